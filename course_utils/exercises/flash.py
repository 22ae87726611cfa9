"""Lesson 09's exercises: the logsumexp bookkeeping of the forward pass, and the backward of one block.

- ``running_logsumexp(score_blocks) -> lse``: the natural-log logsumexp of each query's
  scores, reading one block of keys at a time with a running maximum and a running sum.
  It is the one number per query that FlashAttention saves for the backward pass.
- ``block_backward(q_i, k_j, v_j, do_i, lse_i, d_i, scale) -> (dq_i, dk_j, dv_j)``: what one
  (query block i, key block j) pair adds to the gradients, with the block of probabilities
  recomputed from the saved logsumexp, P_ij = exp(S_ij - lse_i).

The solutions are the functions of these names in ``course_utils.flash`` (``show_solution``
prints them). The expected answers come from independent oracles: ``torch.logsumexp`` over
the whole row in float64, and slices of the full softmax matrix and its gradient in float64
(the tests check that the blocks add up to autograd's gradients).

Each known mistake is recomputed on the same inputs (``_lse_variant``, ``_block_variant``)
and named when the learner's output matches it. Whether the learner really reads one
block at a time is checked by watching the tensors their code creates, as in lesson 07.
"""

import math

import torch

from course_utils.exercises import exercise
from course_utils.exercises.checking import (
    REDUCTIONS,
    Mistake,
    call,
    close,
    diagnose,
    diagnose_batching,
    expect_plain,
    expect_same_dtype,
    expect_tensor,
    generator,
    tolerance,
    torch_calls,
)
from course_utils.flash import block_backward, running_logsumexp

__all__ = ["running_logsumexp", "block_backward"]

# Distinctive phrases, one per mistake (the tests look for them).
LSE_LOG2 = "you took log2 instead of the natural log"
LSE_BASE2 = "you worked in base 2"
LSE_NO_M = "you returned log(l) without adding m back"
LSE_NO_RESCALE = "you did not rescale the running sum"
LSE_INVERTED = "the rescale factor is upside down"
LSE_OVERFLOW = "exp() overflowed"
LSE_MAX_AT_ZERO = "start the running maximum at -inf"
LSE_BLOCK_MAX = "your m is the maximum of the latest block only"
LSE_LAST_BLOCK = "only the last block counts"
LSE_WRONG_AXIS = "you took the maximum over the wrong axis"
LSE_SHARED_MAX = "you kept one running maximum shared by all queries"
LSE_KEEPDIM = "keepdim=True"
LSE_PAIR = "return the logsumexp itself"
LSE_WHOLE_ROW = "you joined the blocks into whole rows"
LSE_TWO_PASSES = "you went over the blocks twice"
LSE_MAX_FROZEN = "your running maximum never changes"

BB_NO_SCALE_DQ = "you forgot the scale in dq_i"
BB_NO_SCALE_DK = "you forgot the scale in dk_j"
BB_NO_SCALE_S = "you forgot the scale in the scores S_ij"
BB_DIVIDED_BY_SCALE = "you divided the scores by scale"
BB_OWN_SCALE = "you used 1/sqrt(d) instead of the scale argument"
BB_NO_D = "you did not subtract D"
BB_BLOCK_D = "you computed D from this block only"
BB_D_OUTSIDE = "the brackets are missing"
BB_BLOCK_SOFTMAX = "you recomputed P with a softmax over this block"
BB_BASE2 = "lse_i is a natural-log logsumexp"
BB_OVERFLOW = "exp() overflowed"
BB_DV_NO_TRANSPOSE = "dv_j needs P_ij transposed"
BB_DK_NO_TRANSPOSE = "dk_j needs dS_ij transposed"
BB_DQ_TRANSPOSED = "dq_i takes dS_ij as it is, not transposed"
BB_DP_TRANSPOSED = "your dP_ij is transposed"
BB_D_UNSQUEEZED = "d_i must be subtracted row by row"
BB_LSE_UNSQUEEZED = "lse_i must be subtracted row by row"
BB_TRANSPOSED_RESULT = "is transposed"
BB_ORDER = "in the order (dq_i, dk_j, dv_j)"
BB_NOT_THREE = "return three tensors"
_BB_BATCH_ADVICE = (
    "`.T` reverses all axes of a batched tensor; `.transpose(-2, -1)` (or `.mT`) swaps only the last two."
)

