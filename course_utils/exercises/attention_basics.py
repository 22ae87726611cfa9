"""Lesson 02's exercises: stable softmax, scaled dot-product attention, the causal mask.

The solutions are the course's reference code: ``course_utils.softmax.stable_softmax``,
``course_utils.attention.scaled_dot_product_attention`` and ``causal_mask``.

A fully masked query row (a query with no key it may attend to) must come out
as zero weights and a zero output, as in the course's reference and lesson 02:
filling with -inf alone gives NaN there, which spreads to every later layer;
filling with -1e9 gives uniform weights, a query attending to every key it was
told not to. Each of the two gets its own message.
"""

import functools
import math

import torch

from course_utils.attention import causal_mask, scaled_dot_product_attention
from course_utils.exercises import exercise
from course_utils.exercises.checking import (
    Mistake,
    NotAttempted,
    call,
    close,
    describe,
    diagnose,
    diagnose_batching,
    expect_plain,
    expect_same_dtype,
    expect_tensor,
    first_difference,
    generator,
)
from course_utils.softmax import stable_softmax

# Distinctive phrases, one per mistake (the tests look for them).
NO_SCALING = "you did not scale the scores"
SCALE_BY_DK = "you divided the scores by d_k instead of sqrt(d_k)"
SCALE_BY_DV = "you divided by sqrt(d_v), the size of the values"
SCALE_BY_LEN = "you divided by the square root of the sequence length"
SCALE_MULTIPLIED = "you multiplied the scores by sqrt(d_k)"
WRONG_AXIS = "softmax over the wrong axis"
OVERFLOW = "exp() overflowed"
MASK_IGNORED = "the mask was ignored"
MASK_INVERTED = "the mask is inverted"
MASK_AFTER_SOFTMAX = "the mask was applied after the softmax"
MASK_ADDED = "you added the mask to the scores"
MASK_MULTIPLIED = "you multiplied the scores by the mask"
MASK_NOT_BOOL = "masked_fill needs a boolean condition"
WRONG_ORDER = "output and weights are in the wrong order"
NOT_A_PAIR = "return a pair (output, weights)"
OUTPUT_NOT_WEIGHTED_SUM = "the weights are right but the output is not weights @ v"
FULLY_MASKED_NAN = "a fully masked query row gave NaN"
FULLY_MASKED_UNIFORM = "a fully masked query row got uniform weights"
DIM_IGNORED = "you ignored the dim argument"
GLOBAL_MAX = "you subtracted the maximum of the whole tensor"
NORMALISED_OVER_ALL = "you divided by the sum over the whole tensor"
ROW_MAX_WHOLE_SUM = "each row's maximum is right, but the sum runs over the whole tensor"
MAX_OTHER_AXIS = "you subtracted the maximum along another axis"
KEEPDIM = "keepdim=True"
CAUSAL_TRANSPOSED = "your mask is transposed"
CAUSAL_NO_DIAGONAL = "the diagonal is missing"
CAUSAL_INVERTED = "your mask marks the forbidden positions"
CAUSAL_ADDITIVE = "an additive float mask"
CAUSAL_VALUES = "a mask holds only True/False or 1/0"

_UNBATCHED_ADVICE = (
    "`k.T` / `k.t()` only transpose 2-D tensors; `k.transpose(-2, -1)` swaps the last two axes "
    "whatever batch and head axes come first. Likewise use `dim=-1` rather than `dim=1`."
)


# --------------------------------------------------------------------------- stable_softmax


def _softmax_cases():
    g = generator(2)
    inf = float("inf")
    return [
        ("a 1-D tensor [1, 2, 3]", torch.tensor([1.0, 2.0, 3.0]), -1),
        ("rows of a [3, 3] tensor", torch.randn(3, 3, generator=g), -1),
        ("rows of a [4, 6] tensor", torch.randn(4, 6, generator=g), -1),
        ("dim=1 of a [2, 3, 4] tensor", torch.randn(2, 3, 4, generator=g), 1),
        ("dim=0 of a [3, 5] tensor", torch.randn(3, 5, generator=g), 0),
        ("masked scores with -inf entries", torch.tensor([[0.0, -inf, 1.0], [-inf, 2.0, 2.0]]), -1),
        (
            "large scores [[1000, 1001, 1002], [-1000, -1001, -1002]]",
            torch.tensor([[1000.0, 1001.0, 1002.0], [-1000.0, -1001.0, -1002.0]]),
            -1,
        ),
        (
            "rows of very different size [[10000, 9999, 9998], [0, 1, 2]]",
            torch.tensor([[1e4, 1e4 - 1, 1e4 - 2], [0.0, 1.0, 2.0]]),
            -1,
        ),
        ("a float64 tensor", torch.randn(2, 5, generator=g, dtype=torch.float64), -1),
    ]


