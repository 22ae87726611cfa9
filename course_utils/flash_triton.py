"""FlashAttention as Triton kernels (lesson 09).

- ``flash_forward_kernel``: the forward kernel. One program computes one block of
  BLOCK_M query rows of one (batch, head): it walks over the key blocks with an online
  softmax and writes the output rows and their natural-log logsumexp.
- ``run_forward_kernel``: launches any kernel with that signature (the exercise's
  kernel too) on q, k, v of shape [..., L, d].
- ``flash_backward_dkdv_kernel``, ``flash_backward_dq_kernel``: the backward pass, which
  rebuilds each block of probabilities from the logsumexp (as course_utils.flash does).
- ``flash_attention_triton_forward``, ``flash_attention_triton_backward``: the kernels as
  functions; ``flash_attention_triton``: both as one differentiable autograd.Function.

Where it runs. With a CUDA GPU the kernel is compiled. Without one, this module sets
TRITON_INTERPRET=1 on import, before any kernel is defined: ``triton.jit`` reads it when
it decorates a function, so the kernels here, and any defined later (in a notebook cell),
run under Triton's interpreter. The interpreter executes the kernel's Python code once per
program, each tl operation as a numpy operation on the CPU. It gives the same numbers as
the GPU up to rounding, but:
- speed: each (query block, key block) step costs a few milliseconds of Python and numpy
  overhead, whatever the block size (one head, n = 1024, d = 64 on a 2-core CPU: about
  1 s with 64 x 64 blocks, 3.4 s with 32 x 32, where PyTorch's CPU attention takes about
  10 ms); its timings say nothing about GPU speed;
- tl.dot is a plain float32 numpy matmul; on a GPU, tl.dot of float32 inputs uses
  TF32 tensor cores by default (a 10-bit mantissa, errors near 1e-3), of bfloat16 inputs
  bfloat16 products with float32 sums;
- numpy has no bfloat16: the interpreter stores it as 16-bit integers and its tl.dot
  multiplies those integers (wrong by orders of magnitude), so bfloat16 is refused there;
- it cannot show what makes a kernel fast or slow: memory coalescing, shared memory,
  register pressure, warps, pipelining; nor whether the compiler accepts the kernel
  (the tests compile it for an sm_90 GPU, which needs no GPU);
- it does not catch an unmasked load past the end of a tensor: it silently reads whatever
  lies in memory there (a GPU usually does not catch it either).

Triton has no wheel for macOS or Windows: then ``TRITON_AVAILABLE`` is False, the
kernels are still defined (as plain functions, never run), and running one raises
an error that says so.
"""

import contextlib
import math
import os
import sys

import torch

__all__ = [
    "TRITON_AVAILABLE",
    "INTERPRETED",
    "TRITON_MISSING",
    "flash_forward_kernel",
    "run_forward_kernel",
    "flash_backward_dkdv_kernel",
    "flash_backward_dq_kernel",
    "flash_attention_triton_forward",
    "flash_attention_triton_backward",
    "flash_attention_triton",
    "interpreted",
    "default_block_sizes",
    "triton",
    "tl",
]


def _forget_triton_made_for_compiling():
    """triton.language's own helpers (tl.max, tl.sum, ...) are @triton.jit functions made when triton is
    first imported. If something imported triton before TRITON_INTERPRET was set, they were made for the
    compiler and the interpreter cannot call them: import triton afresh (its C++ core, triton._C, stays)."""
    standard = sys.modules.get("triton.language.standard")
    if standard is not None and type(standard.max).__name__ == "JITFunction":
        for name in [n for n in sys.modules if n.partition(".")[0] == "triton" and not n.startswith("triton._C")]:
            del sys.modules[name]


if not torch.cuda.is_available():
    # Must happen before the first @triton.jit below (and before any in a notebook).
    os.environ["TRITON_INTERPRET"] = "1"
    _forget_triton_made_for_compiling()

try:
    import triton
    import triton.language as tl

    TRITON_AVAILABLE = True