NEG_INF = float("-inf")


# --------------------------------------------------------------------------- running_logsumexp


def _lse_variant(
    blocks,
    log="e",
    exp="e",
    use_max=True,
    rescale="right",
    max_start=NEG_INF,
    running_max=True,
    accumulate=True,
    add_m=True,
    shared_max=False,
    max_axis=-1,
    keep_max=True,
):
    """running_logsumexp with one planted mistake (log/exp: 'e' or '2'; rescale: 'right', 'none', 'inverted';
    max_start: a number, or "first" for the first block's maximum; keep_max=False: `m = m_new` is missing)."""
    exp_fn = torch.exp if exp == "e" else torch.exp2
    log_fn = torch.log if log == "e" else torch.log2
    if isinstance(max_start, str):
        m = blocks[0].amax(dim=-1)
    else:
        m = blocks[0].new_full(blocks[0].shape[:-1], max_start)
    total = torch.zeros_like(m)
    for s in blocks:
        block_max = s.amax() if shared_max else s.amax(dim=max_axis)
        if not use_max:
            m_new = torch.zeros_like(m)
        elif running_max:
            m_new = torch.maximum(m, block_max)
        else:
            m_new = block_max.expand_as(m)
        factor = {"right": exp_fn(m - m_new), "none": 1.0, "inverted": exp_fn(m_new - m)}[rescale]
        fresh = exp_fn(s - m_new[..., None]).sum(dim=-1)
        total = total * factor + fresh if accumulate else fresh
        m = m_new if keep_max else m
    return m + log_fn(total) if add_m else log_fn(total)


def _causal_scores(n_q, n_k, g):
    """Scores with the causal mask of lesson 02 (query i sees keys 0..i): -inf above the diagonal."""
    scores = torch.randn(n_q, n_k, generator=g) * 2
    allowed = torch.arange(n_k)[None, :] <= torch.arange(n_q)[:, None]
    return scores.masked_fill(~allowed, NEG_INF)


def _lse_cases():
    g = generator(9)
    rows = torch.tensor([[1000.0], [0.0], [-1000.0]])
    one_large = torch.randn(4, 8, generator=g).index_put((torch.tensor(0), torch.tensor(5)), torch.tensor(1000.0))
    # exp(50) fits in float32, exp(100) does not: only a maximum that falls from block to block overflows
    falling = torch.cat([torch.randn(4, 5, generator=g) + 50, torch.randn(4, 6, generator=g) - 50], dim=-1)
    return [
        # first: square blocks (L_q = B_k), so a maximum over the wrong axis has the right shape and can be named
        ("scores [4, 12] in 3 blocks of 4 keys", torch.randn(4, 12, generator=g) * 3, 4),
        ("scores [4, 8] with one score of 1000 (query 0, key 5), blocks of 4", one_large, 4),
        ("scores [3, 9]: rows around +1000, 0 and -1000, blocks of 3", torch.randn(3, 9, generator=g) + rows, 3),
        ("batched scores [2, 3, 5, 10] in blocks of 4 keys (the last has 2)", torch.randn(2, 3, 5, 10, generator=g), 4),
        ("scores [3, 7] in one block", torch.randn(3, 7, generator=g) * 3, 7),
        ("scores [2, 6, 9] in blocks of 1 key", torch.randn(2, 6, 9, generator=g), 1),
        ("large scores [3, 11] around +1000, blocks of 4", torch.randn(3, 11, generator=g) + 1000, 4),
        ("scores [2, 3, 10] all around -1000, blocks of 4", torch.randn(2, 3, 10, generator=g) - 1000, 4),
        ("scores [4, 11]: a first block around +50, then blocks around -50 (blocks of 5)", falling, 5),
        ("causal scores [6, 6] (-inf above the diagonal), blocks of 4", _causal_scores(6, 6, g), 4),
        ("float64 scores [2, 5, 13], blocks of 6", torch.randn(2, 5, 13, generator=g, dtype=torch.float64) * 5, 6),
        ("float16 scores [3, 10], blocks of 4", (torch.randn(3, 10, generator=g) * 3).half(), 4),
        ("bfloat16 scores [2, 3, 9] around +100, blocks of 4", (torch.randn(2, 3, 9, generator=g) + 100).bfloat16(), 4),
    ]


