"""course_utils.efficient: tiled attention is exact and small, online softmax is softmax,
the KV cache changes nothing but the cost, and the lesson's measuring helpers measure.

Oracles: PyTorch's F.scaled_dot_product_attention and torch.softmax, the course's
reference attention, torch.utils.flop_counter, and the operating system's count of
the process's resident memory (peak memory at n = 8192, in a fresh subprocess).
"""

import math
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from course_utils.attention import MultiHeadAttention, causal_mask, scaled_dot_product_attention
from course_utils.efficient import (
    SDPA_BACKENDS,
    KVCache,
    attend_with_cache,
    attention_flops,
    generate,
    loglog_slope,
    naive_attention,
    online_softmax,
    peak_memory,
    sdpa_methods,
    tiled_attention,
    time_alternating,
    time_call,
)

ROOT = Path(__file__).resolve().parents[2]


def _qkv(batch, n_q, n_k, d, d_v, seed=0, scale=1.0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, n_q, d, generator=g) * scale
    k = torch.randn(*batch, n_k, d, generator=g) * scale
    v = torch.randn(*batch, n_k, d_v, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


SHAPES = [  # batch, n_q, n_k, d, d_v, block_size
    ((), 16, 16, 8, 8, 4),  # blocks divide n
    ((), 17, 17, 8, 8, 4),  # a final partial block of 1 key
    ((2,), 33, 50, 16, 12, 7),  # cross-attention, d_v != d_k, partial block
    ((2, 3), 64, 64, 32, 32, 64),  # one block exactly
    ((2, 3), 40, 40, 8, 8, 1000),  # block larger than the sequence
    ((1, 2), 5, 9, 4, 4, 1),  # blocks of one key
    ((2, 4), 128, 128, 64, 64, 48),
]


@pytest.mark.parametrize("batch, n_q, n_k, d, d_v, block_size", SHAPES)
def test_tiled_attention_equals_the_reference_and_torch(batch, n_q, n_k, d, d_v, block_size):
    q, k, v = _qkv(batch, n_q, n_k, d, d_v)
    out = tiled_attention(q, k, v, block_size)
    assert out.shape == (*batch, n_q, d_v) and out.dtype == torch.float32
    torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v)[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("block_size", [1, 5, 16, 100])
def test_tiled_attention_with_large_scores(block_size):
    # scores in the hundreds: without the running maximum exp() overflows
    q, k, v = _qkv((2, 2), 30, 30, 16, 16, seed=1, scale=8.0)
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double()).float()
    assert torch.isfinite(tiled_attention(q, k, v, block_size)).all()
    torch.testing.assert_close(tiled_attention(q, k, v, block_size), expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("n, block_size", [(16, 4), (19, 4), (50, 7), (8, 100), (6, 1)])
def test_tiled_attention_causal(n, block_size):
    q, k, v = _qkv((2, 3), n, n, 8, 8, seed=2)
    out = tiled_attention(q, k, v, block_size, causal=True)
    torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v, causal_mask(n))[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n_q, n_k, block_size", [(1, 9, 4), (3, 11, 4), (5, 5, 2)])
def test_tiled_attention_causal_queries_are_the_last_positions(n_q, n_k, block_size):
    # decoding with a cache: n_q new queries at the end of n_k positions
    q, k, v = _qkv((2,), n_q, n_k, 8, 8, seed=3)
    allowed = torch.ones(n_q, n_k, dtype=torch.bool).tril(diagonal=n_k - n_q)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    torch.testing.assert_close(tiled_attention(q, k, v, block_size, causal=True), expected, atol=1e-5, rtol=1e-5)


def test_tiled_attention_broadcasts_batch_dims_like_matmul():
    q, _, _ = _qkv((2, 3), 10, 10, 8, 8, seed=4)
    _, k, v = _qkv((1, 3), 10, 12, 8, 8, seed=5)
    expected = scaled_dot_product_attention(q, k, v)[0]
    torch.testing.assert_close(tiled_attention(q, k, v, 5), expected, atol=1e-5, rtol=1e-5)


def test_tiled_attention_bfloat16_keeps_statistics_in_float32():
    q, k, v = _qkv((2, 2), 64, 64, 32, 32, seed=6)
    out = tiled_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), 16)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), F.scaled_dot_product_attention(q, k, v), atol=2e-2, rtol=2e-2)


