"""FlashAttention end to end (lesson 09): a trainable attention that never builds the n x n matrix.

- ``flash_attention_forward``: the tiled forward pass of lesson 07, query blocks outer
  (FlashAttention-2), that also returns each query's logsumexp L = log sum_j exp(S_ij).
- ``running_logsumexp``: that logsumexp alone, from a list of score blocks, with a running
  maximum and a running sum (lesson 09's first exercise).
- ``flash_attention_backward``: dQ, dK, dV by recomputing each block of probabilities
  P = exp(S - L) from the saved logsumexp, key blocks outer.
- ``flash_attention``: the two joined in a ``torch.autograd.Function`` that saves only
  q, k, v, the output and the logsumexp.
- ``causal_block_map``, ``causal_block_counts``: which (query block, key block) pairs a
  causal attention computes; the blocks entirely above the diagonal are skipped.
- ``saved_for_backward``, ``saved_for_backward_bytes``, ``peak_memory_bytes``: how the
  lesson measures what autograd keeps and the peak memory of forward + backward.

The maths, per block (S_ij = q_i k_j^T * scale, scale = 1/sqrt(d)):
    forward   P = exp(S - L)           O = P V
    backward  dV = P^T dO    dP = dO V^T    dS = P * (dP - D)    dQ = dS K * scale    dK = dS^T Q * scale
with D = rowsum(dO * O), one number per query (see ``flash_attention_backward``).

Causal convention, as ``F.scaled_dot_product_attention(is_causal=True)`` and
``course_utils.attention.causal_mask``: query i may attend keys 0..i, counted from the
first position of both sequences (top-left aligned, also when L_q != L_k).
(Lesson 07's ``tiled_attention`` aligns the other way, for decoding with a cache.)
"""

import math

import torch

from course_utils import _validate
from course_utils.efficient import NEG_INF, _cpu_peak_memory, _device_of, _synchronize, safe_shift

__all__ = [
    "flash_attention_forward",
    "running_logsumexp",
    "flash_attention_backward",
    "block_backward",
    "flash_attention",
    "FlashAttention",
    "causal_block_map",
    "causal_block_counts",
    "saved_for_backward",
    "saved_for_backward_bytes",
    "peak_memory_bytes",
]

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


# ---------------------------------------------------------------- input checks


def _check_inputs(q, k, v, causal, block_size, skip_masked_blocks=True):
    """The common checks of all three entry points; returns block_size as an int."""
    _validate.qkv(q, k, v)  # tensors of one dtype and device, matching d and L_k, batch dims that broadcast
    if q.dtype not in DTYPES:
        raise TypeError(f"q, k and v must be float16, bfloat16, float32 or float64, got {q.dtype}")
    if q.shape[-2] == 0 or k.shape[-2] == 0:
        raise ValueError(f"q and k need at least one position, got q {tuple(q.shape)}, k {tuple(k.shape)}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {type(causal).__name__} (it is not a mask)")
    if not isinstance(skip_masked_blocks, bool):
        raise TypeError(f"skip_masked_blocks must be True or False, got {type(skip_masked_blocks).__name__}")
    return _validate.positive_int(block_size, "block_size")


def _expect(name, t, shape, device):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape {shape}, got {type(t).__name__}")
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but q, k, v are on {device}: move it with .to(q.device)")
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {t.dtype}")


# ---------------------------------------------------------------- blocks


def _blocks(n, block_size):
    """(start, end) of each block of ``block_size`` positions; the last one may be shorter."""
    return [(start, min(start + block_size, n)) for start in range(0, n, block_size)]


def _key_end(q_end, n_k, causal, skip):
    # Causal: the last query of the block is q_end - 1, so keys from q_end on are masked
    # for the whole block; their blocks are skipped (a key block starting before q_end runs).
    return min(n_k, q_end) if causal and skip else n_k


def _first_query(k_start, causal, skip):
    # Causal: query i sees key k_start only if i >= k_start; earlier query blocks are skipped.
    return k_start if causal and skip else 0


def mask_future_keys(scores, q_start, k_start, causal):
    """Mask the scores of keys after each query (-inf), only in blocks that cross the diagonal."""
    q_end, k_end = q_start + scores.shape[-2], k_start + scores.shape[-1]
    if not causal or k_end - 1 <= q_start:  # every key is at or before every query
        return scores
    query_pos = torch.arange(q_start, q_end, device=scores.device)[:, None]
    key_pos = torch.arange(k_start, k_end, device=scores.device)
    return scores.masked_fill(key_pos > query_pos, NEG_INF)