# (atol, rtol) by dtype: scores around 1000 in float32 keep about 7 digits; float16 about 3, bfloat16 2
_LSE_TOLERANCE = {torch.float16: (4e-3, 2e-3), torch.bfloat16: (5e-2, 1e-2)}


def _lse_mistakes(blocks):
    v = _lse_variant
    mistakes = [
        # first: on scores far below 0 the 0-start and no max at all both give -inf; no max is
        # already caught by the scores around +1000, so here the 0-start is the cause
        (
            f"{LSE_MAX_AT_ZERO}, not 0: when every score of a row is far below 0, the maximum stays at 0, every "
            f"exp(s - 0) underflows to 0 and log(0) = -inf. Start m at -inf: the first block sets it.",
            v(blocks, max_start=0.0),
        ),
        (
            f"{LSE_LOG2} at the end: the logsumexp of FlashAttention is log(sum exp(s)) with the natural log, "
            f"so the backward can recompute P = exp(S - lse). Use torch.log, not torch.log2.",
            v(blocks, log="2"),
        ),
        (
            f"{LSE_BASE2} (exp2 or 2 ** x, with log2 at the end): that is log2(sum 2^s), a different number. "
            f"Triton kernels use exp2 for speed, but only after multiplying the scores by log2(e); here use "
            f"torch.exp and torch.log.",
            v(blocks, log="2", exp="2"),
        ),
        (
            f"{LSE_BASE2} for the sums (exp2 or 2 ** x) but took the natural log at the end: keep one base, "
            f"e: torch.exp and torch.log.",
            v(blocks, exp="2"),
        ),
        (
            f"{LSE_NO_M}: l = sum exp(s - m) is measured against m, so log(sum exp(s)) = m + log(l).",
            v(blocks, add_m=False),
        ),
        (
            f"{LSE_NO_RESCALE}: when a block raises the running maximum, the sum collected so far was measured "
            f"against the old maximum. Multiply it by exp(m_old - m_new) before adding the new block's sum.",
            v(blocks, rescale="none"),
        ),
        (
            f"your result is NaN, as when {LSE_INVERTED}: exp(m_new - m_old) is inf on the first block "
            f"(m_old = -inf), and it grows the old sum when it should shrink it. Use exp(m_old - m_new).",
            v(blocks, rescale="inverted"),
        ),
        (
            f"{LSE_MAX_FROZEN} (`m = m_new` is missing at the end of the loop): m stays at -inf, so "
            f"exp(m - m_new) = 0 wipes the running sum at every block and m + log(l) = -inf. After adding a "
            f"block, set m = m_new.",
            v(blocks, keep_max=False),
        ),
        (
            f"{LSE_MAX_FROZEN} after the first block (`m = m_new` is missing at the end of the loop): the "
            f"running sum is measured against m_new, but you add back the old m. After adding a block, set "
            f"m = m_new.",
            v(blocks, keep_max=False, max_start="first"),
        ),
        (
            f"{LSE_LAST_BLOCK}: either you replaced the running sum by the latest block's sum instead of adding "
            f"to it (l = l * exp(m_old - m_new) + sum exp(s - m_new)), or {LSE_MAX_FROZEN} (`m = m_new` is "
            f"missing), so exp(m - m_new) = 0 wipes the sum at every block.",
            v(blocks, accumulate=False),
        ),
        (
            f"{LSE_BLOCK_MAX}, not max(m_old, block max): when a block's scores are far below an earlier "
            f"block's, exp(m_old - m_new) overflows. The running maximum only ever grows: "
            f"m_new = torch.maximum(m, s.amax(dim=-1)).",
            v(blocks, running_max=False),
        ),
        (
            f"{LSE_OVERFLOW}: exp(s) without subtracting a maximum is inf for scores above 88 in float32 "
            f"(and 0 below -103). Keep the running maximum m and use exp(s - m).",
            v(blocks, use_max=False),
        ),
    ]
    if all(b.shape[-1] == b.shape[-2] for b in blocks):  # square blocks: the wrong axis has the right shape
        mistakes.append(
            (
                f"{LSE_WRONG_AXIS}: a block of scores is [..., L_q, B_k], one row per query, so each query's "
                f"maximum runs over the keys, the last axis: s.amax(dim=-1). A maximum over the queries is right "
                f"only by luck: a query whose scores are far below another query's gets exp(s - m) = 0 and "
                f"log(0) = -inf.",
                v(blocks, max_axis=-2),
            )
        )
    if blocks[0].shape[-2] > 1:
        mistakes.append(
            (
                f"{LSE_SHARED_MAX} (`s.max()` without dim=-1): a query whose scores are far below the largest "
                f"score of the block gets exp(s - m) = 0 everywhere and log(0) = -inf. Every query needs its own "
                f"maximum, shape [..., L_q]: s.amax(dim=-1).",
                v(blocks, shared_max=True),
            )
        )
    return mistakes


