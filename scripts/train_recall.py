"""Lesson 12's comparison: associative recall against the number of pairs, eight models, three seeds.

Trains ``course_utils.recall.RecallModel`` with each mixer (softmax attention, linear
attention, DeltaNet's delta rule, sliding-window attention, a GRU of matched parameter count)
and each variant (the delta rule without DeltaNet's SiLU; a delta layer then a softmax layer;
two delta layers) from each seed with the course's loop (``training.fit``), on sequences of 4 to 64 pairs,
and stores in ``course_utils/data/recall_results.json``: the settings, and per run the held-out
accuracy per number of pairs (during and after training), the accuracy per distance from
query back to pair at 64 pairs, the mean write strength beta of a delta layer on the
64-pair pairs and queries, the first losses (the test reproduces them), the parameter
counts and the CPU seconds.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/train_recall.py            # about 13 min of CPU (AVX-512 EPYC)
    .venv/bin/python scripts/train_recall.py --mixers delta,delta+delta --seeds 0,1,2

The runs named by --mixers and --seeds replace their stored runs; the others are kept (an
--out file with other settings is started afresh).
"""

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from course_utils.data import DATA_DIR
from course_utils.recall import (
    MIXERS,
    VARIANTS,
    RecallModel,
    accuracy_by_distance,
    count_parameters,
    evaluation_sets,
    state_numbers,
    train_on_recall,
)

SETTINGS = {
    "d_model": 32,
    "window": 16,
    "pair_counts": [4, 8, 16, 32, 64],
    "num_queries": 8,
    "steps": 1500,
    "batch_size": 64,
    "lr": 1e-2,
    "eval_every": 250,
    "eval_size": 256,
    "eval_seed": 1000,
    "first_losses_stored": 250,
}
OUT = DATA_DIR / "recall_results.json"


@torch.no_grad()
def write_strengths(model, tokens, num_pairs):
    """The first delta layer's mean beta on the pairs and on the queries (None for a model without one)."""
    layer = model.mixer[0] if isinstance(model.mixer, torch.nn.ModuleList) else model.mixer
    if not hasattr(layer, "beta_linear"):
        return None
    x = model.key_embedding(tokens[..., 0]) + model.value_embedding(tokens[..., 1])
    beta = torch.sigmoid(layer.beta_linear(x))[..., 0]
    return {
        "pairs": round(beta[:, :num_pairs].mean().item(), 4),
        "queries": round(beta[:, num_pairs:].mean().item(), 4),
    }


def train_one(mixer, seed, eval_sets, settings=SETTINGS):
    """One run: the model built from ``seed`` and trained on batches drawn from ``seed``."""
    torch.manual_seed(seed)
    model = RecallModel(mixer, d_model=settings["d_model"], window=settings["window"])
    start = time.process_time()
    history = train_on_recall(
        model, pair_counts=settings["pair_counts"], num_queries=settings["num_queries"], steps=settings["steps"],
        batch_size=settings["batch_size"], lr=settings["lr"], seed=seed, eval_sets=eval_sets,
        eval_every=settings["eval_every"], progress=False,
    )  # fmt: skip
    cpu_seconds = time.process_time() - start
    largest = max(settings["pair_counts"])
    distances, accuracy = accuracy_by_distance(model, *eval_sets[largest])
    return {
        "mixer": mixer,
        "seed": seed,
        "parameters": count_parameters(model),
        "mixer_parameters": count_parameters(model.mixer),
        "state_numbers_at_largest": state_numbers(model, largest + settings["num_queries"]),
        "accuracy_by_pairs": {str(p): history[f"accuracy_{p}"][-1] for p in settings["pair_counts"]},
        "eval_steps": history["eval_steps"],
        "accuracy_curves": {str(p): history[f"accuracy_{p}"] for p in settings["pair_counts"]},
        "distance_pairs": largest,
        "distances": distances.tolist(),
        "accuracy_by_distance": [round(a, 6) for a in accuracy.tolist()],
        "beta_at_largest": write_strengths(model, eval_sets[largest][0], largest),
        "first_losses": [round(x, 6) for x in history["loss"][: settings["first_losses_stored"]]],
        "final_loss_mean_last_50": round(sum(history["loss"][-50:]) / 50, 6),
        "cpu_seconds": round(cpu_seconds, 1),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixers", default=",".join(MIXERS + VARIANTS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    torch.set_num_threads(1)  # a model this small: one thread, and the numbers do not depend on the core count
    eval_sets = evaluation_sets(SETTINGS["pair_counts"], SETTINGS["num_queries"], SETTINGS["eval_size"],
                                SETTINGS["eval_seed"])  # fmt: skip
    result = {
        "description": "Multi-query associative recall (lesson 12): held-out accuracy of small models "
        "against the number of key-value pairs; written by scripts/train_recall.py.",
        "settings": SETTINGS,
        "torch": torch.__version__,
        "machine": platform.machine(),
        "runs": [],
    }
    if args.out.exists() and json.loads(args.out.read_text())["settings"] == SETTINGS:
        result["runs"] = json.loads(args.out.read_text())["runs"]
    order = {name: i for i, name in enumerate(MIXERS + VARIANTS)}
    for seed in (int(s) for s in args.seeds.split(",")):
        for mixer in args.mixers.split(","):
            run = train_one(mixer, seed, eval_sets)
            result["runs"] = [r for r in result["runs"] if (r["mixer"], r["seed"]) != (mixer, seed)] + [run]
            result["runs"].sort(key=lambda r: (r["seed"], order[r["mixer"]]))
            args.out.write_text(json.dumps(result, indent=1) + "\n")  # saved after every run
            accuracy = " ".join(f"{a:.2f}" for a in run["accuracy_by_pairs"].values())
            print(f"{mixer:8s} seed {seed}: accuracy by pairs {accuracy}  ({run['cpu_seconds']} s CPU)", flush=True)


if __name__ == "__main__":
    main()
