"""Lesson 07's exercises: online softmax and tiled (FlashAttention-style) attention.

The solutions are the course's reference code, ``course_utils.efficient.online_softmax``
and ``course_utils.efficient.tiled_attention``. The expected answers come from
independent oracles: ``torch.softmax``, and softmax(q k^T / sqrt(d)) v computed in
float64 in one piece.

Each known mistake is recomputed on the same inputs (``_online_softmax_variant``,
``_tiled_variant``) and named when the learner's output matches it. Whether the
learner really works block by block is checked by watching the tensors their
code creates (``checking.torch_calls`` records every torch call): a reduction over
the whole row, or a tensor as wide as all the keys, gives the trick away.
"""

import math

import torch

from course_utils.efficient import online_softmax, tiled_attention
from course_utils.exercises import exercise
from course_utils.exercises.checking import (
    REDUCTIONS,
    Mistake,
    call,
    diagnose,
    expect_same_dtype,
    expect_tensor,
    generator,
    torch_calls,
)

# Distinctive phrases, one per mistake (the tests look for them).
OS_NO_RESCALE = "you did not rescale the running sum"
OS_INVERTED = "the rescale factor is upside down"
OS_LOST_BLOCK = "the last, shorter block was lost"
OS_OVERFLOW = "exp() overflowed"
OS_MAX_AT_ZERO = "start the running maximum at -inf"
OS_WHOLE_ROW = "you reduced over the whole row at once"
OS_WIDE_BLOCKS = "your blocks are wider than block_size"
OS_ONE_FOR_ALL_ROWS = "you kept one running maximum and one sum for all rows together"
OS_SHARED_MAX = "you kept one running maximum shared by all rows"
OS_MAX_FROZEN = "your running maximum never changes"

T_NO_RESCALE = "you did not rescale the running sum and the output"
T_NO_RESCALE_OUT = "you rescaled the running sum but not the output"
T_NO_RESCALE_SUM = "you rescaled the output but not the running sum"
T_INVERTED = "the rescale factor is upside down"
T_LOST_BLOCK = "the last, shorter block of keys was lost"
T_NO_SCALE = "you did not scale the scores by 1/sqrt(d_k)"
T_SCALE_DK = "you divided the scores by d_k instead of sqrt(d_k)"
T_DIVIDE_EACH = "you divided by the running sum after every block"
T_NO_FINAL_DIVIDE = "you never divided by the running sum"
T_PER_BLOCK_SOFTMAX = "you normalised each block on its own"
T_OVERFLOW = "exp() overflowed"
T_MAX_AT_ZERO = "start the running maximum at -inf"
T_FULL_MATRIX = "you built the full [L_q, L_k] score matrix"
T_WIDE_BLOCKS = "your blocks of keys are wider than block_size"
T_BUILTIN = "you called PyTorch's scaled_dot_product_attention"
T_SHARED_MAX = "you kept one running maximum shared by all queries"


# --------------------------------------------------------------------------- online_softmax


def _online_softmax_variant(
    x,
    block_size,
    rescale="right",
    lost_last=False,
    use_max=True,
    max_start=float("-inf"),
    shared_max=False,
    keep_max=True,
):
    """online softmax with one planted mistake (rescale: 'right', 'none' or 'inverted'; max_start: a number
    or "first", the first block's maximum; keep_max=False: `m = m_new` is missing)."""
    n = x.shape[-1]
    if isinstance(max_start, str):
        running_max = x[..., :block_size].amax(dim=-1, keepdim=True)
    else:
        running_max = x.new_full((*x.shape[:-1], 1), max_start)
    running_sum = x.new_zeros((*x.shape[:-1], 1))
    stop = n - n % block_size if lost_last else n
    for start in range(0, stop, block_size):
        block = x[..., start : start + block_size]
        block_max = block.amax() if shared_max else block.amax(dim=-1, keepdim=True)  # shared: one for all rows
        new_max = torch.maximum(running_max, block_max) if use_max else torch.zeros_like(running_max)
        factor = {"right": torch.exp(running_max - new_max), "none": 1.0, "inverted": torch.exp(new_max - running_max)}[
            rescale
        ]
        running_sum = running_sum * factor + torch.exp(block - new_max).sum(dim=-1, keepdim=True)
        running_max = new_max if keep_max else running_max
    return torch.exp(x - running_max) / running_sum


