"""Lesson 09's Triton exercise: ``flash_forward_kernel``, the inner loop of FlashAttention's forward kernel.

The learner's kernel is a ``@triton.jit`` function with the signature of
``course_utils.flash_triton.flash_forward_kernel``. The checker launches it with
``run_forward_kernel`` under Triton's interpreter (on the CPU, also on a GPU machine:
the interpreter runs the kernel's Python code, so errors point at the learner's line)
on small ragged sizes, and compares the output and the logsumexp with dense attention
in float64.

Each known mistake is replayed here in PyTorch, block by block as the kernel runs
(``_variant``), and named when the learner's numbers match it.

A load past the end of a tensor is a bug the numbers may hide (a masked score never
counts, whatever was loaded). So the checker places each tensor the kernel gets in the
middle of a larger buffer filled with NaN (``_guarded``), and watches the addresses of
every tl.load and tl.store of the interpreter (``_MemoryWatch``): a load of K past the
last key, into another head's rows, or outside the tensors, is named every time.
"""

import contextlib
import math
import warnings

import numpy as np
import torch

from course_utils import flash_triton
from course_utils.exercises import exercise
from course_utils.exercises.checking import (
    Mistake,
    NotAttempted,
    diagnose,
    explain_exception,
    generator,
    raised_in_learner_code,
)

# Distinctive phrases, one per mistake (the tests look for them).
NO_TRITON = "Triton is not installed"
NOT_A_KERNEL = "not a Triton kernel"
NO_RESCALE_ACC = "acc was not rescaled"
NO_RESCALE_L = "l_i was not rescaled"
NO_RESCALE = "neither acc nor l_i was rescaled"
NOT_NORMALISED = "the output was not divided by l_i"
MAX_NOT_KEPT = "m_i was never updated"
EXP_OF_LOG2 = "tl.exp of scores in log2 units"
EXP2_OF_NATURAL = "tl.exp2 of scores in natural units"
UNSCALED = "the scores were not scaled"
PADDING_KEYS = "the padding keys of the ragged last block got weight"
CAUSAL_STRICT = "causal mask off by one: a query does not see its own key"
CAUSAL_NEXT = "causal mask off by one: a query sees the next key"
NOT_CAUSAL = "causal=True, but your kernel did not mask the future keys"
OVERFLOW = "exp2 overflowed"
LSE_M_ONLY = "the logsumexp is only the running max"
LSE_LOG2 = "the logsumexp is in log2 units"
LSE_MIXED = "m_i is in log2 units but you added a natural log"
LSE_NATURAL_LOOP = "your loop works in natural units"
LOAD_PAST_LAST = "reads past the last"
LOAD_ONE_PAST = "one row too many"
HEAD_OFFSET = "rows of another (batch, head)"
OUTSIDE = "outside every tensor"
STORE_PAST_LAST = "writes past the last"
PADDING_ONE_MORE = "your score mask lets key L_k through"
CAUSAL_REVERSED = "your causal mask is reversed"

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


def _cases():
    """(description, q, k, v, causal, block_m, block_n): ragged sizes, float32, a few heads."""
    g = generator(9)

    def qkv(heads, n_q, n_k, d, d_v, scale=1.0):
        return [torch.randn(heads, n, width, generator=g) * scale for n, width in ((n_q, d), (n_k, d), (n_k, d_v))]

    return [
        ("L_q=37, L_k=53, d=16, 2 heads, not causal", *qkv(2, 37, 53, 16, 16), False, 16, 16),
        ("L_q=37, L_k=53, d=16, 2 heads, causal", *qkv(2, 37, 53, 16, 16), True, 16, 16),
        ("L_q=53, L_k=37, d=16, causal (more queries than keys)", *qkv(1, 53, 37, 16, 16), True, 16, 16),
        ("L_q=L_k=40, d=12, d_v=20, 2 heads, causal, BLOCK_M=32, BLOCK_N=16", *qkv(2, 40, 40, 12, 20), True, 32, 16),
        ("L_q=20, L_k=45, d=16, large inputs (scores near 200)", *qkv(1, 20, 45, 16, 16, scale=8.0), False, 16, 16),
    ]


def _reference(q, k, v, causal):
    """Dense attention in float64: (output, natural-log logsumexp)."""
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        allowed = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()  # query i sees keys 0..i
        scores = scores.masked_fill(~allowed, float("-inf"))
    return (torch.softmax(scores, -1) @ v.double()).float(), torch.logsumexp(scores, -1).float()