except ImportError:  # no Triton wheel for this platform (macOS, Windows)
    TRITON_AVAILABLE = False

    class _Unavailable:
        """Stands in for triton and triton.language: kernels can be defined, never run."""

        constexpr = "constexpr"  # used only as an annotation

        @staticmethod
        def jit(fn):
            return fn

    triton = tl = _Unavailable()

INTERPRETED = TRITON_AVAILABLE and os.environ.get("TRITON_INTERPRET") == "1"
TRITON_MISSING = (
    "Triton is not installed (it has wheels for Linux only): the Triton kernels of lesson 09 cannot run "
    "here. Everything else in the lesson works; on Linux, `pip install triton` (make install does it)."
)

DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def flash_forward_kernel(
    Q,  # [BH, L_q, D] queries, contiguous (D: the head dimension padded to a power of two)
    K,  # [BH, L_k, D] keys
    V,  # [BH, L_k, D_V] values
    Out,  # [BH, L_q, D_V] output (written here)
    LSE,  # [BH, L_q] float32 natural-log logsumexp of each query's scores (written here)
    L_q,
    L_k,
    scale,  # 1 / sqrt(d) for the real d
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    D: tl.constexpr,
    D_V: tl.constexpr,
):
    # Which block of query rows, of which (batch, head), this program computes.
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    rows = start_m + tl.arange(0, BLOCK_M)  # query positions of this block
    dims = tl.arange(0, D)
    dims_v = tl.arange(0, D_V)

    # Load the query block once; rows past L_q (the ragged last block) read as 0.
    q = tl.load(Q + bh * L_q * D + rows[:, None] * D + dims[None, :], mask=rows[:, None] < L_q, other=0.0)

    # Online softmax state of each row, in log2 units (exp2 is the GPU's fast exponential).
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")  # running max of the scores
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum of exp2(score - m_i)
    acc = tl.zeros([BLOCK_M, D_V], dtype=tl.float32)  # running sum of exp2(score - m_i) * v
    qk_scale = scale * 1.4426950408889634  # scores in log2 units: exp(x) = exp2(x * log2(e))

    # Causal: query i sees keys 0..i, so key blocks after this block's last row are all
    # masked: stop before them (block skipping).
    end_n = L_k
    if CAUSAL:
        end_n = tl.minimum(L_k, start_m + BLOCK_M)

    for start_n in range(0, end_n, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        # 1. The key block, loaded transposed [D, BLOCK_N], and the value block [BLOCK_N, D_V];
        #    keys past L_k (the ragged last block) read as 0.
        k_t = tl.load(K + bh * L_k * D + keys[None, :] * D + dims[:, None], mask=keys[None, :] < L_k, other=0.0)
        v = tl.load(V + bh * L_k * D_V + keys[:, None] * D_V + dims_v[None, :], mask=keys[:, None] < L_k, other=0.0)
        # 2. Scores of this block; padding keys (and, if causal, future keys) get -inf.
        s = tl.dot(q, k_t) * qk_scale
        allowed = keys[None, :] < L_k
        if CAUSAL:
            allowed = allowed & (keys[None, :] <= rows[:, None])
        s = tl.where(allowed, s, float("-inf"))
        # 3. New running max; what was summed against the old max is rescaled by exp2(m_i - m_new).
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        # 4. Accumulate the block.
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new

    # 5. Normalise, and turn the log2-unit logsumexp m_i + log2(l_i) into a natural log.
    out = acc / l_i[:, None]
    lse = (m_i + tl.log2(l_i)) * 0.6931471805599453

    tl.store(
        Out + bh * L_q * D_V + rows[:, None] * D_V + dims_v[None, :],
        out.to(Out.dtype.element_ty),
        mask=rows[:, None] < L_q,
    )
    tl.store(LSE + bh * L_q + rows, lse, mask=rows < L_q)


def _readable(kernel):
    """inspect (and so show_solution) expects a function: point it at the kernel's Python code."""
    kernel.__wrapped__, kernel.__module__, kernel.__qualname__ = kernel.fn, kernel.fn.__module__, kernel.fn.__qualname__


if TRITON_AVAILABLE:
    _readable(flash_forward_kernel)


# --------------------------------------------------------------------------- launching


def _require_triton():
    if not TRITON_AVAILABLE:
        raise RuntimeError(TRITON_MISSING)


@contextlib.contextmanager
def _helpers_interpreted():
    """Where triton was imported for the compiler (a GPU machine), its own @triton.jit helpers (tl.max,
    tl.sum, ...) raise when called outside a compiled kernel: let an interpreted kernel run them interpreted."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    original = JITFunction.__call__
    JITFunction.__call__ = lambda self, *args, **kwargs: InterpretedFunction(self.fn)(*args, **kwargs)
    try:
        yield
    finally:
        JITFunction.__call__ = original


def interpreted(kernel):
    """The kernel as Triton's interpreter runs it (on the CPU), whether or not it was compiled for a GPU."""
    _require_triton()
    from triton.runtime.interpreter import InterpretedFunction

    if isinstance(kernel, InterpretedFunction):
        return kernel
    return InterpretedFunction(getattr(kernel, "fn", kernel))


def _is_interpreted(kernel):
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(kernel, InterpretedFunction)


def _power_of_two_block(value, name):
    # tl.arange needs a power of two; every block size is the inner dimension of one of the kernels'
    # tl.dot products, which on an NVIDIA GPU must be at least 16 for float16 and bfloat16 inputs.
    if isinstance(value, bool) or not isinstance(value, int) or value < 16 or value & (value - 1):
        raise ValueError(f"{name} must be a power of two >= 16 (16, 32, 64, 128), got {value!r}")
    return value


def _padded(d):
    """The head dimension rounded up to a power of two >= 16 (for tl.arange and tl.dot, as block sizes)."""
    return max(16, 1 << (d - 1).bit_length())


def _check_inputs(kernel, q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor [..., seq_len, d], got {type(t).__name__}")
        if t.dim() < 2 or t.shape[-2] == 0 or t.shape[-1] == 0:
            raise ValueError(f"{name} must have shape [..., seq_len, d] with seq_len, d >= 1, got {tuple(t.shape)}")
    if not q.dtype == k.dtype == v.dtype or q.dtype not in DTYPES:
        raise TypeError(
            f"q, k and v must share one dtype, float16, bfloat16 or float32 (the kernels keep their running sums "
            f"in float32; flash.flash_attention takes float64), got {q.dtype}, {k.dtype} and {v.dtype}"
        )
    if q.dtype == torch.bfloat16 and _is_interpreted(kernel):
        raise TypeError(
            "bfloat16 cannot run under Triton's interpreter (numpy has no bfloat16, and the interpreter's tl.dot "
            "multiplies its bits as integers): use float32 or float16 on the CPU, bfloat16 on a GPU"
        )
    if not q.device == k.device == v.device:
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device} and {v.device}")
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2]:
        raise ValueError(
            f"q, k and v must have the same leading (batch, head) shape, got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same d, got q {tuple(q.shape)} and k {tuple(k.shape)}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same L_k, got k {tuple(k.shape)} and v {tuple(v.shape)}")
    if _is_interpreted(kernel):
        return
    if not torch.cuda.is_available():
        raise ValueError(
            "this kernel was made for Triton's compiler, but this machine has no CUDA GPU: import "
            "course_utils.flash_triton before triton (it switches on the interpreter), or use interpreted(kernel)"
        )
    if q.device.type != "cuda":
        raise ValueError(
            f"this kernel is compiled for the GPU (CUDA is available), so q, k and v must be CUDA tensors, "
            f"got {q.device}: move them with .cuda(), or run the kernel on the CPU with interpreted(kernel)"
        )