def _online_softmax_cases():
    g = generator(7)
    structured = torch.linspace(-50.0, 60.0, 23)[torch.randperm(23, generator=g)]
    return [
        ("a [10] vector, block_size=4 (the last block has 2 entries)", torch.randn(10, generator=g), 4),
        ("[3, 12] rows, block_size=4", torch.randn(3, 12, generator=g) * 3, 4),
        ("[2, 3, 7] rows, block_size=3", torch.randn(2, 3, 7, generator=g) * 3, 3),
        ("[4, 9] rows, block_size=20 (one block)", torch.randn(4, 9, generator=g), 20),
        ("[2, 6] rows, block_size=1", torch.randn(2, 6, generator=g), 1),
        ("a [23] vector with entries from -50 to 60, block_size=5", structured, 5),
        ("[3, 37] rows of large scores (x 100), block_size=5", torch.randn(3, 37, generator=g) * 100, 5),
        (
            "[2, 11] rows of very negative scores (around -1000), block_size=4",
            torch.randn(2, 11, generator=g) - 1000,
            4,
        ),
        (
            "[3, 10] rows around 1000, around 0 and around -1000 in one tensor, block_size=4",
            torch.randn(3, 10, generator=g) + torch.tensor([[1000.0], [0.0], [-1000.0]]),
            4,
        ),
        ("float64 [2, 9] rows, block_size=4", torch.randn(2, 9, generator=g, dtype=torch.float64) * 3, 4),
        ("float16 [3, 10] rows, block_size=4", (torch.randn(3, 10, generator=g) * 3).half(), 4),
        ("bfloat16 [2, 11] rows around +100, block_size=4", (torch.randn(2, 11, generator=g) + 100).bfloat16(), 4),
    ]


# (atol, rtol) by dtype: float16 keeps about 3 digits, bfloat16 about 2
_LOW_PRECISION_TOLERANCE = {torch.float16: (1e-3, 5e-3), torch.bfloat16: (8e-3, 3e-2)}


def _online_softmax_mistakes(x, block_size):
    mistakes = [
        # first: on rows far below 0 the 0-start, no max and an inverted factor all give NaN everywhere;
        # the other two are already caught by earlier cases, so there the 0-start is the cause
        (
            f"{OS_MAX_AT_ZERO}, not 0: a row whose entries are all far below 0 keeps the maximum at 0, every "
            f"exp(x - 0) underflows to 0 and the result is 0/0 = NaN.",
            _online_softmax_variant(x, block_size, max_start=0.0),
        ),
        (
            f"{OS_NO_RESCALE}: when a block raises the running maximum, the sum collected so far was measured "
            f"against the old maximum. Multiply it by exp(m_old - m_new) before adding the new block's sum.",
            _online_softmax_variant(x, block_size, rescale="none"),
        ),
        (
            f"{OS_OVERFLOW}: exp(x) without subtracting a maximum is inf above x = 88 in float32. "
            f"Keep the running maximum m and use exp(block - m).",
            _online_softmax_variant(x, block_size, use_max=False),
        ),
        (
            f"your result is NaN everywhere, as when {OS_INVERTED}: exp(m_new - m_old) is inf on the first block "
            f"(m_old = -inf) and 0 * inf = NaN. A larger maximum makes every old exp(x - m) smaller, so the "
            f"factor is exp(m_old - m_new) (at most 1).",
            _online_softmax_variant(x, block_size, rescale="inverted"),
        ),
        (
            f"{OS_MAX_FROZEN} (`m = m_new` is missing at the end of the loop): m stays at -inf, so "
            f"exp(m - m_new) = 0 wipes the running sum at every block and exp(x - m) = exp(inf) = inf at the "
            f"end. After adding a block, set m = m_new.",
            _online_softmax_variant(x, block_size, keep_max=False),
        ),
        (
            f"{OS_MAX_FROZEN} after the first block (`m = m_new` is missing at the end of the loop): the sum is "
            f"measured against m_new, but exp(x - m) at the end uses the old m. After adding a block, set "
            f"m = m_new.",
            _online_softmax_variant(x, block_size, keep_max=False, max_start="first"),
        ),
    ]
    if x.dim() > 1:
        # the demo cell's Python floats (`.max().item()`, `.sum()`) used on several rows at once
        mistakes.append(
            (
                f"{OS_ONE_FOR_ALL_ROWS} (a Python float, or .max()/.sum() without dim=-1, as in the demo with its "
                f"single row). Every row is its own softmax: keep m and l per row, shape [..., 1], with "
                f"block.amax(dim=-1, keepdim=True) and .sum(dim=-1, keepdim=True).",
                torch.softmax(x.flatten(), dim=0).view_as(x),
            )
        )
        # one maximum for the whole tensor (`block.max()` without dim), but a sum per row: exact while the rows
        # are of similar size, 0/0 = NaN in every row far below the largest entry of the tensor
        mistakes.append(
            (
                f"{OS_SHARED_MAX} (`block.max()` without dim=-1, or a Python float): a row whose entries are far "
                f"below the largest entry of the whole tensor gets exp(x - m) = 0 everywhere and 0/0 = NaN. Every "
                f"row needs its own running maximum, shape [..., 1]: block.amax(dim=-1, keepdim=True).",
                _online_softmax_variant(x, block_size, shared_max=True),
            )
        )
    if x.shape[-1] % block_size:
        mistakes.insert(
            0,
            (
                f"{OS_LOST_BLOCK}: {x.shape[-1]} entries in blocks of {block_size} leave a final block of "
                f"{x.shape[-1] % block_size}. Loop `for start in range(0, n, block_size)` and slice "
                f"`x[..., start:start + block_size]` (slicing past the end is fine).",
                _online_softmax_variant(x, block_size, lost_last=True),
            ),
        )
    return mistakes