def _softmax_overflows(x, dim):
    """The two unstable softmaxes; their NaNs sit in different rows, so they can be told apart."""
    naive = torch.exp(x) / torch.exp(x).sum(dim=dim, keepdim=True)
    shifted = torch.exp(x - x.max())
    return [
        (
            f"{OVERFLOW}: exp(1000) is inf in float32 (anything above ~88 is) and inf/inf = NaN; exp(-1000) is 0 "
            f"and 0/0 = NaN. Subtract each row's maximum before exp(): x.amax(dim=dim, keepdim=True).",
            naive,
        ),
        (
            f"{GLOBAL_MAX}: a row far below that maximum becomes exp(-10000) = 0 everywhere and 0/0 = NaN. "
            f"Subtract each row's own maximum: x.amax(dim=dim, keepdim=True).",
            shifted / shifted.sum(dim=dim, keepdim=True),
        ),
    ]


def _softmax_mistakes(x, dim):
    wrongs = []
    for other in range(x.dim()):
        if other != dim % x.dim():
            e_other = torch.exp(x - x.amax(dim=other, keepdim=True))
            wrongs += [
                (
                    f"{DIM_IGNORED} or used the wrong axis: normalise along dim={dim} "
                    f"(you normalised along dim={other}).",
                    torch.softmax(x, dim=other),
                ),
                (
                    f"{MAX_OTHER_AXIS} (dim={other}), but summed along dim={dim}: only a number that is the same "
                    f"all along the softmax's own axis cancels out. Use x.amax(dim=dim, keepdim=True).",
                    e_other / e_other.sum(dim=dim, keepdim=True),
                ),
            ]
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))  # the right numerator
    wrongs += [
        (
            f"{NORMALISED_OVER_ALL}; each slice along `dim` must sum to 1 on its own: exp.sum(dim=dim, keepdim=True).",
            torch.exp(x - x.max()) / torch.exp(x - x.max()).sum(),
        ),
        (
            f"{ROW_MAX_WHOLE_SUM} (e.sum() without dim), so all the rows together sum to 1. Each row is its own "
            f"softmax: divide by e.sum(dim=dim, keepdim=True).",
            e / e.sum(),
        ),
    ]
    if x.dim() == 2 and x.shape[0] == x.shape[1]:
        # without keepdim a row's max or sum broadcasts along the wrong axis of a square matrix
        m = x.amax(dim=dim)
        advice = f"use amax(dim=dim, {KEEPDIM}) and sum(dim=dim, {KEEPDIM}), so they broadcast back over their own row"
        wrongs += [
            (
                f"the row maximum lost its axis: {advice}, not across rows.",
                torch.exp(x - m) / torch.exp(x - m).sum(dim=dim),
            ),
            (f"the row sum lost its axis: {advice}, not across rows.", e / e.sum(dim=dim)),
        ]
    return wrongs


@exercise(
    "stable_softmax",
    solution=stable_softmax,
    hints=[
        "softmax(x) = exp(x) / sum(exp(x)) along `dim`; it does not change if you subtract the same number "
        "from every entry of a row.",
        "Subtract each row's maximum first: `x.amax(dim=dim, keepdim=True)`. Then the largest exponent is exp(0) = 1.",
        "`m = x.amax(dim=dim, keepdim=True); e = torch.exp(x - m); return e / e.sum(dim=dim, keepdim=True)`",
    ],
)
def check_stable_softmax(candidate):
    for description, x, dim in _softmax_cases():
        expected = torch.softmax(x, dim=dim)
        got = call(candidate, x, dim=dim)
        expect_tensor(got, expected.shape, what=f"result for {description}")
        expect_same_dtype(got, x.dtype, "result", description)
        # float32 has ~3 decimal digits left after 10000: x - logsumexp(x) is then only good to ~1e-3
        atol = 1e-3 if x.abs().nan_to_num(0, 0, 0).max() > 100 else 1e-5
        mistakes = [
            (f"{m}\n(case: {description})", w) for m, w in _softmax_overflows(x, dim) + _softmax_mistakes(x, dim)
        ]
        advice = f"{OVERFLOW}? Subtract each row's maximum before exp(): x.amax(dim=dim, keepdim=True)."
        diagnose(got, expected, mistakes, what="result", atol=atol, context=description, nonfinite_advice=advice)


