"""Lesson 03's exercises: ``split_heads``, ``combine_heads`` and a ``MultiHeadAttention`` class.

Each checker compares the candidate with the reference in ``course_utils.attention``
on several batch sizes, head counts, head sizes and masks, and recognises the
usual multi-head mistakes by computing what each mistake would output
(``_mha`` below is multi-head attention with one "knob" per mistake).

The class is checked by copying the reference's weights into the candidate by
attribute name (``query_linear``, ``key_linear``, ``value_linear``,
``output_linear``), so both compute with the same numbers. The exercise asks
for the slides' layout (no bias on Q/K/V, a bias on the output); the
article's all-bias variant computes the same function family, so it
is accepted too and compared with the reference built with ``qkv_bias=True``.
"""

import math

import torch

from course_utils.attention import MultiHeadAttention, combine_heads, split_heads
from course_utils.exercises import exercise
from course_utils.exercises.checking import (
    KnownMistake,
    Mistake,
    call,
    close,
    diagnose,
    diagnose_batching,
    expect_like,
    expect_tensor,
    generator,
    randn,
)

__all__ = ["check_split_heads", "check_combine_heads", "check_multi_head_attention"]


# ----------------------------------------------------------------------------------------------
# The messages, one per mistake (tests assert on their distinctive phrases).

SPLIT_NO_PERMUTE = (
    "the heads are scrambled: you reshaped [B, S, D] straight to [B, H, S, D/H]. A reshape never moves "
    "numbers, it only re-reads them in memory order, so 'head 0' got the first S*D/H numbers of the sequence "
    "(whole tokens) instead of the first D/H features of every token. Reshape to [B, S, H, D/H] first, "
    "then move the heads axis in front with .permute(0, 2, 1, 3) (or .transpose(1, 2))."
)
SPLIT_INTERLEAVED = (
    "each head got every H-th feature (interleaved) instead of a contiguous block: you reshaped to "
    "[B, S, D/H, H] and permuted. Head h must get features h*D/H ... (h+1)*D/H - 1: reshape to "
    "[B, S, H, D/H], then .permute(0, 2, 1, 3)."
)
SPLIT_KEPT_SEQ_FIRST = (
    "you split the features into heads but kept the axes in the order [B, S, H, D/H]; the heads axis must "
    "come before the sequence axis ([B, H, S, D/H]) so each head is one batch of matrix products: "
    "add .permute(0, 2, 1, 3) (or .transpose(1, 2))."
)
SPLIT_WRONG_PERMUTE = (
    "your axes came out as [B, H, D/H, S]: that is .permute(0, 2, 3, 1). The sequence axis must stay "
    "before the feature axis: use .permute(0, 2, 1, 3)."
)
SPLIT_MERGED_BATCH = "you merged the batch and head axes into one ([B*H, S, D/H]); keep them separate: [B, H, S, D/H]."
SPLIT_SIZES_SWAPPED = (
    "your axes came out as [B, D/H, S, H]: you cut the features into D/H pieces of size H instead of H pieces "
    "of size D/H. Reshape to [B, S, num_heads, D // num_heads] (the head count first), then .permute(0, 2, 1, 3)."
)

COMBINE_NO_PERMUTE = (
    "the heads are scrambled: you reshaped [B, H, S, d] straight to [B, S, H*d] without a permute. A reshape "
    "only re-reads memory in order, so position 0 got head 0's first tokens instead of every head's output "
    "for token 0. Move the heads axis back next to the features first: .permute(0, 2, 1, 3) (or "
    ".transpose(1, 2)), then reshape to [B, S, H*d]."
)
COMBINE_WRONG_ORDER = (
    "heads concatenated in the wrong order: you permuted to [B, S, d, H] (.permute(0, 2, 3, 1)) before "
    "reshaping, which interleaves the heads' features (head 0 feature 0, head 1 feature 0, ...). "
    "Concatenation keeps each head's d features together: [head 0 | head 1 | ...], i.e. "
    ".permute(0, 2, 1, 3) then reshape to [B, S, H*d]."
)
COMBINE_NOT_MERGED = "you moved the axes back to [B, S, H, d] but did not merge the last two: reshape to [B, S, H*d]."
COMBINE_HEADS_AS_POSITIONS = (
    "your output has H*S positions of d features each: the heads were stacked along the sequence axis instead "
    "of concatenated along the features (a view/reshape to [B, -1, d] with d the head size?). Every position "
    "keeps its S index and gets H*d features: .permute(0, 2, 1, 3), then reshape to [B, S, H*d]."
)
COMBINE_LOST_HEADS = (
    "your output has only d features per position: you summed/averaged the heads or kept one of them. "
    "Multi-head attention concatenates the heads: [B, S, H*d]."
)