def _rows(x, width):
    """[..., L, d] -> contiguous [batch * heads, L, width], zero-padded on the right to ``width`` features.

    Zero features change no dot product, so padding q and k leaves the scores as they were,
    and padded value features come out as zero columns that are cut off again."""
    x = x.reshape(-1, *x.shape[-2:])
    if x.shape[-1] < width:
        x = torch.nn.functional.pad(x, (0, width - x.shape[-1]))
    return x.contiguous()


def run_forward_kernel(kernel, q, k, v, causal=False, block_m=16, block_n=16, **launch_options):
    """Run a kernel with ``flash_forward_kernel``'s signature; return (output [..., L_q, d_v], logsumexp [..., L_q]).

    ``launch_options`` (e.g. num_warps, num_stages) go to the compiled launch on a GPU.
    The logsumexp is float32 whatever the inputs' dtype."""
    _require_triton()
    if not callable(getattr(kernel, "__getitem__", None)):
        raise TypeError(
            f"kernel must be a @triton.jit function, got {type(kernel).__name__}: put @triton.jit on the line "
            f"above its def"
        )
    _check_inputs(kernel, q, k, v)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    block_m = _power_of_two_block(block_m, "block_m")
    block_n = _power_of_two_block(block_n, "block_n")
    batch, (L_q, d), L_k, d_v = q.shape[:-2], q.shape[-2:], k.shape[-2], v.shape[-1]
    D, D_V = _padded(d), _padded(d_v)
    q3, k3, v3 = _rows(q, D), _rows(k, D), _rows(v, D_V)
    out = torch.empty(q3.shape[0], L_q, D_V, dtype=q.dtype, device=q.device)
    lse = torch.empty(q3.shape[0], L_q, dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(L_q, block_m), q3.shape[0])  # (query blocks, batch * heads)
    options = {} if _is_interpreted(kernel) else launch_options
    with _helpers_interpreted() if _is_interpreted(kernel) and not INTERPRETED else contextlib.nullcontext():
        kernel[grid](
            q3, k3, v3, out, lse, L_q, L_k, 1.0 / math.sqrt(d),
            CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, D=D, D_V=D_V, **options,
        )  # fmt: skip
    return out[..., :d_v].reshape(*batch, L_q, d_v), lse.reshape(*batch, L_q)


