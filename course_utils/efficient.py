"""Efficient attention (lesson 07): why attention is expensive and how real systems make it fast.

- ``online_softmax``: softmax over the last axis, reading the row in blocks with a
  running maximum and a running sum (the trick behind FlashAttention).
- ``tiled_attention``: exact attention that processes the keys in blocks and never
  builds the [L_q, L_k] score matrix.
- ``KVCache``, ``attend_with_cache``, ``generate``: causal decoding that keeps the
  keys and values of past tokens instead of recomputing them.
- ``naive_attention``, ``sdpa_methods``, ``attention_flops``, ``time_call``,
  ``peak_memory``, ``loglog_slope``: how the lesson measures time and memory.
"""

import math
import os
import time
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from course_utils import _validate
from course_utils.attention import causal_mask, combine_heads, scaled_dot_product_attention

__all__ = [
    "online_softmax",
    "tiled_attention",
    "naive_attention",
    "KVCache",
    "attend_with_cache",
    "generate",
    "sdpa_methods",
    "SDPA_BACKENDS",
    "attention_flops",
    "time_call",
    "time_alternating",
    "peak_memory",
    "loglog_slope",
]

NEG_INF = float("-inf")


def safe_shift(running_max):
    """The running maximum to subtract before exp(): 0 where it is still -inf."""
    # A row that has seen only -inf (masked) scores still has max -inf, and
    # exp(-inf - (-inf)) would be NaN; shifting by 0 there gives exp(-inf) = 0.
    return running_max.masked_fill(running_max == NEG_INF, 0.0)


def online_softmax(x, block_size):
    """softmax(x) over the last axis, reading x in blocks of ``block_size`` entries.

    One pass over the blocks keeps a running maximum m and a running sum
    l = sum exp(x - m). When a block raises the maximum, the sum collected so far
    was measured against the old maximum, so it is rescaled by exp(m_old - m_new).
    The last block may be shorter than ``block_size``.
    """
    _validate.online_softmax_input(x)
    block_size = _validate.positive_int(block_size, "block_size")
    running_max = x.new_full((*x.shape[:-1], 1), NEG_INF)
    running_sum = x.new_zeros((*x.shape[:-1], 1))
    for start in range(0, x.shape[-1], block_size):  # the last block may be partial
        block = x[..., start : start + block_size]
        new_max = torch.maximum(running_max, block.amax(dim=-1, keepdim=True))
        shift = safe_shift(new_max)
        # old sum: rescale from the old maximum to the new one; then add this block
        running_sum = running_sum * torch.exp(running_max - shift) + torch.exp(block - shift).sum(dim=-1, keepdim=True)
        running_max = new_max
    return torch.exp(x - running_max) / running_sum


