"""Lesson 09's checkers: the solutions are right, they pass, and each planted mistake gets its own message.

The mistaken candidates are written the way a learner might write them (keepdim=True and a squeeze
at the end, .mT, torch.split, ...), independently of the checker's own mistake generators.
"""

import math
import time

import pytest
import torch

from course_utils.exercises import check, checking, solution
from course_utils.exercises import flash as ex
from tests.exercises.asserts import assert_caught, assert_passes

INF = math.inf

# ---------------------------------------------------------------- the solutions themselves


def test_running_logsumexp_solution_equals_torch_logsumexp_on_ragged_blocks():
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 3, 7, 23, generator=g, dtype=torch.float64) * 30
    got = ex.running_logsumexp(list(scores.split(5, dim=-1)))
    torch.testing.assert_close(got, torch.logsumexp(scores, dim=-1), rtol=0, atol=1e-12)


def _attention_with_autograd(q, k, v, do, scale):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    s = q @ k.transpose(-2, -1) * scale
    out = torch.softmax(s, dim=-1) @ v
    out.backward(do)
    return out.detach(), torch.logsumexp(s, dim=-1).detach(), q.grad, k.grad, v.grad


@pytest.mark.parametrize("block_q, block_k", [(3, 4), (7, 11), (1, 2), (16, 16)])
def test_block_backward_solution_summed_over_blocks_equals_autograd(block_q, block_k):
    g = torch.Generator().manual_seed(1)
    n_q, n_k, d, d_v, scale = 7, 11, 6, 4, 0.4
    q, k = torch.randn(2, 3, n_q, d, generator=g, dtype=torch.float64), torch.randn(2, 3, n_k, d, generator=g).double()
    v, do = torch.randn(2, 3, n_k, d_v, generator=g).double(), torch.randn(2, 3, n_q, d_v, generator=g).double()
    out, lse, dq_ref, dk_ref, dv_ref = _attention_with_autograd(q, k, v, do, scale)
    d_rows = (do * out).sum(dim=-1)  # D = rowsum(dO * O)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for i in range(0, n_q, block_q):
        for j in range(0, n_k, block_k):
            rows, keys = slice(i, i + block_q), slice(j, j + block_k)
            dq_i, dk_j, dv_j = ex.block_backward(
                q[..., rows, :],
                k[..., keys, :],
                v[..., keys, :],
                do[..., rows, :],
                lse[..., rows],
                d_rows[..., rows],
                scale,
            )
            dq[..., rows, :] += dq_i
            dk[..., keys, :] += dk_j
            dv[..., keys, :] += dv_j
    for got, expected in ((dq, dq_ref), (dk, dk_ref), (dv, dv_ref)):
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


def test_the_solutions_reject_bad_input_clearly():
    with pytest.raises(ValueError, match="at least one block"):
        ex.running_logsumexp([])
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    do, lse = torch.randn(2, 3, 6), torch.randn(2, 3)
    with pytest.raises(ValueError, match=r"must have shape \(2, 3\)"):
        ex.block_backward(q, k, v, do, lse[..., None], lse, 0.5)  # lse kept as [..., B_q, 1]
    with pytest.raises(ValueError, match=r"got \(2, 3\) and \(3,\)"):
        ex.block_backward(q, k, v, do, lse, lse[0], 0.5)


@pytest.mark.parametrize("exercise_id", ["running_logsumexp", "block_backward"])
def test_solutions_pass_and_stubs_are_not_attempted(exercise_id):
    assert_passes(exercise_id, solution(exercise_id))

    def stub(*args):
        raise NotImplementedError

    assert check(exercise_id, stub, quiet=True).status == "not attempted"


@pytest.mark.parametrize("exercise_id", ["running_logsumexp", "block_backward"])
def test_each_check_takes_well_under_a_second(exercise_id):
    check(exercise_id, solution(exercise_id), quiet=True)  # imports and first calls done
    start = time.perf_counter()
    check(exercise_id, solution(exercise_id), quiet=True)
    assert time.perf_counter() - start < 1.0  # about 0.05 s on an idle 2-core CPU