def causal_block_map(L_q, L_k, block_size):
    """[query blocks, key blocks] bool tensor: True where a causal attention computes the pair.

    A pair is skipped when all its keys come after all its queries (entirely above the diagonal).
    """
    L_q, L_k = _validate.positive_int(L_q, "L_q"), _validate.positive_int(L_k, "L_k")
    block_size = _validate.positive_int(block_size, "block_size")
    computed = torch.zeros(math.ceil(L_q / block_size), math.ceil(L_k / block_size), dtype=torch.bool)
    for i, (_, q_end) in enumerate(_blocks(L_q, block_size)):
        key_blocks = _blocks(_key_end(q_end, L_k, causal=True, skip=True), block_size)
        computed[i, : len(key_blocks)] = True
    return computed


def causal_block_counts(L_q, L_k, block_size):
    """dict(computed=, skipped=, total=): (query block, key block) pairs of a causal attention."""
    computed = causal_block_map(L_q, L_k, block_size)
    n_computed = int(computed.sum())
    return {"computed": n_computed, "skipped": computed.numel() - n_computed, "total": computed.numel()}


# ---------------------------------------------------------------- forward


def running_logsumexp(score_blocks):
    """The natural-log logsumexp of each query's scores, reading one block of keys at a time.

    score_blocks: a list of tensors [..., L_q, B_k], the scores of all queries against one block
    of keys each, left to right (the last block may be narrower). Returns lse [..., L_q].
    Each row's first block must hold a finite score (with a causal mask key 0 always does).
    """
    _validate.score_blocks(score_blocks)
    first = score_blocks[0]
    running_max = first.new_full(first.shape[:-1], float("-inf"))  # m, per query: nothing seen yet
    running_sum = first.new_zeros(first.shape[:-1])  # l = sum of exp(s - m), per query
    for s in score_blocks:
        new_max = torch.maximum(running_max, s.amax(dim=-1))
        # the old sum was measured against the old maximum: rescale it, then add this block
        running_sum = running_sum * torch.exp(running_max - new_max) + torch.exp(s - new_max[..., None]).sum(dim=-1)
        running_max = new_max
    return running_max + torch.log(running_sum)  # log(sum exp(s)) = m + log(sum exp(s - m)), natural log


def flash_attention_forward(q, k, v, causal=False, block_size=64, skip_masked_blocks=True):
    """softmax(q k^T / sqrt(d)) v in blocks; returns (output, logsumexp).

    q: [..., L_q, d], k: [..., L_k, d], v: [..., L_k, d_v] -> output [..., L_q, d_v] (dtype of q)
    and logsumexp [..., L_q] (float32 for float16/bfloat16 inputs, else q's dtype): the natural
    log of sum_j exp(S_ij) over the keys query i may attend, S = q k^T / sqrt(d).
    The largest temporary is one [block_size, block_size] block of scores.
    FlashAttention-2 order: each query block loops over the key blocks with an online softmax
    (running max m, running sum l, unnormalised output o, as in lesson 07's tiled_attention).
    causal=True skips key blocks entirely after a query block, unless skip_masked_blocks=False
    (then they are computed and fully masked: same result, for timing the saving).
    """
    block_size = _check_inputs(q, k, v, causal, block_size, skip_masked_blocks)
    n_q, n_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    stats_dtype = torch.promote_types(q.dtype, torch.float32)  # m, l, o in float32 for half inputs
    batch_shape = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    output = torch.empty((*batch_shape, n_q, v.shape[-1]), dtype=q.dtype, device=q.device)
    logsumexp = torch.empty((*batch_shape, n_q), dtype=stats_dtype, device=q.device)
    for q_start, q_end in _blocks(n_q, block_size):  # queries outer: each block of rows is finished in one go
        q_i = q[..., q_start:q_end, :].to(stats_dtype)
        running_max = torch.full((*batch_shape, q_end - q_start, 1), NEG_INF, dtype=stats_dtype, device=q.device)
        running_sum = torch.zeros_like(running_max)
        acc = torch.zeros((*batch_shape, q_end - q_start, v.shape[-1]), dtype=stats_dtype, device=q.device)
        for k_start, k_end in _blocks(_key_end(q_end, n_k, causal, skip_masked_blocks), block_size):
            k_j = k[..., k_start:k_end, :].to(stats_dtype)
            v_j = v[..., k_start:k_end, :].to(stats_dtype)
            # S = Q K^T * scale, for this block only
            s = mask_future_keys(q_i @ k_j.transpose(-2, -1) * scale, q_start, k_start, causal)
            # online softmax: raise the running max m, rescale the sum l and output o collected so far
            new_max = torch.maximum(running_max, s.amax(dim=-1, keepdim=True))
            shift = safe_shift(new_max)
            rescale = torch.exp(running_max - shift)
            p = torch.exp(s - shift)
            running_sum = running_sum * rescale + p.sum(dim=-1, keepdim=True)
            acc = acc * rescale + p @ v_j
            running_max = new_max
        output[..., q_start:q_end, :] = (acc / running_sum).to(q.dtype)
        # L = log sum_j exp(S_ij) = m + log(l): all the backward needs to rebuild P = exp(S - L)
        logsumexp[..., q_start:q_end] = (running_max + torch.log(running_sum)).squeeze(-1)
    return output, logsumexp