def _lse_shape_mistake(got, expected, blocks):
    """A clearer message than 'wrong shape' for the shapes that keepdim or a pair give."""
    if isinstance(got, tuple) and len(got) == 2:
        raise Mistake(f"you returned a pair (m, l?): {LSE_PAIR}, lse = m + log(l), one tensor of shape [..., L_q].")
    if not isinstance(got, torch.Tensor):
        return
    n_q = expected.shape[-1]
    if tuple(got.shape) == (*expected.shape, 1):
        raise Mistake(
            f"your result has shape {tuple(got.shape)}; with {LSE_KEEPDIM} m and l are [..., L_q, 1]. "
            f"Return shape {tuple(expected.shape)}: one number per query, lse.squeeze(-1)."
        )
    if tuple(got.shape) == (*expected.shape, n_q) or tuple(got.shape) == (*expected.shape, blocks[0].shape[-1]):
        raise Mistake(
            f"your result has shape {tuple(got.shape)}: a max or sum with {LSE_KEEPDIM} ([..., L_q, 1]) "
            f"combined with m or l of shape [..., L_q] broadcasts to a square. Keep m and l [..., L_q] "
            f"(amax(dim=-1), sum(dim=-1)) and subtract m[..., None] from the scores."
        )


def _check_lse_blocks(candidate):
    """The candidate must not gather the blocks into whole rows (torch.cat, then one logsumexp)."""
    widths = (6, 6, 6, 6, 3)
    blocks = list(torch.randn(2, 5, sum(widths), generator=generator(15)).split(widths, dim=-1))
    for name, shape, shapes, _ in torch_calls(candidate, blocks):
        wide = [s for s in shapes if s and s[-1] > max(widths)]
        if wide or (name in REDUCTIONS and shape and shape[-1] > max(widths)):
            raise Mistake(
                f"{LSE_WHOLE_ROW} ({name} made or reduced a tensor {wide[0] if wide else shape} wider than one "
                f"block of {max(widths)} keys): the result is right, but in FlashAttention the blocks of scores "
                f"are computed one at a time and never all held at once. Keep a running max m and sum l, "
                f"updated block by block."
            )


def _block_read_again(reads):
    """(block, block read in between) for the first block read again after another block, else None.

    Block 0 may be read any time (its shape, dtype and device make the running state), so it
    never counts; a block read by several operations in a row is one visit. Three blocks or
    more are needed to see a second pass."""
    last_seen = {}
    for position, block in enumerate(reads):
        if block != 0 and block in last_seen:
            between = [b for b in reads[last_seen[block] + 1 : position] if b not in (0, block)]
            if between:
                return block, between[0]
        last_seen[block] = position
    return None


def _check_lse_one_pass(candidate):
    """The candidate must visit each block once, left to right: FlashAttention computes a block of
    scores, uses it and drops it, so a first pass for the maximum and a second for the sum would
    compute every block twice."""
    blocks = list(torch.randn(2, 5, 15, generator=generator(16)).split(5, dim=-1))
    index = {id(b): i for i, b in enumerate(blocks)}  # which block each torch call reads, in order
    again = _block_read_again([index[t] for c in torch_calls(candidate, blocks) for t in c.inputs if t in index])
    if again is not None:
        block, other = again
        raise Mistake(
            f"{LSE_TWO_PASSES} (block {block} was read again after block {other}): the result is right, but in "
            f"FlashAttention each block of scores is computed on the fly, used once and dropped, so a first "
            f"pass for the maximum and a second for the sum would compute every score twice. Do it in one "
            f"pass: keep a running maximum m and, when a block raises it, rescale the running sum l by "
            f"exp(m_old - m_new)."
        )