# --------------------------------------------------------------------------- scaled_dot_product_attention


def _attention_cases():
    """(description, q, k, v, mask). d_k, d_v, L_q and L_k all differ, so each wrong scale is recognisable;
    batch sizes, head counts and mask shapes change from case to case, so no size can be hard-coded."""
    g = generator(3)

    def r(*shape, scale=1.0):
        return torch.randn(*shape, generator=g) * scale

    lengths = torch.tensor([4, 6])  # two sentences of a batch; the first has 2 padding positions
    pad = torch.arange(6)[None, :] < lengths[:, None]  # [2, 6], True = real token
    window = torch.tensor([[1, 1, 0, 1, 0, 1], [0, 1, 1, 1, 1, 0], [1, 0, 0, 1, 1, 1]])  # [3, 6], every row mixed
    scattered = torch.tensor([[1, 0, 1, 1, 0, 0, 1], [0, 1, 0, 0, 1, 1, 0], [1, 1, 1, 0, 0, 0, 0]] * 2)[:5].bool()
    return [
        ("unbatched: q [4, 8], k [6, 8], v [6, 5]", r(4, 8), r(6, 8), r(6, 5), None),
        ("unbatched with a bool mask [5, 7]: q [5, 6], k [7, 6], v [7, 3]", r(5, 6), r(7, 6), r(7, 3), scattered),
        ("batched: q [3, 2, 16], k [3, 5, 16], v [3, 5, 7]", r(3, 2, 16), r(3, 5, 16), r(3, 5, 7), None),
        (
            "heads: q [2, 4, 3, 32], k [2, 4, 6, 32], v [2, 4, 6, 5]",
            r(2, 4, 3, 32),
            r(2, 4, 6, 32),
            r(2, 4, 6, 5),
            None,
        ),
        (
            "padding mask [2, 1, 1, 6] (bool) on 3 heads: q [2, 3, 3, 8]",
            r(2, 3, 3, 8),
            r(2, 3, 6, 8),
            r(2, 3, 6, 5),
            pad[:, None, None, :],
        ),
        (
            "0/1 integer padding mask [2, 1, 6] on batched q [2, 3, 8]",
            r(2, 3, 8),
            r(2, 6, 8),
            r(2, 6, 5),
            pad[:, None, :].long(),
        ),
        (
            "causal mask [5, 5] (bool) broadcast over a batch q, k [2, 5, 12]",
            r(2, 5, 12),
            r(2, 5, 12),
            r(2, 5, 3),
            causal_mask(5),
        ),
        ("0/1 integer mask [3, 6] broadcast over a batch q [4, 3, 8]", r(4, 3, 8), r(4, 6, 8), r(4, 6, 5), window),
        (
            "large scores (|q . k| ~ 1000): q, k [2, 3, 16] times 30",
            r(2, 3, 16, scale=30.0),
            r(2, 5, 16, scale=30.0),
            r(2, 5, 7),
            None,
        ),
    ]


def _weights_variant(q, k, mask, scale, dim=-1, mask_mode="before"):
    """Attention weights as one mistake would compute them (masked with -1e9, so no NaN)."""
    scores = q @ k.transpose(-2, -1) / scale
    if mask is not None:
        if mask_mode == "before":
            scores = scores.masked_fill(mask == 0, -1e9)
        elif mask_mode == "inverted":
            scores = scores.masked_fill(mask != 0, -1e9)
        elif mask_mode == "added":
            scores = scores + mask.float()
        elif mask_mode == "multiplied":
            scores = scores * mask.float()
    weights = torch.softmax(scores, dim=dim)
    if mask is not None and mask_mode == "after":
        weights = weights.masked_fill(mask == 0, 0.0)
    return weights


