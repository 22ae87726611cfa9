"""course_utils.flash: FlashAttention's forward, backward and autograd.Function are exact,
keep only q, k, v, O and the logsumexp, never build the [L_q, L_k] matrix, skip the causal
blocks above the diagonal, and need a fraction of naive attention's memory.

Oracles: autograd through the course's reference attention and through an explicit
softmax, F.scaled_dot_product_attention, torch.logsumexp, torch.autograd.gradcheck,
PyTorch's dispatcher (every operation run and every tensor made, recorded by a
TorchDispatchMode), causal masks and block counts built here element by element, and
the operating system's count of the process's peak resident memory.
"""

import functools
import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from course_utils.attention import scaled_dot_product_attention
from course_utils.flash import (
    causal_block_counts,
    causal_block_map,
    flash_attention,
    flash_attention_backward,
    flash_attention_forward,
    peak_memory_bytes,
    saved_for_backward,
    saved_for_backward_bytes,
)

ROOT = Path(__file__).resolve().parents[2]


def _qkv(batch, n_q, n_k, d, d_v, seed=0, scale=1.0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, n_q, d, generator=g, dtype=torch.float64) * scale
    k = torch.randn(*batch, n_k, d, generator=g, dtype=torch.float64) * scale
    v = torch.randn(*batch, n_k, d_v, generator=g, dtype=torch.float64)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def _allowed(n_q, n_k):
    """Top-left causal mask, element by element: query i may attend key j iff j <= i."""
    return torch.tensor([[j <= i for j in range(n_k)] for i in range(n_q)])


def _reference(q, k, v, causal):
    """Output of the course's four-step attention (lesson 02), differentiable by autograd."""
    mask = _allowed(q.shape[-2], k.shape[-2]) if causal else None
    return scaled_dot_product_attention(q, k, v, mask)[0]


def _grads(fn, q, k, v, grad_output=None):
    """(output, dq, dk, dv) of fn by autograd; dO = ones unless given."""
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    out = fn(q, k, v)
    return (out, *torch.autograd.grad(out, (q, k, v), torch.ones_like(out) if grad_output is None else grad_output))