def _variant(
    q,
    k,
    v,
    causal,
    block_m,
    block_n,
    *,
    rescale_acc=True,
    rescale_l=True,
    normalise=True,
    keep_max=True,
    exp=torch.exp2,
    score_factor=LOG2E,
    mask_padding=True,
    causal_offset=0,
    causal_mask=True,
    causal_reversed=False,
    padding_limit=0,
    lse="natural",
):
    """The kernel's arithmetic, block by block in float64, with one planted mistake: (output, logsumexp)."""
    L_q, L_k = q.shape[-2], k.shape[-2]
    n_q, n_k = math.ceil(L_q / block_m) * block_m, math.ceil(L_k / block_n) * block_n
    # rows and keys past the end read as 0, as the kernel's masked loads do
    qp = torch.nn.functional.pad(q.double(), (0, 0, 0, n_q - L_q))
    kp = torch.nn.functional.pad(k.double(), (0, 0, 0, n_k - L_k))
    vp = torch.nn.functional.pad(v.double(), (0, 0, 0, n_k - L_k))
    factor = score_factor / math.sqrt(q.shape[-1])
    outs, lses = [], []
    for start_m in range(0, L_q, block_m):
        rows = torch.arange(start_m, start_m + block_m)
        m_i = qp.new_full((q.shape[0], block_m), float("-inf"))
        l_i = qp.new_zeros((q.shape[0], block_m))
        acc = qp.new_zeros((q.shape[0], block_m, v.shape[-1]))
        for start_n in range(0, min(L_k, start_m + block_m) if causal else L_k, block_n):
            keys = torch.arange(start_n, start_n + block_n)
            s = qp[:, rows] @ kp[:, keys].transpose(-2, -1) * factor
            allowed = (
                (keys[None, :] < L_k + padding_limit) if mask_padding else torch.ones(1, block_n, dtype=torch.bool)
            )
            if causal and causal_mask:
                if causal_reversed:
                    allowed = allowed & (keys[None, :] >= rows[:, None])
                else:
                    allowed = allowed & (keys[None, :] <= rows[:, None] + causal_offset)
            s = s.masked_fill(~allowed, float("-inf"))
            m_new = torch.maximum(m_i, s.amax(-1))
            alpha = exp(m_i - m_new)
            p = exp(s - m_new[..., None])
            l_i = (l_i * alpha if rescale_l else l_i) + p.sum(-1)
            acc = (acc * alpha[..., None] if rescale_acc else acc) + p @ vp[:, keys]
            m_i = m_new if keep_max else m_i
        outs.append((acc / l_i[..., None] if normalise else acc)[:, : L_q - start_m])
        log_sum = {
            "natural": (m_i + torch.log2(l_i)) * LN2,
            "m only": m_i * LN2,
            "m only, log2": m_i,
            "log2": m_i + torch.log2(l_i),
            "mixed": m_i + torch.log(l_i),
        }[lse]
        lses.append(log_sum[:, : L_q - start_m])
    return torch.cat(outs, 1).float(), torch.cat(lses, 1).float()