def _rows_with_a_key(mask, shape):
    """[..., L_q] True where the query row has at least one allowed key under ``mask``."""
    if mask is None:
        return torch.ones(shape[:-1], dtype=torch.bool)
    return torch.broadcast_to(mask != 0, shape).any(dim=-1)


def _close_on_rows(got, wrong, rows):
    """Compare only the query rows in ``rows`` (rows with no allowed key differ between -inf and -1e9)."""
    if got.shape != wrong.shape:
        return False
    return close(got[rows], wrong[rows])


def _attention_mistakes(q, k, v, mask):
    """(message, weights that mistake gives, rows to compare)."""
    d_k, d_v, l_q, l_k = q.shape[-1], v.shape[-1], q.shape[-2], k.shape[-2]
    shape = (*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), l_q, l_k)
    rows = _rows_with_a_key(mask, shape)
    sqrt_dk = math.sqrt(d_k)
    out = [
        (
            f"{NO_SCALING}: divide q k^T by sqrt(d_k) = {sqrt_dk:.3g} (d_k = {d_k}, the size of q and k) "
            f"before the softmax, so the scores keep a variance near 1.",
            _weights_variant(q, k, mask, 1.0),
            rows,
        ),
        (
            f"{SCALE_BY_DK} = {sqrt_dk:.3g} (d_k = {d_k}): the variance of q . k grows like d_k, so its "
            f"standard deviation grows like sqrt(d_k).",
            _weights_variant(q, k, mask, float(d_k)),
            rows,
        ),
        (f"{SCALE_MULTIPLIED} instead of dividing by it.", _weights_variant(q, k, mask, 1 / sqrt_dk), rows),
    ]
    if d_v != d_k:
        out.append(
            (
                f"{SCALE_BY_DV} = {d_v}; scale by sqrt(d_k) = sqrt(q.shape[-1]) = sqrt({d_k}), the size of "
                f"the vectors in the dot product.",
                _weights_variant(q, k, mask, math.sqrt(d_v)),
                rows,
            )
        )
    for name, length in (("L_k", l_k), ("L_q", l_q)):
        if length != d_k:
            out.append(
                (
                    f"{SCALE_BY_LEN} ({name} = {length}); scale by sqrt(d_k) = sqrt(q.shape[-1]), the "
                    f"feature size, not a number of positions.",
                    _weights_variant(q, k, mask, math.sqrt(length)),
                    rows,
                )
            )
    for dim in range(len(shape) - 1):
        message = (
            f"{WRONG_AXIS} (dim={dim}, i.e. dim={dim - len(shape)}): each query's weights over the keys must sum to 1, so the "
            f"softmax runs over the last axis, dim=-1."
        )
        if dim == 1 and len(shape) > 2:
            message += " (dim=1 is the key axis only for 2-D inputs.)"
        variant = _weights_variant(q, k, mask, sqrt_dk, dim=dim)
        out.append((message, variant, rows & torch.isfinite(variant).all(dim=-1)))
    if mask is not None:
        out += [
            (
                f"{MASK_IGNORED}: positions where the mask is 0/False must get weight 0. Fill their scores with "
                f"-inf (or -1e9) before the softmax: scores.masked_fill(mask == 0, float('-inf')).",
                _weights_variant(q, k, None, sqrt_dk),
                rows,
            ),
            (
                f"{MASK_INVERTED}: 1/True means 'may attend' and 0/False 'may not'. Fill where mask == 0, "
                f"not where it is 1.",
                _weights_variant(q, k, mask, sqrt_dk, mask_mode="inverted"),
                _rows_with_a_key(mask == 0, shape),
            ),
            (
                f"{MASK_AFTER_SOFTMAX}: zeroing weights afterwards leaves rows that no longer sum to 1. Mask the "
                f"scores (with -inf or -1e9) before the softmax.",
                _weights_variant(q, k, mask, sqrt_dk, mask_mode="after"),
                rows,
            ),
            (
                f"{MASK_ADDED} (scores + mask): a 0/1 mask must decide, not nudge. That is the float-mask convention "
                f"of F.scaled_dot_product_attention; here use scores.masked_fill(mask == 0, float('-inf')).",
                _weights_variant(q, k, mask, sqrt_dk, mask_mode="added"),
                rows,
            ),
            (
                f"{MASK_MULTIPLIED}: a masked score becomes 0, and exp(0) = 1 still gives it weight. Fill it with "
                f"-inf (or -1e9) instead: scores.masked_fill(mask == 0, float('-inf')).",
                _weights_variant(q, k, mask, sqrt_dk, mask_mode="multiplied"),
                rows,
            ),
        ]
    return out