# ---------------------------------------------------------------- running_logsumexp


def learner_lse(
    score_blocks,
    log=torch.log,
    exp=torch.exp,
    start=-INF,
    subtract_max=True,
    rescale="right",
    running=True,
    accumulate=True,
    add_m=True,
    whole_block_max=False,
    axis=-1,
    keep_max=True,
):
    """Kept with keepdim=True ([..., L_q, 1]) and squeezed at the end, unlike the reference."""
    if start == "first":
        m = score_blocks[0].amax(dim=-1, keepdim=True)
    else:
        m = torch.full((*score_blocks[0].shape[:-1], 1), start, dtype=score_blocks[0].dtype)
    l = torch.zeros_like(m)  # noqa: E741
    for block in score_blocks:
        if not subtract_max:
            l = l + exp(block).sum(-1, keepdim=True)  # noqa: E741
            continue
        if whole_block_max:
            block_max = block.max()
        elif axis == -1:
            block_max = block.max(dim=-1, keepdim=True).values
        else:
            block_max = block.max(dim=axis).values[..., None]
        m_new = torch.max(m, block_max) if running else block_max.expand_as(m)
        alpha = {"right": exp(m - m_new), "inverted": exp(m_new - m), "none": torch.ones_like(m)}[rescale]
        fresh = exp(block - m_new).sum(-1, keepdim=True)
        l = l * alpha + fresh if accumulate else fresh  # noqa: E741
        m = m_new if keep_max else m
    if not subtract_max:
        return log(l).squeeze(-1)
    return (m + log(l) if add_m else log(l)).squeeze(-1)


def _lse(**kwargs):
    return lambda score_blocks: learner_lse(score_blocks, **kwargs)


def test_learner_written_running_logsumexp_passes():
    assert_passes("running_logsumexp", learner_lse)


def test_per_block_logsumexp_combined_with_logaddexp_passes():
    def with_logaddexp(score_blocks):  # also online and stable: lse = logaddexp(lse, logsumexp(block))
        lse = torch.full(score_blocks[0].shape[:-1], -INF, dtype=score_blocks[0].dtype)
        for block in score_blocks:
            lse = torch.logaddexp(lse, torch.logsumexp(block, dim=-1))
        return lse

    assert_passes("running_logsumexp", with_logaddexp)


@pytest.mark.parametrize(
    "kwargs, phrase",
    [
        (dict(log=torch.log2), ex.LSE_LOG2),
        (dict(log=torch.log2, exp=torch.exp2), ex.LSE_BASE2),
        (dict(exp=torch.exp2), ex.LSE_BASE2),
        (dict(add_m=False), ex.LSE_NO_M),
        (dict(rescale="none"), ex.LSE_NO_RESCALE),
        (dict(rescale="inverted"), ex.LSE_INVERTED),
        (dict(subtract_max=False), ex.LSE_OVERFLOW),
        (dict(start=0.0), ex.LSE_MAX_AT_ZERO),
        (dict(running=False), ex.LSE_BLOCK_MAX),
        (dict(accumulate=False), ex.LSE_LAST_BLOCK),
        (dict(axis=-2), ex.LSE_WRONG_AXIS),
        (dict(whole_block_max=True), ex.LSE_SHARED_MAX),
        (dict(keep_max=False), ex.LSE_MAX_FROZEN),
        (dict(keep_max=False, start="first"), ex.LSE_MAX_FROZEN),
    ],
    ids=lambda p: str(p)[:40],
)
def test_running_logsumexp_mistakes_are_named(kwargs, phrase):
    assert_caught("running_logsumexp", _lse(**kwargs), phrase)


def test_the_max_at_zero_is_named_even_though_no_max_at_all_gives_the_same_numbers_there():
    result = check("running_logsumexp", _lse(start=0.0), quiet=True)
    assert ex.LSE_OVERFLOW not in result.message.split(":")[0], result.message


