"""Lesson 08 checkers: the solutions pass, each planted mistake is named by its own message."""

import pytest
import torch

from course_utils.attention import scaled_dot_product_attention
from course_utils.exercises import check, checking, solution
from course_utils.exercises import modern as ex
from tests.exercises.asserts import assert_caught, assert_passes


def assert_distinct(phrases):
    for i, a in enumerate(phrases):
        for b in phrases[i + 1 :]:
            assert a == b or (a not in b and b not in a), (a, b)


@pytest.mark.parametrize("exercise_id", ["repeat_kv", "apply_rope", "sliding_window_mask", "grouped_query_attention"])
def test_stub_is_not_attempted(exercise_id):
    def stub(*args, **kwargs):
        raise NotImplementedError

    assert check(exercise_id, stub, quiet=True).status == "not attempted"


def test_document_stub_is_not_attempted():
    def document_mask_mod(document_ids):
        def mask_mod(b, h, q_idx, kv_idx):
            raise NotImplementedError

        return mask_mod

    assert check("document_mask_mod", document_mask_mod, quiet=True).status == "not attempted"


# --------------------------------------------------------------------------- repeat_kv

REPEAT_MISTAKES = {
    "repeat (tiled)": (lambda x, n: x.repeat(1, n, 1, 1), ex.KV_TILED),
    "sequence axis": (lambda x, n: x.repeat_interleave(n, dim=2), ex.KV_WRONG_DIM),
    "batch axis": (lambda x, n: x.repeat_interleave(n, dim=0), ex.KV_WRONG_DIM),
    "feature axis": (lambda x, n: x.repeat_interleave(n, dim=-1), ex.KV_WRONG_DIM),
    "not repeated": (lambda x, n: x, ex.KV_NOT_REPEATED),
    "expand without reshape": (lambda x, n: x[:, :, None].expand(-1, -1, n, -1, -1), ex.KV_NOT_RESHAPED),
    "in place": (lambda x, n: x.mul_(1.0).add_(1.0).repeat_interleave(n, 1), "in place"),
}


@pytest.mark.parametrize("name", REPEAT_MISTAKES)
def test_repeat_kv_mistake_is_named(name):
    candidate, phrase = REPEAT_MISTAKES[name]
    assert_caught("repeat_kv", candidate, phrase)


@pytest.mark.parametrize(
    "candidate",
    [
        solution("repeat_kv"),
        lambda x, n: x[:, :, None].expand(-1, -1, n, -1, -1).reshape(x.shape[0], -1, *x.shape[2:]),
        lambda x, n: torch.stack([x] * n, dim=2).flatten(1, 2),
    ],
    ids=["reference", "expand + reshape (transformers)", "stack + flatten"],
)
def test_repeat_kv_correct_alternatives_pass(candidate):
    assert_passes("repeat_kv", candidate)


# --------------------------------------------------------------------------- apply_rope