def test_tiled_attention_does_not_change_its_inputs():
    q, k, v = _qkv((2,), 9, 9, 4, 4)
    copies = [t.clone() for t in (q, k, v)]
    tiled_attention(q, k, v, 4, causal=True)
    assert all(torch.equal(a, b) for a, b in zip(copies, (q, k, v), strict=True))


@pytest.mark.parametrize(
    "args, kwargs, error, words",
    [
        (lambda q, k, v: (q, k, v, 0), {}, ValueError, "block_size must be a positive int"),
        (lambda q, k, v: (q, k, v, 2.5), {}, ValueError, "block_size"),
        (lambda q, k, v: (q, k, v, True), {}, ValueError, "block_size"),
        (lambda q, k, v: (q, k[..., :3], v, 4), {}, ValueError, "same feature size d_k"),
        (lambda q, k, v: (q, k, v[..., :5, :], 4), {}, ValueError, "same number of positions"),
        (lambda q, k, v: (q.long(), k, v, 4), {}, TypeError, "floating-point"),
        (lambda q, k, v: (q, k.double(), v, 4), {}, TypeError, "share one dtype"),
        (lambda q, k, v: (q[:1], k, v, 4), {"causal": False}, None, None),  # broadcasting batch of 1 is fine
        (lambda q, k, v: (q, k[..., :2, :], v[..., :2, :], 4), {"causal": True}, ValueError, "L_q <= L_k"),
        (lambda q, k, v: (q, k[..., :0, :], v[..., :0, :], 4), {}, ValueError, "at least one position"),
        (lambda q, k, v: (q[0, 0], k[0, 0], v[0, 0, 0], 4), {}, ValueError, "[..., seq_len, features]"),
        (lambda q, k, v: (q, k, v.reshape(3, 2, 7, 4), 4), {}, ValueError, "do not broadcast"),
    ],
)
def test_tiled_attention_rejects_bad_input_clearly(args, kwargs, error, words):
    q, k, v = _qkv((2, 3), 7, 7, 4, 4)
    if error is None:
        tiled_attention(*args(q, k, v), **kwargs)
        return
    with pytest.raises(error, match=re.escape(words)):
        tiled_attention(*args(q, k, v), **kwargs)


def test_attention_module_does_not_import_efficient():
    # efficient.py builds on attention.py, never the other way round: no import cycle, and
    # tiled_attention has one home. Checked in a fresh interpreter, where nothing was imported yet.
    code = textwrap.dedent(
        """
        import sys
        import course_utils.attention
        assert "course_utils.efficient" not in sys.modules, "attention imported efficient"
        assert not hasattr(course_utils.attention, "tiled_attention")
        assert "tiled_attention" not in course_utils.attention.__all__
        """
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)


# ---------------------------------------------------------------- online softmax


@pytest.mark.parametrize(
    "shape, block_size, scale, shift",
    [
        ((10,), 4, 1.0, 0.0),
        ((3, 12), 4, 3.0, 0.0),
        ((2, 3, 7), 3, 1.0, 0.0),
        ((4, 9), 20, 1.0, 0.0),
        ((2, 6), 1, 1.0, 0.0),
        ((3, 37), 5, 100.0, 0.0),
        ((2, 11), 4, 1.0, -1000.0),
        ((2, 11), 4, 1.0, 1000.0),
    ],
)
def test_online_softmax_equals_torch_softmax(shape, block_size, scale, shift):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0)) * scale + shift
    torch.testing.assert_close(online_softmax(x, block_size), torch.softmax(x, dim=-1), atol=1e-6, rtol=1e-5)


