"""Testing what the attention pictures suggest: remove heads and measure (lesson 06b).

Lesson 06 *looked* at MiniLM's 72 heads. Looking shows where a head reads, not
whether the model needs it. Here we intervene: remove a head's output
(``pretrained.masked_heads``: a [layers, heads] mask, 1 keeps, 0 removes) and
measure what changes in what the model is for, sentence embeddings that put
paraphrases close together.

    pairs, is_paraphrase = load_pairs()
    embed_pairs = pair_embedder(pairs)
    effects = ablation_effects(embed_pairs, is_paraphrase, 6, 12)   # [layers, heads]

Also here: the gender probe of lesson 06 as functions (so the attention probe
and the intervention use the same sentences), subject-verb sentences, and the
layer-by-layer separation of paraphrases.
"""

import json
import operator
from pathlib import Path

import torch
import torch.nn.functional as F

from course_utils.attention import padding_mask
from course_utils.data import DATA_DIR
from course_utils.pretrained import encode, load_model, masked_heads, mean_pool

__all__ = [
    "load_pairs",
    "paraphrase_gap",
    "pair_embedder",
    "ablation_effects",
    "heads_mask",
    "random_heads",
    "BIAS_TEMPLATES",
    "PROFESSION_PAIRS",
    "bias_cases",
    "pronoun_job_attention",
    "pronoun_bias_score",
    "SUBJECT_VERB",
    "subject_verb_scores",
    "token_change",
    "layer_separation",
    "load_sweep",
]


# ---------------------------------------------------------------------------
# The task: are paraphrases closer than non-paraphrases?
# ---------------------------------------------------------------------------


def load_pairs(path=None):
    """(pairs, is_paraphrase): a list of (sentence a, sentence b) and a bool tensor [pairs]."""
    data = json.loads(Path(path or DATA_DIR / "paraphrase_pairs.json").read_text())
    pairs = [tuple(p) for p in data["paraphrases"] + data["non_paraphrases"]]
    is_paraphrase = torch.tensor([True] * len(data["paraphrases"]) + [False] * len(data["non_paraphrases"]))
    return pairs, is_paraphrase


def paraphrase_gap(a, b, is_paraphrase):
    """Mean cosine similarity of the paraphrase pairs minus that of the other pairs.

    a, b: [pairs, d] vectors of each pair's two sentences (any length: cosine divides
    it out). is_paraphrase: [pairs], True (or 1) for a paraphrase pair. Large = the
    embeddings tell paraphrases from non-paraphrases.
    """
    is_paraphrase = _paraphrase_labels(a, b, is_paraphrase)
    cos = F.cosine_similarity(a, b, dim=-1)  # [pairs]
    return cos[is_paraphrase].mean() - cos[~is_paraphrase].mean()


def _paraphrase_labels(a, b, is_paraphrase):
    """is_paraphrase as a bool tensor, or a clear error (0/1 integers would index pairs 0 and 1)."""
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a tensor [pairs, d] of one side of each pair, got {got}")
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape [pairs, d], got {tuple(a.shape)} and {tuple(b.shape)}")
    labels = torch.as_tensor(is_paraphrase) if isinstance(is_paraphrase, (list, tuple)) else is_paraphrase
    if not isinstance(labels, torch.Tensor) or labels.dim() != 1 or len(labels) != len(a):
        got = tuple(labels.shape) if isinstance(labels, torch.Tensor) else type(labels).__name__
        raise ValueError(f"is_paraphrase must be a 1-d tensor with one label per pair ({len(a)}), got {got}")
    if labels.dtype != torch.bool:
        if labels.is_complex() or not ((labels == 0) | (labels == 1)).all():
            raise ValueError(
                f"is_paraphrase must hold True/False (or 1/0) per pair, got values {labels.unique().tolist()}"
            )
        labels = labels == 1
    if labels.all() or not labels.any():
        kind = "paraphrases" if labels.all() else "non-paraphrases"
        raise ValueError(
            f"every pair is marked as one kind ({kind}): the gap compares paraphrase pairs with the other pairs, "
            f"so it needs at least one of each"
        )
    return labels


