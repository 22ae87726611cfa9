"""Lesson 07's checkers: the solutions pass, and each planted mistake gets its own message.

The mistaken candidates are written the way a learner might write them (torch.split,
q scaled up front, ...), independently of the checker's own mistake generator.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from course_utils.exercises import check, checking, solution
from course_utils.exercises import efficient as ex

# ---------------------------------------------------------------- online_softmax


def learner_online_softmax(
    x,
    block_size,
    rescale="right",
    lost_last=False,
    subtract_max=True,
    start_max=-math.inf,
    global_max=False,
    fixed_block=None,
    keep_max=True,
):
    size = fixed_block or block_size
    blocks = list(torch.split(x, size, dim=-1))
    if lost_last and blocks[-1].shape[-1] < size:
        blocks = blocks[:-1]
    if start_max == "first":
        m = blocks[0].amax(dim=-1, keepdim=True)
    else:
        m = torch.full(x.shape[:-1] + (1,), start_max, dtype=x.dtype)
    if global_max:
        m = x.amax(dim=-1, keepdim=True)
    total = torch.zeros(x.shape[:-1] + (1,), dtype=x.dtype)
    for block in blocks:
        if not subtract_max:
            total = total + block.exp().sum(-1, keepdim=True)
            continue
        m_block = torch.max(m, block.max(dim=-1, keepdim=True).values)
        if rescale == "right":
            total = total * (m - m_block).exp()
        elif rescale == "inverted":
            total = total * (m_block - m).exp()
        total = total + (block - m_block).exp().sum(-1, keepdim=True)
        m = m_block if keep_max else m
    if not subtract_max:
        return x.exp() / total
    return (x - m).exp() / total


def _online(candidate):
    return check("online_softmax", candidate, quiet=True)


def test_online_softmax_solution_and_learner_version_pass():
    assert _online(solution("online_softmax")).passed
    assert _online(learner_online_softmax).passed


def test_online_softmax_stub_is_not_attempted():
    def stub(x, block_size):
        raise NotImplementedError

    assert _online(stub).status == "not attempted"


@pytest.mark.parametrize(
    "kwargs, phrase",
    [
        (dict(rescale="none"), ex.OS_NO_RESCALE),
        (dict(rescale="inverted"), ex.OS_INVERTED),
        (dict(lost_last=True), ex.OS_LOST_BLOCK),
        (dict(subtract_max=False), ex.OS_OVERFLOW),
        (dict(start_max=0.0), ex.OS_MAX_AT_ZERO),
        (dict(global_max=True), ex.OS_WHOLE_ROW),
        (dict(fixed_block=16), ex.OS_WIDE_BLOCKS),
        (dict(keep_max=False), ex.OS_MAX_FROZEN),
        (dict(keep_max=False, start_max="first"), ex.OS_MAX_FROZEN),
    ],
    ids=lambda p: str(p)[:40],
)
def test_online_softmax_mistakes_are_named(kwargs, phrase):
    result = _online(lambda x, block_size: learner_online_softmax(x, block_size, **kwargs))
    assert not result.passed and result.status == "not yet"
    assert phrase in result.message, result.message


def test_online_softmax_with_one_maximum_for_all_rows_is_named():
    def like_the_demo(x, block_size):  # the lesson's demo cell, Python floats and all, on several rows
        m, total = -math.inf, 0.0
        for start in range(0, x.shape[-1], block_size):
            block = x[..., start : start + block_size]
            m_new = max(m, block.max().item())
            total = total * math.exp(m - m_new) + torch.exp(block - m_new).sum().item()
            m = m_new
        return torch.exp(x - m) / total

    result = _online(like_the_demo)
    assert not result.passed and ex.OS_ONE_FOR_ALL_ROWS in result.message, result.message


def test_online_softmax_with_torch_softmax_is_caught():
    result = _online(lambda x, block_size: torch.softmax(x, dim=-1))
    assert not result.passed and ex.OS_WHOLE_ROW in result.message


def test_online_softmax_in_place_and_dtype_mistakes():
    def in_place(x, block_size):
        x -= x.amax(dim=-1, keepdim=True)
        return learner_online_softmax(x, block_size)

    assert "in place" in _online(in_place).message
    assert "dtype" in _online(lambda x, b: learner_online_softmax(x, b).double()).message


# ---------------------------------------------------------------- tiled_attention


def learner_tiled(
    q,
    k,
    v,
    block_size,
    rescale_sum=True,
    rescale_out=True,
    inverted=False,
    lost_last=False,
    scale="sqrt",
    subtract_max=True,
    divide="end",
    softmax_per_block=False,
    fixed_block=None,
    start_max=-math.inf,
):
    d = q.shape[-1]
    q = q * {"sqrt": d**-0.5, "none": 1.0, "d": 1.0 / d}[scale]  # scale the queries once, up front
    size = fixed_block or block_size
    k_blocks, v_blocks = torch.split(k, size, dim=-2), torch.split(v, size, dim=-2)
    if lost_last and k_blocks[-1].shape[-2] < size:
        k_blocks, v_blocks = k_blocks[:-1], v_blocks[:-1]
    m = torch.full(q.shape[:-1] + (1,), start_max, dtype=q.dtype)
    s = torch.zeros(q.shape[:-1] + (1,), dtype=q.dtype)
    acc = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    for kb, vb in zip(k_blocks, v_blocks, strict=True):
        scores = torch.matmul(q, kb.mT)
        if softmax_per_block:
            acc = acc + F.softmax(scores, dim=-1) @ vb
            continue
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True)) if subtract_max else torch.zeros_like(m)
        alpha = (m_new - m).exp() if inverted else (m - m_new).exp()
        p = (scores - m_new).exp()
        s_new = (s * alpha if rescale_sum else s) + p.sum(-1, keepdim=True)
        acc = (acc * alpha if rescale_out else acc) + p @ vb
        if divide == "each":
            acc = acc / s_new
        m, s = m_new, s_new
    return acc / s if divide == "end" else acc


def _tiled(candidate):
    return check("tiled_attention", candidate, quiet=True)


def test_tiled_solution_and_learner_version_pass():
    assert _tiled(solution("tiled_attention")).passed
    assert _tiled(learner_tiled).passed


def test_tiled_stub_is_not_attempted():
    def stub(q, k, v, block_size):
        raise NotImplementedError

    assert _tiled(stub).status == "not attempted"


@pytest.mark.parametrize(
    "kwargs, phrase",
    [
        (dict(rescale_sum=False, rescale_out=False), ex.T_NO_RESCALE),
        (dict(rescale_out=False), ex.T_NO_RESCALE_OUT),
        (dict(rescale_sum=False), ex.T_NO_RESCALE_SUM),
        (dict(inverted=True), ex.T_INVERTED),
        (dict(lost_last=True), ex.T_LOST_BLOCK),
        (dict(scale="none"), ex.T_NO_SCALE),
        (dict(scale="d"), ex.T_SCALE_DK),
        (dict(divide="each"), ex.T_DIVIDE_EACH),
        (dict(divide="never"), ex.T_NO_FINAL_DIVIDE),
        (dict(softmax_per_block=True), ex.T_PER_BLOCK_SOFTMAX),
        (dict(subtract_max=False), ex.T_OVERFLOW),
        (dict(start_max=0.0), ex.T_MAX_AT_ZERO),
        (dict(fixed_block=32), ex.T_WIDE_BLOCKS),
    ],
    ids=lambda p: str(p)[:40],
)
def test_tiled_mistakes_are_named(kwargs, phrase):
    result = _tiled(lambda q, k, v, block_size: learner_tiled(q, k, v, block_size, **kwargs))
    assert not result.passed and result.status == "not yet"
    assert phrase in result.message, result.message


def test_full_score_matrix_is_caught_even_when_the_output_is_right():
    def one_piece(q, k, v, block_size):
        return F.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v

    def global_max_first(q, k, v, block_size):  # the "global max" shortcut: needs the whole row of scores
        m = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).amax(-1, keepdim=True)
        out = learner_tiled(q, k, v, block_size)
        return out + 0 * m

    for candidate in (one_piece, global_max_first):
        result = _tiled(candidate)
        assert not result.passed and ex.T_FULL_MATRIX in result.message, result.message
    builtin = _tiled(lambda q, k, v, block_size: F.scaled_dot_product_attention(q, k, v))
    assert not builtin.passed and ex.T_BUILTIN in builtin.message


def test_tiled_other_errors_are_explained():
    no_transpose = _tiled(lambda q, k, v, b: learner_tiled(q, k.transpose(-2, -1), v, b))
    assert not no_transpose.passed and "raised" in no_transpose.message
    as_tuple = _tiled(lambda q, k, v, b: (learner_tiled(q, k, v, b), None))
    assert "tuple" in as_tuple.message

    def in_place(q, k, v, b):
        q /= 1.0
        q.mul_(2.0)
        return learner_tiled(q, k, v, b)

    assert "in place" in _tiled(in_place).message


# ---------------------------------------------------------------- one running maximum for every row


def online_softmax_shared_max(x, block_size, python_float=False):
    """A running maximum over the whole tensor (no dim=-1), with a proper sum per row."""
    m = -math.inf if python_float else torch.tensor(-math.inf)
    total = torch.zeros(x.shape[:-1] + (1,))
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start : start + block_size]
        if python_float:
            m_new = max(m, block.max().item())
            total = total * math.exp(m - m_new) + torch.exp(block - m_new).sum(-1, keepdim=True)
        else:
            m_new = torch.maximum(m, block.max())
            total = total * torch.exp(m - m_new) + torch.exp(block - m_new).sum(-1, keepdim=True)
        m = m_new
    return torch.exp(x - m) / total


@pytest.mark.parametrize("python_float", [False, True], ids=["tensor max", "Python float max"])
def test_online_softmax_with_one_maximum_shared_by_all_rows_is_named(python_float):
    result = _online(lambda x, block_size: online_softmax_shared_max(x, block_size, python_float))
    assert not result.passed and ex.OS_SHARED_MAX in result.message, result.message


def test_online_softmax_cases_hold_rows_of_very_different_size_in_one_tensor():
    row_maxima = [x.amax(dim=-1) for _, x, _ in ex._online_softmax_cases() if x.dim() > 1]
    assert any(m.max() - m.min() > 1000 for m in row_maxima)


def test_tiled_with_one_maximum_shared_by_all_queries_is_named():
    def shared(q, k, v, block_size):
        m = -math.inf
        total, acc = torch.zeros(q.shape[:-1] + (1,)), torch.zeros(q.shape[:-1] + (v.shape[-1],))
        for kb, vb in zip(torch.split(k, block_size, dim=-2), torch.split(v, block_size, dim=-2), strict=True):
            scores = q @ kb.mT / math.sqrt(q.shape[-1])
            m_new = max(m, scores.max().item())
            p = torch.exp(scores - m_new)
            total = total * math.exp(m - m_new) + p.sum(-1, keepdim=True)
            acc = acc * math.exp(m - m_new) + p @ vb
            m = m_new
        return acc / total

    result = _tiled(shared)
    assert not result.passed and ex.T_SHARED_MAX in result.message, result.message


# ---------------------------------------------------------------- unusual outputs are named, never a checker crash


@pytest.mark.parametrize(
    "convert, phrase",
    [(lambda t: t.long(), "dtype"), (lambda t: t.double(), "float64"), (lambda t: t.to("meta"), checking.OTHER_DEVICE)],
    ids=["int", "float64", "meta device"],
)
def test_unusual_outputs_get_a_mistake_not_a_crash(convert, phrase):
    online = _online(lambda x, block_size: convert(learner_online_softmax(x, block_size)))
    tiled = _tiled(lambda q, k, v, block_size: convert(learner_tiled(q, k, v, block_size)))
    for result in (online, tiled):
        assert not result.passed and result.status == "not yet" and phrase in result.message, result.message


def _non_contiguous(t):
    strided = torch.stack([t, t], dim=-1)[..., 0]  # same values, every other element of a bigger tensor
    assert not strided.is_contiguous()
    return strided


def test_non_contiguous_outputs_pass():
    assert _online(lambda x, block_size: _non_contiguous(learner_online_softmax(x, block_size))).passed
    assert _tiled(lambda q, k, v, block_size: _non_contiguous(learner_tiled(q, k, v, block_size))).passed


def test_online_softmax_with_a_running_maximum_never_updated_is_not_called_overflow():
    for kwargs in (dict(keep_max=False), dict(keep_max=False, start_max="first")):
        result = _online(lambda x, block_size, kw=kwargs: learner_online_softmax(x, block_size, **kw))
        assert ex.OS_OVERFLOW not in result.message and ex.OS_MAX_FROZEN in result.message, result.message


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_online_softmax_that_loses_the_dtype_is_caught(dtype):
    def in_float32(x, block_size):  # float32 arithmetic, the result left in float32
        return learner_online_softmax(x.float() if x.dtype == dtype else x, block_size)

    result = _online(in_float32)
    assert not result.passed and str(dtype) in result.message, result.message


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_tiled_attention_that_loses_the_dtype_is_caught(dtype):
    def in_float32(q, k, v, block_size):  # float32 arithmetic, the output left in float32
        if q.dtype == dtype:
            q, k, v = q.float(), k.float(), v.float()
        return learner_tiled(q, k, v, block_size)

    result = _tiled(in_float32)
    assert not result.passed and str(dtype) in result.message, result.message


def test_online_softmax_computed_in_float32_for_float64_is_named():
    def in_float32(x, block_size):  # the float32 result put back into the input's dtype
        return learner_online_softmax(x.float(), block_size).to(x.dtype)

    result = _online(in_float32)
    assert not result.passed and checking.FLOAT32_PRECISION in result.message, result.message


def test_tiled_attention_computed_in_float32_for_float64_is_named():
    def in_float32(q, k, v, block_size):
        return learner_tiled(q.float(), k.float(), v.float(), block_size).to(q.dtype)

    result = _tiled(in_float32)
    assert not result.passed and checking.FLOAT32_PRECISION in result.message, result.message