def _first_sentence(q, k, v, mask):
    """The first sentence (and head) of a batched case as 2-D tensors, its mask cut to [L_q, L_k]."""
    first = (0,) * (q.dim() - 2)
    if mask is not None:
        scores_shape = (*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2])
        mask = torch.broadcast_to(mask, scores_shape)[first].clone()
    return q[first].clone(), k[first].clone(), v[first].clone(), mask


def _right_on(candidate, q, k, v, mask):
    """True if the candidate returns the reference's (output, weights) on these inputs; False if it raises."""
    try:
        got = call(candidate, q, k, v) if mask is None else call(candidate, q, k, v, mask)
    except (Mistake, NotAttempted):
        return False
    expected = scaled_dot_product_attention(q, k, v, mask)
    return isinstance(got, (tuple, list)) and len(got) == 2 and all(map(close, got, expected))


def _right_the_other_way(candidate, q, k, v, mask):
    """True if the candidate gets the first sentence of a batched case right on its own, or an unbatched
    case right as a batch of one sentence.

    Only then is a failure a batching problem (k.T, dim=1, ...); a mistake that breaks one
    sentence too (`if mask:`, torch.where with a 0/1 mask, ...) must not get batching advice."""
    if q.dim() > 2:
        return _right_on(candidate, *_first_sentence(q, k, v, mask))
    mask = None if mask is None else mask.clone()
    return _right_on(candidate, q[None].clone(), k[None].clone(), v[None].clone(), mask)


def _call_attention(candidate, description, q, k, v, mask):
    # copies: if the candidate changes them in place, the case itself stays intact for the probes below
    args = [t.clone() for t in ((q, k, v) if mask is None else (q, k, v, mask))]
    try:
        return call(candidate, *args)
    except Mistake as m:
        text = str(m)
        if "in place" in text:  # the framework names the argument; nothing to add
            raise Mistake(f"{text}\n(case: {description})") from None
        if "masked_fill" in text and "bool" in text:
            raise Mistake(
                f"{MASK_NOT_BOOL} ({description}): `~mask` or `masked_fill(mask, ...)` only work for bool masks. "
                f"`mask == 0` is True where attending is not allowed, for bool and 0/1 masks alike.\n{text}"
            ) from None
        right = functools.partial(_right_the_other_way, candidate, q, k, v, mask)
        diagnose_batching(q.dim() > 2, right, description, _UNBATCHED_ADVICE, text)
        if mask is not None:
            raise Mistake(f"with a mask ({description}): {text}") from None
        raise Mistake(f"{text}\n(case: {description})") from None


def _unpack(got, expected_out, expected_w, description):
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        extra = ""
        if isinstance(got, torch.Tensor) and got.shape == expected_out.shape:
            extra = " You returned only the output."
        raise Mistake(f"{NOT_A_PAIR}, as in the article's `return output, attention_weights`.{extra} ({description})")
    out, weights = got
    if (
        isinstance(out, torch.Tensor)
        and isinstance(weights, torch.Tensor)
        and out.shape == expected_w.shape
        and weights.shape == expected_out.shape
    ):
        raise Mistake(f"{WRONG_ORDER}: return (output, weights), output [..., L_q, d_v] first. ({description})")
    for name, got_t, expected_t in (("output", out, expected_out), ("weights", weights, expected_w)):
        expect_tensor(got_t, expected_t.shape, dtype=expected_t.dtype, what=f"{name} for {description}")
        expect_plain(got_t, expected_t.device, f"{name} for {description}")
    return out, weights