def default_block_sizes(q):
    """(block_m, block_n) of the forward kernel for queries ``q``: 64 x 64 under the interpreter (its cost is
    per block, so few large blocks run fastest); on a GPU 128 x 64 for rows of q up to 256 bytes (d = 128 in
    bfloat16), smaller for wider rows, so that the tiles of q, k and v fit in an H100/H200's shared memory.
    The backward kernels use half the block_m."""
    if INTERPRETED or not isinstance(q, torch.Tensor) or q.device.type != "cuda":
        return 64, 64
    row_bytes = _padded(q.shape[-1]) * q.element_size()  # e.g. 128 bytes for bfloat16, d = 64
    return (128 if row_bytes <= 256 else 64), (64 if row_bytes <= 512 else 32)


def flash_attention_triton_forward(q, k, v, causal=False, block_m=None, block_n=None):
    """FlashAttention's forward pass with the course kernel: (output, logsumexp), no autograd."""
    _require_triton()
    default_m, default_n = default_block_sizes(q)
    block_m, block_n = block_m or default_m, block_n or default_n
    options = {} if INTERPRETED else {"num_warps": 8 if block_m >= 128 else 4, "num_stages": 2}
    return run_forward_kernel(flash_forward_kernel, q, k, v, causal, block_m, block_n, **options)


# --------------------------------------------------------------------------- the backward pass
# The same recomputation as course_utils.flash.flash_attention_backward, as two kernels, so that
# no two programs add into the same memory: one program per KEY block sums dK_j and dV_j over the
# query blocks; one program per QUERY block sums dQ_i over the key blocks. Both rebuild
# P = exp(S - L) from the saved logsumexp L, and use Delta = rowsum(dO * O) (computed before).