MHA_TUPLE = (
    "your forward returned a tuple (output, weights), like the article's ScaledDotProductAttention does. "
    "A multi-head attention layer returns only the output tensor [B, L_q, d_model]; if you want the "
    "weights for plotting, store them on the module (e.g. self.attention_weights) instead of returning them."
)
MHA_SCALE_MODEL = (
    "you scaled the scores by sqrt(d_model); each head's dot products have d_k = d_model // num_heads "
    "terms, so scale by sqrt(d_k) (the head size), not by sqrt(d_model)."
)
MHA_NO_SCALE = "you did not scale the scores: divide q @ k^T by sqrt(d_k), d_k = d_model // num_heads."
MHA_SOFTMAX_QUERIES = (
    "softmax over the wrong axis: you normalised each column of the scores (over the queries, dim=-2). Each "
    "query's weights over the keys must sum to 1: torch.softmax(scores, dim=-1)."
)
MHA_SHARED_PROJECTION = (
    "one projection reused for Q, K and V: queries, keys and values each need their own learned "
    "projection: query_linear(query), key_linear(key), value_linear(value)."
)
MHA_KV_IGNORED = (
    "key/value arguments ignored: your output only depends on `query`, so self-attention works but "
    "cross-attention breaks (there key and value come from another sequence, with L_k != L_q). "
    "Project key with key_linear(key) and value with value_linear(value)."
)
MHA_MASK_IGNORED = (
    "the mask was ignored: positions where mask == 0 must get zero weight. Before the softmax, "
    "scores = scores.masked_fill(mask == 0, float('-inf'))."
)
MHA_INVERTED_MASK = (
    "the mask is inverted: you blocked the positions where mask == 1. In this course (and the seeds) "
    "1/True means 'may attend' and 0/False 'may not': masked_fill(mask == 0, float('-inf'))."
)
MHA_NAN = (
    "your output contains NaN where the reference has none. Usually a query row whose scores are all -inf "
    "(every key blocked: is the mask the right way round, 1/True = may attend?), or exp() of large scores: "
    "use torch.softmax, which subtracts the row maximum for you."
)
MHA_NO_OUTPUT_PROJECTION = (
    "missing output projection: after concatenating the heads, apply output_linear; it mixes what the "
    "different heads found."
)
MHA_SPLIT_NO_PERMUTE = "the heads are scrambled when splitting: " + SPLIT_NO_PERMUTE.split(": ", 1)[1]
MHA_COMBINE_NO_PERMUTE = "the heads are scrambled when combining: " + COMBINE_NO_PERMUTE.split(": ", 1)[1]
MHA_BOTH_NO_PERMUTE = (
    "the heads are scrambled: you split with a plain reshape to [B, H, S, d] and combined with a plain "
    "reshape back, without a permute either way, so each 'head' attends over pieces of several tokens. "
    "Split: reshape to [B, S, H, d] then .permute(0, 2, 1, 3); combine: .permute(0, 2, 1, 3) then "
    "reshape to [B, S, H*d]."
)
MHA_WRONG_ORDER = COMBINE_WRONG_ORDER
MHA_INTERLEAVED = (
    "each head takes every H-th feature (interleaved) instead of a contiguous block of d_k features. "
    "It is a valid layer in itself, but not the standard layout: head h must use features "
    "h*d_k ... (h+1)*d_k - 1 of each projection, as in the seeds, PyTorch and pretrained models. "
    "Split with reshape to [B, S, H, d_k] + .permute(0, 2, 1, 3), combine with the inverse."
)
MHA_RETURNED_ATTENTION_PAIR = (
    "your forward returned the (output, weights) pair of scaled_dot_product_attention, still split into heads "
    "([B, H, L_q, d_k]). Unpack it, `context, weights = scaled_dot_product_attention(q, k, v, mask)`, then "
    "combine the heads of `context` to [B, L_q, d_model] and return output_linear(...) of that."
)
MHA_UNCOMBINED = (
    "your output still has a heads axis ([B, H, L_q, d_k]): combine the heads back to [B, L_q, d_model] "
    "and apply output_linear."
)