@exercise(
    "scaled_dot_product_attention",
    solution=scaled_dot_product_attention,
    hints=[
        "Four steps: scores = q k^T; scale by sqrt(d_k); softmax over the keys (last axis); weighted sum with v. "
        "Return (output, weights).",
        "Use `k.transpose(-2, -1)` so batches and heads work, `d_k = q.shape[-1]`, and "
        "`scores.masked_fill(mask == 0, float('-inf'))` before `torch.softmax(scores, dim=-1)`.",
        "A query row with no allowed key is all -inf, and softmax gives 0/0 = NaN there. Such a row must come out "
        "as zero weights and a zero output: after the softmax, `no_key = (mask == 0).all(dim=-1, keepdim=True)`, "
        "`weights = weights.masked_fill(no_key, 0.0)`; then `weights @ v` is zero there too.",
    ],
)
def check_scaled_dot_product_attention(candidate):
    for description, q, k, v, mask in _attention_cases():
        expected_out, expected_w = scaled_dot_product_attention(q, k, v, mask)
        got = _call_attention(candidate, description, q, k, v, mask)
        out, weights = _unpack(got, expected_out, expected_w, description)
        weights_ok = close(weights, expected_w)
        if weights_ok and close(out, expected_out):
            continue
        if weights_ok:
            raise Mistake(
                f"{OUTPUT_NOT_WEIGHTED_SUM} ({description}): output = weights @ v, [..., L_q, L_k] @ "
                f"[..., L_k, d_v].\nexpected: {describe(expected_out)}\ngot:      {describe(out)}"
            )
        sums_ok = torch.isfinite(weights).all() and close(weights.sum(-1), torch.ones(weights.shape[:-1]))
        if "large" in description and not sums_ok:
            raise Mistake(
                f"{OVERFLOW} on large scores ({description}): your weights contain NaN/inf (or NaN "
                f"replaced by 0, so rows no longer sum to 1). exp(100) is already inf in float32. "
                f"Subtract each row's maximum before exp(), or use torch.softmax, which does it for you."
            )
        for message, wrong, rows in _attention_mistakes(q, k, v, mask):
            if _close_on_rows(weights, wrong, rows):
                raise Mistake(f"{message}\n(case: {description})")
        if q.dim() > 2:
            wrong = f"the weights are wrong.\nexpected: {describe(expected_w)}\ngot:      {describe(weights)}"
            right = functools.partial(_right_the_other_way, candidate, q, k, v, mask)
            diagnose_batching(True, right, description, _UNBATCHED_ADVICE, wrong)
        if not torch.isfinite(weights).all():
            raise Mistake(
                f"your weights contain NaN or inf where the reference has none ({description}). NaN comes from "
                f"0/0, e.g. a row whose scores are all -inf (is the mask the right way round? 1/True = may "
                f"attend), inf from exp() of large scores: use torch.softmax, which subtracts the row maximum."
            )
        raise Mistake(f"the attention weights are not right ({description}): {first_difference(weights, expected_w)}")
    _check_fully_masked_rows(candidate)


_ZERO_THE_EMPTY_ROWS = (
    "Required: zero weights and a zero output for such a row. How: fill with -inf and, after the softmax, zero "
    "the weights of the rows that have no allowed key, `no_key = (mask == 0).all(dim=-1, keepdim=True)`, "
    "`weights = weights.masked_fill(no_key, 0.0)`; `weights @ v` is then zero there too."
)