def _rope(
    x,
    positions,
    base=10000.0,
    *,
    layout="half",
    shift=0,
    exponent=2,
    sign=1,
    swap=False,
    use_arange=False,
    angles_layout=None,
    keep_dtype=True,
):
    """An independent RoPE (cos/sin over the full width), with switches for the planted mistakes."""
    d = x.shape[-1]
    pos = torch.arange(x.shape[-2]) if use_arange else positions
    theta = base ** (-exponent * torch.arange(d // 2).float() / d)
    angles = (pos.float() + shift)[:, None] * theta * sign
    if (angles_layout or layout) == "half":
        angles = torch.cat((angles, angles), -1)
    else:
        angles = angles.repeat_interleave(2, -1)
    if layout == "half":
        x1, x2 = x[..., : d // 2], x[..., d // 2 :]
        rotated = torch.cat((x2, -x1), -1) if swap else torch.cat((-x2, x1), -1)
    else:
        rotated = torch.stack((-x[..., 1::2], x[..., 0::2]), -1).flatten(-2)
    cos, sin = angles.cos(), angles.sin()
    if keep_dtype:
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return x * cos + rotated * sin


ROPE_MISTAKES = {
    "interleaved pairs": (lambda x, p, base=10000.0: _rope(x, p, base, layout="pairs"), ex.ROPE_INTERLEAVED),
    "halves swapped": (
        lambda x, p, base=10000.0: _rope(x, p, base, swap=True),
        ex.ROPE_DIRECTION,
    ),  # the same as -angle
    "wrong direction": (lambda x, p, base=10000.0: _rope(x, p, base, sign=-1), ex.ROPE_DIRECTION),
    "positions + 1": (lambda x, p, base=10000.0: _rope(x, p, base, shift=1), ex.ROPE_POSITIONS_PLUS_ONE),
    "positions - 1": (lambda x, p, base=10000.0: _rope(x, p, base, shift=-1), ex.ROPE_POSITIONS_MINUS_ONE),
    "exponent i/d": (lambda x, p, base=10000.0: _rope(x, p, base, exponent=1), ex.ROPE_EXPONENT_I),
    "exponent sign": (lambda x, p, base=10000.0: _rope(x, p, base, exponent=-2), ex.ROPE_EXPONENT_SIGN),
    "positions ignored": (lambda x, p, base=10000.0: _rope(x, p, base, use_arange=True), ex.ROPE_IGNORED_POSITIONS),
    "base ignored": (lambda x, p, base=10000.0: _rope(x, p), ex.ROPE_IGNORED_BASE),
    "float64 result": (lambda x, p, base=10000.0: _rope(x.double(), p, base), "float64"),
    "float32 result for low precision": (
        lambda x, p, base=10000.0: _rope(x, p, base, keep_dtype=False),
        checking.KEEP_DTYPE,
    ),
    "half-split pairs, interleaved angles": (
        lambda x, p, base=10000.0: _rope(x, p, base, angles_layout="pairs"),
        ex.ROPE_LAYOUT_MIX,
    ),
    "neighbour pairs, half-split angles": (
        lambda x, p, base=10000.0: _rope(x, p, base, layout="pairs", angles_layout="half"),
        ex.ROPE_LAYOUT_MIX,
    ),
}


@pytest.mark.parametrize("name", ROPE_MISTAKES)
def test_apply_rope_mistake_is_named(name):
    candidate, phrase = ROPE_MISTAKES[name]
    assert_caught("apply_rope", candidate, phrase)


def test_apply_rope_messages_are_distinct():
    assert_distinct([phrase for _, phrase in ROPE_MISTAKES.values()])


@pytest.mark.parametrize(
    "candidate",
    [solution("apply_rope"), _rope, lambda x, p, base=10000.0: _rope(x.double(), p, base).to(x.dtype)],
    ids=["reference", "independent", "computed in float64"],
)
def test_apply_rope_correct_alternatives_pass(candidate):
    assert_passes("apply_rope", candidate)


def test_apply_rope_complex_form_passes():
    """The complex-number form (Meta's LLaMA code) on the half-split layout is the same rotation."""

    def complex_rope(x, positions, base=10000.0):
        d = x.shape[-1]
        theta = base ** (-torch.arange(0, d, 2).double() / d)
        z = torch.complex(x[..., : d // 2].double(), x[..., d // 2 :].double())
        z = z * torch.polar(torch.ones(len(positions), d // 2, dtype=torch.float64), positions[:, None] * theta)
        return torch.cat((z.real, z.imag), -1).to(x.dtype)

    assert_passes("apply_rope", complex_rope)


# --------------------------------------------------------------------------- sliding_window_mask


def _window(n, w, *, causal=True):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return ((j <= i) | (not causal)) & ((i - j).abs() < w)


WINDOW_MISTAKES = {
    "<= window": (lambda n, w: (lambda i, j: (j <= i) & (i - j <= w))(*_ij(n)), ex.SW_WINDOW_PLUS_ONE),
    "< window - 1": (lambda n, w: (lambda i, j: (j <= i) & (i - j < w - 1))(*_ij(n)), ex.SW_WINDOW_MINUS_ONE),
    "not causal": (lambda n, w: _window(n, w, causal=False), ex.SW_NOT_CAUSAL),
    "transposed": (lambda n, w: _window(n, w).T, ex.SW_TRANSPOSED),
    "inverted": (lambda n, w: ~_window(n, w), ex.SW_INVERTED),
    "no diagonal": (lambda n, w: (lambda i, j: (j < i) & (i - j < w))(*_ij(n)), ex.SW_NO_DIAGONAL),
    "plain causal": (lambda n, w: torch.ones(n, n, dtype=torch.bool).tril(), ex.SW_ONLY_CAUSAL),
    "additive": (lambda n, w: torch.zeros(n, n).masked_fill(~_window(n, w), float("-inf")), ex.SW_VALUES),
    "wrong shape": (lambda n, w: _window(n, w)[None], "should have shape"),
}


def _ij(n):
    return torch.arange(n)[:, None], torch.arange(n)[None, :]


@pytest.mark.parametrize("name", WINDOW_MISTAKES)
def test_sliding_window_mistake_is_named(name):
    candidate, phrase = WINDOW_MISTAKES[name]
    assert_caught("sliding_window_mask", candidate, phrase)


def test_sliding_window_messages_are_distinct():
    assert_distinct([phrase for _, phrase in WINDOW_MISTAKES.values()])


@pytest.mark.parametrize(
    "candidate",
    [
        solution("sliding_window_mask"),
        lambda n, w: torch.ones(n, n).tril() - torch.ones(n, n).tril(-w),  # 0/1 floats: band of the lower triangle
        lambda n, w: torch.ones(n, n, dtype=torch.bool).tril().triu(-(w - 1)),
    ],
    ids=["reference", "difference of triangles (float)", "tril + triu"],
)
def test_sliding_window_correct_alternatives_pass(candidate):
    assert_passes("sliding_window_mask", candidate)


# --------------------------------------------------------------------------- grouped_query_attention


def _gqa(q, k, v, positions, mask=None, *, rope_on="qk", tiled=False, scaled=True, use_arange=False):
    pos = torch.arange(q.shape[-2]) if use_arange else positions
    if "q" in rope_on:
        q = _rope(q, pos)
    if "k" in rope_on:
        k = _rope(k, pos)
    if "v" in rope_on:
        v = _rope(v, pos)
    n_rep = q.shape[1] // k.shape[1]
    repeat = (lambda t: t.repeat(1, n_rep, 1, 1)) if tiled else (lambda t: t.repeat_interleave(n_rep, 1))
    k, v = repeat(k), repeat(v)
    if not scaled:
        q = q * q.shape[-1] ** 0.5  # undoes the 1/sqrt(d) inside
    return scaled_dot_product_attention(q, k, v, mask)[0]


GQA_MISTAKES = {
    "RoPE on values": (lambda q, k, v, p, m=None: _gqa(q, k, v, p, m, rope_on="qkv"), ex.GQA_ROPE_ON_V),
    "no RoPE": (lambda q, k, v, p, m=None: _gqa(q, k, v, p, m, rope_on=""), ex.GQA_NO_ROPE),
    "RoPE on q only": (lambda q, k, v, p, m=None: _gqa(q, k, v, p, m, rope_on="q"), ex.GQA_ROPE_Q_ONLY),
    "RoPE on k only": (lambda q, k, v, p, m=None: _gqa(q, k, v, p, m, rope_on="k"), ex.GQA_ROPE_K_ONLY),
    "tiled heads": (lambda q, k, v, p, m=None: _gqa(q, k, v, p, m, tiled=True), ex.GQA_TILED),
    "no scaling": (lambda q, k, v, p, m=None: _gqa(q, k, v, p, m, scaled=False), ex.GQA_NO_SCALE),
    "mask ignored": (lambda q, k, v, p, m=None: _gqa(q, k, v, p, None), ex.GQA_MASK_IGNORED),
    "positions ignored": (lambda q, k, v, p, m=None: _gqa(q, k, v, p, m, use_arange=True), ex.GQA_POSITIONS_IGNORED),
    "(output, weights) pair": (
        lambda q, k, v, p, m=None: (_gqa(q, k, v, p, m), None),
        "tuple",
    ),
    "float32 result": (lambda q, k, v, p, m=None: _gqa(q, k, v, p, m).float(), checking.KEEP_DTYPE),
}


@pytest.mark.parametrize("name", GQA_MISTAKES)
def test_gqa_mistake_is_named(name):
    candidate, phrase = GQA_MISTAKES[name]
    assert_caught("grouped_query_attention", candidate, phrase)


def test_gqa_messages_are_distinct():
    assert_distinct([phrase for _, phrase in GQA_MISTAKES.values()])


@pytest.mark.parametrize(
    "candidate",
    [solution("grouped_query_attention"), _gqa],
    ids=["reference", "independent"],
)
def test_gqa_correct_alternatives_pass(candidate):
    assert_passes("grouped_query_attention", candidate)


# --------------------------------------------------------------------------- document_mask_mod


def _doc_mod(cond):
    def make(document_ids):
        def mask_mod(b, h, q_idx, kv_idx):
            return cond(document_ids, q_idx, kv_idx)

        return mask_mod

    return make


DOC_MISTAKES = {
    "not causal": (_doc_mod(lambda d, q, kv: d[q] == d[kv]), ex.DOC_NOT_CAUSAL),
    "no documents": (_doc_mod(lambda d, q, kv: q >= kv), ex.DOC_NO_DOCUMENTS),
    "transposed": (_doc_mod(lambda d, q, kv: (d[q] == d[kv]) & (q <= kv)), ex.DOC_TRANSPOSED),
    "python and": (_doc_mod(lambda d, q, kv: (d[q] == d[kv]) and (q >= kv)), ex.DOC_CONTROL_FLOW),
    "returns a mask": (lambda d: d[:, None] == d[None, :], ex.DOC_NOT_A_FUNCTION),
}


@pytest.mark.parametrize("name", DOC_MISTAKES)
def test_document_mistake_is_named(name):
    candidate, phrase = DOC_MISTAKES[name]
    assert_caught("document_mask_mod", candidate, phrase)


@pytest.mark.parametrize(
    "candidate",
    [
        solution("document_mask_mod"),
        _doc_mod(lambda d, q, kv: (d[q] == d[kv]) & ~(kv > q)),
        _doc_mod(lambda d, q, kv: torch.where(q >= kv, d[q] == d[kv], False)),
    ],
    ids=["reference", "negated", "torch.where"],
)
def test_document_correct_alternatives_pass(candidate):
    assert_passes("document_mask_mod", candidate)


def test_apply_rope_layout_mix_message_shows_where_it_first_differs():
    result = check("apply_rope", ROPE_MISTAKES["half-split pairs, interleaved angles"][0], quiet=True)
    assert "largest difference" not in result.message  # named, not a bare "not right"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_apply_rope_checks_each_dtype(dtype):
    def only_this_dtype_wrong(x, positions, base=10000.0):
        out = _rope(x, positions, base)
        return out.float() if x.dtype == dtype else out

    result = check("apply_rope", only_this_dtype_wrong, quiet=True)
    assert not result.passed and str(dtype) in result.message, result.message
