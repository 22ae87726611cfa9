"""Lesson 06b's exercise: remove one head at a time and measure the paraphrase gap.

The checker does not run MiniLM (72 runs would take a minute): it passes a tiny
linear stand-in, ``embed_pairs(head_mask) -> (a, b)``, in which every head adds its
own vector to each sentence and every pair has its own length, so cosine and dot
product disagree and every usual mistake gives a different number.
"""

import torch
import torch.nn.functional as F

from course_utils.ablation import ablation_effects
from course_utils.exercises import exercise
from course_utils.exercises.checking import Mistake, call, diagnose

# Distinctive phrases, one per mistake (the tests look for them).
DOT_PRODUCT = "you compared the vectors with the dot product"
GAP_WITHOUT_HEAD = "you returned the gap of the model *without* the head"
NO_BASELINE = "you returned minus the gap without the head"
SIGN_FLIPPED = "the sign is flipped"
CUMULATIVE = "your mask is not reset between runs"
WHOLE_LAYER = "you removed the whole layer"
ONLY_ONE_HEAD = "you kept only the one head"
PARAPHRASES_ONLY = "you averaged the similarity of the paraphrase pairs only"
ALL_PAIRS = "you averaged the similarity over all pairs at once"
LAYERS_FIRST = "layers come first, then heads"
AXES_SWAPPED = "layers and heads are swapped"