def tiled_attention(q, k, v, block_size, causal=False):
    """Exact softmax(q k^T / sqrt(d_k)) v, one block of ``block_size`` keys at a time.

    q: [..., L_q, d_k], k: [..., L_k, d_k], v: [..., L_k, d_v] -> [..., L_q, d_v].
    The [L_q, L_k] score matrix is never built: the largest temporary is one
    [L_q, block_size] block of scores. Per query row we keep a running maximum m,
    a running sum l and an unnormalised output o; when a block raises the maximum,
    both l and o are rescaled by exp(m_old - m_new); we divide by l once, at the end.

    causal=True: the queries are the last L_q positions of the sequence, so query i
    may attend to keys 0 .. i + (L_k - L_q); with L_q == L_k this is ``causal_mask``.
    bfloat16/float16 inputs keep m, l and o in float32, as FlashAttention does.
    """
    _validate.tiled_inputs(q, k, v, causal)
    block_size = _validate.positive_int(block_size, "block_size")
    n_q, n_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    stats_dtype = torch.promote_types(q.dtype, torch.float32)
    batch_shape = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    running_max = torch.full((*batch_shape, n_q, 1), NEG_INF, dtype=stats_dtype, device=q.device)
    running_sum = torch.zeros((*batch_shape, n_q, 1), dtype=stats_dtype, device=q.device)
    output = torch.zeros((*batch_shape, n_q, v.shape[-1]), dtype=stats_dtype, device=q.device)
    query_pos = torch.arange(n_k - n_q, n_k, device=q.device)[:, None]  # position of each query in the sequence
    for start in range(0, n_k, block_size):  # the last block may be partial
        k_block, v_block = k[..., start : start + block_size, :], v[..., start : start + block_size, :]
        # 1.-2. scaled scores of all queries against this block of keys: [..., L_q, block]
        scores = (q @ k_block.transpose(-2, -1)).to(stats_dtype) * scale
        if causal:
            key_pos = torch.arange(start, start + k_block.shape[-2], device=q.device)
            scores = scores.masked_fill(key_pos > query_pos, NEG_INF)
        # 3. online softmax: update the running max, rescale what we collected so far
        new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))
        shift = safe_shift(new_max)
        rescale = torch.exp(running_max - shift)
        p = torch.exp(scores - shift)
        running_sum = running_sum * rescale + p.sum(dim=-1, keepdim=True)
        # 4. weighted sum of this block's values, added to the rescaled output
        output = output * rescale + p.to(v.dtype) @ v_block
        running_max = new_max
    return (output / running_sum).to(q.dtype)


def naive_attention(q, k, v, causal=False):
    """The course's four-step attention (lesson 02); builds the full [L_q, L_k] matrix."""
    mask = causal_mask(q.shape[-2], device=q.device) if causal else None
    return scaled_dot_product_attention(q, k, v, mask)[0]


# ---------------------------------------------------------------- KV cache


class KVCache:
    """Keys and values of every token seen so far, for one attention layer.

    Two buffers [batch, heads, max_len, head_dim] are allocated once and filled
    left to right, as inference servers do; ``keys``/``values`` are views of the
    filled part.
    """

    def __init__(self, batch_size, num_heads, max_len, head_dim, dtype=torch.float32, device=None):
        sizes = {"batch_size": batch_size, "num_heads": num_heads, "max_len": max_len, "head_dim": head_dim}
        shape = tuple(_validate.positive_int(value, name) for name, value in sizes.items())
        self._keys = torch.zeros(shape, dtype=dtype, device=device)
        self._values = torch.zeros(shape, dtype=dtype, device=device)
        self.length = 0

    @property
    def max_len(self):
        return self._keys.shape[2]

    @property
    def keys(self):
        return self._keys[:, :, : self.length]

    @property
    def values(self):
        return self._values[:, :, : self.length]

    def append(self, k, v):
        """Store the keys/values [batch, heads, t, head_dim] of t new tokens; return all of them so far."""
        expected = (*self._keys.shape[:2], self._keys.shape[3])
        for name, t in (("k", k), ("v", v)):
            if not isinstance(t, torch.Tensor) or t.dim() != 4 or (t.shape[0], t.shape[1], t.shape[3]) != expected:
                shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(
                    f"{name} must have shape [{expected[0]}, {expected[1]}, t, {expected[2]}], got {shape}"
                )
        if k.shape[2] != v.shape[2]:
            raise ValueError(f"k and v must hold the same number of tokens, got {k.shape[2]} and {v.shape[2]}")
        if self.length + k.shape[2] > self.max_len:
            raise ValueError(f"the cache holds {self.max_len} tokens; {self.length} + {k.shape[2]} do not fit")
        self._keys[:, :, self.length : self.length + k.shape[2]] = k
        self._values[:, :, self.length : self.length + v.shape[2]] = v
        self.length += k.shape[2]
        return self.keys, self.values