def _output_mistakes(case):
    description, q, k, v, causal, block_m, block_n = case
    where = f"({description})"

    def out(**mistake):
        return _variant(q, k, v, causal, block_m, block_n, **mistake)[0]

    mistakes = [
        (
            f"{NO_RESCALE_ACC} by alpha = exp2(m_i - m_new) when the running max grew: what acc summed was "
            f"measured against the old max. `acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)` {where}",
            out(rescale_acc=False),
        ),
        (
            f"{NO_RESCALE_L} by alpha = exp2(m_i - m_new) when the running max grew: "
            f"`l_i = l_i * alpha + tl.sum(p, 1)` {where}",
            out(rescale_l=False),
        ),
        (
            f"{NO_RESCALE} by alpha = exp2(m_i - m_new) when the running max grew: both sums were measured "
            f"against the old max {where}",
            out(rescale_acc=False, rescale_l=False),
        ),
        (
            f"{NOT_NORMALISED}: acc holds sum(p * v) with unnormalised weights; `out = acc / l_i[:, None]` {where}",
            out(normalise=False),
        ),
        (
            f"{MAX_NOT_KEPT} (`m_i = m_new` at the end of the loop is missing): alpha = exp2(-inf) = 0 wipes acc "
            f"at every block, so only the last key block counts {where}",
            out(keep_max=False),
        ),
        (
            f"{EXP_OF_LOG2}: qk_scale already holds log2(e), so the scores are in log2 units and need tl.exp2 "
            f"(for alpha and p), not tl.exp {where}",
            out(exp=torch.exp),
        ),
        (
            f"{EXP2_OF_NATURAL}: with tl.exp2, multiply the scores by qk_scale = scale * log2(e), not by scale {where}",
            out(score_factor=1.0),
        ),
        (
            f"{UNSCALED}: multiply tl.dot(q, k_t) by qk_scale (1/sqrt(d) and log2(e) in one number) {where}",
            out(score_factor=math.sqrt(q.shape[-1])),
        ),
        (
            f"{PADDING_KEYS}: keys past L_k are loaded as 0, so their score is 0, not -inf. Mask them: "
            f"`tl.where(keys[None, :] < L_k, s, float('-inf'))` {where}",
            out(mask_padding=False),
        ),
        (
            f"{PADDING_ONE_MORE} (`keys <= L_k` where it should be `keys < L_k`): keys are numbered 0..L_k - 1, "
            f"so key L_k is the first padding key, loaded as 0 with score 0. `allowed = keys[None, :] < L_k` "
            f"{where}",
            out(padding_limit=1),
        ),
    ]
    if causal:
        mistakes += [
            (
                f"{CAUSAL_STRICT} (`<` where it should be `<=`): query i sees keys 0..i, itself included {where}",
                out(causal_offset=-1),
            ),
            (
                f"{CAUSAL_NEXT}: query i sees keys 0..i, so `keys[None, :] <= rows[:, None]` {where}",
                out(causal_offset=1),
            ),
            (
                f"{NOT_CAUSAL} inside the blocks it computes (skipping the later blocks is not enough): "
                f"`allowed = allowed & (keys[None, :] <= rows[:, None])` {where}",
                out(causal_mask=False),
            ),
            (
                f"{CAUSAL_REVERSED} (`keys >= rows`): query i must see keys 0..i, its past, not i and after. Rows "
                f"that see no key of a block get max = -inf and exp2(-inf - -inf) = NaN. "
                f"`allowed = allowed & (keys[None, :] <= rows[:, None])` {where}",
                out(causal_reversed=True),
            ),
        ]
    return mistakes


def _lse_mistakes(case):
    description, q, k, v, causal, block_m, block_n = case
    where = f"({description})"

    def lse(form, **units):
        return _variant(q, k, v, causal, block_m, block_n, lse=form, **units)[1]

    tip = "the logsumexp is m_i + log2(l_i) in log2 units; times ln(2) it is the natural log"
    return [
        (f"{LSE_M_ONLY} (times ln 2): add log2(l_i) first; {tip} {where}", lse("m only")),
        (f"{LSE_M_ONLY} (in log2 units): {tip} {where}", lse("m only, log2")),
        (f"{LSE_LOG2} (m_i + log2(l_i)): multiply by ln(2) = 0.6931... for the natural log {where}", lse("log2")),
        (f"{LSE_MIXED} (m_i + log(l_i)): (m_i + tl.log2(l_i)) * ln(2) {where}", lse("mixed")),
        (
            f"{LSE_NATURAL_LOOP} (scores times scale, tl.exp), so the output is right, but the lines after the "
            f"loop read m_i in log2 units: use qk_scale and tl.exp2 in the loop (or lse = m_i + tl.log(l_i)) {where}",
            lse("natural", exp=torch.exp, score_factor=1.0),
        ),
    ]


# --------------------------------------------------------------------------- guarded memory

STORE_GUARD_VALUE = 7777.0  # what the guards around Out and LSE hold: a store there changes it


def _guarded(x, fill=float("nan")):
    """A copy of x in the middle of a buffer three times its size, the rest filled with ``fill``:
    a load just past either end (or one head too far) reads NaN, not another tensor's numbers."""
    buffer = torch.full((3 * x.numel(),), fill, dtype=x.dtype)
    inner = buffer[x.numel() : 2 * x.numel()].view(x.shape)
    inner.copy_(x)
    return inner


class _Tensor:
    """One argument of the kernel: where it lies in memory, and what one (batch, head) of it is."""

    def __init__(self, name, t, what_row, block, bound):
        self.name, self.t, self.what_row, self.block, self.bound = name, t, what_row, block, bound
        self.rows, self.width = t.shape[-2] if t.dim() == 3 else t.shape[-1], t.shape[-1] if t.dim() == 3 else 1
        self.start, self.size = t.data_ptr(), t.element_size()
        self.end = self.start + t.numel() * self.size
        buffer = t.untyped_storage()
        self.buffer_start, self.buffer_end = buffer.data_ptr(), buffer.data_ptr() + buffer.nbytes()

    def holds(self, address):
        return self.buffer_start <= address < self.buffer_end