def _check_online_softmax_blocks(candidate):
    """The candidate must not reduce over more than block_size entries at once."""
    # 5 blocks: stacking per-block results stays <= 8 wide
    x, block_size = torch.randn(3, 37, generator=generator(11)), 8
    for name, shape, _, _ in torch_calls(candidate, x, block_size):
        if name in REDUCTIONS and shape and shape[-1] > block_size:
            if shape[-1] == x.shape[-1]:
                raise Mistake(
                    f"{OS_WHOLE_ROW} ({name} of a tensor of shape {shape}): the result is right, but online "
                    f"softmax never looks at the whole row at once. Take max and sum of one block at a time "
                    f"and combine them with the running maximum and sum."
                )
            raise Mistake(
                f"{OS_WIDE_BLOCKS}: with block_size={block_size} you took {name} over {shape[-1]} entries at once. "
                f"Slice blocks of block_size entries: x[..., start:start + block_size]."
            )


@exercise(
    "online_softmax",
    solution=online_softmax,
    hints=[
        "Walk over the row in blocks of block_size entries and keep two numbers per row: the largest entry "
        "seen so far (m) and the sum of exp(x - m) over the entries seen so far (l). At the end, "
        "softmax = exp(x - m) / l.",
        "Start with m = -inf and l = 0 (shapes [..., 1]). For each block: m_new = max(m, block.amax(-1, keepdim=True)); "
        "the old l was computed with the old m, so it becomes l * exp(m - m_new).",
        "`l = l * torch.exp(m - m_new) + torch.exp(block - m_new).sum(dim=-1, keepdim=True); m = m_new`, "
        "for `start in range(0, n, block_size)` with `block = x[..., start:start + block_size]`.",
    ],
)
def check_online_softmax(candidate):
    for description, x, block_size in _online_softmax_cases():
        expected = torch.softmax(x.double(), dim=-1).to(x.dtype)  # the oracle: PyTorch's softmax
        got = call(candidate, x, block_size)
        expect_tensor(got, expected.shape, what=f"result for {description}")
        expect_same_dtype(got, x.dtype, "result", description)
        atol, rtol = _LOW_PRECISION_TOLERANCE.get(x.dtype, (1e-5, 1e-4))
        diagnose(
            got,
            expected,
            _online_softmax_mistakes(x, block_size),
            what="result",
            atol=atol,
            rtol=rtol,
            context=description,
            dtype=x.dtype,
            nonfinite_advice=f"{OS_OVERFLOW} or 0/0 happened. Subtract the running maximum (start it at -inf) "
            "before exp(), and rescale the sum when the maximum changes.",
        )
    _check_online_softmax_blocks(candidate)