_BATCH_ADVICE = (
    "Every sample is right on its own, the batched call is not. Do not hard-code a batch size of 1 or "
    "squeeze/index the batch axis, and keep the samples apart (never fold the batch into the sequence axis): "
    "read the batch size from the input, batch_size = x.shape[0]."
)


def _is_named(mistake):
    # "in place": the framework's own specific message about an input the candidate changed
    return isinstance(mistake, KnownMistake) or "in place" in str(mistake)


def _batched(batch, run, per_sample_ok):
    """Run one case; if a batch > 1 fails for an unnamed reason but every sample
    passes on its own, say that the code only works for one sample at a time."""
    try:
        run()
    except Mistake as m:
        if batch > 1 and not _is_named(m):
            diagnose_batching(True, per_sample_ok, f"batch size {batch}", _BATCH_ADVICE)
        raise


# ----------------------------------------------------------------------------------------------
# split_heads

SPLIT_CASES = [  # (batch, seq_len, d_model, num_heads): batch 1 first, then several d_k values
    (1, 4, 6, 2),
    (2, 5, 12, 3),
    (3, 3, 8, 4),
    (2, 4, 8, 1),
    (2, 3, 16, 8),
    (4, 6, 64, 4),
    (3, 7, 10, 5),
]


_ONLY_MOVES = "moving axes only rearranges numbers, so something in your code computes with them (a division?)."


def _split_shape_hint(got, b, s, h, d):
    if not isinstance(got, torch.Tensor) or tuple(got.shape) == (b, h, s, d):
        return
    hints = {
        (b, d, s, h): SPLIT_SIZES_SWAPPED,
        (b, s, h, d): SPLIT_KEPT_SEQ_FIRST,
        (b, h, d, s): SPLIT_WRONG_PERMUTE,
        (b * h, s, d): SPLIT_MERGED_BATCH,
    }  # where two of these shapes coincide, the later entry wins
    if tuple(got.shape) in hints:
        raise KnownMistake(hints[tuple(got.shape)])


def _check_split_case(candidate, x, h):
    b, s, dm = x.shape
    d = dm // h
    got = call(candidate, x, h)
    if isinstance(got, tuple):
        raise KnownMistake("split_heads should return one tensor [B, H, S, D/H], not a tuple.")
    expect_like(got, x, f"result for x of shape {tuple(x.shape)}, num_heads={h}")
    _split_shape_hint(got, b, s, h, d)
    diagnose(
        got,
        split_heads(x, h),
        known_mistakes=[
            (SPLIT_NO_PERMUTE, x.reshape(b, h, s, d)),
            (SPLIT_INTERLEAVED, x.reshape(b, s, d, h).permute(0, 3, 1, 2)),
        ],
        context=f"x of shape {tuple(x.shape)}, num_heads={h}",
        nonfinite_advice=_ONLY_MOVES,
    )


@exercise(
    "split_heads",
    solution=split_heads,
    hints=[
        "Two moves: cut the last axis D into H pieces of D/H, then bring the heads axis in front of the sequence axis.",
        "x.reshape(B, S, H, D // H) gives [B, S, H, D/H]; .permute(0, 2, 1, 3) (or .transpose(1, 2)) gives [B, H, S, D/H].",
        "batch_size, seq_len, d_model = x.shape; "
        "return x.reshape(batch_size, seq_len, num_heads, d_model // num_heads).permute(0, 2, 1, 3)",
    ],
)
def check_split_heads(candidate):
    for i, (b, s, dm, h) in enumerate(SPLIT_CASES):
        x = randn(generator(300 + i), b, s, dm)

        def per_sample_ok(x=x, h=h):
            return all(_matches(lambda xb: candidate(xb, h), split_heads, x[j : j + 1], h) for j in range(x.shape[0]))

        _batched(b, lambda x=x, h=h: _check_split_case(candidate, x, h), per_sample_ok)


def _matches(fn, reference, x, *args):
    try:
        got = fn(x.clone())
    except Exception:
        return False
    want = reference(x, *args)
    return close(got, want)


# ----------------------------------------------------------------------------------------------
# combine_heads