def test_running_logsumexp_shape_mistakes_are_named():
    assert_caught("running_logsumexp", lambda blocks: learner_lse(blocks)[..., None], ex.LSE_KEEPDIM)

    def keepdim_against_flat_m(score_blocks):
        m = torch.full(score_blocks[0].shape[:-1], -INF)
        l = torch.zeros_like(m)  # noqa: E741
        for block in score_blocks:
            m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))  # [..., L_q, 1] against [..., L_q]
            l = l * torch.exp(m - m_new) + torch.exp(block - m_new).sum(-1)  # noqa: E741
            m = m_new
        return m + torch.log(l)

    assert_caught("running_logsumexp", keepdim_against_flat_m, ex.LSE_KEEPDIM)

    def returns_m_and_l(score_blocks):
        m = torch.full(score_blocks[0].shape[:-1], -INF)
        l = torch.zeros_like(m)  # noqa: E741
        for block in score_blocks:
            m_new = torch.maximum(m, block.amax(dim=-1))
            l = l * torch.exp(m - m_new) + torch.exp(block - m_new[..., None]).sum(-1)  # noqa: E741
            m = m_new
        return m, l

    assert_caught("running_logsumexp", returns_m_and_l, ex.LSE_PAIR)


def test_joining_the_blocks_into_whole_rows_is_caught():
    assert_caught("running_logsumexp", lambda blocks: torch.cat(blocks, dim=-1).logsumexp(dim=-1), ex.LSE_WHOLE_ROW)


# ---------------------------------------------------------------- block_backward


def learner_block(
    q_i,
    k_j,
    v_j,
    do_i,
    lse_i,
    d_i,
    scale,
    scale_dq=True,
    scale_dk=True,
    scores="scale",
    probs="exp",
    subtract_d="given",
    dv_t=True,
    dk_t=True,
    dq_t=False,
    dp_t=False,
    use_dot_t=False,
    order="qkv",
):
    """Written with .mT and the scale folded into q up front, unlike the reference."""
    t = (lambda x: x.T) if use_dot_t else (lambda x: x.mT)
    factor = {"scale": scale, "none": 1.0, "divide": 1 / scale, "sqrt_d": q_i.shape[-1] ** -0.5}[scores]
    s = (q_i * factor) @ t(k_j)
    if probs == "exp":
        p = (s - lse_i.unsqueeze(-1)).exp()
    elif probs == "flat":
        p = (s - lse_i).exp()
    elif probs == "softmax":
        p = s.softmax(dim=-1)
    elif probs == "exp2":
        p = 2 ** (s - lse_i.unsqueeze(-1))
    elif probs == "exp2_log2e":
        p = torch.exp2(s * 1.4426950408889634 - lse_i.unsqueeze(-1))
    else:  # "overflow"
        p = s.exp() / lse_i.exp().unsqueeze(-1)
    dp = v_j @ t(do_i) if dp_t else do_i @ t(v_j)
    d = {
        "given": lambda: d_i.unsqueeze(-1),
        "none": lambda: 0,
        "flat": lambda: d_i,
        "block": lambda: (p * dp).sum(-1, keepdim=True),
        "outside": lambda: d_i.unsqueeze(-1),
    }[subtract_d]()
    ds = p * dp - d if subtract_d == "outside" else p * (dp - d)
    dv = (t(p) if dv_t else p) @ do_i
    dq = (t(ds) if dq_t else ds) @ k_j
    dk = (t(ds) if dk_t else ds) @ q_i
    dq, dk = (dq * scale if scale_dq else dq), (dk * scale if scale_dk else dk)
    return {"qkv": (dq, dk, dv), "kqv": (dk, dq, dv), "two": (dq, dk), "dk.T": (dq, t(dk), dv)}[order]


def _block(**kwargs):
    return lambda *args: learner_block(*args, **kwargs)


def test_learner_written_block_backward_passes():
    assert_passes("block_backward", learner_block)


