"""Train lesson 11's two-layer attention-only model from several seeds and store what the lesson reads.

    .venv/bin/python scripts/train_induction.py              # every seed (a few minutes on one core)
    .venv/bin/python scripts/train_induction.py --check 100  # re-train the first 100 steps of each seed
                                                             # and compare them with the stored curves

Writes course_utils/data/induction_runs.json (the settings; per seed the loss of every step, the first- and
second-half losses on the fixed evaluation sequences, and the final previous-token and induction
scores of every head) and course_utils/data/induction_weights.pt (the trained weights, about 0.2 MB a seed).
The lesson trains the first steps of one seed live and reads the rest from these files.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from course_utils import induction  # noqa: E402
from course_utils.data import DATA_DIR  # noqa: E402
from course_utils.head_scores import previous_token_score  # noqa: E402

SEEDS = [0, 1, 2, 3, 4]
RUNS = DATA_DIR / "induction_runs.json"
WEIGHTS = DATA_DIR / "induction_weights.pt"


def scores(model, settings):
    """The final previous-token and induction scores of every head, [layers][heads], on the evaluation sequences."""
    weights = model.attention(induction.evaluation_tokens(settings)).mean(0)  # [layers, heads, T, T]
    return {
        "previous_token": previous_token_score(weights).round(decimals=4).tolist(),
        "induction": induction.induction_scores(weights, settings["eval_half_len"]).round(decimals=4).tolist(),
    }


def train_all(seeds, settings):
    runs, models = {}, {}
    for seed in seeds:
        start = time.process_time()
        model, history = induction.train(settings, seed=seed)
        runs[str(seed)] = {**history, **scores(model, settings), "cpu_seconds": round(time.process_time() - start)}
        models[str(seed)] = model.state_dict()
        print(f"seed {seed}: second-half loss {history['second_half'][-1]:.3f} ({runs[str(seed)]['cpu_seconds']} s)")
    settings = {**settings, "half_lens": list(settings["half_lens"])}
    RUNS.write_text(json.dumps({"settings": settings, "seeds": seeds, "runs": runs}, indent=1) + "\n")
    torch.save({"settings": settings, "models": models}, WEIGHTS)


def check(steps):
    """Re-train the first ``steps`` steps of every stored seed; the largest difference from the stored losses."""
    stored = induction.load_runs()
    settings = {**induction.SETTINGS, **stored["settings"]}
    worst = 0.0
    for seed in stored["seeds"]:
        _, history = induction.train(settings, seed=seed, steps=steps)
        run = stored["runs"][str(seed)]
        evaluated = len(history["eval_steps"])
        pairs = list(zip(history["loss"], run["loss"][:steps], strict=True))
        for name in ("first_half", "second_half"):
            pairs += list(zip(history[name], run[name][:evaluated], strict=True))
        diff = max(abs(a - b) for a, b in pairs)
        worst = max(worst, diff)
        print(f"seed {seed}: the first {steps} steps differ from the stored losses by at most {diff:.2g}")
    return worst


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", type=int, metavar="STEPS", help="compare the first STEPS steps instead of training")
    args = parser.parse_args()
    if args.check:
        sys.exit(0 if check(args.check) < 1e-3 else 1)
    train_all(SEEDS, induction.SETTINGS)


if __name__ == "__main__":
    main()