# ---------------------------------------------------------------- backward


def block_backward(q_i, k_j, v_j, do_i, lse_i, d_i, scale, q_start=0, k_start=0, causal=False):
    """What one (query block i, key block j) pair adds to dQ_i, dK_j and dV_j (lesson 09's exercise).

    q_i [..., B_q, d], k_j [..., B_k, d], v_j [..., B_k, d_v], do_i [..., B_q, d_v];
    lse_i [..., B_q]: each query's natural-log logsumexp over ALL keys (saved by the forward);
    d_i [..., B_q]: D = rowsum(dO * O); scale: the factor of the scores, 1/sqrt(d).
    q_start, k_start, causal: where the blocks sit, for the causal mask (the exercise leaves them out).
    """
    _validate.block_statistics(q_i, lse_i, d_i)
    # S = Q K^T * scale and P = exp(S - L): the forward's probabilities, rebuilt (L covers all keys)
    s = mask_future_keys(q_i @ k_j.transpose(-2, -1) * scale, q_start, k_start, causal)
    p = torch.exp(s - lse_i[..., None])
    dv_j = p.transpose(-2, -1) @ do_i  # dV = P^T dO
    dp = do_i @ v_j.transpose(-2, -1)  # dP = dO V^T
    ds = p * (dp - d_i[..., None])  # dS = P * (dP - D): the softmax's backward
    dq_i = ds @ k_j * scale  # dQ = dS K * scale
    dk_j = ds.transpose(-2, -1) @ q_i * scale  # dK = dS^T Q * scale
    return dq_i, dk_j, dv_j


def flash_attention_backward(
    q, k, v, output, logsumexp, grad_output, causal=False, block_size=64, skip_masked_blocks=True
):
    """(dq, dk, dv) of attention, given dO = ``grad_output``, rebuilding P one block at a time.

    P_ij = exp(S_ij - L_i) is recomputed from the saved logsumexp L: no max, no sum, no
    normalisation, and no [L_q, L_k] matrix kept anywhere.
    dS = P * (dP - D) needs, per query i, D_i = sum_j P_ij dP_ij over ALL keys. Since
    O_i = sum_j P_ij v_j and dP_ij = dO_i . v_j, that sum equals dO_i . O_i: D = rowsum(dO * O),
    computed once from two [L_q, d_v] tensors before the loop.
    FlashAttention-2 order: key blocks outer, so dK_j and dV_j are finished in one go;
    dQ_i collects a contribution from every key block.
    """
    block_size = _check_inputs(q, k, v, causal, block_size, skip_masked_blocks)
    n_q, n_k = q.shape[-2], k.shape[-2]
    batch_shape = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    _expect("output", output, (*batch_shape, n_q, v.shape[-1]), q.device)
    _expect("grad_output", grad_output, (*batch_shape, n_q, v.shape[-1]), q.device)
    _expect("logsumexp", logsumexp, (*batch_shape, n_q), q.device)
    scale = 1.0 / math.sqrt(q.shape[-1])
    work_dtype = torch.promote_types(q.dtype, torch.float32)
    # D = rowsum(dO * O) = rowsum(P * dP), one number per query: [..., L_q]
    D = (grad_output.to(work_dtype) * output.to(work_dtype)).sum(dim=-1)
    lse = logsumexp.to(work_dtype)
    shapes = q.shape, k.shape, v.shape
    # broadcast batch dims made explicit (views, no copies): every block then has lse's batch dims
    q, k, v = (t.expand(*batch_shape, *t.shape[-2:]) for t in (q, k, v))
    dq = torch.zeros((*batch_shape, n_q, q.shape[-1]), dtype=work_dtype, device=q.device)
    dk = torch.zeros((*batch_shape, n_k, k.shape[-1]), dtype=work_dtype, device=q.device)
    dv = torch.zeros((*batch_shape, n_k, v.shape[-1]), dtype=work_dtype, device=q.device)
    for k_start, k_end in _blocks(n_k, block_size):  # keys outer: dK_j, dV_j finished in one go
        k_j = k[..., k_start:k_end, :].to(work_dtype)
        v_j = v[..., k_start:k_end, :].to(work_dtype)
        dk_j = dk[..., k_start:k_end, :]  # views: += below writes into dk and dv
        dv_j = dv[..., k_start:k_end, :]
        first = _first_query(k_start, causal, skip_masked_blocks)
        for q_start, q_end in _blocks(n_q - first, block_size):
            q_start, q_end = q_start + first, q_end + first
            q_i = q[..., q_start:q_end, :].to(work_dtype)
            do_i = grad_output[..., q_start:q_end, :].to(work_dtype)
            dq_i, dk_ij, dv_ij = block_backward(
                q_i, k_j, v_j, do_i, lse[..., q_start:q_end], D[..., q_start:q_end], scale, q_start, k_start, causal
            )
            dq[..., q_start:q_end, :] += dq_i
            dk_j += dk_ij
            dv_j += dv_ij
    # inputs whose batch dims were broadcast get the sum over the copies they were expanded to
    return (
        dq.sum_to_size(shapes[0]).to(q.dtype),
        dk.sum_to_size(shapes[1]).to(k.dtype),
        dv.sum_to_size(shapes[2]).to(v.dtype),
    )