def pair_embedder(pairs, model=None, means=None):
    """A function head_mask -> (a, b), the mean-pooled last-layer vectors [pairs, d] of both sides.

    Removing a head of layer l leaves layers 0..l-1 untouched, so the model runs once
    without a mask, keeps every layer's input, and each masked run starts at the first
    layer with a removed head: about half the work of 72 full runs.
    """
    model = load_model() if model is None else model
    out = encode([a for a, _ in pairs] + [b for _, b in pairs], model)
    attend = padding_mask(out.input_ids, pad_id=model.config.pad_token_id)
    n = len(pairs)

    @torch.no_grad()
    def embed_pairs(head_mask):
        changed = (head_mask != 1).any(-1).nonzero()  # layers with a head removed or scaled
        start = int(changed[0]) if len(changed) else model.config.num_layers
        x = out.hidden_states[start]  # the unchanged input of the first changed layer
        with masked_heads(model, head_mask, means):
            for layer in model.encoder.layers[start:]:
                x = layer(x, attend)
        pooled = mean_pool(model.encoder.final_norm(x), out.input_ids, model.config.pad_token_id).cpu()
        return pooled[:n], pooled[n:]

    return embed_pairs


def ablation_effects(embed_pairs, is_paraphrase, num_layers, num_heads):
    """[layers, heads]: how much the paraphrase gap drops when that one head is removed.

    embed_pairs(head_mask) -> (a, b) vectors of the pairs' two sentences, not normalised.
    Positive = the model tells paraphrases apart worse without the head.
    """
    keep_all = torch.ones(num_layers, num_heads)
    baseline = paraphrase_gap(*embed_pairs(keep_all), is_paraphrase)  # the intact model
    effects = torch.zeros(num_layers, num_heads)
    for layer in range(num_layers):
        for head in range(num_heads):
            head_mask = keep_all.clone()  # a fresh mask: remove exactly one head
            head_mask[layer, head] = 0.0
            effects[layer, head] = baseline - paraphrase_gap(*embed_pairs(head_mask), is_paraphrase)
    return effects


def heads_mask(heads, num_layers=6, num_heads=12):
    """A [layers, heads] mask of ones with a 0 at every (layer, head) in ``heads``."""
    mask = torch.ones(num_layers, num_heads)
    for layer, head in heads:
        mask[layer, head] = 0.0
    return mask


def random_heads(k, generator, num_layers=6, num_heads=12, exclude=()):
    """k distinct (layer, head) pairs drawn uniformly, none of them in ``exclude``."""
    exclude = {tuple(int(i) for i in pair) for pair in exclude}  # (layer, head) pairs, also as lists or tensors
    allowed = [(lay, h) for lay in range(num_layers) for h in range(num_heads) if (lay, h) not in exclude]
    k = _head_count(k, len(allowed), num_layers, num_heads, len(exclude))
    order = torch.randperm(len(allowed), generator=generator)[:k].tolist()
    return [allowed[i] for i in order]


def _head_count(k, available, num_layers, num_heads, excluded):
    try:
        k = None if isinstance(k, bool) else operator.index(k)
    except TypeError:
        k = None
    if k is None or k < 0:
        raise ValueError(f"k must be a whole number of heads >= 0, got {k!r}")
    if k > available:
        raise ValueError(
            f"k={k} distinct heads asked for, but only {available} can be drawn ({num_layers} layers x "
            f"{num_heads} heads{f', minus {excluded} excluded' if excluded else ''})"
        )
    return k


# ---------------------------------------------------------------------------
# Lesson 06's gender probe, as functions
# ---------------------------------------------------------------------------

BIAS_TEMPLATES = [
    "The {a} asked the {b} a question because {p} was worried.",
    "The {a} called the {b} because {p} needed help.",
    "The {a} thanked the {b} after {p} finished the work.",
    "The {a} argued with the {b} because {p} was late.",
]
# (stereotypically male, stereotypically female) professions
PROFESSION_PAIRS = [("doctor", "nurse"), ("engineer", "teacher"), ("pilot", "secretary"), ("surgeon", "nanny")]