@exercise(
    "running_logsumexp",
    solution=running_logsumexp,
    hints=[
        "This is lesson 07's online softmax, without the final division: keep per query a running maximum m "
        "and a running sum l = sum exp(s - m) of the scores seen so far; at the end log(sum exp(s)) = m + log(l).",
        "m and l have shape [..., L_q] (one number per query): start m at -inf and l at 0, e.g. "
        "`first = score_blocks[0]; m = first.new_full(first.shape[:-1], float('-inf'))`, `l = torch.zeros_like(m)`. "
        "For each block s: m_new = torch.maximum(m, s.amax(dim=-1)).",
        "`l = l * torch.exp(m - m_new) + torch.exp(s - m_new[..., None]).sum(dim=-1); m = m_new` for every "
        "block s in score_blocks; then `return m + torch.log(l)` (the natural log).",
    ],
)
def check_running_logsumexp(candidate):
    for description, scores, width in _lse_cases():
        blocks = list(scores.split(width, dim=-1))
        expected = torch.logsumexp(scores.double(), dim=-1).to(scores.dtype)  # the oracle: the whole row at once
        got = call(candidate, blocks)
        _lse_shape_mistake(got, expected, blocks)
        expect_tensor(got, expected.shape, what=f"logsumexp for {description}")
        expect_same_dtype(got, scores.dtype, "logsumexp", description)
        diagnose(
            got,
            expected,
            _lse_mistakes(blocks),
            what="logsumexp",
            atol=_LSE_TOLERANCE.get(scores.dtype, (1e-5, 1e-6))[0],
            rtol=_LSE_TOLERANCE.get(scores.dtype, (1e-5, 1e-6))[1],
            context=description,
            dtype=scores.dtype,
            nonfinite_advice=f"{LSE_OVERFLOW} or log(0) happened. Subtract the running maximum (start it at "
            "-inf, update it to max(m, block max)) before exp(), and rescale the sum when the maximum changes.",
        )
    _check_lse_blocks(candidate)
    _check_lse_one_pass(candidate)


# --------------------------------------------------------------------------- block_backward


def _block_variant(
    q_i,
    k_j,
    v_j,
    do_i,
    lse_i,
    d_i,
    scale,
    scale_dq=True,
    scale_dk=True,
    scores="right",
    probs="right",
    dp_t=False,
    minus_d="right",
    dv_t=True,
    dk_t=True,
    dq_t=False,
):
    """block_backward with one planted mistake; None if the mistake cannot run on these shapes."""
    t = lambda x: x.transpose(-2, -1)  # noqa: E731
    factor = {"right": scale, "none": 1.0, "divided": 1 / scale, "own": 1 / math.sqrt(q_i.shape[-1])}[scores]
    try:
        s = q_i @ t(k_j) * factor
        p = {
            "right": lambda: torch.exp(s - lse_i[..., None]),
            "flat": lambda: torch.exp(s - lse_i),  # lse_i lined up with the keys' axis
            "softmax": lambda: torch.softmax(s, dim=-1),
            "exp2": lambda: torch.exp2(s - lse_i[..., None]),
            "exp2_log2e": lambda: torch.exp2(s * math.log2(math.e) - lse_i[..., None]),
            "overflow": lambda: torch.exp(s) / torch.exp(lse_i[..., None]),
        }[probs]()
        dp = v_j @ t(do_i) if dp_t else do_i @ t(v_j)
        d = {
            "right": lambda: d_i[..., None],
            "none": lambda: 0.0,
            "flat": lambda: d_i,
            "block": lambda: (p * dp).sum(dim=-1, keepdim=True),
            "outside": lambda: d_i[..., None],
        }[minus_d]()
        ds = p * dp - d if minus_d == "outside" else p * (dp - d)
        dv = t(p) @ do_i if dv_t else p @ do_i
        dq = (t(ds) if dq_t else ds) @ k_j * (scale if scale_dq else 1.0)
        dk = (t(ds) if dk_t else ds) @ q_i * (scale if scale_dk else 1.0)
    except RuntimeError:  # shapes that do not line up: this mistake would have raised an error
        return None
    return dq, dk, dv