COMBINE_CASES = [  # (batch, heads, seq_len, head_dim)
    (1, 2, 4, 3),
    (2, 3, 5, 4),
    (3, 4, 3, 2),
    (2, 1, 4, 8),
    (2, 8, 3, 2),
    (4, 4, 6, 16),
    (3, 5, 7, 2),
]


def _check_combine_case(candidate, x):
    b, h, s, d = x.shape
    got = call(candidate, x)
    if isinstance(got, tuple):
        raise KnownMistake("combine_heads should return one tensor [B, S, H*d], not a tuple.")
    expect_like(got, x, f"result for x of shape {tuple(x.shape)}")
    if isinstance(got, torch.Tensor) and tuple(got.shape) != (b, s, h * d):
        hints = {(b, s, h, d): COMBINE_NOT_MERGED}
        if h > 1:
            hints[(b, s, d)] = COMBINE_LOST_HEADS
            hints[(b, h * s, d)] = COMBINE_HEADS_AS_POSITIONS
        if tuple(got.shape) in hints:
            raise KnownMistake(hints[tuple(got.shape)])
    diagnose(
        got,
        combine_heads(x),
        known_mistakes=[
            (COMBINE_NO_PERMUTE, x.reshape(b, s, h * d)),
            (COMBINE_WRONG_ORDER, x.permute(0, 2, 3, 1).reshape(b, s, h * d)),
        ],
        context=f"x of shape {tuple(x.shape)}",
        nonfinite_advice=_ONLY_MOVES,
    )


@exercise(
    "combine_heads",
    solution=combine_heads,
    hints=[
        "Undo split_heads in reverse order: first put the sequence axis back before the heads axis, then merge heads and features.",
        "x.permute(0, 2, 1, 3) (or .transpose(1, 2)) gives [B, S, H, d]; it is not contiguous any more, so merge "
        "with .reshape(B, S, H * d) (or .contiguous().view(...)).",
        "batch_size, num_heads, seq_len, head_dim = x.shape; "
        "return x.permute(0, 2, 1, 3).reshape(batch_size, seq_len, num_heads * head_dim)",
    ],
)
def check_combine_heads(candidate):
    for i, (b, h, s, d) in enumerate(COMBINE_CASES):
        x = randn(generator(310 + i), b, h, s, d)

        def per_sample_ok(x=x):
            return all(_matches(candidate, combine_heads, x[j : j + 1]) for j in range(x.shape[0]))

        _batched(b, lambda x=x: _check_combine_case(candidate, x), per_sample_ok)


# ----------------------------------------------------------------------------------------------
# MultiHeadAttention

PROJECTIONS = ("query_linear", "key_linear", "value_linear", "output_linear")


def _mha(
    w,
    query,
    key,
    value,
    mask,
    num_heads,
    scale="head",
    shared_projection=False,
    ignore_kv=False,
    ignore_mask=False,
    invert_mask=None,
    split="heads",
    combine="heads",
    output_projection=True,
    softmax_dim=-1,
):
    """Multi-head attention from weights ``w``, with one knob per known mistake."""
    if ignore_kv:
        key = value = query
    lin = {}
    for name in PROJECTIONS:
        used = "query_linear" if shared_projection and name != "output_linear" else name
        lin[name] = (w[used + ".weight"], w.get(used + ".bias"))

    def project(x, name):
        weight, bias = lin[name]
        y = x @ weight.T
        return y if bias is None else y + bias

    d_model = query.shape[-1]
    d_k = d_model // num_heads

    def to_heads(x):
        b, s, _ = x.shape
        if split == "reshape":
            return x.reshape(b, num_heads, s, d_k)
        if split == "interleave":
            return x.reshape(b, s, d_k, num_heads).permute(0, 3, 1, 2)
        return x.reshape(b, s, num_heads, d_k).permute(0, 2, 1, 3)

    q = to_heads(project(query, "query_linear"))
    k = to_heads(project(key, "key_linear"))
    v = to_heads(project(value, "value_linear"))
    scores = q @ k.transpose(-2, -1)
    scores = scores / {"head": math.sqrt(d_k), "model": math.sqrt(d_model), "none": 1.0}[scale]
    if mask is not None and invert_mask is not None:  # invert_mask: the fill value the learner used
        scores = scores.masked_fill(mask != 0, invert_mask)
    elif mask is not None and not ignore_mask:
        scores = scores.masked_fill(mask == 0, float("-inf"))
    context = torch.softmax(scores, dim=softmax_dim) @ v  # [B, H, L_q, d_k]
    b, _, lq, _ = context.shape
    if combine == "reshape":
        out = context.reshape(b, lq, d_model)
    elif combine in ("wrong_order", "interleave"):
        out = context.permute(0, 2, 3, 1).reshape(b, lq, d_model)
    else:
        out = context.permute(0, 2, 1, 3).reshape(b, lq, d_model)
    return project(out, "output_linear") if output_projection else out