def bias_cases(templates=BIAS_TEMPLATES, pairs=PROFESSION_PAIRS):
    """(template, male job, female job, first job, second job): every template, pair and order."""
    return [(t, m, f, a, b) for t in templates for m, f in pairs for a, b in ((m, f), (f, m))]


def _run_cases(cases, pronoun, model, head_mask=None):
    out = encode([t.format(a=a, b=b, p=pronoun) for t, _, _, a, b in cases], model, head_mask)
    where = [
        (tokens.index(pronoun), tokens.index(m), tokens.index(f))
        for tokens, (_, m, f, _, _) in zip(out.tokens, cases, strict=True)
    ]
    return out, torch.tensor(where)  # positions [cases, 3]: pronoun, male job, female job


def pronoun_job_attention(cases, pronoun, model=None, head_mask=None):
    """[cases, layers, heads]: the pronoun's weight on the female job minus on the male job."""
    model = load_model() if model is None else model
    out, where = _run_cases(cases, pronoun, model, head_mask)
    rows = []
    for n, (p, m, f) in enumerate(where.tolist()):
        weights = out.attentions[:, n, :, p]  # [layers, heads, keys]: the pronoun's row
        rows.append(weights[..., f] - weights[..., m])
    return torch.stack(rows).cpu()


def pronoun_bias_score(cases, model=None, head_mask=None):
    """The bias in the model's *output*, averaged over cases: how much closer the pronoun's
    last-layer vector is to the female job's than to the male job's, "she" minus "he".

    0 = the pronoun's gender makes no difference; > 0 = "she" leans to the stereotypically
    female job (and/or "he" to the male one).
    """
    model = load_model() if model is None else model
    leaning = []
    for pronoun in ("she", "he"):
        out, where = _run_cases(cases, pronoun, model, head_mask)
        n = torch.arange(len(cases))
        last = out.last_hidden_state
        p, m, f = (last[n, where[:, i]] for i in range(3))  # [cases, d] each
        leaning.append(F.cosine_similarity(p, f, dim=-1) - F.cosine_similarity(p, m, dim=-1))
    return (leaning[0] - leaning[1]).mean().item()


# ---------------------------------------------------------------------------
# Subject and verb: a relation we know in every sentence
# ---------------------------------------------------------------------------

# (sentence, subject, verb); a second noun sits between them, so "the nearest noun" is wrong
SUBJECT_VERB = [
    ("The keys to the old cabinet are on the table.", "keys", "are"),
    ("The dog near the small houses sleeps at night.", "dog", "sleeps"),
    ("The girls with the red umbrella sing very well.", "girls", "sing"),
    ("The author of the famous books lives in Rome.", "author", "lives"),
    ("The man behind the trees waves at us.", "man", "waves"),
    ("The flowers in the blue vase smell sweet.", "flowers", "smell"),
    ("The teacher of the young students speaks slowly.", "teacher", "speaks"),
    ("The birds on the wooden fence fly away.", "birds", "fly"),
    ("The boy with the heavy bags walks home.", "boy", "walks"),
    ("The cars outside the station wait for hours.", "cars", "wait"),
    ("The cook in the busy kitchens works hard.", "cook", "works"),
    ("The children of the farmer swim in the river.", "children", "swim"),
]


def subject_verb_scores(model=None, sentences=SUBJECT_VERB):
    """[sentences, layers, heads]: the weight the verb puts on its subject, in every head."""
    model = load_model() if model is None else model
    out = encode([s for s, _, _ in sentences], model)
    rows = []
    for i, (tokens, (_, subject, verb)) in enumerate(zip(out.tokens, sentences, strict=True)):
        rows.append(out.attentions[:, i, :, tokens.index(verb), tokens.index(subject)])
    return torch.stack(rows).cpu()


