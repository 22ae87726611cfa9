"""Lesson 05b's learning curves: do its conclusions hold when the models train longer?

Run from the course folder: ``python scripts/long_range_curves.py`` (about 15 minutes on two CPU cores).
The lesson trains every model for 200 steps (``scripts/long_range_seeds.py``). This script trains the
same models, with the same settings, for 10 times as long (2,000 steps, the learning-rate schedule
stretched over them) and measures held-out accuracy every 100 steps, on 3 seeds:

- hairpins: the GRU and the attention model, accuracy at every distance;
- the memory-load control: k = 1, 2, 4, 8, 16 marked bases, GRU and attention model, accuracy at
  distances 1-15 ("near") and 16-31 ("far");
- one marked base trained only 16-31 positions back ("long only"), GRU.

It writes ``course_utils/data/long_range_curves.json``; ``tests/scripts/test_long_range_curves.py``
checks that the script reproduces the stored first losses.
"""

import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from course_utils import long_range  # noqa: E402
from course_utils.data import DATA_DIR  # noqa: E402
from course_utils.transformer import TinyTransformer  # noqa: E402

OUT = DATA_DIR / "long_range_curves.json"
SETTINGS = {
    "stem_length": 16,
    "steps": 2000,  # 10 x the lesson's budget
    "eval_every": 100,
    "batch_size": 64,
    "lr": 1e-2,
    "held_out": 2000,
    "held_out_seed": 1,
    "seeds": [0, 2, 3],
    "loads": [1, 2, 4, 8, 16],
    "max_distance": 31,
    "far": 16,
}
KINDS = ["GRU", "attention"]
FIRST_LOSSES = 20  # stored for the reproduction test; the warm-up (30 steps) does not depend on the budget


def make_model(kind, seed, vocab_size, max_len):
    """The lesson's two models: a GRU (hidden 80) and lesson 05's TinyTransformer (d 32, 2 heads, 2 layers)."""
    torch.manual_seed(seed)
    if kind == "GRU":
        return long_range.RecurrentModel(hidden_size=80, embed_dim=16, vocab_size=vocab_size)
    return TinyTransformer(vocab_size, d_model=32, num_heads=2, num_layers=2, max_len=max_len)


def rounded(history):
    """The curves to 4 digits, and the first training losses (the same whatever the budget: warm-up)."""
    curves = {name: [round(v, 4) for v in values] for name, values in history.items() if name != "loss"}
    return {**curves, "first_losses": [round(v, 5) for v in history["loss"][:FIRST_LOSSES]]}


def hairpin_curve(kind, seed, steps):
    """Held-out accuracy at each distance, every eval_every steps."""
    stem = SETTINGS["stem_length"]
    held_out = long_range.hairpins(SETTINGS["held_out"], stem, torch.Generator().manual_seed(SETTINGS["held_out_seed"]))
    model = make_model(kind, seed, len(long_range.VOCAB), 2 * stem)

    def by_distance():
        distances, accuracy = long_range.accuracy_by_distance(model, *held_out)
        return {str(int(d)): a for d, a in zip(distances.tolist(), accuracy.tolist(), strict=True)}

    history = long_range.train_on_hairpins(
        model, stem, held_out, steps=steps, batch_size=SETTINGS["batch_size"], lr=SETTINGS["lr"], seed=seed,
        eval_every=SETTINGS["eval_every"], progress=False, evaluate=by_distance,
    )  # fmt: skip
    return rounded(history)


def load_curve(kind, num_marked, seed, steps, min_distance=None):
    """k marked bases: held-out accuracy at distances 1-15 ("near") and 16-31 ("far"), every eval_every steps."""
    d_max, far = SETTINGS["max_distance"], SETTINGS["far"]
    generator = torch.Generator().manual_seed(SETTINGS["held_out_seed"])
    inputs, targets, distances = long_range.marked_bases(SETTINGS["held_out"], num_marked, d_max, generator)
    model = make_model(kind, seed, len(long_range.CONTROL_VOCAB), d_max + num_marked)

    def near_and_far():
        right = long_range.accuracy_on_queries(model, inputs, targets)[:, d_max:].float().mean(1)
        return {"near": right[distances < far].mean().item(), "far": right[distances >= far].mean().item()}

    def sample_batch(g):
        return long_range.marked_bases(SETTINGS["batch_size"], num_marked, d_max, g, min_distance)[:2]

    history = long_range.train_on_task(
        model, sample_batch, steps=steps, lr=SETTINGS["lr"], seed=seed, evaluate=near_and_far,
        eval_every=SETTINGS["eval_every"],
    )  # fmt: skip
    return rounded(history)


def run(job):
    """One (what, kind, k, seed, steps) job; the jobs are independent, so they run side by side."""
    what, kind, k, seed, steps = job
    torch.set_num_threads(1)
    if what == "hairpins":
        return hairpin_curve(kind, seed, steps)
    return load_curve(kind, k, seed, steps, SETTINGS["far"] if what == "long_only" else None)


def main(steps=SETTINGS["steps"], out=OUT, workers=2):
    seeds = SETTINGS["seeds"]
    jobs = [("hairpins", kind, None, s, steps) for kind in KINDS for s in seeds]
    jobs += [("loads", kind, k, s, steps) for kind in KINDS for k in SETTINGS["loads"] for s in seeds]
    jobs += [("long_only", "GRU", 1, s, steps) for s in seeds]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        curves = list(pool.map(run, jobs))
    results = {"settings": {**SETTINGS, "steps": steps}, "hairpins": {}, "loads": {}, "long_only": {}}
    for (what, kind, k, seed, _), curve in zip(jobs, curves, strict=True):
        runs = results[what].setdefault(kind, {})
        if what == "loads":
            runs = runs.setdefault(str(k), {})
        runs[str(seed)] = curve
    Path(out).write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