def _known_mha_mistakes(w, query, key, value, mask, h, cross):
    args = (w, query, key, value, mask, h)
    mistakes = [
        (MHA_SCALE_MODEL, _mha(*args, scale="model")),
        (MHA_NO_SCALE, _mha(*args, scale="none")),
        (MHA_SOFTMAX_QUERIES, _mha(*args, softmax_dim=-2)),
        (MHA_SHARED_PROJECTION, _mha(*args, shared_projection=True)),
        (MHA_NO_OUTPUT_PROJECTION, _mha(*args, output_projection=False)),
        (MHA_SPLIT_NO_PERMUTE, _mha(*args, split="reshape")),
        (MHA_COMBINE_NO_PERMUTE, _mha(*args, combine="reshape")),
        (MHA_BOTH_NO_PERMUTE, _mha(*args, split="reshape", combine="reshape")),
        (MHA_WRONG_ORDER, _mha(*args, combine="wrong_order")),
        (MHA_INTERLEAVED, _mha(*args, split="interleave", combine="interleave")),
    ]
    if cross and mask is None:  # with a mask sized for L_k, ignoring key/value would not even run
        mistakes.append((MHA_KV_IGNORED, _mha(*args, ignore_kv=True)))
    if mask is not None:
        mistakes.append((MHA_MASK_IGNORED, _mha(*args, ignore_mask=True)))
        mistakes.append((MHA_INVERTED_MASK, _mha(*args, invert_mask=float("-inf"))))
        mistakes.append((MHA_INVERTED_MASK, _mha(*args, invert_mask=-1e9)))
    return mistakes


MHA_CASES = [  # batch 1 first; cross-attention without a mask before masked cross-attention
    dict(batch=1, d_model=8, heads=2, lq=5, lk=None, mask=None),
    dict(batch=1, d_model=8, heads=2, lq=3, lk=6, mask=None),
    dict(batch=1, d_model=8, heads=2, lq=5, lk=None, mask="causal"),
    dict(batch=3, d_model=12, heads=3, lq=4, lk=None, mask=None),
    dict(batch=2, d_model=16, heads=4, lq=4, lk=7, mask="padding"),
    dict(batch=2, d_model=16, heads=4, lq=5, lk=None, mask="per_head"),
    dict(batch=2, d_model=24, heads=8, lq=3, lk=5, mask="causal_cross"),
    dict(batch=2, d_model=12, heads=1, lq=4, lk=None, mask=None),
    dict(batch=2, d_model=32, heads=4, lq=6, lk=9, mask=None, scale=8.0),  # large-magnitude inputs
    dict(batch=3, d_model=20, heads=5, lq=2, lk=7, mask="padding"),
]


def _make_mask(kind, batch, heads, lq, lk, seed):
    """Bool masks (True = may attend) with at least one allowed key in every row."""
    if kind == "causal":  # [L, L], the same for every batch element and head
        return torch.ones(lq, lq, dtype=torch.bool).tril()
    if kind == "causal_cross":  # [1, 1, L_q, L_k]: query i sees keys 0 .. i + L_k - L_q
        return torch.ones(lq, lk, dtype=torch.bool).tril(diagonal=lk - lq)[None, None]
    if kind == "padding":  # [B, 1, 1, L_k]: the last keys of each sequence are padding
        lengths = torch.arange(batch) + lk - batch
        return (torch.arange(lk)[None, :] < lengths[:, None])[:, None, None, :]
    if kind == "per_head":  # [B, H, L, L]: a different random pattern for each head, diagonal always allowed
        allowed = randn(generator(seed), batch, heads, lq, lq) > 0
        return allowed | torch.eye(lq, dtype=torch.bool)
    raise ValueError(kind)


