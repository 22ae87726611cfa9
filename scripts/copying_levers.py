"""The search for a lesson 10 model that copies: each lever trained once, with its curves.

    python scripts/copying_levers.py                    # every lever (up to 20 CPU-minutes each, 2 at a time)
    python scripts/copying_levers.py --levers mix-25    # one lever; the others' stored results are kept

A lever changes the share of repeated strings in the training mix (scripts/train_language_model.py's
"repeats") and trains seed 0 for the budget it names; everything else is the stored model's setting.
Every EVAL_EVERY steps it measures what lesson 10 section 4 asks of a model that reads its
context: the hero's later mentions with the first mention kept or swapped, and random story
words said twice (the second copy should cost at most half the first).
Writes course_utils/data/copying_levers.json: per lever its settings, its curves and its CPU time.
One seed per lever. The stored model (repeats 8, 6,000 steps; scripts/train_language_model.py, three
seeds) is the mix-25 lever at a shorter budget; "stories only" is its control.
"""

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from train_language_model import SETTINGS, train_one  # noqa: E402

from course_utils.data import DATA_DIR  # noqa: E402

LEVERS_FILE = DATA_DIR / "copying_levers.json"
# Chan et al. (2022): items that recur within a sequence drive in-context learning. "repeats" of
# the 32 crops of a batch are a random string of story words said again and again.
LEVERS = {
    "mix-25": {"repeats": 8, "steps": 10_000},
    "mix-50": {"repeats": 16, "steps": 10_000},
    # the control of the stored model (repeats 8, 6,000 steps): the same budget without repeats
    "stories only": {"repeats": 0, "steps": 6_000},
}


def train_lever(name):
    settings = {**SETTINGS, **LEVERS[name]}
    import torch  # noqa: PLC0415  (each worker process sets its own threads)

    from course_utils import language_model as lm  # noqa: PLC0415

    torch.set_num_threads(1)
    tokenizer, _, _ = lm.corpus_splits(settings["num_stories"], settings["validation_share"])
    run, _ = train_one({**settings, "vocab_size": tokenizer.vocab_size}, seed=0)
    return {"changed": LEVERS[name], "settings": settings, "cpu_seconds": run["cpu_seconds"], "curves": run["curves"]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levers", nargs="+", choices=list(LEVERS), default=list(LEVERS))
    args = parser.parse_args(argv)
    stored = json.loads(LEVERS_FILE.read_text()) if LEVERS_FILE.exists() else {}
    with ProcessPoolExecutor(max_workers=2) as pool:
        for name, result in zip(args.levers, pool.map(train_lever, args.levers), strict=True):
            stored[name] = result
            curves = result["curves"]
            ratio = curves["repeat second"][-1] / curves["repeat first"][-1]
            print(f"{name}: repeat ratio {ratio:.3f}, {result['cpu_seconds']} s of CPU", flush=True)
            LEVERS_FILE.write_text(json.dumps(stored, indent=1) + "\n")


if __name__ == "__main__":
    main()