def attend_with_cache(mha, x, cache):
    """Causal self-attention of t new tokens x [B, t, d_model] with a course ``MultiHeadAttention``.

    Only the new tokens are projected; their keys and values join the cache, and
    their queries attend to every cached token up to their own position.
    Returns [B, t, d_model], equal to the last t rows of the full causal attention.
    """
    if x.dim() != 3 or x.shape[-1] != mha.d_model:
        raise ValueError(f"x must have shape [batch, t, d_model={mha.d_model}], got {tuple(x.shape)}")
    query = mha.split_heads(mha.query_linear(x))
    keys, values = cache.append(mha.split_heads(mha.key_linear(x)), mha.split_heads(mha.value_linear(x)))
    # the new tokens are the last t positions: the last t rows of the causal mask
    mask = causal_mask(cache.length, device=x.device)[cache.length - x.shape[1] :]
    context = mha.compute_attention(query, keys, values, mask)
    return mha.output_linear(combine_heads(context))


@torch.no_grad()
def _check_generate_inputs(mha, prompt, steps):
    if not all(hasattr(mha, name) for name in ("d_model", "num_heads", "head_dim")):
        raise TypeError(f"mha must be the course's MultiHeadAttention layer, got {type(mha).__name__}")
    if not isinstance(prompt, torch.Tensor) or prompt.dim() != 3 or prompt.shape[-1] != mha.d_model:
        got = tuple(prompt.shape) if isinstance(prompt, torch.Tensor) else type(prompt).__name__
        raise ValueError(f"prompt must be a tensor [batch, P, d_model={mha.d_model}], got {got}")
    return _validate.positive_int(steps, "steps")


def generate(mha, prompt, steps, use_cache=True, step_times=None):
    """Autoregressive decoding with one attention layer as a toy language model.

    The output vector at the last position becomes the next token's input.
    prompt: [B, P, d_model] -> [B, P + steps, d_model] (prompt, then generated vectors).
    ``use_cache=False`` recomputes attention over the whole sequence at every step;
    ``use_cache=True`` processes the prompt once, then one token per step.
    ``step_times``: a list that receives the seconds each step took.
    """
    steps = _check_generate_inputs(mha, prompt, steps)
    sequence = prompt
    if use_cache:
        cache = KVCache(
            prompt.shape[0], mha.num_heads, prompt.shape[1] + steps, mha.head_dim, prompt.dtype, prompt.device
        )
        new_tokens = prompt  # first the whole prompt ("prefill"), then one token at a time
    for _ in range(steps):
        _synchronize(prompt.device)
        start = time.perf_counter()
        if use_cache:
            next_token = attend_with_cache(mha, new_tokens, cache)[:, -1:]
            new_tokens = next_token
        else:  # every step attends over the whole sequence again
            n = sequence.shape[1]
            next_token = mha(sequence, sequence, sequence, mask=causal_mask(n, device=sequence.device))[:, -1:]
        sequence = torch.cat([sequence, next_token], dim=1)
        _synchronize(prompt.device)
        if step_times is not None:
            step_times.append(time.perf_counter() - start)
    return sequence


# ---------------------------------------------------------------- measuring


# PyTorch's SDPA backends, by the names the lesson uses
SDPA_BACKENDS = {
    "SDPA math": SDPBackend.MATH,
    "SDPA flash": SDPBackend.FLASH_ATTENTION,
    "SDPA memory-efficient": SDPBackend.EFFICIENT_ATTENTION,
    "SDPA cuDNN": SDPBackend.CUDNN_ATTENTION,
}


