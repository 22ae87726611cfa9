"""Lesson 14's measurements: each RoPE scaling method on lesson 10's stored models, before and during a fine-tune.

    python scripts/long_context_runs.py                   # 3 seeds x 7 methods (about 20 minutes on 2 cores)
    python scripts/long_context_runs.py --steps 10 --seeds 0 --methods yarn --dry-run   # the first steps only
    python scripts/long_context_runs.py --methods dynamic --keep-others   # one method again, the rest kept

For every seed of lesson 10's model and every method (factor 8: from 128 to 1,024 tokens): the loss per
bucket of positions of 8 held-out texts of 1,024 tokens and the copy losses at each distance
(``long_context.measure``), before training and every EVAL_EVERY steps of a fine-tune at 256 tokens
with that method's frequencies (``long_context.fine_tune``). The unscaled model ('default') gets the
same fine-tune: it is the control. Dynamic NTK is measured untrained only (it changes with the length
read, so it is used without a fine-tune). Also stored: the first losses of every fine-tune, exactly,
for tests/unit/test_long_context.py, which reproduces them.

Writes course_utils/data/long_context_runs.json.
"""

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from course_utils import context_use  # noqa: E402
from course_utils import language_model as lm  # noqa: E402
from course_utils import long_context as lc  # noqa: E402
from course_utils.data import DATA_DIR  # noqa: E402

SETTINGS = {
    "factor": 8.0,
    "length": 256,
    "batch_size": 8,
    "repeats": 2,
    "lr": 1e-3,
    "warmup": 10,
    "steps": 300,
    "texts": 8,
    "text_length": 1024,
}
SEEDS = [0, 1, 2]
METHODS = [*lc.KINDS, "yarn_paper"]  # yarn_paper: YaRN with its paper's ramp (long_context.yarn_paper_frequencies)
FINE_TUNED = ["default", "linear", "ntk", "yarn", "yarn_paper", "llama3"]
EVAL_EVERY = 60
FIRST_STEPS = 10


def rounded(measures):
    return {name: round(value, 4) for name, value in measures.items()}


def run_one(settings, seed, kind, distances=lc.DISTANCES, evaluate_during=True):
    """One method on one seed: its measurements before and during the fine-tune.

    distances and evaluate_during=False make the reproduction test cheaper (fewer copy probes, no measures
    while training)."""
    torch.set_num_threads(1)
    model, tokenizer = lm.load_trained_model(seed)
    _, train_ids, _ = lm.corpus_splits()
    texts = lc.long_texts(tokenizer, settings["text_length"], settings["texts"])

    def evaluate():
        measures = lc.measure(model, tokenizer, kind, settings["factor"], texts, distances)
        model.train()
        return measures

    start = time.process_time()
    run = {"untrained": rounded(evaluate())}
    if kind in FINE_TUNED and settings["steps"]:
        history = lc.fine_tune(
            model,
            kind,
            settings["factor"],
            train_ids,
            context_use.story_words(tokenizer),
            settings["steps"],
            seed,
            length=settings["length"],
            batch_size=settings["batch_size"],
            repeats=settings["repeats"],
            lr=settings["lr"],
            warmup=settings["warmup"],
            evaluate=evaluate if evaluate_during else None,
            eval_every=EVAL_EVERY,
        )
        run["first_losses"] = history["loss"][:FIRST_STEPS]
        run["loss_every_10"] = [round(x, 4) for x in history["loss"][::10]]
        if evaluate_during:
            run["eval_steps"] = history["eval_steps"]
            run["curves"] = {name: [round(x, 4) for x in history[name]] for name in run["untrained"]}
    run["cpu_seconds"] = round(time.process_time() - start)
    return run


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=SETTINGS["steps"])
    parser.add_argument("--seeds", type=int, nargs="+", default=SEEDS)
    parser.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    parser.add_argument("--dry-run", action="store_true", help="print the results, write nothing")
    parser.add_argument("--keep-others", action="store_true", help="replace only these runs in the stored file")
    args = parser.parse_args(argv)
    settings = {**SETTINGS, "steps": args.steps}
    jobs = [(seed, kind) for seed in args.seeds for kind in args.methods]
    # independent runs: two processes (one per core), one thread each
    with ProcessPoolExecutor(max_workers=2) as pool:
        runs = list(pool.map(run_one, [settings] * len(jobs), *zip(*jobs, strict=True)))
    results = {
        "settings": settings,
        "seeds": args.seeds,
        "methods": args.methods,
        "fine_tuned": [k for k in args.methods if k in FINE_TUNED],
        "buckets": [list(b) for b in lc.BUCKETS],
        "distances": list(lc.DISTANCES),
        "runs": {},
    }
    if args.keep_others:  # the stored file with the runs of these seeds and methods replaced
        results = lc.load_runs()
        assert results["settings"] == settings, "--keep-others needs the stored settings"
        results["methods"] = [k for k in METHODS if k in results["methods"] or k in args.methods]
        results["fine_tuned"] = [k for k in results["methods"] if k in FINE_TUNED]
    for (seed, kind), run in zip(jobs, runs, strict=True):
        results["runs"].setdefault(str(seed), {})[kind] = run
        last = run["curves"]["loss 512-1023"][-1] if "curves" in run else None
        print(f"seed {seed} {kind}: untrained {run['untrained']['loss 512-1023']}, tuned {last}", flush=True)
    if args.dry_run:
        print(json.dumps(results["runs"], indent=1)[:3000])
    else:
        (DATA_DIR / lc.RESULTS_FILE).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