def _reference_weights(d_model, qkv_bias, seed):
    """Weights with unit-variance projections, so the heads' patterns are sharp and mistakes show."""
    gen = torch.Generator().manual_seed(seed)
    w = {}
    for name in PROJECTIONS:
        w[name + ".weight"] = torch.randn(d_model, d_model, generator=gen) / math.sqrt(d_model)
        if qkv_bias or name == "output_linear":
            w[name + ".bias"] = 0.5 * torch.randn(d_model, generator=gen)
    return w


def _load_into(model, w):
    with torch.no_grad():
        for name in PROJECTIONS:
            linear = getattr(model, name)
            linear.weight.copy_(w[name + ".weight"])
            if linear.bias is not None:
                linear.bias.copy_(w[name + ".bias"])


def _inspect_candidate(model, d_model):
    """The four projections exist, have the right shapes and a consistent bias setting.

    Returns whether Q/K/V carry a bias (the article's variant) or not (the slides')."""
    if not isinstance(model, torch.nn.Module):
        raise KnownMistake(
            f"calling your class gave a {type(model).__name__}, not an nn.Module: define "
            f"`class MultiHeadAttention(nn.Module)` and call super().__init__() first in __init__."
        )
    linears = {}
    for name in PROJECTIONS:
        linear = getattr(model, name, None)
        if linear is None:
            raise KnownMistake(
                f"your module has no attribute `{name}`. The checker copies the reference's weights into "
                f"query_linear, key_linear, value_linear and output_linear, so use these names (as in the slides): "
                f"self.{name} = nn.Linear(d_model, d_model{', bias=False' if name != 'output_linear' else ''})."
            )
        weight = getattr(linear, "weight", None)
        if not isinstance(weight, torch.Tensor):
            raise KnownMistake(
                f"`{name}` should be an nn.Linear(d_model, d_model), but it is a {type(linear).__name__}."
            )
        if tuple(weight.shape) != (d_model, d_model):
            raise KnownMistake(
                f"`{name}.weight` has shape {tuple(weight.shape)}, but with d_model={d_model} it should be "
                f"({d_model}, {d_model}): one projection maps d_model features to d_model features for all heads "
                f"at once (nn.Linear(d_model, d_model)); the heads are split afterwards."
            )
        bias = getattr(linear, "bias", None)
        if bias is not None and tuple(bias.shape) != (d_model,):
            raise KnownMistake(f"`{name}.bias` has shape {tuple(bias.shape)}; it should be ({d_model},).")
        linears[name] = linear
    for a, b in ((0, 1), (0, 2), (1, 2)):
        la, lb = linears[PROJECTIONS[a]], linears[PROJECTIONS[b]]
        if la is lb or la.weight.data_ptr() == lb.weight.data_ptr():
            raise KnownMistake(MHA_SHARED_PROJECTION)
    if linears["output_linear"].bias is None:
        raise KnownMistake(
            "`output_linear` has no bias. As in both seeds, the output projection keeps its bias: "
            "nn.Linear(d_model, d_model)."
        )
    has_bias = [linears[n].bias is not None for n in PROJECTIONS[:3]]
    if any(has_bias) and not all(has_bias):
        which = ", ".join(n for n, hb in zip(PROJECTIONS[:3], has_bias, strict=True) if hb)
        raise KnownMistake(
            f"only {which} has a bias: give Q, K and V the same setting. This exercise follows the slides: "
            f"nn.Linear(d_model, d_model, bias=False) for all three (bias=True for all three, as in the "
            f"article, is accepted too)."
        )
    return all(has_bias)


