"""Lesson 02's checkers: each planted mistake is named by its own message; correct variants pass."""

import math

import pytest
import torch
import torch.nn.functional as F

from course_utils.exercises import attention_basics as ab
from course_utils.exercises import check, checking, solution
from tests.exercises.asserts import assert_caught, assert_passes

# --------------------------------------------------------------------------- building blocks for candidates


def _sdpa(
    q,
    k,
    v,
    mask=None,
    *,
    scale=None,
    dim=-1,
    fill=float("-inf"),
    mask_mode="fill",
    softmax=torch.softmax,
    transpose=lambda k: k.transpose(-2, -1),
    order="ow",
    nan_to_zero=True,
):
    d_k = q.shape[-1]
    scores = q @ transpose(k)
    scores = scores / (math.sqrt(d_k) if scale is None else scale)
    if mask is not None:
        if mask_mode == "fill":
            scores = scores.masked_fill(mask == 0, fill)
        elif mask_mode == "inverted":
            scores = scores.masked_fill(mask == 1, fill)
        elif mask_mode == "added":
            scores = scores + mask.float()
        elif mask_mode == "multiplied":
            scores = scores * mask
        elif mask_mode == "tilde":
            scores = scores.masked_fill(~mask, fill)
    weights = softmax(scores, dim=dim)
    if mask is not None and mask_mode == "after":
        weights = weights.masked_fill(mask == 0, 0.0)
    if nan_to_zero:
        weights = weights.nan_to_num(0.0)
    output = weights @ v
    return (output, weights) if order == "ow" else (weights, output)