def token_change(texts, positions, head_mask, model=None):
    """How much removing heads changes the last-layer vectors: 1 - cosine, intact vs masked.

    Returns (change at ``positions`` [one (sentence, token) per text], mean change of all
    other real tokens). A head that carries something *to* those tokens changes them more.
    """
    model = load_model() if model is None else model
    intact, masked = encode(texts, model), encode(texts, model, head_mask)
    change = 1 - F.cosine_similarity(intact.last_hidden_state, masked.last_hidden_state, dim=-1)  # [B, S]
    chosen = torch.zeros_like(change, dtype=torch.bool)
    chosen[torch.arange(len(texts)), torch.tensor(positions)] = True
    real = intact.input_ids != model.config.pad_token_id
    return change[chosen].mean().item(), change[real & ~chosen].mean().item()


# ---------------------------------------------------------------------------
# Layer by layer
# ---------------------------------------------------------------------------


def layer_separation(pairs, is_paraphrase, model=None):
    """For the embeddings and each layer's output: the paraphrase gap of its mean-pooled vectors
    and the fraction of (paraphrase, non-paraphrase) pairs of pairs ranked the right way round
    (the paraphrase more similar; 0.5 = chance, 1 = perfect). Two lists of layers + 1 numbers."""
    model = load_model() if model is None else model
    out = encode([a for a, _ in pairs] + [b for _, b in pairs], model)
    n = len(pairs)
    gaps, ranked = [], []
    for states in out.hidden_states:  # [B, S, d] per layer, embeddings first
        pooled = mean_pool(states, out.input_ids, model.config.pad_token_id).cpu()
        cos = F.cosine_similarity(pooled[:n], pooled[n:], dim=-1)
        gaps.append(paraphrase_gap(pooled[:n], pooled[n:], is_paraphrase).item())
        ranked.append((cos[is_paraphrase][:, None] > cos[~is_paraphrase][None, :]).double().mean().item())
    return gaps, ranked


def load_sweep(kind="zero", path=None):
    """The stored one-head-at-a-time effects [layers, heads] ('zero' or 'mean' ablation).

    72 runs cost as much as about 40 full passes over the pairs, too long for the lesson's budget,
    so they were made once with ``ablation_effects``; the lesson recomputes a layer
    live and checks it against these numbers.
    """
    data = json.loads(Path(path or DATA_DIR / "head_ablation_minilm.json").read_text())
    if kind not in ("zero", "mean"):
        raise ValueError(f"kind must be 'zero' or 'mean', got {kind!r}")
    return torch.tensor(data[kind])


# ---------------------------------------------------------------------------
# How sure are we? Per-pair numbers, a bootstrap over the pairs, chance levels
# ---------------------------------------------------------------------------

__all__ += [
    "pair_cosines",
    "one_head_cosines",
    "bootstrap_weights",
    "gap_from_cosines",
    "ranked_right",
    "layer_cosines",
    "load_controls",
]


def pair_cosines(embed_pairs, head_mask):
    """[pairs]: the cosine of each pair's two vectors with ``head_mask`` applied.

    The paraphrase gap is a difference of two means of these numbers, so keeping them
    (instead of the gap alone) lets us resample the pairs and see how much the gap
    would move with other pairs of the same kind.
    """
    return F.cosine_similarity(*embed_pairs(head_mask), dim=-1)


def one_head_cosines(embed_pairs, num_layers, num_heads):
    """[layers, heads, pairs]: ``pair_cosines`` with each single head removed in turn."""
    keep_all = torch.ones(num_layers, num_heads)
    cosines = []
    for layer in range(num_layers):
        for head in range(num_heads):
            head_mask = keep_all.clone()
            head_mask[layer, head] = 0.0
            cosines.append(pair_cosines(embed_pairs, head_mask))
    return torch.stack(cosines).unflatten(0, (num_layers, num_heads))


def _check_pair_inputs(cosines, is_paraphrase):
    if not isinstance(is_paraphrase, torch.Tensor) or is_paraphrase.dtype != torch.bool or is_paraphrase.dim() != 1:
        raise TypeError("is_paraphrase must be a 1-d bool tensor [pairs] (what load_pairs returns)")
    if cosines.shape[-1] != len(is_paraphrase):
        raise ValueError(
            f"the last axis of the cosines must hold the {len(is_paraphrase)} pairs, got shape {tuple(cosines.shape)}"
        )
    if is_paraphrase.all() or not is_paraphrase.any():
        raise ValueError("is_paraphrase needs at least one paraphrase and one non-paraphrase pair")