def sdpa_methods(device, dtype=torch.float32, head_dim=64):
    """{name: fn(q, k, v, causal=False)} for each PyTorch SDPA backend that runs on ``device``
    for inputs of this dtype and head size (flash, for one, needs float16/bfloat16 on a GPU).

    Each backend is tried on a tiny input, with and without the causal mask; one that
    cannot run raises there and is left out (``SDPA_BACKENDS`` lists them all).
    """
    probe = torch.randn(1, 1, 8, head_dim).to(device, dtype)
    methods = {}
    for name, backend in SDPA_BACKENDS.items():

        def run(q, k, v, causal=False, backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        try:
            with warnings.catch_warnings():  # an unavailable backend warns (on a GPU) before it raises
                warnings.simplefilter("ignore")
                for causal in (False, True):
                    run(probe, probe, probe, causal=causal)
        except RuntimeError:  # "No available kernel": not for this device, dtype or head size
            continue
        methods[name] = run
    return methods


def attention_flops(batch, heads, n_q, n_k, head_dim, causal=False):
    """Forward FLOPs: q k^T and weights @ v, each 2 * n_q * n_k * d per head; causal skips half."""
    batch, heads, n_q, n_k, head_dim = (
        _validate.positive_int(value, name)
        for name, value in (("batch", batch), ("heads", heads), ("n_q", n_q), ("n_k", n_k), ("head_dim", head_dim))
    )
    flops = 4 * batch * heads * n_q * n_k * head_dim
    return flops // 2 if causal else flops


def _device_of(args):
    return next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))


def _synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # GPU kernels run asynchronously: wait before reading the clock


def time_call(fn, *args, repeats=3, warmup=1, **kwargs):
    """Best wall-clock time in seconds of fn(*args, **kwargs) over ``repeats`` runs.

    The minimum is the least disturbed by other programs; on a GPU we synchronise
    before and after, since kernels run asynchronously.
    """
    device = _device_of(args)
    with torch.no_grad():
        for _ in range(warmup):
            fn(*args, **kwargs)
        best = float("inf")
        for _ in range(repeats):
            _synchronize(device)
            start = time.perf_counter()
            fn(*args, **kwargs)
            _synchronize(device)
            best = min(best, time.perf_counter() - start)
    return best


def time_alternating(fns, *args, repeats=3, **kwargs):
    """Best time in seconds of each function in ``fns`` ({name: fn}) on the same arguments, over
    ``repeats`` rounds that run them in turn: a busy moment of the machine slows all of them alike,
    so their ratio stays fair (timed one after the other, one of them could take the whole delay)."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, fn in fns.items():
            best[name] = min(best[name], time_call(fn, *args, repeats=1, **kwargs))
    return best


def peak_memory(fn, *args, **kwargs):
    """Bytes allocated at the peak of fn(*args, **kwargs), beyond what was allocated before.

    GPU: PyTorch's CUDA allocator statistics (torch.cuda.max_memory_allocated).
    CPU: PyTorch's profiler records every allocation and free of its CPU allocator;
    we replay them in order and take the highest running total. (Python's
    tracemalloc does not see tensor memory, and the process's resident size also
    counts memory the C allocator keeps after a free.)
    The output counts, since it is alive at the end of the call.
    """
    device = _device_of(args)
    with torch.no_grad():
        if device.type == "cuda":
            _synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
            result = fn(*args, **kwargs)
            _synchronize(device)
            peak = torch.cuda.max_memory_allocated(device) - before
            del result
            return peak
        return _cpu_peak_memory(fn, *args, **kwargs)


def _cpu_peak_memory(fn, *args, **kwargs):
    from torch.profiler import ProfilerActivity, profile

    os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # the profiler would print start/stop lines otherwise
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn(*args, **kwargs)
        del result
    sizes = []  # (time, bytes): + for an allocation, - for a free
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        extra = node.extra_fields
        if type(extra).__name__ == "_ExtraFields_Allocation" and extra.device.type == "cpu":
            sizes.append((node.start_time_ns, extra.alloc_size))
    running = peak = 0
    for _, size in sorted(sizes, key=lambda e: (e[0], e[1] < 0)):  # on a tie, count the allocation first
        running += size
        peak = max(peak, running)
    return peak


def loglog_slope(x, y):
    """Slope of the least-squares line through (log x, log y): y ~ x^slope."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 2 or len(x) != len(y) or (x <= 0).any() or (y <= 0).any():
        raise ValueError("loglog_slope needs two or more positive (x, y) pairs")
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])