def _naive_softmax(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def _einsum_sdpa(q, k, v, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", q, k) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(mask == 0, float("-inf"))
    weights = F.softmax(scores, dim=-1)
    if mask is not None:
        weights = torch.where((mask != 0).any(dim=-1, keepdim=True), weights, 0.0)
    return torch.einsum("...qk,...kd->...qd", weights, v), weights


def _torch_sdpa_inside(q, k, v, mask=None):
    bool_mask = None if mask is None else mask.bool()
    output = F.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask)  # zeros for a fully masked row on CPU
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if bool_mask is not None:
        scores = scores.masked_fill(~bool_mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return output, weights if bool_mask is None else weights.masked_fill(~bool_mask.any(-1, keepdim=True), 0.0)


def _in_place_sdpa(q, k, v, mask=None):
    q /= math.sqrt(q.shape[-1])  # changes the caller's q
    return _sdpa(q, k, v, mask, scale=1.0)


def _article_module(q, k, v, mask=None):
    """The article's ScaledDotProductAttention.forward, verbatim logic (-1e9, no NaN handling needed)."""
    d_k = k.size(-1)
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    attention_weights = torch.softmax(scores, dim=-1)
    return torch.matmul(attention_weights, v), attention_weights


def _as_hint_3_says(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask == 0, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        no_key = (mask == 0).all(dim=-1, keepdim=True)
        weights = weights.masked_fill(no_key, 0.0)
    return weights @ v, weights


SDPA_MISTAKES = {
    "no scaling": (lambda q, k, v, mask=None: _sdpa(q, k, v, mask, scale=1.0), ab.NO_SCALING),
    "divide by d_k": (lambda q, k, v, mask=None: _sdpa(q, k, v, mask, scale=q.shape[-1]), ab.SCALE_BY_DK),
    "sqrt(d_v)": (lambda q, k, v, mask=None: _sdpa(q, k, v, mask, scale=math.sqrt(v.shape[-1])), ab.SCALE_BY_DV),
    "sqrt(L_k)": (lambda q, k, v, mask=None: _sdpa(q, k, v, mask, scale=math.sqrt(k.shape[-2])), ab.SCALE_BY_LEN),
    "sqrt(L_q)": (lambda q, k, v, mask=None: _sdpa(q, k, v, mask, scale=math.sqrt(q.shape[-2])), ab.SCALE_BY_LEN),
    "times sqrt(d_k)": (
        lambda q, k, v, mask=None: _sdpa(q, k, v, mask, scale=1 / math.sqrt(q.shape[-1])),
        ab.SCALE_MULTIPLIED,
    ),
    "softmax dim=-2": (lambda q, k, v, mask=None: _sdpa(q, k, v, mask, dim=-2), ab.WRONG_AXIS),
    "softmax dim=1": (lambda q, k, v, mask=None: _sdpa(q, k, v, mask, dim=1), ab.WRONG_AXIS),
    "softmax dim=0": (lambda q, k, v, mask=None: _sdpa(q, k, v, mask, dim=0), ab.WRONG_AXIS),
    "naive softmax": (lambda q, k, v, mask=None: _sdpa(q, k, v, mask, softmax=_naive_softmax), ab.OVERFLOW),
    "mask ignored": (lambda q, k, v, mask=None: _sdpa(q, k, v, None), ab.MASK_IGNORED),
    "mask inverted -inf": (lambda q, k, v, mask=None: _sdpa(q, k, v, mask, mask_mode="inverted"), ab.MASK_INVERTED),
    "mask inverted -1e9": (
        lambda q, k, v, mask=None: _sdpa(q, k, v, mask, mask_mode="inverted", fill=-1e9),
        ab.MASK_INVERTED,
    ),
    "mask after softmax": (lambda q, k, v, mask=None: _sdpa(q, k, v, mask, mask_mode="after"), ab.MASK_AFTER_SOFTMAX),
    "mask added": (lambda q, k, v, mask=None: _sdpa(q, k, v, mask, mask_mode="added"), ab.MASK_ADDED),
    "mask multiplied": (lambda q, k, v, mask=None: _sdpa(q, k, v, mask, mask_mode="multiplied"), ab.MASK_MULTIPLIED),
    "~mask on an int mask": (lambda q, k, v, mask=None: _sdpa(q, k, v, mask, mask_mode="tilde"), ab.MASK_NOT_BOOL),
    "wrong order": (lambda q, k, v, mask=None: _sdpa(q, k, v, mask, order="wo"), ab.WRONG_ORDER),
    "only the output": (lambda q, k, v, mask=None: _sdpa(q, k, v, mask)[0], ab.NOT_A_PAIR),
    "k.T": (lambda q, k, v, mask=None: _sdpa(q, k, v, mask, transpose=lambda k: k.T), checking.ONLY_UNBATCHED),
    "k.transpose(0, 1)": (
        lambda q, k, v, mask=None: _sdpa(q, k, v, mask, transpose=lambda k: k.transpose(0, 1)),
        checking.ONLY_UNBATCHED,
    ),
    "k.transpose(1, 2)": (
        lambda q, k, v, mask=None: _sdpa(q, k, v, mask, transpose=lambda k: k.transpose(1, 2)),
        checking.ONLY_BATCHED,
    ),
    "k.permute(0, 2, 1)": (
        lambda q, k, v, mask=None: _sdpa(q, k, v, mask, transpose=lambda k: k.permute(0, 2, 1)),
        checking.ONLY_BATCHED,
    ),
    "in place": (_in_place_sdpa, "in place"),
    "-inf without NaN handling": (
        lambda q, k, v, mask=None: _sdpa(q, k, v, mask, nan_to_zero=False),
        ab.FULLY_MASKED_NAN,
    ),
    "-1e9 (the article)": (_article_module, ab.FULLY_MASKED_UNIFORM),
    "finfo.min": (
        lambda q, k, v, mask=None: _sdpa(q, k, v, mask, fill=torch.finfo(q.dtype).min, nan_to_zero=False),
        ab.FULLY_MASKED_UNIFORM,
    ),
    "output is weights @ q": (
        lambda q, k, v, mask=None: (_sdpa(q, k, v, mask)[1] @ v * 2, _sdpa(q, k, v, mask)[1]),
        ab.OUTPUT_NOT_WEIGHTED_SUM,
    ),
}


@pytest.mark.filterwarnings("ignore:The use of `x.T`")
@pytest.mark.parametrize("name", SDPA_MISTAKES)
def test_sdpa_mistake_is_named(name):
    candidate, phrase = SDPA_MISTAKES[name]
    assert_caught("scaled_dot_product_attention", candidate, phrase)


def test_sdpa_messages_are_distinct():
    phrases = [phrase for _, phrase in SDPA_MISTAKES.values()]
    for i, a in enumerate(phrases):
        for b in phrases[i + 1 :]:
            assert a == b or (a not in b and b not in a), (a, b)


@pytest.mark.parametrize(
    "candidate",
    [
        solution("scaled_dot_product_attention"),
        _einsum_sdpa,
        _torch_sdpa_inside,
        lambda q, k, v, mask=None: _sdpa(q, k, v, mask, softmax=F.softmax),
        lambda q, k, v, mask=None: _sdpa(q, k, v, mask, transpose=lambda k: k.mT),
        _as_hint_3_says,
    ],
    ids=["reference", "einsum", "torch SDPA inside", "F.softmax", "k.mT", "hint 3"],
)
def test_sdpa_correct_alternatives_pass(candidate):
    assert_passes("scaled_dot_product_attention", candidate)


def test_sdpa_stub_is_not_attempted():
    def stub(q, k, v, mask=None):
        raise NotImplementedError

    assert check("scaled_dot_product_attention", stub, quiet=True).status == "not attempted"


def test_sdpa_fully_masked_rows_must_be_zero_not_other_numbers():
    def garbage_in_empty_rows(q, k, v, mask=None):
        output, weights = _sdpa(q, k, v, mask)
        if mask is not None:
            empty = ~torch.broadcast_to(mask != 0, weights.shape).any(-1)
            weights = weights.masked_fill(empty[..., None], 0.7)
            output = output.masked_fill(empty[..., None], 3.0)
        return output, weights

    assert_caught("scaled_dot_product_attention", garbage_in_empty_rows, "fully masked row should be all zeros")


def test_sdpa_checker_cases_have_no_fully_masked_rows():
    """Only the dedicated last case may contain an empty row, so -1e9 and -inf agree on the others."""
    for _, q, k, _, mask in ab._attention_cases():
        if mask is not None:
            shape = (*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2])
            assert torch.broadcast_to(mask != 0, shape).any(-1).all()


# --------------------------------------------------------------------------- stable_softmax


def _global_max_softmax(x, dim=-1):
    e = torch.exp(x - x.max())
    return e / e.sum(dim=dim, keepdim=True)


def _no_keepdim_softmax(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim))
    return e / e.sum(dim=dim)


def _row_max_whole_sum_softmax(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum()


def _in_place_softmax(x, dim=-1):
    x -= x.amax(dim=dim, keepdim=True)
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


SOFTMAX_MISTAKES = {
    "naive": (_naive_softmax, ab.OVERFLOW),
    "global max": (_global_max_softmax, ab.GLOBAL_MAX),
    "dim ignored": (lambda x, dim=-1: torch.softmax(x, dim=-1), ab.DIM_IGNORED),
    "sum over everything": (
        lambda x, dim=-1: torch.exp(x - x.max()) / torch.exp(x - x.max()).sum(),
        ab.NORMALISED_OVER_ALL,
    ),
    "row max, then the sum of the whole tensor": (_row_max_whole_sum_softmax, ab.ROW_MAX_WHOLE_SUM),
    "no keepdim": (_no_keepdim_softmax, ab.KEEPDIM),
    "max along another axis": (
        lambda x, dim=-1: (lambda e: e / e.sum(dim=dim, keepdim=True))(torch.exp(x - x.amax(dim=0, keepdim=True))),
        ab.MAX_OTHER_AXIS,
    ),
    "F.softmax without dim": (lambda x, dim=-1: F.softmax(x), ab.DIM_IGNORED),
    "no keepdim on the sum only": (
        lambda x, dim=-1: (lambda e: e / e.sum(dim=dim))(torch.exp(x - x.amax(dim=dim, keepdim=True))),
        "the row sum lost its axis",
    ),
    "max(dim) without .values": (
        lambda x, dim=-1: (lambda e: e / e.sum(dim=dim, keepdim=True))(torch.exp(x - x.max(dim=dim, keepdim=True))),
        checking.MAX_IS_A_PAIR,
    ),
    "in place": (_in_place_softmax, "in place"),
    "float32 result": (lambda x, dim=-1: torch.softmax(x.float(), dim=dim), checking.KEEP_DTYPE),
    "int result": (lambda x, dim=-1: torch.softmax(x, dim=dim).long(), checking.KEEP_DTYPE),
    "result on another device": (lambda x, dim=-1: torch.softmax(x, dim=dim).to("meta"), checking.OTHER_DEVICE),
}


def test_softmax_messages_are_distinct():
    phrases = [phrase for _, phrase in SOFTMAX_MISTAKES.values()]
    for i, a in enumerate(phrases):
        for b in phrases[i + 1 :]:
            assert a == b or (a not in b and b not in a), (a, b)


@pytest.mark.filterwarnings("ignore:Implicit dimension choice")
@pytest.mark.parametrize("name", SOFTMAX_MISTAKES)
def test_softmax_mistake_is_named(name):
    candidate, phrase = SOFTMAX_MISTAKES[name]
    assert_caught("stable_softmax", candidate, phrase)


@pytest.mark.parametrize(
    "candidate",
    [
        solution("stable_softmax"),
        lambda x, dim=-1: torch.softmax(x, dim=dim),
        lambda x, dim=-1: torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True)),
        lambda x, dim=-1: (lambda e: e / e.sum(dim, keepdim=True))(torch.exp(x - x.max(dim=dim, keepdim=True).values)),
    ],
    ids=["reference", "torch.softmax", "logsumexp", "max().values"],
)
def test_softmax_correct_alternatives_pass(candidate):
    assert_passes("stable_softmax", candidate)


