"""Lesson 05b's experiments over several training seeds: hairpins, the two controls, wider GRUs.

Run from the course folder: ``python scripts/long_range_seeds.py`` (about 6 minutes on one CPU core).
It writes ``course_utils/data/long_range_seeds.json``: the settings and, for every run, its held-out accuracy
by distance and its first training losses. The lesson prints these results and re-runs seed 0 of
some of them live; ``tests/scripts/test_long_range_seeds.py`` checks that this script reproduces them.

Seed s seeds both the model's initial weights (torch.manual_seed(s)) and the training batches
(fit's generator). Seed 1 is left out: it draws the held-out sets.
"""

import json
import sys

import torch

from course_utils import long_range
from course_utils.data import DATA_DIR

OUT = DATA_DIR / "long_range_seeds.json"
SETTINGS = {
    "stem_length": 16,
    "steps": 200,
    "batch_size": 64,
    "lr": 1e-2,
    "held_out": 2000,
    "held_out_seed": 1,
    "embed_dim": 16,
    "hidden_size": 80,
    "max_distance": 31,
    "seeds": [0, 2, 3, 4, 5],
    "few_seeds": [0, 2, 3],
    "loads": [1, 2, 4, 8, 16],
    "widths": [160, 320],
    "far": 16,
}
LOSSES_KEPT = 20  # the first training losses of each run, for the reproduction test


def gru(seed, hidden_size=SETTINGS["hidden_size"], vocab_size=None):
    vocab_size = len(long_range.VOCAB) if vocab_size is None else vocab_size
    torch.manual_seed(seed)
    return long_range.RecurrentModel(hidden_size, SETTINGS["embed_dim"], vocab_size)


def hairpin_run(kind, seed, hidden_size=SETTINGS["hidden_size"]):
    """Accuracy by distance on held-out hairpins after training a GRU or the attention model."""
    stem = SETTINGS["stem_length"]
    held_out = long_range.hairpins(SETTINGS["held_out"], stem, torch.Generator().manual_seed(SETTINGS["held_out_seed"]))
    if kind == "GRU":
        model = gru(seed, hidden_size)
    else:
        torch.manual_seed(seed)
        model = long_range.attention_model(stem, d_model=32, num_heads=2, num_layers=2)
    history = long_range.train_on_hairpins(
        model, stem, held_out, steps=SETTINGS["steps"], batch_size=SETTINGS["batch_size"], lr=SETTINGS["lr"],
        seed=seed, eval_every=SETTINGS["steps"], progress=False,
    )  # fmt: skip
    distances, accuracy = long_range.accuracy_by_distance(model, *held_out)
    return {"distances": distances.tolist(), "accuracy": [round(a, 4) for a in accuracy.tolist()],
            "loss": [round(v, 5) for v in history["loss"][:LOSSES_KEPT]]}  # fmt: skip


def control_held_out(num_marked, min_distance=None):
    generator = torch.Generator().manual_seed(SETTINGS["held_out_seed"])
    return long_range.marked_bases(SETTINGS["held_out"], num_marked, SETTINGS["max_distance"], generator, min_distance)


def accuracy_by_control_distance(model, inputs, targets, distances):
    """{distance: share of right answers} over the held-out sequences of each distance."""
    right = long_range.accuracy_on_queries(model, inputs, targets)[:, SETTINGS["max_distance"] :].float().mean(1)
    return {int(d): round(right[distances == d].mean().item(), 4) for d in distances.unique().tolist()}


def control_run(num_marked, seed, min_distance=None, steps=SETTINGS["steps"]):
    """Train a GRU on k marked bases (distances min_distance..31) and measure it on every distance k..31."""
    model = gru(seed, vocab_size=len(long_range.CONTROL_VOCAB))
    d_max, batch = SETTINGS["max_distance"], SETTINGS["batch_size"]

    def sample_batch(generator):
        return long_range.marked_bases(batch, num_marked, d_max, generator, min_distance)[:2]

    history = long_range.train_on_task(model, sample_batch, steps=steps, lr=SETTINGS["lr"], seed=seed)
    by_distance = accuracy_by_control_distance(model, *control_held_out(num_marked))
    far = [a for d, a in by_distance.items() if d >= SETTINGS["far"]]
    return {"by_distance": by_distance, "far": round(sum(far) / len(far), 4),
            "loss": [round(v, 5) for v in history["loss"][:LOSSES_KEPT]]}  # fmt: skip


def main():
    torch.set_num_threads(1)
    results = {"settings": SETTINGS, "hairpins": {}, "widths": {}, "loads": {}, "long_only": {}}
    for kind in ["GRU", "attention"]:
        results["hairpins"][kind] = {str(s): hairpin_run(kind, s) for s in SETTINGS["seeds"]}
        print(kind, "hairpins done", file=sys.stderr)
    for k in SETTINGS["loads"]:
        seeds = SETTINGS["seeds"] if k == 1 else SETTINGS["few_seeds"]
        results["loads"][str(k)] = {str(s): control_run(k, s) for s in seeds}
        print("load", k, "done", file=sys.stderr)
    # one marked base, trained only where it lies far back: does the GRU learn to carry it at all?
    results["long_only"] = {str(s): control_run(1, s, min_distance=SETTINGS["far"]) for s in SETTINGS["few_seeds"]}
    for width in SETTINGS["widths"]:
        results["widths"][str(width)] = {str(s): hairpin_run("GRU", s, width) for s in SETTINGS["few_seeds"]}
        print("width", width, "done", file=sys.stderr)
    OUT.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