def _check_mha_case(candidate, case, seed):
    b, d, h, lq = case["batch"], case["d_model"], case["heads"], case["lq"]
    cross = case["lk"] is not None
    lk = case["lk"] if cross else lq
    model = call(candidate, d, h)
    qkv_bias = _inspect_candidate(model, d)
    w = _reference_weights(d, qkv_bias, seed)
    _load_into(model, w)
    reference = MultiHeadAttention(d, h, qkv_bias=qkv_bias)
    _load_into(reference, w)
    model.eval()
    reference.eval()

    scale = case.get("scale", 1.0)
    query = scale * randn(generator(seed + 1), b, lq, d)
    key = scale * randn(generator(seed + 2), b, lk, d) if cross else query
    value = scale * randn(generator(seed + 3), b, lk, d) if cross else query
    mask = _make_mask(case["mask"], b, h, lq, lk, seed + 4) if case["mask"] else None
    args = (query, key, value) + ((mask,) if mask is not None else ())
    what = f"{'cross' if cross else 'self'}-attention, batch {b}, d_model={d}, num_heads={h}, L_q={lq}, L_k={lk}" + (
        f", {case['mask']} mask of shape {tuple(mask.shape)}" if mask is not None else ""
    )

    def run():
        with torch.no_grad():
            try:
                got = call(model, *(a.clone() for a in args))  # copies keep the case intact
            except Mistake as error:
                # say which case broke: a shape error only in cross-attention means L_k != L_q was not expected
                lengths = (
                    " Key and value have L_k positions, query L_q: read each tensor's own length." if cross else ""
                )
                raise Mistake(f"{error}\n(checking {what}.){lengths}") from None
            expected = reference(*args)
        if isinstance(got, tuple):
            first = got[0] if got else None
            if isinstance(first, torch.Tensor) and tuple(first.shape) == (b, h, lq, d // h):
                raise KnownMistake(MHA_RETURNED_ATTENTION_PAIR)
            raise KnownMistake(MHA_TUPLE)
        expect_like(got, query, f"output ({what})")
        if tuple(got.shape) == (b, h, lq, d // h) and h > 1:
            raise KnownMistake(MHA_UNCOMBINED)
        expect_tensor(got, (b, lq, d), what=f"output ({what})")
        known = _known_mha_mistakes(w, query, key, value, mask, h, cross)
        # float32 rounding grows with the size of the numbers (and PyTorch's fused attention kernels
        # sum in another order), so the absolute tolerance follows the output's scale
        atol = 2e-5 * max(1.0, expected.abs().max().item())
        if got.isnan().any() and not expected.isnan().any():
            for message, wrong in known:
                if close(got, wrong, atol=atol):
                    raise KnownMistake(message)
            raise KnownMistake(MHA_NAN)
        diagnose(got, expected, known_mistakes=known, context=what, atol=atol)

    def per_sample_ok():
        with torch.no_grad():
            expected = reference(*args)
            for j in range(b):
                sample_mask = (
                    () if mask is None else ((mask[j : j + 1] if mask.dim() == 4 and mask.shape[0] == b else mask),)
                )
                try:
                    got = model(
                        query[j : j + 1].clone(), key[j : j + 1].clone(), value[j : j + 1].clone(), *sample_mask
                    )
                except Exception:
                    return False
                atol = 2e-5 * max(1.0, expected.abs().max().item())
                if not close(got, expected[j : j + 1], atol=atol):
                    return False
        return True

    _batched(b, run, per_sample_ok)


@exercise(
    "multi_head_attention",
    solution=MultiHeadAttention,
    hints=[
        "Four steps: project (query_linear, key_linear, value_linear), split into heads, scaled dot-product "
        "attention in every head at once, combine the heads and apply output_linear.",
        "Shapes: [B, L, d_model] -> linear -> split_heads -> [B, H, L, d_k]; scores = q @ k.transpose(-2, -1) / "
        "sqrt(d_k) with d_k = d_model // num_heads -> [B, H, L_q, L_k]; masked_fill(mask == 0, float('-inf')); "
        "softmax(dim=-1); @ v -> [B, H, L_q, d_k]; combine_heads -> [B, L_q, d_model]; output_linear.",
        "In __init__: self.num_heads = num_heads; self.query_linear = nn.Linear(d_model, d_model, bias=False) (same "
        "for key/value); self.output_linear = nn.Linear(d_model, d_model). In forward: q = split_heads("
        "self.query_linear(query), self.num_heads) (same for k from key and v from value); "
        "context, _ = attention.scaled_dot_product_attention(q, k, v, mask); "
        "return self.output_linear(combine_heads(context)).",
    ],
)
def check_multi_head_attention(candidate):
    # Building modules draws from the global random generator (nn.Linear's init); keep the
    # learner's random stream unchanged, so the numbers later in the lesson do not depend on the check.
    if isinstance(candidate, torch.nn.Module):
        raise KnownMistake(
            'pass the class itself, not an instance: check("multi_head_attention", MultiHeadAttention) '
            "(the checker builds it with several sizes)."
        )
    with torch.random.fork_rng(devices=[]):
        for i, case in enumerate(MHA_CASES):
            _check_mha_case(candidate, case, seed=320 + 10 * i)