@pytest.mark.parametrize(
    "kwargs, phrase",
    [
        (dict(scale_dq=False), ex.BB_NO_SCALE_DQ),
        (dict(scale_dk=False), ex.BB_NO_SCALE_DK),
        (dict(scale_dq=False, scale_dk=False), ex.BB_NO_SCALE_DQ),
        (dict(scores="none"), ex.BB_NO_SCALE_S),
        (dict(scores="divide"), ex.BB_DIVIDED_BY_SCALE),
        (dict(scores="sqrt_d"), ex.BB_OWN_SCALE),
        (dict(subtract_d="none"), ex.BB_NO_D),
        (dict(subtract_d="block"), ex.BB_BLOCK_D),
        (dict(subtract_d="flat"), ex.BB_D_UNSQUEEZED),
        (dict(subtract_d="outside"), ex.BB_D_OUTSIDE),
        (dict(probs="flat"), ex.BB_LSE_UNSQUEEZED),
        (dict(probs="softmax"), ex.BB_BLOCK_SOFTMAX),
        (dict(probs="exp2"), ex.BB_BASE2),
        (dict(probs="exp2_log2e"), ex.BB_BASE2),
        (dict(probs="overflow"), ex.BB_OVERFLOW),
        (dict(dv_t=False), ex.BB_DV_NO_TRANSPOSE),
        (dict(dk_t=False), ex.BB_DK_NO_TRANSPOSE),
        (dict(dq_t=True), ex.BB_DQ_TRANSPOSED),
        (dict(dp_t=True), ex.BB_DP_TRANSPOSED),
        (dict(order="kqv"), ex.BB_ORDER),
        (dict(order="two"), ex.BB_NOT_THREE),
        (dict(order="dk.T"), ex.BB_TRANSPOSED_RESULT),
        (dict(use_dot_t=True), checking.ONLY_UNBATCHED),
    ],
    ids=lambda p: str(p)[:40],
)
@pytest.mark.filterwarnings("ignore:The use of `x.T` on tensors:UserWarning")  # the planted .T mistake warns
def test_block_backward_mistakes_are_named(kwargs, phrase):
    assert_caught("block_backward", _block(**kwargs), phrase)


def test_block_softmax_and_block_d_are_right_when_one_block_holds_all_keys():
    # why the checker splits the keys into several blocks: with one block both mistakes give the right numbers
    g = torch.Generator().manual_seed(3)
    q, k, v, do = (torch.randn(2, n, 4, generator=g, dtype=torch.float64) for n in (5, 6, 6, 5))
    out, lse, *_ = _attention_with_autograd(q, k, v, do, 0.5)
    args = (q, k, v, do, lse, (do * out).sum(-1), 0.5)
    right = ex.block_backward(*args)
    for kwargs in (dict(probs="softmax"), dict(subtract_d="block")):
        for got, expected in zip(learner_block(*args, **kwargs), right, strict=True):
            torch.testing.assert_close(got, expected)


def test_inputs_changed_in_place_are_caught():
    def in_place(q_i, k_j, v_j, do_i, lse_i, d_i, scale):
        q_i *= scale  # changes the caller's tensor
        return learner_block(q_i, k_j, v_j, do_i, lse_i, d_i, 1.0, scale_dq=True)

    assert_caught("block_backward", in_place, "in place")


def test_blocks_changed_in_place_are_caught():
    def in_place(score_blocks):
        for block in score_blocks:
            block -= 1.0  # changes the caller's scores
        return learner_lse(score_blocks) + 1.0

    assert_caught("running_logsumexp", in_place, "in place")


def test_max_with_dim_used_as_a_tensor_is_explained():
    def max_pair(score_blocks):
        m = torch.full(score_blocks[0].shape[:-1], -INF)
        l = torch.zeros_like(m)  # noqa: E741
        for block in score_blocks:
            m_new = torch.maximum(m, block.max(dim=-1))  # a (values, indices) pair
            l = l * torch.exp(m - m_new) + torch.exp(block - m_new[..., None]).sum(-1)  # noqa: E741
            m = m_new
        return m + torch.log(l)

    assert_caught("running_logsumexp", max_pair, checking.MAX_IS_A_PAIR)