def _block_mistakes(args):
    """(message, (dq, dk, dv) that the mistake gives) pairs, for the mistakes that run on these shapes."""
    q_i, scale = args[0], args[6]
    named = [
        (
            f"{BB_BLOCK_SOFTMAX}: that normalises the weights over this block's keys only, which is right only "
            f"if the block holds all keys. lse_i covers all keys, so P_ij = exp(S_ij - lse_i) gives the true "
            f"weights without looking at any other block.",
            dict(probs="softmax"),
        ),
        (
            f"{BB_BLOCK_D}: rowsum(P_ij * dP_ij) sums over this block's keys only, but D_i sums over all keys. "
            f"Use the d_i you were given (D = rowsum(dO * O), which equals rowsum(P * dP) over all keys).",
            dict(minus_d="block"),
        ),
        (
            f"{BB_NO_D}: dS_ij = P_ij * (dP_ij - D_i). The - D_i comes from the softmax's Jacobian: each weight "
            f"depends on all the scores of its row.",
            dict(minus_d="none"),
        ),
        (
            f"{BB_D_OUTSIDE}: dS_ij = P_ij * (dP_ij - D_i), so D_i is multiplied by P_ij too (you wrote P * dP - D).",
            dict(minus_d="outside"),
        ),
        (
            f"{BB_D_UNSQUEEZED}: d_i [..., B_q] against dP_ij [..., B_q, B_k] lines up with the keys' axis. "
            f"Use d_i[..., None] (shape [..., B_q, 1]).",
            dict(minus_d="flat"),
        ),
        (
            f"{BB_LSE_UNSQUEEZED}: lse_i [..., B_q] against S_ij [..., B_q, B_k] lines up with the keys' axis. "
            f"Use lse_i[..., None] (shape [..., B_q, 1]).",
            dict(probs="flat"),
        ),
        (
            f"{BB_BASE2} (natural log): P_ij = torch.exp(S_ij - lse_i). exp2 belongs to kernels that keep "
            f"the logsumexp in base 2.",
            dict(probs="exp2"),
        ),
        (
            f"{BB_BASE2} (natural log): P_ij = torch.exp(S_ij - lse_i), with no log2(e) factor.",
            dict(probs="exp2_log2e"),
        ),
        (
            f"{BB_NO_SCALE_S}: S_ij = q_i k_j^T * scale, the same scores as in the forward pass, or exp(S - lse) "
            f"is not the softmax.",
            dict(scores="none"),
        ),
        (f"{BB_DIVIDED_BY_SCALE}: scale is already 1/sqrt(d); multiply by it.", dict(scores="divided")),
        (
            f"{BB_OWN_SCALE}: here scale = {scale:g}, not 1/sqrt({q_i.shape[-1]}). Use the argument, as the "
            f"forward pass did.",
            dict(scores="own"),
        ),
        (
            f"{BB_NO_SCALE_DQ}: S = Q K^T * scale, so dL/dQ = dS K * scale; the chain rule brings the scale back.",
            dict(scale_dq=False),
        ),
        (
            f"{BB_NO_SCALE_DK}: S = Q K^T * scale, so dL/dK = dS^T Q * scale; the chain rule brings the scale back.",
            dict(scale_dk=False),
        ),
        (
            f"{BB_DV_NO_TRANSPOSE}: O = P V, so dV = P^T dO: dv_j = P_ij.transpose(-2, -1) @ do_i, one row per key.",
            dict(dv_t=False),
        ),
        (
            f"{BB_DK_NO_TRANSPOSE}: dK = dS^T Q * scale, one row per key: dS_ij.transpose(-2, -1) @ q_i.",
            dict(dk_t=False),
        ),
        (f"{BB_DQ_TRANSPOSED}: dQ = dS K * scale, one row per query: dS_ij @ k_j.", dict(dq_t=True)),
        (
            f"{BB_DP_TRANSPOSED}: O = P V, so dP = dO V^T, [..., B_q, B_k] like P: do_i @ v_j.transpose(-2, -1).",
            dict(dp_t=True),
        ),
        (
            f"{BB_OVERFLOW}: exp(S_ij) / exp(lse_i) is inf / inf for scores above 88 in float32. Compute "
            f"exp(S_ij - lse_i) in one go: S - lse <= 0, so it never overflows.",
            dict(probs="overflow"),
        ),
    ]
    if abs(scale - 1 / math.sqrt(q_i.shape[-1])) < 1e-12:
        named = [(message, kw) for message, kw in named if kw != dict(scores="own")]
    return [(message, _block_variant(*args, **kw)) for message, kw in named]


