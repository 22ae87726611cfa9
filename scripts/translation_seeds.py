"""Lesson 05c's translator trained from nine seeds: where does each run take the French gender from?

Run from the course folder: ``python scripts/translation_seeds.py`` (about a minute on one CPU core).
It writes ``course_utils/data/translation_seeds.json``: the settings and, for every seed, the held-out exact match,
the English words that the rows writing *la*, *voiture* and *bleue* read most in *the blue car*, the
alignment accuracy, the swap counts for the article's and the noun's vectors, and the first training
losses. The lesson prints these results and re-trains seeds 0-2 live;
``tests/scripts/test_translation_seeds.py`` checks that this script reproduces them.

Seed s seeds both the translator's initial weights (torch.manual_seed(s)) and its training batches.
"""

import json
import sys

import torch

from course_utils.data import DATA_DIR
from course_utils.translation import (
    TranslationTask,
    Translator,
    alignment_accuracy,
    encode_batch,
    exact_match,
    gender_source,
    swap_experiment,
    train,
)

OUT = DATA_DIR / "translation_seeds.json"
SETTINGS = {"d_model": 32, "num_heads": 2, "steps": 200, "held_out": 300, "held_out_seed": 1, "seeds": list(range(9))}
LOSSES_KEPT = 20


def trained(seed):
    torch.manual_seed(seed)
    model = Translator(SETTINGS["d_model"], SETTINGS["num_heads"])
    history = train(model, TranslationTask(), steps=SETTINGS["steps"], seed=seed, progress=False)
    return model, history


def measure(model, held_out):
    """One run's line: exact match, what 'the blue car' reads, alignment, and the two swaps."""
    (source, target_in), _ = encode_batch(["the blue car"])
    with torch.no_grad():
        model((source, target_in))
    reads = model.cross_attentions()[-1, 0].mean(dim=0)[:3].argmax(dim=-1).tolist()  # rows writing la, voiture, bleue
    article, noun = swap_experiment(model, 0)[0], swap_experiment(model, 2)[0]
    return {
        "exact_match": round(exact_match(model, held_out), 4),
        "reads": ["the blue car".split()[i] for i in reads],
        "alignment_accuracy": round(alignment_accuracy(model, held_out), 4),
        "article_follows_when_the_swapped": article["article follows donor"],
        "article_follows_when_noun_swapped": noun["article follows donor"],
        "adjective_follows_when_the_swapped": article["adjective follows donor"],
        "adjective_follows_when_noun_swapped": noun["adjective follows donor"],
        "route": gender_source(article["article follows donor"], noun["article follows donor"]),
    }


def main():
    torch.set_num_threads(1)
    held_out = TranslationTask().held_out(SETTINGS["held_out"], seed=SETTINGS["held_out_seed"])
    runs = {}
    for seed in SETTINGS["seeds"]:
        model, history = trained(seed)
        runs[str(seed)] = {**measure(model, held_out), "loss": [round(v, 5) for v in history["loss"][:LOSSES_KEPT]]}
        print(seed, runs[str(seed)]["route"], file=sys.stderr)
    OUT.write_text(json.dumps({"settings": SETTINGS, "runs": runs}, indent=1) + "\n")
    print(f"wrote {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