SHAPES = [  # batch, n_q, n_k, d, d_v, block_size
    ((), 16, 16, 8, 8, 4),  # blocks divide n
    ((), 17, 17, 8, 8, 4),  # a last block of one position
    ((2,), 33, 50, 16, 12, 7),  # L_q < L_k, d_v != d, ragged blocks
    ((2,), 50, 33, 16, 12, 7),  # L_q > L_k: the causal rows past L_k see every key
    ((2, 3), 64, 64, 32, 32, 64),  # one block exactly
    ((2, 3), 40, 40, 8, 8, 1000),  # a block larger than the sequence
    ((1, 2), 5, 9, 4, 4, 1),  # blocks of one position
    ((2, 2), 70, 70, 16, 16, 16),  # several blocks on and off the diagonal, ragged
]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("batch, n_q, n_k, d, d_v, block_size", SHAPES)
def test_output_and_gradients_equal_autograd_through_the_reference_in_float64(
    batch, n_q, n_k, d, d_v, block_size, causal
):
    q, k, v = _qkv(batch, n_q, n_k, d, d_v)
    grad_output = torch.randn(*batch, n_q, d_v, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    flash = _grads(lambda q, k, v: flash_attention(q, k, v, causal, block_size), q, k, v, grad_output)
    expected = _grads(lambda q, k, v: _reference(q, k, v, causal), q, k, v, grad_output)
    for name, got, want in zip(("output", "dq", "dk", "dv"), flash, expected, strict=True):
        assert got.shape == want.shape and got.dtype == torch.float64, name
        torch.testing.assert_close(got, want, atol=1e-8, rtol=1e-8, msg=name)


@pytest.mark.parametrize("causal", [False, True])
def test_backward_function_equals_autograd_and_broadcast_batch_dims_sum_their_gradients(causal):
    # q [L_q, d] attends the keys of two sequences: its gradient sums over both
    q, _, _ = _qkv((), 11, 1, 8, 8, seed=3)
    _, k, v = _qkv((2,), 1, 13, 8, 6, seed=4)
    grad_output = torch.randn(2, 11, 6, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    output, logsumexp = flash_attention_forward(q, k, v, causal, block_size=4)
    got = flash_attention_backward(q, k, v, output, logsumexp, grad_output.mT.mT, causal, block_size=4)
    expected = _grads(lambda q, k, v: _reference(q, k, v, causal), q, k, v, grad_output)[1:]
    for name, g, e, x in zip(("dq", "dk", "dv"), got, expected, (q, k, v), strict=True):
        assert g.shape == x.shape, name
        torch.testing.assert_close(g, e, atol=1e-8, rtol=1e-8, msg=name)


@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck(causal):
    q, k, v = _qkv((2,), 7, 10, 4, 3, seed=6)
    inputs = tuple(x.requires_grad_() for x in (q, k, v))
    assert torch.autograd.gradcheck(lambda q, k, v: flash_attention(q, k, v, causal, block_size=3), inputs)


@pytest.mark.parametrize("causal", [False, True])
def test_float32_matches_pytorch_and_the_float64_gradients_to_1e_5(causal):
    q, k, v = _qkv((2, 4), 100, 100, 32, 32, seed=7, dtype=torch.float32)
    grad_output = torch.randn(2, 4, 100, 32, generator=torch.Generator().manual_seed(8))
    flash = _grads(lambda q, k, v: flash_attention(q, k, v, causal, block_size=32), q, k, v, grad_output)
    torch.testing.assert_close(
        flash[0], F.scaled_dot_product_attention(q, k, v, is_causal=causal), atol=1e-5, rtol=1e-5
    )
    expected = _grads(
        lambda q, k, v: _reference(q, k, v, causal), q.double(), k.double(), v.double(), grad_output.double()
    )
    for name, got, want in zip(("output", "dq", "dk", "dv"), flash, expected, strict=True):
        assert got.dtype == torch.float32, name
        torch.testing.assert_close(got, want.float(), atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_q, n_k, block_size", [(30, 30, 8), (20, 45, 16), (45, 20, 7)])
def test_logsumexp_is_the_natural_log_of_the_masked_scaled_scores(n_q, n_k, block_size, causal):
    q, k, v = _qkv((2, 3), n_q, n_k, 16, 16, seed=10, scale=3.0)  # scores in the tens: needs the running max
    output, logsumexp = flash_attention_forward(q, k, v, causal, block_size)
    scores = q @ k.mT / math.sqrt(16)
    if causal:
        scores = scores.masked_fill(~_allowed(n_q, n_k), float("-inf"))
    assert logsumexp.shape == (2, 3, n_q) and logsumexp.dtype == torch.float64
    torch.testing.assert_close(logsumexp, torch.logsumexp(scores, dim=-1), atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(output, F.scaled_dot_product_attention(q, k, v, is_causal=causal))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_inputs_keep_the_statistics_in_float32(dtype):
    q, k, v = _qkv((2,), 40, 40, 16, 16, seed=11, dtype=dtype)
    out, logsumexp = flash_attention_forward(q, k, v, causal=True, block_size=16)
    assert out.dtype == dtype and logsumexp.dtype == torch.float32
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    # one rounding of the output to 8 (bfloat16) or 11 (float16) significant bits
    tolerance = 1e-2 if dtype == torch.bfloat16 else 2e-3
    torch.testing.assert_close(out.double(), expected, atol=tolerance, rtol=tolerance)
    grads = _grads(lambda q, k, v: flash_attention(q, k, v, True, 16), q, k, v)[1:]
    assert all(g.dtype == dtype and torch.isfinite(g).all() for g in grads)


def test_large_scores_do_not_overflow():
    q, k, v = _qkv((2,), 30, 30, 16, 16, seed=12, scale=10.0, dtype=torch.float32)  # scores in the hundreds
    expected = _grads(lambda q, k, v: _reference(q, k, v, True), q.double(), k.double(), v.double())
    got = _grads(lambda q, k, v: flash_attention(q, k, v, True, 8), q, k, v)
    for g, e in zip(got, expected, strict=True):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g.double(), e, atol=1e-3, rtol=1e-3)


def test_skipping_masked_blocks_changes_nothing_but_the_work():
    q, k, v = _qkv((2,), 45, 37, 8, 8, seed=13)
    grad_output = torch.randn(2, 45, 8, generator=torch.Generator().manual_seed(14), dtype=torch.float64)
    skip = _grads(lambda q, k, v: flash_attention(q, k, v, True, 8), q, k, v, grad_output)
    no_skip = _grads(lambda q, k, v: flash_attention(q, k, v, True, 8, skip_masked_blocks=False), q, k, v, grad_output)
    for a, b in zip(skip, no_skip, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


def test_inputs_are_not_changed():
    q, k, v = _qkv((2,), 20, 20, 8, 8, seed=15)
    copies = [x.clone() for x in (q, k, v)]
    _grads(lambda q, k, v: flash_attention(q, k, v, True, 8), q, k, v)
    assert all(torch.equal(a, b) for a, b in zip((q, k, v), copies, strict=True))


# ---------------------------------------------------------------- what is saved for the backward


def test_the_autograd_function_saves_q_k_v_the_output_and_one_logsumexp_row():
    q, k, v = (x.requires_grad_() for x in _qkv((2, 3), 40, 24, 8, 6, seed=16))
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        output = flash_attention(q, k, v, causal=True, block_size=16)
    assert len(saved) == 5
    for t, x in zip(saved[:3], (q, k, v), strict=True):  # the inputs themselves, not copies
        assert t.data_ptr() == x.data_ptr() and t.shape == x.shape
    assert saved[3].data_ptr() == output.data_ptr()
    assert saved[4].shape == (2, 3, 40)  # one number per query: the logsumexp


def test_saved_bytes_flash_keeps_no_n_by_n_matrix_naive_does():
    n, d = 256, 32
    q, k, v = _qkv((1, 1), n, n, d, d, dtype=torch.float32)
    # q, k, v, O: n x d floats each; the logsumexp: n floats
    assert saved_for_backward_bytes(flash_attention, q, k, v) == (4 * n * d + n) * 4
    naive = lambda q, k, v: torch.softmax(q @ k.mT / math.sqrt(d), dim=-1) @ v  # noqa: E731
    # q and k^T (the view of k counted once) for q k^T; the n x n softmax output; v
    assert saved_for_backward_bytes(naive, q, k, v) == (3 * n * d + n * n) * 4
    assert [tuple(t.shape) for t in saved_for_backward(flash_attention, q, k, v)][-1] == (1, 1, n)


# ---------------------------------------------------------------- what is computed


class _Recorder(TorchDispatchMode):
    """Records every operation PyTorch runs and the shape of every tensor it makes."""

    def __init__(self):
        super().__init__()
        self.ops, self.shapes = [], []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        self.ops.append(func)
        outputs = result if isinstance(result, (tuple, list)) else [result]
        self.shapes += [tuple(t.shape) for t in outputs if isinstance(t, torch.Tensor)]
        return result


def _matrix_shapes(shapes, n_q, n_k):
    return [s for s in shapes if len(s) >= 2 and set(s[-2:]) == {n_q, n_k}]


@pytest.mark.parametrize("causal", [False, True])
def test_forward_and_backward_never_make_an_l_q_by_l_k_tensor(causal):
    n_q, n_k, block_size = 37, 53, 16
    q, k, v = (x.requires_grad_() for x in _qkv((2, 2), n_q, n_k, 8, 6, seed=17))
    with _Recorder() as naive:  # the detector sees the naive attention's matrix
        _reference(q, k, v, causal).sum().backward()
    assert _matrix_shapes(naive.shapes, n_q, n_k)
    with _Recorder() as flash:
        flash_attention(q, k, v, causal, block_size).sum().backward()
    assert flash.shapes and not _matrix_shapes(flash.shapes, n_q, n_k)
    largest = max(math.prod(s) for s in flash.shapes)
    assert largest <= 2 * 2 * max(n_q, n_k) * 8  # q, k, v, O and their gradients: nothing bigger


def _pairs_with_an_allowed_key(n_q, n_k, block_size):
    """(query block, key block) pairs with at least one allowed (query, key), from the full mask."""
    allowed = _allowed(n_q, n_k)
    pairs = set()
    for i in range(0, n_q, block_size):
        for j in range(0, n_k, block_size):
            if allowed[i : i + block_size, j : j + block_size].any():
                pairs.add((i // block_size, j // block_size))
    return pairs


def _matmuls(fn):
    with _Recorder() as recorder:
        fn()
    matmul = (torch.ops.aten.mm.default, torch.ops.aten.bmm.default)
    return sum(op in matmul for op in recorder.ops)


@pytest.mark.parametrize("n_q, n_k, block_size", [(64, 64, 16), (70, 70, 16), (40, 90, 16), (90, 40, 16), (9, 9, 4)])
def test_causal_attention_computes_only_the_blocks_with_an_allowed_key(n_q, n_k, block_size):
    pairs = _pairs_with_an_allowed_key(n_q, n_k, block_size)
    total = math.ceil(n_q / block_size) * math.ceil(n_k / block_size)
    assert causal_block_counts(n_q, n_k, block_size) == {
        "computed": len(pairs),
        "skipped": total - len(pairs),
        "total": total,
    }
    assert {tuple(ij) for ij in causal_block_map(n_q, n_k, block_size).nonzero().tolist()} == pairs
    q, k, v = _qkv((2,), n_q, n_k, 8, 8, seed=18)
    dO = torch.ones(2, n_q, 8, dtype=torch.float64)
    for skip, blocks in ((True, len(pairs)), (False, total)):
        out, lse = flash_attention_forward(q, k, v, True, block_size, skip_masked_blocks=skip)
        # per block: the forward multiplies S = q k^T and P v; the backward rebuilds S and makes dV, dP, dQ, dK
        forward = functools.partial(flash_attention_forward, q, k, v, True, block_size, skip)
        backward = functools.partial(flash_attention_backward, q, k, v, out, lse, dO, True, block_size, skip)
        assert _matmuls(forward) == 2 * blocks
        assert _matmuls(backward) == 5 * blocks


def test_about_half_the_blocks_are_skipped_at_long_sequences():
    n, block_size = 4096, 64
    blocks = n // block_size
    computed = blocks * (blocks + 1) // 2  # the diagonal and every block below it
    counts = causal_block_counts(n, n, block_size)
    assert counts == {"computed": computed, "skipped": blocks * blocks - computed, "total": blocks * blocks}
    assert 0.45 < counts["skipped"] / counts["total"] < 0.5


# ---------------------------------------------------------------- peak memory at n = 4096


def _naive(q, k, v):
    return torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), dim=-1) @ v


def test_peak_memory_of_forward_and_backward_at_4096_is_at_least_4x_below_naive():
    q, k, v = _qkv((1, 1), 4096, 4096, 64, 64, dtype=torch.float32)
    flash = peak_memory_bytes(flash_attention, q, k, v, block_size=256)
    naive = peak_memory_bytes(_naive, q, k, v)
    # naive: scores, probabilities and their gradients are 4096 x 4096 float32 = 64 MiB each
    assert naive >= 2 * 4096 * 4096 * 4
    # flash: at least the three gradients dq, dk, dv are allocated, 1 MiB each
    assert 3 * 4096 * 64 * 4 <= flash <= naive / 4


def test_peak_memory_helper_counts_forward_and_backward_allocations():
    x = torch.randn(1000, 100)
    # output 2 * exp(x), exp(x) saved for exp's backward, dO = ones, dO * 2, then dx = (dO * 2) * exp(x)
    assert peak_memory_bytes(lambda t: t.exp() * 2, x) == 5 * x.nbytes
    # three slices of 10 rows (output, dO, dx of the slice), then dx of the whole tensor
    assert peak_memory_bytes(lambda t: t[:10].exp(), x) == 3 * 10 * 100 * 4 + x.nbytes
    # output, dO, dx, and a few bytes for the number 2 kept for the backward
    assert 3 * x.nbytes <= peak_memory_bytes(lambda t: t * 2, x) <= 3 * x.nbytes + 64


_RSS_SCRIPT = textwrap.dedent(
    """
    import json, re, torch
    from course_utils.flash import flash_attention

    def peak_growth(fn, q, k, v):
        # reset the kernel's high-water mark VmHWM to the resident size now (Linux >= 4.0); the
        # high-water mark of getrusage cannot be reset and is inherited from the parent process
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1))
        q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
        out = fn(q, k, v)
        grads = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
        after = int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1))
        del out, grads
        return (after - before) * 1024

    def naive(q, k, v):
        return torch.softmax(q @ k.mT / 8.0, dim=-1) @ v

    flash = lambda q, k, v: flash_attention(q, k, v, block_size=128)
    torch.set_num_threads(1)  # memory does not depend on it, and one thread is fastest on a busy machine
    small = [torch.randn(1, 1, 256, 64) for _ in range(3)]
    peak_growth(flash, *small), peak_growth(naive, *small)  # load the code paths first
    q, k, v = (torch.randn(1, 1, 4096, 64) for _ in range(3))
    print(json.dumps({"flash": peak_growth(flash, q, k, v), "naive": peak_growth(naive, q, k, v)}))
    """
)


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="reads the resident size from Linux's /proc")
def test_peak_resident_memory_at_4096_is_at_least_4x_below_naive():
    """Measured by the operating system in a fresh process, not by PyTorch's profiler: the growth
    of the process's peak resident memory during forward + backward."""
    result = subprocess.run(
        [sys.executable, "-c", _RSS_SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    growth = json.loads(result.stdout.strip().splitlines()[-1])
    assert growth["naive"] >= 2 * 4096 * 4096 * 4, growth
    assert growth["naive"] >= 4 * growth["flash"], growth


# ---------------------------------------------------------------- bad input

_q, _k, _v = _qkv((2,), 8, 8, 4, 4, dtype=torch.float32)


@pytest.mark.parametrize(
    "args, kwargs, error, words",
    [
        ((_q.numpy(), _k, _v), {}, TypeError, "q must be a torch.Tensor"),
        ((_q, _k.double(), _v), {}, TypeError, "share one dtype"),
        ((_q.int(), _k.int(), _v.int()), {}, TypeError, "floating-point"),
        ((_q[..., :3], _k, _v), {}, ValueError, "same feature size"),
        ((_q, _k, _v[:, :5]), {}, ValueError, "same number of positions"),
        ((_q[0, 0], _k, _v), {}, ValueError, "[..., seq_len, features]"),
        ((_q[:, :0], _k, _v), {}, ValueError, "at least one position"),
        ((_q, _k, _v), {"block_size": 0}, ValueError, "block_size must be a positive int"),
        ((_q, _k, _v), {"block_size": 2.5}, ValueError, "block_size must be a positive int"),
        ((_q, _k, _v), {"causal": torch.ones(8, 8)}, TypeError, "causal must be True or False"),
        ((_q, _k, _v), {"skip_masked_blocks": None}, TypeError, "skip_masked_blocks must be True or False"),
    ],
)
@pytest.mark.parametrize("fn", [flash_attention, flash_attention_forward])
def test_bad_input_is_refused_clearly(fn, args, kwargs, error, words):
    with pytest.raises(error, match=words.replace("[", r"\[").replace(".", r"\.")):
        fn(*args, **kwargs)


def test_unsupported_dtypes_and_devices_are_refused():
    q8 = _q.to(torch.float8_e4m3fn)
    with pytest.raises(TypeError, match="float16, bfloat16, float32 or float64"):
        flash_attention(q8, q8, q8)
    with pytest.raises(ValueError, match="one device"):
        flash_attention(_q.to("meta"), _k, _v)


def test_backward_refuses_mismatched_saved_tensors():
    out, lse = flash_attention_forward(_q, _k, _v)
    dO = torch.ones_like(out)
    with pytest.raises(ValueError, match=r"logsumexp must have shape \(2, 8\)"):
        flash_attention_backward(_q, _k, _v, out, lse[..., None], dO)
    with pytest.raises(ValueError, match=r"grad_output must have shape \(2, 8, 4\)"):
        flash_attention_backward(_q, _k, _v, out, lse, dO[:, :4])
    with pytest.raises(TypeError, match="output must be a torch.Tensor"):
        flash_attention_backward(_q, _k, _v, None, lse, dO)
    with pytest.raises(ValueError, match="block_size"):
        causal_block_counts(8, 8, 0)