def _block_oracle(q, k, v, do, scale):
    """Full-matrix P, dP and D in float64, and lse, D as the forward pass would save them."""
    q, k, v, do = q.double(), k.double(), v.double(), do.double()
    s = q @ k.transpose(-2, -1) * scale
    p = torch.softmax(s, dim=-1)
    dp = do @ v.transpose(-2, -1)
    d = (do * (p @ v)).sum(dim=-1)  # D = rowsum(dO * O)
    return torch.logsumexp(s, dim=-1), d, p, dp


def _block_cases():
    g = generator(21)

    def blocks(batch, n_q, n_k, d, d_v, size=1.0, dtype=torch.float32):
        shapes = ((n_q, d), (n_k, d), (n_k, d_v), (n_q, d_v))
        return [
            torch.randn(*batch, *s, generator=g, dtype=dtype) * (size if i < 2 else 1) for i, s in enumerate(shapes)
        ]

    return [
        # first: 2-D and square blocks, so swapped transposes still run and can be named
        ("q [8, 4], k [12, 4], v [12, 3], blocks of 4 queries and 4 keys", *blocks((), 8, 12, 4, 3), 0.5, 4, 4),
        (
            "batched q [2, 3, 7, 5], k [2, 3, 10, 5], v [2, 3, 10, 3], blocks of 3 queries and 4 keys",
            *blocks((2, 3), 7, 10, 5, 3),
            1 / math.sqrt(5),
            3,
            4,
        ),
        (
            "q [2, 6, 8], k [2, 9, 8], v [2, 9, 6], scale=0.3, blocks of 6 queries and 2 keys",
            *blocks((2,), 6, 9, 8, 6),
            0.3,
            6,
            2,
        ),
        (
            "large scores (q, k x 8): q [2, 5, 4], k [2, 8, 4], v [2, 8, 2], blocks of 2 queries and 3 keys",
            *blocks((2,), 5, 8, 4, 2, size=8.0),
            0.5,
            2,
            3,
        ),
        (
            "float64 q [3, 6, 16], k [3, 7, 16], v [3, 7, 5], blocks of 4 queries and 5 keys",
            *blocks((3,), 6, 7, 16, 5, dtype=torch.float64),
            0.25,
            4,
            5,
        ),
    ]


def _block_pairs(n_q, n_k, block_q, block_k):
    for i in range(0, n_q, block_q):
        for j in range(0, n_k, block_k):
            yield slice(i, i + block_q), slice(j, j + block_k)


def _unpack_block_result(got, expected, where):
    """Three tensors of the expected shapes, or a message naming what came back instead."""
    names = ("dq_i", "dk_j", "dv_j")
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        what = f"a {type(got).__name__} of {len(got)}" if isinstance(got, (tuple, list)) else type(got).__name__
        raise Mistake(f"{BB_NOT_THREE}, (dq_i, dk_j, dv_j), but your function returned {what} ({where}).")
    for name, g, e in zip(names, got, expected, strict=True):
        if isinstance(g, torch.Tensor) and g.shape != e.shape:
            if g.shape == e.transpose(-2, -1).shape:
                raise Mistake(
                    f"your {name} has shape {tuple(g.shape)}: it {BB_TRANSPOSED_RESULT}. It should have shape "
                    f"{tuple(e.shape)}, like the input it is the gradient of ({where})."
                )
            if any(g.shape == other.shape for other in expected):
                raise Mistake(
                    f"your {name} has shape {tuple(g.shape)}, but should have {tuple(e.shape)}: return the "
                    f"gradients {BB_ORDER}, with the shapes of q_i, k_j and v_j ({where})."
                )
        expect_tensor(g, e.shape, what=f"{name} ({where})")
    return got