def test_reference_softmax_matches_torch_and_survives_large_inputs():
    from course_utils.softmax import naive_softmax, stable_softmax

    x = torch.tensor([[1000.0, 1001.0, 1002.0], [-1000.0, -1001.0, -1002.0]])
    assert torch.isnan(naive_softmax(x)).all()  # the overflow the lesson shows
    torch.testing.assert_close(stable_softmax(x), torch.softmax(x, dim=-1))
    y = torch.randn(3, 4, 5)
    for dim in (0, 1, 2, -1):
        torch.testing.assert_close(stable_softmax(y, dim=dim), torch.softmax(y, dim=dim))
    with pytest.raises(TypeError, match="floating-point"):
        stable_softmax(torch.tensor([1, 2, 3]))


# --------------------------------------------------------------------------- causal_mask

CAUSAL_MISTAKES = {
    "upper triangle": (lambda n: torch.ones(n, n, dtype=torch.bool).triu(), ab.CAUSAL_TRANSPOSED),
    "diagonal excluded": (lambda n: torch.ones(n, n, dtype=torch.bool).tril(-1), ab.CAUSAL_NO_DIAGONAL),
    "inverted (future marked)": (lambda n: torch.ones(n, n, dtype=torch.bool).triu(1), ab.CAUSAL_INVERTED),
    "additive 0/-inf": (lambda n: torch.full((n, n), float("-inf")).triu(1), ab.CAUSAL_ADDITIVE),
    "values 0/2": (lambda n: torch.ones(n, n).tril() * 2, ab.CAUSAL_VALUES),
    "wrong shape": (lambda n: torch.ones(1, n, n).tril(), "should have shape"),
    "a list": (lambda n: torch.ones(n, n).tril().tolist(), "should be a torch.Tensor"),
}