@triton.jit
def flash_backward_dkdv_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV, L_q, L_k, scale,
    CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr, D_V: tl.constexpr,
):  # fmt: skip
    start_n = tl.program_id(0) * BLOCK_N
    bh = tl.program_id(1)
    keys = start_n + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, D)
    dims_v = tl.arange(0, D_V)
    k = tl.load(K + bh * L_k * D + keys[:, None] * D + dims[None, :], mask=keys[:, None] < L_k, other=0.0)
    v = tl.load(V + bh * L_k * D_V + keys[:, None] * D_V + dims_v[None, :], mask=keys[:, None] < L_k, other=0.0)
    dk = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, D_V], dtype=tl.float32)
    qk_scale = scale * 1.4426950408889634  # log2 units, as in the forward kernel
    # Causal: the first query that sees key start_n is query start_n: earlier query blocks are skipped.
    start = 0
    if CAUSAL:
        start = (start_n // BLOCK_M) * BLOCK_M
    for start_m in range(start, L_q, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        q_t = tl.load(Q + bh * L_q * D + rows[None, :] * D + dims[:, None], mask=rows[None, :] < L_q, other=0.0)
        do = tl.load(DO + bh * L_q * D_V + rows[:, None] * D_V + dims_v[None, :], mask=rows[:, None] < L_q, other=0.0)
        lse = tl.load(LSE + bh * L_q + rows, mask=rows < L_q, other=0.0) * 1.4426950408889634
        delta = tl.load(DELTA + bh * L_q + rows, mask=rows < L_q, other=0.0)
        # P^T [BLOCK_N, BLOCK_M] = exp(S^T - L), rebuilt; 0 where a key may not be seen
        allowed = (keys[:, None] < L_k) & (rows[None, :] < L_q)
        if CAUSAL:
            allowed = allowed & (keys[:, None] <= rows[None, :])
        p_t = tl.where(allowed, tl.exp2(tl.dot(k, q_t) * qk_scale - lse[None, :]), 0.0)
        dv += tl.dot(p_t.to(do.dtype), do)  # dV = P^T dO
        dp_t = tl.dot(v, tl.trans(do))  # dP^T = V dO^T
        ds_t = p_t * (dp_t - delta[None, :])  # dS = P * (dP - Delta)
        dk += tl.dot(ds_t.to(q_t.dtype), tl.trans(q_t))  # dK = dS^T Q (times scale, below)
    tl.store(
        DK + bh * L_k * D + keys[:, None] * D + dims[None, :],
        (dk * scale).to(DK.dtype.element_ty),
        mask=keys[:, None] < L_k,
    )
    tl.store(
        DV + bh * L_k * D_V + keys[:, None] * D_V + dims_v[None, :],
        dv.to(DV.dtype.element_ty),
        mask=keys[:, None] < L_k,
    )


@triton.jit
def flash_backward_dq_kernel(
    Q, K, V, DO, LSE, DELTA, DQ, L_q, L_k, scale,
    CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr, D_V: tl.constexpr,
):  # fmt: skip
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    dims_v = tl.arange(0, D_V)
    q = tl.load(Q + bh * L_q * D + rows[:, None] * D + dims[None, :], mask=rows[:, None] < L_q, other=0.0)
    do = tl.load(DO + bh * L_q * D_V + rows[:, None] * D_V + dims_v[None, :], mask=rows[:, None] < L_q, other=0.0)
    lse = tl.load(LSE + bh * L_q + rows, mask=rows < L_q, other=0.0) * 1.4426950408889634
    delta = tl.load(DELTA + bh * L_q + rows, mask=rows < L_q, other=0.0)
    dq = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    qk_scale = scale * 1.4426950408889634
    end_n = L_k
    if CAUSAL:
        end_n = tl.minimum(L_k, start_m + BLOCK_M)
    for start_n in range(0, end_n, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        k_t = tl.load(K + bh * L_k * D + keys[None, :] * D + dims[:, None], mask=keys[None, :] < L_k, other=0.0)
        v_t = tl.load(V + bh * L_k * D_V + keys[None, :] * D_V + dims_v[:, None], mask=keys[None, :] < L_k, other=0.0)
        allowed = (keys[None, :] < L_k) & (rows[:, None] < L_q)
        if CAUSAL:
            allowed = allowed & (keys[None, :] <= rows[:, None])
        p = tl.where(allowed, tl.exp2(tl.dot(q, k_t) * qk_scale - lse[:, None]), 0.0)
        ds = p * (tl.dot(do, v_t) - delta[:, None])  # dS = P * (dO V^T - Delta)
        dq += tl.dot(ds.to(k_t.dtype), tl.trans(k_t))  # dQ = dS K (times scale, below)
    tl.store(
        DQ + bh * L_q * D + rows[:, None] * D + dims[None, :],
        (dq * scale).to(DQ.dtype.element_ty),
        mask=rows[:, None] < L_q,
    )


def flash_attention_triton_backward(q, k, v, output, logsumexp, grad_output, causal=False, block_m=None, block_n=None):
    """(dq, dk, dv) with the two backward kernels, from the forward's output and logsumexp."""
    _require_triton()
    _check_inputs(flash_backward_dq_kernel, q, k, v)
    batch, (L_q, d), L_k, d_v = q.shape[:-2], q.shape[-2:], k.shape[-2], v.shape[-1]
    for name, t, shape in (("output", output, (*batch, L_q, d_v)), ("grad_output", grad_output, (*batch, L_q, d_v)),
                           ("logsumexp", logsumexp, (*batch, L_q))):  # fmt: skip
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape or t.device != q.device:
            got = f"{tuple(t.shape)} on {t.device}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a tensor of shape {shape} on {q.device}, got {got}")
    default_m, default_n = default_block_sizes(q)
    # the backward kernels hold more blocks at once than the forward (k, v, dk, dv): smaller query blocks
    block_m = _power_of_two_block(block_m or max(16, default_m // 2), "block_m")
    block_n = _power_of_two_block(block_n or default_n, "block_n")
    D, D_V = _padded(d), _padded(d_v)
    q3, k3, v3, do3 = _rows(q, D), _rows(k, D), _rows(v, D_V), _rows(grad_output.to(q.dtype), D_V)
    lse = logsumexp.reshape(-1, L_q).float().contiguous()
    delta = (grad_output.float() * output.float()).sum(-1).reshape(-1, L_q).contiguous()  # Delta = rowsum(dO * O)
    dq, dk, dv = torch.empty_like(q3), torch.empty_like(k3), torch.empty_like(v3)
    sizes = {"CAUSAL": causal, "BLOCK_M": block_m, "BLOCK_N": block_n, "D": D, "D_V": D_V}
    options = {} if INTERPRETED else {"num_warps": 4, "num_stages": 1}
    scale = 1.0 / math.sqrt(d)
    flash_backward_dkdv_kernel[(triton.cdiv(L_k, block_n), q3.shape[0])](
        q3, k3, v3, do3, lse, delta, dk, dv, L_q, L_k, scale, **sizes, **options
    )
    flash_backward_dq_kernel[(triton.cdiv(L_q, block_m), q3.shape[0])](
        q3, k3, v3, do3, lse, delta, dq, L_q, L_k, scale, **sizes, **options
    )
    return (
        dq[..., :d].reshape(q.shape),
        dk[..., :d].reshape(k.shape),
        dv[..., :d_v].reshape(v.shape),
    )


class _FlashAttentionTriton(torch.autograd.Function):
    """Forward and backward in Triton; only q, k, v, the output and the logsumexp are kept in between."""

    @staticmethod
    def forward(ctx, q, k, v, causal, block_m, block_n):
        out, lse = flash_attention_triton_forward(q, k, v, causal, block_m, block_n)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.block_m, ctx.block_n = causal, block_m, block_n
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_triton_backward(q, k, v, out, lse, grad_out, ctx.causal, ctx.block_m, ctx.block_n)
        return dq, dk, dv, None, None, None


def flash_attention_triton(q, k, v, causal=False, block_m=None, block_n=None):
    """Attention output of q [..., L_q, d], k [..., L_k, d], v [..., L_k, d_v], differentiable in q, k, v.
    Block sizes left as None are chosen by ``default_block_sizes``.

    Forward: ``flash_forward_kernel``; backward: the two backward kernels, from the saved output
    and logsumexp (no L_q x L_k matrix is kept)."""
    return _FlashAttentionTriton.apply(q, k, v, causal, block_m, block_n)