def _check_one_block(candidate, args, expected, where, atol):
    got = call(candidate, *args)
    got = _unpack_block_result(got, expected, where)
    dtype = expected[0].dtype
    tight = tolerance(dtype, atol)  # float64 blocks at float64 precision
    for index in (2, 0, 1):  # dv first: it needs P only; then dq and dk, which need dS
        name = ("dq_i", "dk_j", "dv_j")[index]
        expect_same_dtype(got[index], expected[index].dtype, name, where)
        expect_plain(got[index], expected[index].device, name)
        if close(got[index], expected[index], *tight):
            continue
        if close(got[index].transpose(-2, -1), expected[index], atol=atol):
            raise Mistake(
                f"your {name} {BB_TRANSPOSED_RESULT}: it should have one row per "
                f"{'query' if index == 0 else 'key'}, like the input it is the gradient of ({where})."
            )
        for other, other_name in enumerate(("dq_i", "dk_j", "dv_j")):
            if other != index and close(got[index], expected[other], atol=atol):
                raise Mistake(
                    f"what you returned as {name} is {other_name}: return the gradients {BB_ORDER} ({where})."
                )
        mistakes = [(message, wrong[index]) for message, wrong in _block_mistakes(args) if wrong is not None]
        diagnose(
            got[index],
            expected[index],
            mistakes,
            what=name,
            atol=atol,
            context=where,
            dtype=dtype,
            nonfinite_advice=f"{BB_OVERFLOW}? Recompute P_ij = exp(S_ij - lse_i): S - lse <= 0, so it never overflows.",
        )


@exercise(
    "block_backward",
    solution=block_backward,
    hints=[
        "Recompute the block of probabilities as in the forward pass: S_ij = q_i k_j^T * scale and "
        "P_ij = exp(S_ij - lse_i). Then follow the lesson's formulas: dV = P^T dO, dP = dO V^T, "
        "dS = P * (dP - D), dQ = dS K * scale, dK = dS^T Q * scale, each restricted to this block.",
        "Mind the shapes: S_ij, P_ij, dP_ij and dS_ij are [..., B_q, B_k]; lse_i and d_i are [..., B_q], so "
        "subtract them as lse_i[..., None] and d_i[..., None]. Transpose with .transpose(-2, -1) (or .mT), "
        "which leaves batch and head axes alone.",
        "`s = q_i @ k_j.transpose(-2, -1) * scale; p = torch.exp(s - lse_i[..., None]); "
        "dv_j = p.transpose(-2, -1) @ do_i; dp = do_i @ v_j.transpose(-2, -1); ds = p * (dp - d_i[..., None]); "
        "dq_i = ds @ k_j * scale; dk_j = ds.transpose(-2, -1) @ q_i * scale`; return (dq_i, dk_j, dv_j).",
    ],
)
def check_block_backward(candidate):
    passed_unbatched = False
    for description, q, k, v, do, scale, block_q, block_k in _block_cases():
        lse, d, p, dp = _block_oracle(q, k, v, do, scale)
        ds = p * (dp - d[..., None])
        atol = 1e-4 if q.abs().max() > 5 else 1e-5  # large scores: float32 rounding of S ~ 100
        for rows, keys in _block_pairs(q.shape[-2], k.shape[-2], block_q, block_k):
            args = (q[..., rows, :], k[..., keys, :], v[..., keys, :], do[..., rows, :])
            args = (*args, lse[..., rows].to(q.dtype), d[..., rows].to(q.dtype), scale)
            # the expected contributions: slices of the full float64 P, dP and dS
            p_ij, ds_ij = p[..., rows, keys], ds[..., rows, keys]
            expected = tuple(
                x.to(q.dtype)
                for x in (
                    ds_ij @ k.double()[..., keys, :] * scale,
                    ds_ij.transpose(-2, -1) @ q.double()[..., rows, :] * scale,
                    p_ij.transpose(-2, -1) @ do.double()[..., rows, :],
                )
            )
            where = f"{description}; query rows {rows.start}..{min(rows.stop, q.shape[-2]) - 1}, keys {keys.start}..{min(keys.stop, k.shape[-2]) - 1}"
            try:
                _check_one_block(candidate, args, expected, where, atol)
            except Mistake as mistake:
                if q.dim() > 2 and "your code raised" in str(mistake):
                    diagnose_batching(
                        True, lambda passed=passed_unbatched: passed, where, _BB_BATCH_ADVICE, str(mistake)
                    )
                raise
        passed_unbatched = passed_unbatched or q.dim() == 2