def test_a_running_maximum_never_updated_is_not_called_no_maximum():
    for kwargs in (dict(keep_max=False), dict(keep_max=False, start="first")):
        result = check("running_logsumexp", _lse(**kwargs), quiet=True)
        assert ex.LSE_OVERFLOW not in result.message and "without subtracting" not in result.message, result.message


def test_the_last_m_new_with_m_never_updated_names_both_causes():
    def returns_m_new(score_blocks):  # `m = m_new` missing, and m_new + log(l) returned
        m = torch.full(score_blocks[0].shape[:-1], -INF, dtype=score_blocks[0].dtype)
        l = torch.zeros_like(m)  # noqa: E741
        for block in score_blocks:
            m_new = torch.maximum(m, block.amax(dim=-1))
            l = l * torch.exp(m - m_new) + torch.exp(block - m_new[..., None]).sum(-1)  # noqa: E741
        return m_new + torch.log(l)

    result = check("running_logsumexp", returns_m_new, quiet=True)
    assert ex.LSE_LAST_BLOCK in result.message and ex.LSE_MAX_FROZEN in result.message, result.message


def _two_passes(score_blocks):
    """Right, stable, but not online: a first pass for the maximum, a second for the sum."""
    m = score_blocks[0].amax(dim=-1)
    for block in score_blocks:
        m = torch.maximum(m, block.amax(dim=-1))
    l = sum(torch.exp(block - m[..., None]).sum(dim=-1) for block in score_blocks)  # noqa: E741
    return m + torch.log(l)


def _two_passes_after_a_copy(score_blocks):
    blocks = list(score_blocks)
    m = torch.stack([block.amax(dim=-1) for block in blocks]).amax(dim=0)
    return m + torch.log(torch.stack([torch.exp(block - m[..., None]).sum(dim=-1) for block in blocks]).sum(0))


@pytest.mark.parametrize("candidate", [_two_passes, _two_passes_after_a_copy])
def test_two_passes_over_the_blocks_are_caught(candidate):
    assert_caught("running_logsumexp", candidate, ex.LSE_TWO_PASSES)


def test_one_pass_that_reads_a_block_several_times_in_a_row_or_the_first_block_often_passes():
    def indexed(score_blocks):
        first = score_blocks[0]
        m = torch.full(first.shape[:-1], -INF, dtype=first.dtype)
        l = torch.zeros_like(m)  # noqa: E741
        for i in range(len(score_blocks)):
            m_new = torch.maximum(m, score_blocks[i].amax(dim=-1))
            zero = torch.zeros_like(score_blocks[0][..., 0])  # the first block again, for its shape
            l = l * torch.exp(m - m_new) + torch.exp(score_blocks[i] - m_new[..., None]).sum(dim=-1) + zero  # noqa: E741
            m = m_new
        return m + torch.log(l)

    assert_passes("running_logsumexp", indexed)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_running_logsumexp_that_returns_float32_for_low_precision_scores_is_caught(dtype):
    def in_float32(score_blocks):  # float32 arithmetic, and the result left in float32
        return learner_lse([b.float() if b.dtype == dtype else b for b in score_blocks])

    result = check("running_logsumexp", in_float32, quiet=True)
    assert not result.passed and "dtype" in result.message and str(dtype).removeprefix("torch.") in result.message


def test_running_logsumexp_computed_in_float32_for_float64_scores_is_named():
    def in_float32(score_blocks):  # float32 arithmetic, the result put back into float64
        return learner_lse([b.float() for b in score_blocks]).to(score_blocks[0].dtype)

    assert_caught("running_logsumexp", in_float32, checking.FLOAT32_PRECISION)


def test_block_backward_computed_in_float32_for_float64_blocks_is_named():
    def in_float32(*args):  # float32 arithmetic, the gradients put back into the inputs' dtype
        *tensors, scale = args
        grads = learner_block(*(t.float() for t in tensors), scale)
        return tuple(g.to(args[0].dtype) for g in grads)

    assert_caught("block_backward", in_float32, checking.FLOAT32_PRECISION)