# --------------------------------------------------------------------------- tiled_attention


def _attention_oracle(q, k, v):
    """softmax(q k^T / sqrt(d)) v in float64, in one piece: independent of any blockwise code."""
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    return (torch.softmax(scores, dim=-1) @ v.double()).to(q.dtype)


def _tiled_variant(
    q,
    k,
    v,
    block_size,
    rescale_sum=True,
    rescale_out=True,
    inverted=False,
    lost_last=False,
    scale="sqrt",
    use_max=True,
    normalise="end",
    per_block_softmax=False,
    max_start=float("-inf"),
    shared_max=False,
):
    """tiled attention with one planted mistake (normalise: 'end', 'each_block' or 'never')."""
    n_k, d = k.shape[-2], q.shape[-1]
    factor = {"sqrt": 1 / math.sqrt(d), "none": 1.0, "d": 1 / d}[scale]
    m = torch.full((*q.shape[:-1], 1), max_start, dtype=q.dtype)
    total = torch.zeros((*q.shape[:-1], 1), dtype=q.dtype)
    o = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype)
    stop = n_k - n_k % block_size if lost_last else n_k
    for start in range(0, stop, block_size):
        s = q @ k[..., start : start + block_size, :].transpose(-2, -1) * factor
        vb = v[..., start : start + block_size, :]
        if per_block_softmax:
            o = o + torch.softmax(s, dim=-1) @ vb
            continue
        block_max = s.amax() if shared_max else s.amax(dim=-1, keepdim=True)  # shared: one for all queries
        m_new = torch.maximum(m, block_max) if use_max else torch.zeros_like(m)
        r = torch.exp(m_new - m) if inverted else torch.exp(m - m_new)
        p = torch.exp(s - m_new)
        total_new = (total * r if rescale_sum else total) + p.sum(dim=-1, keepdim=True)
        o = (o * r if rescale_out else o) + p @ vb
        if normalise == "each_block":
            o = o / total_new
        total, m = total_new, m_new
    return o / total if normalise == "end" else o


def _tiled_cases():
    g = generator(5)

    def qkv(batch, n_q, n_k, d, d_v, scale=1.0):
        return (
            torch.randn(*batch, n_q, d, generator=g) * scale,
            torch.randn(*batch, n_k, d, generator=g) * scale,
            torch.randn(*batch, n_k, d_v, generator=g),
        )

    return [
        ("q, k, v [12, 8], block_size=4", *qkv((), 12, 12, 8, 8), 4),
        ("batched [2, 3, 10, 8], block_size=4 (the last block has 2 keys)", *qkv((2, 3), 10, 10, 8, 8), 4),
        ("cross-attention: q [2, 7, 6], k [2, 13, 6], v [2, 13, 5], block_size=5", *qkv((2,), 7, 13, 6, 5), 5),
        ("[3, 9, 16], block_size=32 (one block)", *qkv((3,), 9, 9, 16, 16), 32),
        ("[2, 5, 4], block_size=1", *qkv((2,), 5, 5, 4, 4), 1),
        ("[2, 2, 20, 8] with large inputs (q, k x 10), block_size=6", *qkv((2, 2), 20, 20, 8, 8, scale=10.0), 6),
        (
            "[2, 6, 4] with very negative scores (q > 0, k < 0: every score below -200), block_size=4",
            10 + 4 * torch.rand(2, 6, 4, generator=g),
            -10 - 4 * torch.rand(2, 10, 4, generator=g),
            torch.randn(2, 10, 3, generator=g),
            4,
        ),
        (
            "[3, 9, 8], block_size=4, queries of very different size (one sentence's q x 50, one's x -50)",
            torch.randn(3, 9, 8, generator=g) * torch.tensor([50.0, 1.0, -50.0])[:, None, None],
            torch.randn(3, 9, 8, generator=g),
            torch.randn(3, 9, 8, generator=g),
            4,
        ),
        ("float64 [2, 11, 8], block_size=4", *(t.double() for t in qkv((2,), 11, 11, 8, 8)), 4),
        ("float16 [2, 9, 8], block_size=4", *(t.half() for t in qkv((2,), 9, 9, 8, 8)), 4),
        ("bfloat16 [2, 10, 8], block_size=4", *(t.bfloat16() for t in qkv((2,), 10, 10, 8, 8)), 4),
    ]