class _MemoryWatch:
    """Watches every tl.load and tl.store of the interpreter: the first one that touches memory outside
    the (batch, head) slice of its program's tensor is kept as (kind, tensor, head, rows) in ``wrong``."""

    def __init__(self, tensors):
        self.tensors, self.wrong = tensors, None

    @contextlib.contextmanager
    def watching(self):
        from triton.runtime import interpreter

        builder = interpreter.interpreter_builder
        load, store = builder.create_masked_load, builder.create_masked_store

        def watched_load(ptrs, mask, *rest):
            self._look("load", builder.grid_idx, ptrs, mask)
            return load(ptrs, mask, *rest)

        def watched_store(ptrs, value, mask, *rest):
            self._look("store", builder.grid_idx, ptrs, mask)
            return store(ptrs, value, mask, *rest)

        builder.create_masked_load, builder.create_masked_store = watched_load, watched_store
        try:
            yield self
        finally:
            del builder.create_masked_load, builder.create_masked_store  # the class's methods again

    def _look(self, kind, grid_idx, ptrs, mask):
        if self.wrong is not None:
            return
        addresses = np.asarray(ptrs.data, dtype=np.uint64)
        active = np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)
        addresses = addresses[active].astype(np.int64)
        if addresses.size == 0:
            return
        tensor = next((t for t in self.tensors if t.holds(int(addresses[0]))), None)
        if tensor is None:
            self.wrong = (kind, None, grid_idx[1], None)
            return
        head = grid_idx[1]
        head_start = tensor.start + head * tensor.rows * tensor.width * tensor.size
        rows = (addresses - head_start) // (tensor.width * tensor.size)  # rows of this program's head
        outside = np.unique(rows[(rows < 0) | (rows >= tensor.rows)])
        if outside.size or not all(tensor.holds(int(a)) for a in (addresses.min(), addresses.max())):
            self.wrong = (kind, tensor, head, outside)


def _memory_mistake(wrong, where):
    """The message for the first load or store outside its program's slice."""
    kind, tensor, head, rows = wrong
    if tensor is None:
        return (
            f"your {kind} reads memory {OUTSIDE} the kernel was given (program for (batch, head) {head}): "
            f"a pointer is built from the wrong base or offsets {where}"
        )
    L, name = tensor.rows, tensor.name
    padded = math.ceil(L / tensor.block) * tensor.block
    past_end = rows.size and rows.min() >= L and rows.max() < padded
    if kind == "store":
        return (
            f"your store to {name} {STORE_PAST_LAST} {tensor.what_row} (rows {int(rows.min())}..{int(rows.max())} "
            f"of (batch, head) {head}, which has {L}): mask it with `{tensor.bound}` {where}"
        )
    if past_end and rows.max() == L and padded > L + 1:
        return (
            f"the mask of your load of {name} lets {LOAD_ONE_PAST} through: it reads row {L}, one past the last "
            f"{tensor.what_row} ({tensor.what_row}s are numbered 0..{L - 1}). Use `{tensor.bound}`, not `<=` {where}"
        )
    if past_end:
        return (
            f"your load of {name} {LOAD_PAST_LAST} {tensor.what_row}: the ragged last block reads rows "
            f"{int(rows.min())}..{int(rows.max())} of a (batch, head) that has {L}, memory that belongs to the next "
            f"head or to nothing (on a GPU: garbage or a crash). Mask it with `{tensor.bound}` "
            f"(tl.load(..., mask=..., other=0.0)) {where}"
        )
    return (
        f"your load of {name} reads {HEAD_OFFSET} (the program for (batch, head) {head} read rows "
        f"{int(rows.min())}..{int(rows.max())} of its own {L}): each (batch, head) of {name} is {L} x "
        f"{tensor.width} numbers, so its rows start at bh * {'L_k' if name in 'KV' else 'L_q'} * "
        f"{'D_V' if name == 'V' else 'D'} {where}"
    )


def _launch(kernel, case):
    """The kernel run on guarded copies of the case's tensors: (output, logsumexp, first wrong access)."""
    description, q, k, v, causal, block_m, block_n = case
    L_q, d, L_k, d_v = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
    D, D_V = flash_triton._padded(d), flash_triton._padded(d_v)
    q3, k3, v3 = (_guarded(flash_triton._rows(x, width)) for x, width in ((q, D), (k, D), (v, D_V)))
    out = _guarded(torch.full((q3.shape[0], L_q, D_V), float("nan")), STORE_GUARD_VALUE)
    lse = _guarded(torch.full((q3.shape[0], L_q), float("nan")), STORE_GUARD_VALUE)
    watch = _MemoryWatch(
        [
            _Tensor("Q", q3, "query row", block_m, "rows[:, None] < L_q"),
            _Tensor("K", k3, "key", block_n, "keys[None, :] < L_k"),
            _Tensor("V", v3, "key", block_n, "keys[:, None] < L_k"),
            _Tensor("Out", out, "query row", block_m, "rows[:, None] < L_q"),
            _Tensor("LSE", lse, "query row", block_m, "rows < L_q"),
        ]
    )
    grid = (math.ceil(L_q / block_m), q3.shape[0])
    helpers = flash_triton._helpers_interpreted() if not flash_triton.INTERPRETED else contextlib.nullcontext()
    with helpers, watch.watching():
        kernel[grid](
            q3, k3, v3, out, lse, L_q, L_k, 1.0 / math.sqrt(d),
            CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, D=D, D_V=D_V,
        )  # fmt: skip
    return out[..., :d_v].reshape(*q.shape[:-1], d_v), lse.reshape(q.shape[:-1]), watch.wrong