class _TinyModel:
    """embed_pairs for a made-up model of ``layers`` x ``heads`` heads and ``n`` pairs."""

    def __init__(self, layers, heads, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.layers, self.heads = layers, heads
        self.base = torch.randn(2, n, 8, generator=g)  # the two sentences of each pair, without heads
        self.head_vectors = 0.6 * torch.randn(layers, heads, 2, n, 8, generator=g)  # what each head adds
        self.lengths = torch.rand(2, n, 1, generator=g) * 4 + 0.3  # pair-specific norms: dot != cosine
        self.calls = 0

    def __call__(self, head_mask):
        expected = (self.layers, self.heads)
        if not isinstance(head_mask, torch.Tensor):
            raise Mistake(
                f"embed_pairs needs head_mask as a tensor [layers, heads] = {expected}, got {type(head_mask).__name__}"
            )
        if tuple(head_mask.shape) != expected:
            swapped = f"; {LAYERS_FIRST}" if tuple(head_mask.shape) == expected[::-1] else ""
            raise Mistake(
                f"embed_pairs got a head_mask of shape {tuple(head_mask.shape)}, expected [layers, heads] = "
                f"{expected}{swapped}: torch.ones(num_layers, num_heads)."
            )
        if bool((head_mask < 0).any()) or bool((head_mask > 1).any()):
            raise Mistake("head_mask values must lie in [0, 1]: 1 keeps a head, 0 removes it.")
        self.calls += 1
        mask = head_mask.float()[:, :, None, None, None]
        vectors = self.lengths * (self.base + (mask * self.head_vectors).sum((0, 1)))
        return vectors[0], vectors[1]


def _gap(a, b, is_paraphrase, similarity):
    s = similarity(a, b)
    return s[is_paraphrase].mean() - s[~is_paraphrase].mean()


def _effects(model, is_paraphrase, mask_for, similarity, reset=True, baseline=True, sign=1, gap=_gap):
    """The effects computed in the right way or with one planted mistake."""
    keep = torch.ones(model.layers, model.heads)
    base = gap(*model(keep), is_paraphrase, similarity)
    effects = torch.zeros(model.layers, model.heads)
    mask = keep.clone()
    for layer in range(model.layers):
        for head in range(model.heads):
            mask = mask_for(keep.clone() if reset else mask, layer, head)
            ablated = gap(*model(mask), is_paraphrase, similarity)
            effects[layer, head] = sign * ((base if baseline else 0) - ablated)
    return effects


def _cosine(a, b):
    return F.cosine_similarity(a, b, dim=-1)


def _remove(mask, layer, head):
    mask[layer, head] = 0.0
    return mask


def _known_mistakes(model, is_paraphrase):
    def dot(a, b):
        return (a * b).sum(-1)

    def only_paraphrases(a, b):
        return torch.where(is_paraphrase, _cosine(a, b), torch.zeros(()))  # the other mean is then 0

    def whole_layer(mask, layer, head):
        mask[layer] = 0.0
        return mask

    def only_this_head(mask, layer, head):
        mask.zero_()
        mask[layer, head] = 1.0
        return mask

    def mean_of_all_pairs(a, b, is_paraphrase, similarity):
        return similarity(a, b).mean()

    def run(**kwargs):
        options = {"mask_for": _remove, "similarity": _cosine, **kwargs}
        return _effects(model, is_paraphrase, options.pop("mask_for"), options.pop("similarity"), **options)

    mistakes = [
        (
            f"{DOT_PRODUCT} (a * b).sum(-1). The sentence vectors are not "
            "normalised, so a long vector scores high whatever it means: use the cosine similarity, "
            "F.cosine_similarity(a, b, dim=-1).",
            run(similarity=dot),
        ),
        (
            f"{GAP_WITHOUT_HEAD}, not how much it dropped. Subtract it "
            "from the intact model's gap (head_mask all ones): effect = baseline gap - gap without the head.",
            run(baseline=False, sign=-1),
        ),
        (
            f"{NO_BASELINE}, with no baseline: compute the intact model's gap "
            "once (all ones) and return baseline - gap without the head.",
            run(baseline=False),
        ),
        (
            f"{SIGN_FLIPPED}: you computed gap without the head - baseline. The effect is the *drop*, "
            "baseline - gap without the head, positive when the model needs the head.",
            run(sign=-1),
        ),
        (
            f"{CUMULATIVE}, so each run removes one more head than the last "
            "(cumulative ablation). Start every run from a fresh torch.ones(num_layers, num_heads), "
            "or .clone() the all-ones mask, before setting the one head to 0.",
            run(reset=False),
        ),
        (
            f"{WHOLE_LAYER} (mask[layer] = 0, or mask[layer, :] = 0) instead of one head: "
            "set only mask[layer, head] = 0.",
            run(mask_for=whole_layer),
        ),
        (
            f"{ONLY_ONE_HEAD} and removed all the others: 1 keeps a head, 0 removes it. Start from "
            "ones and set mask[layer, head] = 0.",
            run(mask_for=only_this_head),
        ),
        (
            f"{PARAPHRASES_ONLY}. The gap subtracts the mean cosine of "
            "the non-paraphrase pairs (is_paraphrase False) from that of the paraphrases.",
            run(similarity=only_paraphrases),
        ),
        (
            f"{ALL_PAIRS}. The gap compares two groups: the mean cosine "
            "of the paraphrase pairs (is_paraphrase True) minus the mean cosine of the others.",
            run(gap=mean_of_all_pairs),
        ),
    ]
    if model.layers == model.heads:
        right = run()
        mistakes.append(
            (
                f"{AXES_SWAPPED}: effects[l, h] should be the drop when head h of layer l is "
                "removed, mask[l, h] = 0 (the mask is [layers, heads], layers first).",
                right.T.contiguous(),
            )
        )
    return mistakes


@exercise(
    "ablation_effects",
    solution=ablation_effects,
    hints=[
        "First the intact model: embed_pairs(torch.ones(num_layers, num_heads)) gives (a, b); its paraphrase "
        "gap is the baseline. Then, for every layer and head, a fresh all-ones mask with that one entry 0.",
        "The gap: cos = F.cosine_similarity(a, b, dim=-1), one number per pair; then "
        "cos[is_paraphrase].mean() - cos[~is_paraphrase].mean().",
        "effects[layer, head] = baseline - gap without that head: positive when removing the head hurts.",
    ],
)
def check_ablation_effects(candidate):
    # sizes with layers != heads (a swapped mask fails on its shape) and one square one
    for layers, heads, n, seed in [(2, 3, 6, 0), (3, 3, 8, 1), (1, 4, 5, 2)]:
        model = _TinyModel(layers, heads, n, seed)
        is_paraphrase = torch.arange(n) % 2 == 0
        expected = _effects(model, is_paraphrase, _remove, _cosine)
        context = f"a made-up model of {layers} layers x {heads} heads, {n} pairs"
        got = call(candidate, model, is_paraphrase.clone(), layers, heads)
        if isinstance(got, torch.Tensor) and got.dtype == torch.float64:
            got = got.float()  # a float64 effect table is fine here
        diagnose(got, expected, _known_mistakes(model, is_paraphrase), what="effects [layers, heads]", context=context)