def _tiled_mistakes(q, k, v, block_size):
    variant = _tiled_variant
    mistakes = [
        # first: on very negative scores the 0-start and no max at all both give NaN everywhere;
        # no max is already caught by the large inputs, so there the 0-start is the cause
        (
            f"{T_MAX_AT_ZERO}, not 0: when every score of a row is far below 0, the maximum stays at 0, every "
            f"exp(s - 0) underflows to 0 and the output is 0/0 = NaN.",
            variant(q, k, v, block_size, max_start=0.0),
        ),
        (
            f"{T_NO_RESCALE}: when a block raises the running maximum m, everything collected so far (the sum l "
            f"and the output o) was computed with the old m. Multiply both by exp(m_old - m_new) before adding "
            f"the new block.",
            variant(q, k, v, block_size, rescale_sum=False, rescale_out=False),
        ),
        (
            f"{T_NO_RESCALE_OUT}: the unnormalised output o = sum exp(s - m) v also depends on m; "
            f"multiply it by exp(m_old - m_new) too.",
            variant(q, k, v, block_size, rescale_out=False),
        ),
        (
            f"{T_NO_RESCALE_SUM}: multiply the running sum l by exp(m_old - m_new) as well, or the final "
            f"division uses a sum measured against a mix of maxima.",
            variant(q, k, v, block_size, rescale_sum=False),
        ),
        (
            f"your output is NaN everywhere, as when {T_INVERTED}: exp(m_new - m_old) is inf on the first block "
            f"(m_old = -inf), 0 * inf = NaN, and it grows the old sums when it should shrink them. "
            f"Use exp(m_old - m_new).",
            variant(q, k, v, block_size, inverted=True),
        ),
        (
            f"{T_NO_SCALE}: divide the scores q k^T by sqrt(d_k) = sqrt({q.shape[-1]}) as in lesson 02.",
            variant(q, k, v, block_size, scale="none"),
        ),
        (f"{T_SCALE_DK}: the scale is 1/sqrt(d_k) = 1/sqrt({q.shape[-1]}).", variant(q, k, v, block_size, scale="d")),
        (
            f"{T_DIVIDE_EACH}: the output kept from earlier blocks was already divided by the old sum, so dividing "
            f"again by the new one shrinks it too much. Keep o unnormalised and divide by l once, after the loop.",
            variant(q, k, v, block_size, normalise="each_block"),
        ),
        (
            f"{T_NO_FINAL_DIVIDE}: o = sum exp(s - m) v still has to be divided by l = sum exp(s - m) after the "
            f"loop, so the weights sum to 1.",
            variant(q, k, v, block_size, normalise="never"),
        ),
        (
            f"{T_PER_BLOCK_SOFTMAX}: a softmax per block makes each block's weights sum to 1, so the weights over "
            f"all keys sum to the number of blocks. Keep a running max and sum across blocks instead.",
            variant(q, k, v, block_size, per_block_softmax=True),
        ),
        (
            f"{T_OVERFLOW}: exp(scores) without subtracting a maximum is inf for scores above 88 in float32. "
            f"Keep the running maximum m and use exp(scores - m).",
            variant(q, k, v, block_size, use_max=False),
        ),
    ]
    if q.shape[-2] > 1:
        mistakes.append(
            (
                f"{T_SHARED_MAX} (`s.max()` without dim=-1, or a Python float): a query whose scores are far below "
                f"the largest score of the whole tensor gets exp(s - m) = 0 everywhere and 0/0 = NaN. Every query "
                f"needs its own running maximum, shape [..., L_q, 1]: s.amax(dim=-1, keepdim=True).",
                variant(q, k, v, block_size, shared_max=True),
            )
        )
    if k.shape[-2] % block_size:
        mistakes.insert(
            0,
            (
                f"{T_LOST_BLOCK}: {k.shape[-2]} keys in blocks of {block_size} leave a final block of "
                f"{k.shape[-2] % block_size}. Loop `for start in range(0, L_k, block_size)`; slicing "
                f"`k[..., start:start + block_size, :]` past the end is fine.",
                variant(q, k, v, block_size, lost_last=True),
            ),
        )
    return mistakes