@pytest.mark.parametrize("name", CAUSAL_MISTAKES)
def test_causal_mistake_is_named(name):
    candidate, phrase = CAUSAL_MISTAKES[name]
    assert_caught("causal_mask", candidate, phrase)


@pytest.mark.parametrize(
    "candidate",
    [
        solution("causal_mask"),
        lambda n: torch.tril(torch.ones(n, n)),
        lambda n: torch.tril(torch.ones(n, n, dtype=torch.long)),
        lambda n: torch.arange(n)[:, None] >= torch.arange(n)[None, :],
    ],
    ids=["reference", "float ones", "int ones", "arange comparison"],
)
def test_causal_correct_alternatives_pass(candidate):
    assert_passes("causal_mask", candidate)


# --------------------------------------------------------------------------- mask mistakes that are not about batching

BATCHING_ADVICE = (checking.ONLY_UNBATCHED, checking.ONLY_BATCHED, "k.T")


def _where_with_the_mask(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = torch.where(mask, scores, float("-inf"))  # needs a bool condition; a 0/1 mask is not one
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def _if_mask(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask:  # a tensor of many values has no single truth value
        scores = scores.masked_fill(mask == 0, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def _mask_inverted_in_place(q, k, v, mask=None):
    if mask is not None:
        mask.logical_not_()  # changes the caller's mask
        return _sdpa(q, k, v, mask, mask_mode="inverted")
    return _sdpa(q, k, v)


def _mask_made_additive_in_place(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        mask.masked_fill_(mask == 0, float("-inf"))  # changes the caller's mask (and breaks a bool one)
        scores = scores + mask
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def _mask_overwritten(q, k, v, mask=None):
    if mask is not None:
        mask[...] = mask == 0  # changes the caller's mask
        return _sdpa(q, k, v, mask, mask_mode="inverted")
    return _sdpa(q, k, v)


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (_where_with_the_mask, "where expected condition to be a boolean tensor"),
        (_if_mask, "Boolean value of Tensor with more than one value is ambiguous"),
        (_mask_inverted_in_place, "`mask` in place"),
        (_mask_overwritten, "`mask` in place"),
        (_mask_made_additive_in_place, "`mask` in place"),
    ],
    ids=["torch.where with a 0/1 mask", "if mask:", "mask.logical_not_()", "mask[...] =", "mask.masked_fill_"],
)
def test_sdpa_mask_mistakes_get_no_batching_advice(candidate, phrase):
    result = check("scaled_dot_product_attention", candidate, quiet=True)
    assert not result.passed and phrase in result.message, result.message
    for advice in BATCHING_ADVICE:
        assert advice not in result.message, f"{advice!r} should not be in:\n{result.message}"


def test_sdpa_where_with_a_bool_mask_and_zeroed_rows_passes():
    def where_bool(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = torch.where(mask.bool(), scores, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        if mask is not None:
            weights = weights.masked_fill((mask == 0).all(dim=-1, keepdim=True), 0.0)
        return weights @ v, weights

    assert_passes("scaled_dot_product_attention", where_bool)


# --------------------------------------------------------------------------- fully masked rows: hints and message agree with lesson 02


def test_sdpa_hints_zero_the_rows_with_no_allowed_key_and_that_passes():
    from course_utils.exercises import _lookup

    hints = " ".join(_lookup("scaled_dot_product_attention").hints)
    assert "nan_to_num" not in hints  # lesson 02 warns: it also hides NaN from broken inputs
    assert "(mask == 0).all(dim=-1, keepdim=True)" in hints and "masked_fill(no_key, 0.0)" in hints
    assert_passes("scaled_dot_product_attention", _as_hint_3_says)


def test_sdpa_nan_message_says_what_is_required_and_why():
    message = check("scaled_dot_product_attention", SDPA_MISTAKES["-inf without NaN handling"][0], quiet=True).message
    for phrase in ("zero weights and a zero output", "spreads to every later layer", "masked_fill(no_key, 0.0)"):
        assert phrase in message, message


def test_sdpa_cases_vary_every_size():
    cases = ab._attention_cases()
    batches = {q.shape[0] for _, q, *_ in cases if q.dim() >= 3}
    heads = {q.shape[1] for _, q, *_ in cases if q.dim() == 4}
    masks = {tuple(m.shape) for *_, m in cases if m is not None}
    assert len(batches) >= 3 and len(heads) >= 2 and len(masks) >= 4
    assert any(q.dim() == 2 and m is not None for _, q, _, _, m in cases)  # a mask mistake shows unbatched too
    for _, q, k, v, _ in cases:
        assert len({q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]}) == 4 or q.shape[-2] == k.shape[-2]


@pytest.mark.parametrize(
    "convert, phrase",
    [(lambda t: t.long(), "dtype"), (lambda t: t.double(), "float64"), (lambda t: t.to("meta"), checking.OTHER_DEVICE)],
    ids=["int", "float64", "meta device"],
)
def test_sdpa_unusual_outputs_get_a_mistake_not_a_crash(convert, phrase):
    def odd(q, k, v, mask=None):
        output, weights = _as_hint_3_says(q, k, v, mask)
        return convert(output), convert(weights)

    assert_caught("scaled_dot_product_attention", odd, phrase)


def test_sdpa_non_contiguous_outputs_pass():
    def transposed_twice(q, k, v, mask=None):
        output, weights = _as_hint_3_says(q, k, v, mask)
        return output.mT.contiguous().mT, weights.mT.contiguous().mT

    assert_passes("scaled_dot_product_attention", transposed_twice)