def _run(kernel, case):
    """The kernel's (output, logsumexp) for one case; learner errors become NotAttempted or a Mistake,
    and so does a load or store outside its program's slice of a tensor."""
    description, q, k, v, causal, block_m, block_n = case
    try:
        with warnings.catch_warnings():  # numpy's "invalid value" warnings: a NaN output is named below
            warnings.simplefilter("ignore", RuntimeWarning)
            out, lse, wrong = _launch(kernel, case)
    except Exception as exc:
        chain = [exc]  # the interpreter wraps the kernel's exception in InterpreterErrors
        while chain[-1].__cause__ is not None:
            chain.append(chain[-1].__cause__)
        cause = chain[-1]
        if isinstance(cause, NotImplementedError):
            raise NotAttempted() from None
        if not any(raised_in_learner_code(e) for e in chain):
            raise  # the course's own code failed: check() reports a bug in the course
        advice = (
            "Inside the kernel q is [BLOCK_M, D], k_t [D, BLOCK_N], v [BLOCK_N, D_V]; under the interpreter "
            "`print(x.shape)` in the kernel shows a block's shape."
        )
        raise Mistake(f"{explain_exception(cause, description)}\n{advice}") from None
    if wrong is not None:
        raise Mistake(_memory_mistake(wrong, f"({description})"))
    return out, lse


def _as_kernel(candidate):
    if not flash_triton.TRITON_AVAILABLE:
        raise Mistake(
            f"this check cannot run on this machine (not a fault in your kernel). {flash_triton.TRITON_MISSING}"
        )
    if not callable(getattr(candidate, "__getitem__", None)) or not hasattr(candidate, "fn"):
        raise Mistake(
            f"your {type(candidate).__name__} is {NOT_A_KERNEL}: pass the @triton.jit function itself, "
            f'check("flash_forward_kernel", flash_forward_kernel), and keep @triton.jit on the line above its def.'
        )
    return flash_triton.interpreted(candidate)  # the checker runs it on the CPU, also on a GPU machine


@exercise(
    "flash_forward_kernel",
    solution=flash_triton.flash_forward_kernel,
    hints=[
        "Per key block: `keys = start_n + tl.arange(0, BLOCK_N)`; load k_t [D, BLOCK_N] and v [BLOCK_N, D_V] as q "
        "is loaded (with keys[None, :] and dims[:, None] for k_t), masked by `keys < L_k` with other=0.0; scores "
        "`s = tl.dot(q, k_t) * qk_scale`; set the scores of keys that may not be seen to -inf with tl.where "
        "(padding keys: keys >= L_k; causal: keys > rows).",
        "m_new = tl.maximum(m_i, tl.max(s, 1)); alpha = tl.exp2(m_i - m_new); p = tl.exp2(s - m_new[:, None]); "
        "then rescale both running sums by alpha before adding this block, and set m_i = m_new.",
        "`l_i = l_i * alpha + tl.sum(p, 1)`, `acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)`, `m_i = m_new`; "
        "the lines after the loop (normalising, the natural-log logsumexp) are given.",
    ],
)
def check_flash_forward_kernel(candidate):
    kernel = _as_kernel(candidate)
    for case in _cases():
        description, q, k, v, causal, block_m, block_n = case
        out, lse = _run(kernel, case)
        expected_out, expected_lse = _reference(q, k, v, causal)
        diagnose(
            out,
            expected_out,
            _output_mistakes(case),
            what="output",
            context=description,
            nonfinite_advice=f"{OVERFLOW} or 0/0 happened. Subtract the running max before exp2 "
            "(p = tl.exp2(s - m_new[:, None]), m_new = tl.maximum(m_i, tl.max(s, 1))), and start m_i at -inf.",
        )
        diagnose(lse, expected_lse, _lse_mistakes(case), what="logsumexp", context=description)