# ---------------------------------------------------------------- autograd


class FlashAttention(torch.autograd.Function):
    """Attention whose backward needs only q, k, v, the output and one logsumexp per query."""

    @staticmethod
    def forward(ctx, q, k, v, causal, block_size, skip_masked_blocks):
        output, logsumexp = flash_attention_forward(q, k, v, causal, block_size, skip_masked_blocks)
        # the only tensors kept for the backward: no [L_q, L_k] probabilities
        ctx.save_for_backward(q, k, v, output, logsumexp)
        ctx.options = (causal, block_size, skip_masked_blocks)
        return output

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output):
        q, k, v, output, logsumexp = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(q, k, v, output, logsumexp, grad_output, *ctx.options)
        return dq, dk, dv, None, None, None  # no gradient for causal, block_size, skip_masked_blocks


def flash_attention(q, k, v, causal=False, block_size=64, skip_masked_blocks=True):
    """Differentiable FlashAttention: q [..., L_q, d], k [..., L_k, d], v [..., L_k, d_v] -> [..., L_q, d_v]."""
    # clear errors before autograd sees the inputs
    block_size = _check_inputs(q, k, v, causal, block_size, skip_masked_blocks)
    return FlashAttention.apply(q, k, v, causal, block_size, skip_masked_blocks)


# ---------------------------------------------------------------- measuring memory


def _with_grad_leaves(inputs):
    # fresh leaves that share the inputs' memory (detach copies nothing), so every call
    # starts from the same state: no .grad left over from a previous call
    return [x.detach().requires_grad_(x.is_floating_point()) if isinstance(x, torch.Tensor) else x for x in inputs]


def saved_for_backward(fn, *inputs, **kwargs):
    """The tensors autograd keeps for the backward while running fn(*inputs, **kwargs), in order.

    Floating-point inputs are made to require gradients; the list shows what a training
    step would hold in memory between its forward and its backward.
    """
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*_with_grad_leaves(inputs), **kwargs)
    return saved


def saved_for_backward_bytes(fn, *inputs, **kwargs):
    """Bytes of memory autograd keeps for the backward of fn(*inputs, **kwargs).

    Each block of memory counts once: k and its transpose k^T, saved by two operations,
    are one storage.
    """
    storages = {}
    for t in saved_for_backward(fn, *inputs, **kwargs):
        storage = t.untyped_storage()
        storages[(storage.device, storage.data_ptr())] = storage.nbytes()
    return sum(storages.values())


def peak_memory_bytes(fn, *inputs, **kwargs):
    """Peak bytes allocated while running fn(*inputs, **kwargs) and its backward, beyond what was
    allocated before: the memory one training step of this attention needs.

    The backward receives dO = ones; the gradients of the floating-point inputs count
    (they are alive at the end). GPU: PyTorch's CUDA allocator statistics. CPU: the
    profiler's record of every allocation and free, replayed in order (lesson 07's
    ``peak_memory``, checked there against the process's resident memory); faster than a
    subprocess, and blind to memory that the C allocator keeps after a free.
    """
    device = _device_of(inputs)
    leaves = _with_grad_leaves(inputs)
    wrt = [x for x in leaves if isinstance(x, torch.Tensor) and x.requires_grad]

    def step():
        with torch.enable_grad():
            output = fn(*leaves, **kwargs)
            grads = torch.autograd.grad(output, wrt, torch.ones_like(output))
        return output, grads

    if device.type == "cuda":
        _synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        result = step()
        _synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - before
        del result
        return peak
    return _cpu_peak_memory(step)