def _check_tiled_blocks(candidate):
    """The candidate must never hold a tensor as wide as all keys, nor blocks wider than block_size."""
    g = generator(13)
    n_q, n_k, d, d_v, block_size = 40, 100, 6, 5, 16  # distinct sizes, so every axis can be recognised
    q, k, v = (
        torch.randn(2, 3, n_q, d, generator=g),
        torch.randn(2, 3, n_k, d, generator=g),
        torch.randn(2, 3, n_k, d_v, generator=g),
    )
    for name, _, shapes, _ in torch_calls(candidate, q, k, v, block_size):
        if "scaled_dot_product_attention" in name:
            raise Mistake(
                f"{T_BUILTIN}: it is exact and fast, but the exercise is to write the blockwise loop yourself."
            )
        for shape in shapes:
            if len(shape) < 2:
                continue
            width = None
            if shape[-2] == n_q and shape[-1] not in (d, d_v, 1):
                width = shape[-1]
            elif shape[-1] == n_q and shape[-2] not in (d, d_v, 1):
                width = shape[-2]
            full = width == n_k or math.prod(shape) >= 6 * n_q * n_k
            if full:
                raise Mistake(
                    f"{T_FULL_MATRIX} (a tensor of shape {shape} came out of {name}, with L_q={n_q}, "
                    f"L_k={n_k}): the result is right, but the point is never to hold all the scores at once. "
                    f"Compute the scores of one block of keys at a time, q @ k_block^T, and fold them into "
                    f"the running max, sum and output."
                )
            if width is not None and width > block_size:
                raise Mistake(
                    f"{T_WIDE_BLOCKS}: with block_size={block_size} a block of scores of shape {shape} came out "
                    f"of {name}. Slice k[..., start:start + block_size, :] and v the same way."
                )


@exercise(
    "tiled_attention",
    solution=tiled_attention,
    hints=[
        "Online softmax, one row per query: walk over the keys in blocks, keep per query a running max m, a "
        "running sum l and an unnormalised output o; at the end return o / l.",
        "Shapes: m and l are [..., L_q, 1] (m starts at -inf, l at 0), o is [..., L_q, d_v] (zeros). For a block: "
        "s = q @ k_block.transpose(-2, -1) / sqrt(d_k); m_new = max(m, s.amax(-1, keepdim=True)); p = exp(s - m_new).",
        "r = exp(m - m_new); l = l * r + p.sum(-1, keepdim=True); o = o * r + p @ v_block; m = m_new. "
        "Loop `for start in range(0, L_k, block_size)`; return o / l.",
    ],
)
def check_tiled_attention(candidate):
    for description, q, k, v, block_size in _tiled_cases():
        expected = _attention_oracle(q, k, v)
        got = call(candidate, q, k, v, block_size)
        expect_tensor(got, expected.shape, what=f"output for {description}")
        expect_same_dtype(got, q.dtype, "output", description)
        # large scores: float32 rounding of scores ~100 moves the weights by ~1e-5 relative
        atol, rtol = _LOW_PRECISION_TOLERANCE.get(q.dtype, (1e-4 if q.abs().max() > 10 else 1e-5, 1e-4))
        diagnose(
            got,
            expected,
            _tiled_mistakes(q, k, v, block_size),
            atol=atol,
            rtol=rtol,
            context=description,
            dtype=q.dtype,
            nonfinite_advice=f"{T_OVERFLOW} or 0/0 happened. Subtract the running maximum (start it at -inf, "
            "update it to max(m, block max)) before exp().",
        )
    _check_tiled_blocks(candidate)