def _check_fully_masked_rows(candidate):
    """A query that may attend to nothing must get zero weights and a zero output (not NaN, not uniform)."""
    g = generator(4)
    q, k, v = torch.randn(2, 3, 8, generator=g), torch.randn(2, 5, 8, generator=g), torch.randn(2, 5, 4, generator=g)
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    mask[0, 1] = False  # query 1 of sentence 0 may attend to nothing
    mask[1, :, 3:] = False  # ordinary padding in sentence 1
    description = "mask [2, 3, 5] where query 1 of sentence 0 may attend to no key"
    expected_out, expected_w = scaled_dot_product_attention(q, k, v, mask)
    out, weights = _unpack(
        _call_attention(candidate, description, q, k, v, mask), expected_out, expected_w, description
    )
    empty = torch.zeros(2, 3, dtype=torch.bool)
    empty[0, 1] = True
    if torch.isnan(weights[empty]).any() or torch.isnan(out[empty]).any():
        raise Mistake(
            f"{FULLY_MASKED_NAN} ({description}). Every score of that row is -inf, and softmax computes 0/0 = NaN "
            f"there; one NaN row spreads to every later layer (lesson 02, fully masked rows). {_ZERO_THE_EMPTY_ROWS} "
            f"(Not `weights.nan_to_num(0.0)`: it would also hide a NaN that comes from broken inputs.)"
        )
    if not (close(weights[~empty], expected_w[~empty]) and close(out[~empty], expected_out[~empty])):
        raise Mistake(
            f"the rows that do have allowed keys are not right ({description}).\n"
            f"expected: {describe(expected_w[~empty])}\ngot:      {describe(weights[~empty])}"
        )
    row_w, row_out = weights[0, 1], out[0, 1]
    if close(row_w, torch.full((5,), 0.2)):
        raise Mistake(
            f"{FULLY_MASKED_UNIFORM} 1/L_k ({description}): that is what filling with -1e9 (as the article does) or "
            f"torch.finfo(dtype).min gives, since all the row's scores are then equal. The query attends to "
            f"every key it was told not to. {_ZERO_THE_EMPTY_ROWS}"
        )
    if not (close(row_w, torch.zeros(5)) and close(row_out, torch.zeros(4))):
        raise Mistake(
            f"the fully masked row should be all zeros, weights and output ({description}). {_ZERO_THE_EMPTY_ROWS}"
            f"\ngot weights {describe(row_w, 5)}, output {describe(row_out)}"
        )


# --------------------------------------------------------------------------- causal_mask


def _causal_mistakes(n):
    lower = torch.ones(n, n).tril()
    return [
        (
            f"{CAUSAL_TRANSPOSED} (upper triangle): row i is the query at position i and may see columns 0..i, "
            f"the past, not the future. Use the lower triangle: torch.ones(n, n).tril().",
            lower.T,
        ),
        (
            f"{CAUSAL_NO_DIAGONAL}: a token may attend to itself, so (i, i) is allowed; tril() keeps the diagonal, "
            f"tril(-1) drops it.",
            torch.ones(n, n).tril(-1),
        ),
        (
            f"{CAUSAL_INVERTED} (the future) with True/1. The course's convention is the other way round: "
            f"True/1 = may attend, so mark the past and the token itself.",
            torch.ones(n, n).triu(1),
        ),
    ]


@exercise(
    "causal_mask",
    solution=causal_mask,
    hints=[
        "Row i is the query at position i; it may attend to keys 0..i (the past and itself), never to i+1...",
        "That is the lower triangle, diagonal included, of an [n, n] matrix of ones.",
        "`torch.ones(seq_len, seq_len, dtype=torch.bool).tril()`",
    ],
)
def check_causal_mask(candidate):
    for n in (5, 1, 2, 7):  # 5 first: for n = 1 several mistakes give the same [[0]]
        expected = causal_mask(n)
        got = call(candidate, n)
        expect_tensor(got, (n, n), what=f"mask for seq_len={n}")
        # a mask built on the notebook's device (device=...) is fine; one on meta holds no values
        expect_plain(got, torch.device("cpu") if got.is_meta else got.device, f"mask for seq_len={n}")
        got = got.cpu()
        if got.is_floating_point() and torch.isinf(got).any():
            raise Mistake(
                f"your mask holds -inf: that is {CAUSAL_ADDITIVE} (0 = allowed, -inf = forbidden, added to the "
                f"scores, like nn.Transformer.generate_square_subsequent_mask). Here the mask says True/1 where "
                f"attending is allowed and 0/False where it is not."
            )
        if got.dtype != torch.bool and not bool(((got == 0) | (got == 1)).all()):
            raise Mistake(f"{CAUSAL_VALUES}; yours (seq_len={n}) holds {describe(got.unique(), 6)}.")
        allowed = got != 0
        if torch.equal(allowed, expected):
            continue
        for message, wrong in _causal_mistakes(n):
            if torch.equal(allowed, wrong != 0):
                raise Mistake(f"{message}\n(case: seq_len={n})")
        raise Mistake(f"the mask is not right for seq_len={n}.\nexpected:\n{expected.int()}\ngot:\n{allowed.int()}")