def bootstrap_weights(is_paraphrase, draws, generator):
    """[draws, pairs]: how often each pair is picked in each bootstrap sample.

    A sample draws as many paraphrase pairs as there are, with replacement, from the
    paraphrases, and likewise for the non-paraphrases, so every sample keeps the
    24 + 24 design. Counts (not indices) let one matrix product evaluate all samples.
    """
    _check_pair_inputs(torch.zeros(len(is_paraphrase)), is_paraphrase)
    weights = torch.zeros(draws, len(is_paraphrase))
    for group in (is_paraphrase, ~is_paraphrase):
        members = group.nonzero().flatten()
        picks = members[torch.randint(len(members), (draws, len(members)), generator=generator)]
        weights.scatter_add_(1, picks, torch.ones(picks.shape))
    return weights


def gap_from_cosines(cosines, is_paraphrase, weights=None):
    """The paraphrase gap from per-pair cosines [..., pairs]; with bootstrap ``weights``
    [draws, pairs], one gap per sample: [draws, ...]."""
    _check_pair_inputs(cosines, is_paraphrase)
    cosines = cosines.double()
    if weights is None:
        return cosines[..., is_paraphrase].mean(-1) - cosines[..., ~is_paraphrase].mean(-1)
    w = weights.double()
    flat = cosines.reshape(-1, cosines.shape[-1])  # [rows, pairs]
    means = []
    for group in (is_paraphrase, ~is_paraphrase):
        wg = w * group  # the sample's weights on this group only
        means.append((wg @ flat.T) / wg.sum(-1, keepdim=True))  # [draws, rows]
    return (means[0] - means[1]).reshape(len(weights), *cosines.shape[:-1])


def ranked_right(cosines, is_paraphrase, weights=None):
    """Share of (paraphrase pair, non-paraphrase pair) combinations in which the paraphrase
    has the higher cosine (0.5 = chance, 1 = every paraphrase above every non-paraphrase;
    the area under the ROC curve). cosines [..., pairs]; with ``weights`` [draws, pairs]: [draws, ...]."""
    _check_pair_inputs(cosines, is_paraphrase)
    above = (cosines[..., is_paraphrase, None] > cosines[..., None, ~is_paraphrase]).double()  # [..., P, N]
    if weights is None:
        return above.mean((-1, -2))
    wp, wn = weights[:, is_paraphrase].double(), weights[:, ~is_paraphrase].double()  # [draws, P], [draws, N]
    total = torch.einsum("dp,...pn,dn->d...", wp, above, wn)
    return total / (wp.sum(-1) * wn.sum(-1)).reshape(-1, *[1] * (cosines.dim() - 1))


@torch.no_grad()
def layer_cosines(pairs, model=None):
    """[layers + 1, pairs]: each pair's cosine of its mean-pooled vectors, for the embeddings
    and after every layer (what ``layer_separation`` summarises)."""
    model = load_model() if model is None else model
    out = encode([a for a, _ in pairs] + [b for _, b in pairs], model)
    n = len(pairs)
    pooled = torch.stack([mean_pool(s, out.input_ids, model.config.pad_token_id) for s in out.hidden_states]).cpu()
    return F.cosine_similarity(pooled[:, :n], pooled[:, n:], dim=-1)


def load_controls(path=None):
    """The stored per-pair cosines and random-head controls of lesson 06b
    (``scripts/head_ablation_controls.py`` makes them): a dict of tensors and lists."""
    data = json.loads(Path(path or DATA_DIR / "head_ablation_controls.json").read_text())
    for key in ("intact_cosines", "zero_cosines", "mean_cosines", "bias_controls", "verb_controls"):
        if key in data:
            data[key] = torch.tensor(data[key], dtype=torch.float64)
    return data
