"""Train lesson 10's language model on the course's stories and store it in course_utils/data/.

    python scripts/train_language_model.py            # all seeds, side by side (minutes each on one CPU core)
    python scripts/train_language_model.py --steps 20 --seeds 0 --dry-run   # the first steps only, nothing written

Writes course_utils/data/language_model_seed{0,1,2}.pt (weights in float16, to keep the files small)
and course_utils/data/language_model_settings.json: the settings, the vocabulary, the corpus's
SHA-256, the baselines and the grammar's floor, and per seed the loss of every 10th step, the
first 20 losses, the validation loss of the stored (float16) weights, and every EVAL_EVERY steps
the validation loss and the two copying measurements of course_utils.context_use (the hero's
later mentions with the first mention kept or swapped; the two copies of repeated random words).
tests/unit/test_language_model.py checks that this script's first steps reproduce the stored
losses and that the stored weights give the stored validation loss.
"""

import argparse
import hashlib
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from course_utils import context_use  # noqa: E402
from course_utils import language_model as lm  # noqa: E402
from course_utils.data import DATA_DIR as DATA  # noqa: E402
from course_utils.stories import entropy_per_token, story_corpus, story_information  # noqa: E402

SETTINGS = {
    "num_stories": lm.NUM_STORIES,
    "validation_share": 10,
    "d_model": 64,
    "num_heads": 4,
    "num_layers": 2,
    "context": 128,
    "batch_size": 32,
    "steps": 6000,
    "lr": 3e-3,
    "warmup": 100,
    "repeats": 8,
}
SEEDS = [0, 1, 2]
FIRST_STEPS = 20  # stored exactly, for the reproduction test
EVAL_EVERY = 250  # steps between two measurements of the curves
MEASURED_STORIES = 300  # validation stories for the name measurement


def rounded_to_float16(model):
    """The weights as they are stored (float16), put back into the model in float32."""
    state = {name: value.half() for name, value in model.state_dict().items()}
    model.load_state_dict({name: value.float() for name, value in state.items()})
    return state


def train_one(settings, seed):
    """Train one seed; return its results and its float16 weights."""
    torch.set_num_threads(1)
    tokenizer, train_ids, valid_ids = lm.corpus_splits(settings["num_stories"], settings["validation_share"])
    stories = lm.validation_stories(settings["num_stories"], settings["validation_share"])[:MEASURED_STORIES]

    def measure(model):
        kept, swapped = context_use.name_losses(model, tokenizer, stories)
        first, second = context_use.repeat_losses(model, tokenizer)
        model.train()
        return {"name kept": kept, "name swapped": swapped, "repeat first": first, "repeat second": second}

    start = time.process_time()
    model, history = lm.train_model(
        settings,
        train_ids,
        valid_ids,
        seed,
        eval_every=EVAL_EVERY,
        measure=measure,
        words=context_use.story_words(tokenizer),
    )
    seconds = time.process_time() - start
    state = rounded_to_float16(model)
    run = {
        "first_losses": history["loss"][:FIRST_STEPS],
        "loss_every_10": [round(x, 4) for x in history["loss"][::10]],
        "validation_loss_float32": round(history["validation loss"][-1], 4),
        "validation_loss": lm.evaluate_loss(model, valid_ids, settings["context"]),
        "cpu_seconds": round(seconds),
        "curves": {name: [round(x, 4) for x in history[name]] for name in history if name != "loss"},
    }
    return run, state


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=SETTINGS["steps"])
    parser.add_argument("--seeds", type=int, nargs="+", default=SEEDS)
    parser.add_argument("--dry-run", action="store_true", help="print the losses, write nothing")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    tokenizer, train_ids, valid_ids = lm.corpus_splits(SETTINGS["num_stories"], SETTINGS["validation_share"])
    settings = {**SETTINGS, "vocab_size": tokenizer.vocab_size, "steps": args.steps}
    text = story_corpus(SETTINGS["num_stories"])
    validation = story_information(SETTINGS["num_stories"])[-len(lm.validation_stories(SETTINGS["num_stories"])) :]
    results = {
        "settings": settings,
        "seeds": args.seeds,
        "words": tokenizer.words,
        "corpus_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "train_tokens": len(train_ids),
        "validation_tokens": len(valid_ids),
        "unigram_validation_loss": round(lm.unigram_loss(train_ids, valid_ids, tokenizer.vocab_size), 4),
        "bigram_validation_loss": round(lm.bigram_loss(train_ids, valid_ids, tokenizer.vocab_size), 4),
        "grammar_validation_loss": round(entropy_per_token(validation, lm.WordTokenizer.split), 4),
        "runs": {},
    }
    # the seeds are independent runs: train them side by side, one process (and one thread) each
    with ProcessPoolExecutor(max_workers=len(args.seeds)) as pool:
        outcomes = list(pool.map(train_one, [settings] * len(args.seeds), args.seeds))
    for seed, (run, state) in zip(args.seeds, outcomes, strict=True):
        results["runs"][str(seed)] = run
        print(f"seed {seed}: validation loss {run['validation_loss']:.4f}, {run['cpu_seconds']} s of CPU", flush=True)
        if not args.dry_run:
            torch.save(state, DATA / lm.weights_file(seed))
    if args.dry_run:
        print(json.dumps(results["runs"], indent=1)[:2000])
    else:
        (DATA / lm.SETTINGS_FILE).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