def test_online_softmax_handles_masked_entries_and_rejects_bad_input():
    x = torch.randn(3, 10)
    x[:, :6] = float("-inf")  # a whole first block of masked scores
    torch.testing.assert_close(online_softmax(x, 4), torch.softmax(x, dim=-1))
    with pytest.raises(ValueError, match="block_size"):
        online_softmax(x, 0)
    with pytest.raises(ValueError, match="floating-point"):
        online_softmax(torch.arange(5), 2)


# ---------------------------------------------------------------- peak memory at n = 8192

_RSS_SCRIPT = textwrap.dedent(
    """
    import json, re, torch
    from course_utils.efficient import naive_attention, tiled_attention

    def status():
        text = open("/proc/self/status").read()
        return {key: int(re.search(key + r":\\s+(\\d+) kB", text).group(1)) * 1024 for key in ("VmRSS", "VmHWM")}

    def extra_peak(fn, *args):
        # reset the kernel's high-water mark to the current resident size (Linux >= 4.0)
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass
        before = status()
        out = fn(*args)
        after = status()
        del out
        # extra resident memory at the peak lies between these two; they are equal after a reset
        return after["VmHWM"] - before["VmHWM"], after["VmHWM"] - before["VmRSS"]

    torch.set_num_threads(1)  # memory does not depend on it, and one thread is fastest on a busy machine
    n, d, block = 8192, 64, 128
    small = [torch.randn(1, 1, 256, d) for _ in range(3)]
    naive_attention(*small), tiled_attention(*small, block)  # load the code paths first
    q, k, v = (torch.randn(1, 1, n, d) for _ in range(3))
    # tiled first, in a fresh process: nothing freed by an earlier big run can hide its allocations
    tiled = extra_peak(lambda q, k, v: tiled_attention(q, k, v, block), q, k, v)
    naive = extra_peak(naive_attention, q, k, v)
    print(json.dumps({"tiled": tiled, "naive": naive}))
    """
)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the resident size from Linux's /proc")
def test_tiled_attention_peak_memory_at_8192_is_at_least_4x_below_naive():
    """Measured by the operating system, not by PyTorch: the process's peak resident memory
    (VmHWM) during each call, minus its resident memory just before, in a fresh subprocess."""
    import json

    result = subprocess.run(
        [sys.executable, "-c", _RSS_SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    naive_low, _ = measured["naive"]
    _, tiled_high = measured["tiled"]
    n = 8192
    # the naive version holds the scores and the weights, two float32 [n, n] matrices (256 MiB each), at once
    assert naive_low >= 0.9 * 2 * n * n * 4, measured
    assert naive_low >= 4 * tiled_high, f"naive {naive_low / 2**20:.0f} MiB vs tiled {tiled_high / 2**20:.0f} MiB"


def test_peak_memory_helper_counts_allocations_exactly():
    x = torch.randn(1000, 1000)
    # exp(x) (a temporary) and the sum (the result) are alive together: two x-sized buffers
    assert peak_memory(lambda t: t.exp() + t, x) == 2 * x.nbytes
    assert peak_memory(lambda t: t[:10].clone(), x) == 10 * 1000 * 4


def test_peak_memory_helper_sees_the_n_squared_matrices():
    n, block = 1024, 64
    q, k, v = _qkv((1, 1), n, n, 64, 64)
    naive, tiled = peak_memory(naive_attention, q, k, v), peak_memory(tiled_attention, q, k, v, block)
    matrix, out = n * n * 4, n * 64 * 4
    assert 2 * matrix <= naive <= 2 * matrix + 4 * out  # scores and weights together, plus the output
    assert tiled <= 5 * n * block * 4 + 4 * out  # a few [n, block] blocks, the running statistics and output


# ---------------------------------------------------------------- KV cache


@pytest.mark.parametrize(
    "batch, prompt_len, steps, d_model, heads, bias",
    [(1, 1, 6, 16, 2, False), (2, 5, 12, 32, 4, False), (3, 7, 9, 24, 3, True)],
)
def test_generation_with_a_kv_cache_equals_full_recomputation(batch, prompt_len, steps, d_model, heads, bias):
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model, heads, qkv_bias=bias).eval()
    prompt = torch.randn(batch, prompt_len, d_model)
    with torch.no_grad():
        cached = generate(mha, prompt, steps, use_cache=True)
        full = generate(mha, prompt, steps, use_cache=False)
    assert cached.shape == full.shape == (batch, prompt_len + steps, d_model)
    torch.testing.assert_close(cached, full, atol=1e-5, rtol=1e-5)
    assert torch.equal(cached[:, :prompt_len], prompt)


def test_attend_with_cache_in_chunks_equals_causal_attention_of_the_whole_sequence():
    torch.manual_seed(1)
    mha = MultiHeadAttention(32, 4).eval()
    x = torch.randn(2, 10, 32)
    with torch.no_grad():
        expected = mha(x, x, x, mask=causal_mask(10))
        cache = KVCache(2, 4, 10, 8)
        pieces = [attend_with_cache(mha, x[:, a:b], cache) for a, b in ((0, 4), (4, 5), (5, 9), (9, 10))]
    torch.testing.assert_close(torch.cat(pieces, dim=1), expected, atol=1e-5, rtol=1e-5)
    assert cache.length == 10 and cache.keys.shape == (2, 4, 10, 8)


def test_kv_cache_rejects_overflow_and_wrong_shapes():
    cache = KVCache(1, 2, 4, 8)
    keys, values = cache.append(torch.ones(1, 2, 3, 8), torch.ones(1, 2, 3, 8))
    assert keys.shape == values.shape == (1, 2, 3, 8)
    with pytest.raises(ValueError, match="holds 4 tokens"):
        cache.append(torch.ones(1, 2, 2, 8), torch.ones(1, 2, 2, 8))
    with pytest.raises(ValueError, match=r"shape \[1, 2, t, 8\]"):
        cache.append(torch.ones(1, 3, 1, 8), torch.ones(1, 3, 1, 8))
    with pytest.raises(ValueError, match="same number of tokens"):
        cache.append(torch.ones(1, 2, 1, 8), torch.ones(1, 2, 0, 8))
    with pytest.raises(ValueError, match="max_len must be a positive int"):
        KVCache(1, 2, 0, 8)


# ---------------------------------------------------------------- measuring helpers


@pytest.mark.parametrize("causal", [False, True])
def test_attention_flops_matches_pytorchs_flop_counter(causal):
    from torch.utils.flop_counter import FlopCounterMode

    b, h, n, d = 2, 3, 64, 16
    q, k, v = _qkv((b, h), n, n, d, d)
    with FlopCounterMode(display=False) as counter:
        naive_attention(q, k, v)  # full q k^T and weights @ v (masking does not skip work)
    assert attention_flops(b, h, n, n, d) == counter.get_total_flops()
    expected = counter.get_total_flops() // 2 if causal else counter.get_total_flops()
    assert attention_flops(b, h, n, n, d, causal=causal) == expected


def test_sdpa_methods_on_cpu_agree_with_the_reference():
    q, k, v = _qkv((1, 2), 32, 32, 16, 16)
    methods = sdpa_methods("cpu")
    assert {"SDPA math", "SDPA flash"} <= set(methods)
    for name, fn in methods.items():
        torch.testing.assert_close(fn(q, k, v), naive_attention(q, k, v), atol=1e-5, rtol=1e-5, msg=name)
        torch.testing.assert_close(
            fn(q, k, v, causal=True), naive_attention(q, k, v, causal=True), atol=1e-5, rtol=1e-5, msg=name
        )


def test_sdpa_backends_are_pytorchs_and_unavailable_ones_are_left_out():
    from torch.nn.attention import SDPBackend

    assert set(SDPA_BACKENDS.values()) == {
        SDPBackend.MATH,
        SDPBackend.FLASH_ATTENTION,
        SDPBackend.EFFICIENT_ATTENTION,
        SDPBackend.CUDNN_ATTENTION,
    }
    methods = sdpa_methods("cpu", torch.float32, 64)
    assert set(methods) <= set(SDPA_BACKENDS)
    if not torch.cuda.is_available():  # without CUDA the two CUDA-only kernels cannot run
        assert "SDPA memory-efficient" not in methods and "SDPA cuDNN" not in methods


def test_time_alternating_takes_turns_and_keeps_each_best():
    calls, durations = [], {"slow": [0.08, 0.02, 0.1], "fast": [0.01, 0.05, 0.01]}

    def timed(name):
        def fn(x):
            calls.append(name)
            time.sleep(durations[name][(len(calls) - 1) // 4] if len(calls) % 2 == 0 else 0)  # warm-up: no sleep
            return x

        return fn

    best = time_alternating({"slow": timed("slow"), "fast": timed("fast")}, torch.zeros(1), repeats=3)
    # each round: slow's warm-up and run, then fast's; so neither gets all of one busy stretch
    assert calls == ["slow", "slow", "fast", "fast"] * 3
    assert best["slow"] == pytest.approx(0.02, abs=0.008) and best["fast"] == pytest.approx(0.01, abs=0.008)  # the best


def test_time_call_and_loglog_slope():
    x = torch.randn(64, 64)
    assert 0 < time_call(torch.matmul, x, x, repeats=2) < 5
    assert loglog_slope([1, 2, 4, 8], [3, 12, 48, 192]) == pytest.approx(2.0)
    assert loglog_slope([10, 100], [5, 50]) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        loglog_slope([1], [1])
    with pytest.raises(ValueError):
        loglog_slope([1, 2], [0, 1])
    assert math.isfinite(loglog_slope([1, 2, 3], [1, 2, 3]))


def test_numpy_integer_sizes_are_accepted_and_floats_refused():
    q, k, v = _qkv((2,), 7, 9, 8, 4)
    torch.testing.assert_close(tiled_attention(q, k, v, np.int64(4)), tiled_attention(q, k, v, 4), atol=0, rtol=0)
    torch.testing.assert_close(online_softmax(q, np.int32(3)), online_softmax(q, 3), atol=0, rtol=0)
    cache = KVCache(np.int64(2), np.int64(2), np.int64(8), np.int64(4))
    assert cache.keys.shape == (2, 2, 0, 4) and cache.max_len == 8
    mha = MultiHeadAttention(8, 2).eval()
    assert generate(mha, torch.randn(1, 3, 8), np.int64(2)).shape == (1, 5, 8)
    for bad in (True, 4.0, np.float32(4.0), np.int64(0)):
        with pytest.raises(ValueError, match="block_size must be a positive int"):
            tiled_attention(q, k, v, bad)
        with pytest.raises(ValueError, match="block_size must be a positive int"):
            online_softmax(q, bad)
        with pytest.raises(ValueError, match="max_len must be a positive int"):
            KVCache(2, 2, bad, 4)
        with pytest.raises(ValueError, match="steps must be a positive int"):
            generate(mha, torch.randn(1, 3, 8), bad)


def test_tiled_attention_names_mismatched_inputs_like_the_reference():
    q, k, v = _qkv((2,), 7, 9, 8, 4)
    with pytest.raises(TypeError, match=r"torch.from_numpy\(q\).float\(\)"):
        tiled_attention(q.numpy(), k, v, 4)
    with pytest.raises(TypeError, match="share one dtype"):
        tiled_attention(q.double(), k, v, 4)
