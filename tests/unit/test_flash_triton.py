"""The Triton FlashAttention kernel: equal to PyTorch's attention under the interpreter (CPU) and compiled (GPU),
gradients through the PyTorch backward, clear errors, and the interpreter switched on without the learner's help."""

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from course_utils import flash_triton
from course_utils.flash_triton import (
    flash_attention_triton,
    flash_attention_triton_backward,
    flash_attention_triton_forward,
    run_forward_kernel,
)

needs_triton = pytest.mark.skipif(not flash_triton.TRITON_AVAILABLE, reason="Triton is not installed")
needs_cuda = pytest.mark.skipif(
    not (torch.cuda.is_available() and flash_triton.TRITON_AVAILABLE and not flash_triton.INTERPRETED),
    reason="the compiled kernel needs a CUDA GPU and Triton (here kernels run interpreted, or not at all)",
)
ROOT = Path(__file__).resolve().parents[2]

# (batch shape, L_q, L_k, d, d_v, causal, block_m, block_n): ragged lengths, L_q != L_k, d not a power of two
SHAPES = [
    ((2, 3), 37, 53, 16, 16, False, 16, 16),
    ((2, 3), 37, 53, 16, 16, True, 16, 16),
    ((1,), 53, 37, 20, 12, True, 16, 32),
    ((3,), 40, 40, 12, 20, True, 32, 16),
    ((), 17, 33, 8, 8, False, 16, 16),
    ((1, 2), 130, 130, 64, 64, True, 64, 64),
    ((1, 2), 1, 70, 32, 32, True, 16, 16),
]


def qkv(batch, L_q, L_k, d, d_v, dtype=torch.float32, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = ((*batch, L_q, d), (*batch, L_k, d), (*batch, L_k, d_v))
    return [torch.randn(s, generator=g).to(device=device, dtype=dtype) for s in shapes]


def reference(q, k, v, causal):
    """(output, natural-log logsumexp) of dense attention in float64, top-left causal like SDPA."""
    scores = q.double() @ k.double().transpose(-2, -1) / q.shape[-1] ** 0.5
    if causal:
        scores = scores.masked_fill(
            ~torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).tril(), -torch.inf
        )
    return torch.softmax(scores, -1) @ v.double(), torch.logsumexp(scores, -1)


def test_no_gpu_means_interpreter():
    if not torch.cuda.is_available():
        assert os.environ["TRITON_INTERPRET"] == "1"
        assert flash_triton.INTERPRETED == flash_triton.TRITON_AVAILABLE


def run_script(script, **env_changes):
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"} | env_changes
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()


@needs_triton
def test_kernels_defined_later_run_interpreted_without_the_learner_setting_anything():
    """As a notebook does it: import the course module, then define a kernel with @triton.jit. Even when
    triton was imported before (by another library), before TRITON_INTERPRET was set."""
    script = """
        import torch
        import triton  # imported before the course module sets TRITON_INTERPRET

        from course_utils.flash_triton import INTERPRETED, tl, triton

        @triton.jit
        def row_sums(X, Out, N: tl.constexpr):
            i = tl.arange(0, N)
            x = tl.load(X + i[:, None] * N + i[None, :])
            tl.store(Out + i, tl.sum(x, 1))  # tl.sum is one of triton's own @triton.jit helpers

        x = torch.arange(256.0).reshape(16, 16)
        out = torch.zeros(16)
        if not torch.cuda.is_available():
            row_sums[(1,)](x, out, 16)
            assert torch.equal(out, x.sum(1)), out
        print(type(row_sums).__name__, INTERPRETED)
        """
    if not torch.cuda.is_available():
        assert run_script(script) == ["InterpretedFunction", "True"]


@needs_triton
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_equals_reference_under_the_interpreter(shape):
    batch, L_q, L_k, d, d_v, causal, block_m, block_n = shape
    q, k, v = qkv(batch, L_q, L_k, d, d_v)
    out, lse = run_forward_kernel(
        flash_triton.interpreted(flash_triton.flash_forward_kernel), q, k, v, causal, block_m, block_n
    )
    expected_out, expected_lse = reference(q, k, v, causal)
    assert out.shape == (*batch, L_q, d_v) and out.dtype == torch.float32
    assert lse.shape == (*batch, L_q) and lse.dtype == torch.float32
    torch.testing.assert_close(out.double(), expected_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse.double(), expected_lse, atol=1e-5, rtol=1e-5)
    sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(out, sdpa, atol=1e-5, rtol=1e-5)


@needs_triton
def test_large_scores_do_not_overflow():
    q, k, v = qkv((2,), 45, 70, 16, 16)
    out, lse = flash_attention_triton_forward(q * 10, k * 10, v)  # scores in the hundreds
    expected_out, expected_lse = reference(q * 10, k * 10, v, False)
    assert lse.min() > 100 and torch.isfinite(out).all()
    # float32 scores near 1000 are rounded by about 1e-4: the tolerance is the inputs', not the kernel's
    torch.testing.assert_close(out.double(), expected_out, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(lse.double(), expected_lse, atol=1e-4, rtol=1e-5)


@needs_triton
def test_float16_keeps_its_dtype():
    q, k, v = qkv((2,), 37, 53, 16, 16, dtype=torch.float16)
    out, _ = flash_attention_triton_forward(q, k, v, causal=True)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.double(), reference(q, k, v, True)[0], atol=2e-3, rtol=2e-3)


@needs_triton
@pytest.mark.parametrize(
    ("batch", "L_q", "L_k", "d", "d_v", "causal", "blocks"),
    [
        ((2, 2), 37, 53, 16, 24, False, (16, 16)),
        ((2, 2), 37, 53, 16, 24, True, (16, 16)),
        ((1,), 53, 37, 20, 12, True, (32, 16)),
        ((3,), 40, 40, 12, 20, True, (16, 32)),
        ((1, 2), 130, 130, 64, 64, True, (None, None)),
    ],
    ids=str,
)
def test_gradients_equal_autograd_through_naive_attention(batch, L_q, L_k, d, d_v, causal, blocks):
    q, k, v = qkv(batch, L_q, L_k, d, d_v)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = flash_attention_triton(*leaves, causal, *blocks)
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    grads = torch.autograd.grad(out, leaves, grad_out)
    naive = [t.double().requires_grad_() for t in (q, k, v)]
    expected = torch.autograd.grad(reference(*naive, causal)[0], naive, grad_out.double())
    torch.testing.assert_close(out.double(), reference(q, k, v, causal)[0], atol=1e-5, rtol=1e-5)
    for got, want in zip(grads, expected, strict=True):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-4)


@needs_triton
def test_triton_backward_equals_the_pytorch_backward():
    from course_utils.flash import flash_attention_backward

    q, k, v = qkv((2,), 45, 30, 16, 16)
    out, lse = flash_attention_triton_forward(q, k, v, causal=True)
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    triton_grads = flash_attention_triton_backward(q, k, v, out, lse, grad_out, causal=True, block_m=16, block_n=16)
    torch_grads = flash_attention_backward(q, k, v, out, lse, grad_out, causal=True, block_size=16)
    for got, want in zip(triton_grads, torch_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


@needs_triton
@pytest.mark.parametrize("name", ["output", "logsumexp", "grad_output"])
def test_backward_names_a_wrong_saved_tensor(name):
    q, k, v = qkv((2,), 8, 8, 16, 16)
    args = {"output": torch.zeros(2, 8, 16), "logsumexp": torch.zeros(2, 8), "grad_output": torch.zeros(2, 8, 16)}
    args[name] = args[name][..., :-1]
    with pytest.raises(ValueError, match=f"{name} must be a tensor of shape"):
        flash_attention_triton_backward(q, k, v, **args)


@needs_triton
def test_backward_keeps_only_the_logsumexp_beside_the_inputs_and_output():
    q, k, v = (t.requires_grad_() for t in qkv((2,), 20, 30, 16, 16))
    out = flash_attention_triton(q, k, v)
    saved = out.grad_fn.saved_tensors
    assert len(saved) == 5
    assert [tuple(t.shape) for t in saved[:4]] == [(2, 20, 16), (2, 30, 16), (2, 30, 16), (2, 20, 16)]
    assert tuple(saved[4].shape) == (2, 20)  # the logsumexp, one number per query


# --------------------------------------------------------------------------- clear errors


@needs_triton
@pytest.mark.parametrize(
    ("change", "error", "phrase"),
    [
        ({"q": torch.zeros(2, 5, 8, dtype=torch.float64)}, TypeError, "float16, bfloat16 or float32"),
        ({"q": torch.zeros(2, 5, 4)}, ValueError, "same d"),
        ({"v": torch.zeros(2, 6, 8)}, ValueError, "same L_k"),
        ({"k": torch.zeros(3, 7, 8)}, ValueError, "same leading (batch, head) shape"),
        ({"q": [[1.0]]}, TypeError, "q must be a torch.Tensor"),
        ({"q": torch.zeros(2, 0, 8)}, ValueError, "seq_len, d >= 1"),
        ({"block_m": 24}, ValueError, "block_m must be a power of two >= 16"),
        ({"block_n": 8}, ValueError, "block_n must be a power of two >= 16"),
        ({"causal": "yes"}, TypeError, "causal must be True or False"),
    ],
    ids=lambda x: str(x)[:30] if isinstance(x, str) else None,
)
def test_bad_input_is_named(change, error, phrase):
    args = dict(
        q=torch.zeros(2, 5, 8), k=torch.zeros(2, 7, 8), v=torch.zeros(2, 7, 8), causal=False, block_m=16, block_n=16
    )
    args.update(change)
    with pytest.raises(error, match=phrase.replace("(", r"\(").replace(")", r"\)")):
        flash_attention_triton_forward(**args)


@needs_triton
def test_bfloat16_is_refused_by_the_interpreter():
    q, k, v = qkv((1,), 8, 8, 16, 16, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="bfloat16 cannot run under Triton's interpreter"):
        run_forward_kernel(flash_triton.interpreted(flash_triton.flash_forward_kernel), q, k, v)


@needs_triton
def test_cpu_tensors_for_a_compiled_kernel_are_named(monkeypatch):
    from triton.runtime.jit import JITFunction

    compiled = JITFunction(flash_triton.flash_forward_kernel.fn)  # what @triton.jit makes on a GPU machine
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="made for Triton's compiler, but this machine has no CUDA GPU"):
            run_forward_kernel(compiled, *qkv((1,), 8, 8, 16, 16))
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on a GPU machine
    with pytest.raises(ValueError, match="compiled for the GPU.*must be CUDA tensors"):
        run_forward_kernel(compiled, *qkv((1,), 8, 8, 16, 16))


@needs_triton
def test_a_plain_function_is_not_a_kernel():
    with pytest.raises(TypeError, match="@triton.jit"):
        run_forward_kernel(flash_triton.flash_forward_kernel.fn, *qkv((1,), 8, 8, 16, 16))


def test_without_triton_the_module_imports_and_says_why_it_cannot_run(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # `import triton` now raises ImportError
    monkeypatch.setitem(sys.modules, "triton.language", None)
    spec = importlib.util.spec_from_file_location("flash_triton_without_triton", flash_triton.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.TRITON_AVAILABLE is False and module.INTERPRETED is False
    assert callable(module.flash_forward_kernel)  # defined, as a notebook cell's kernel would be
    with pytest.raises(RuntimeError, match="Triton is not installed"):
        module.flash_attention_triton(*qkv((1,), 8, 8, 16, 16))


# --------------------------------------------------------------------------- compiled on a GPU


@needs_triton
def test_as_on_a_gpu_machine_the_kernels_compile_and_the_exercise_is_checked_interpreted():
    """What the interpreter cannot show: the kernels also pass Triton's compiler (types, loop-carried
    values, constexpr branches), down to an sm_90 binary (H100/H200), with no GPU here. In a fresh process,
    told there is a GPU, so that nothing switches the interpreter on; there the exercise's checker still
    runs kernels interpreted (triton's own helpers, made for the compiler, included)."""
    script = """
        import warnings

        import torch

        torch.cuda.is_available = lambda: True  # the course module then leaves the compiler on
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource

        from course_utils import flash_triton

        warnings.simplefilter("ignore")  # Triton 3.9's note on the default of FP fusion
        scalars = {"L_q": "i32", "L_k": "i32", "scale": "fp32"}
        for name, kernel, pointers, constants, options in [
            ("forward", flash_triton.flash_forward_kernel, ("Q", "K", "V", "Out"), {"BLOCK_M": 128}, (8, 2)),
            ("dk, dv", flash_triton.flash_backward_dkdv_kernel, ("Q", "K", "V", "DO", "DK", "DV"), {}, (4, 1)),
            ("dq", flash_triton.flash_backward_dq_kernel, ("Q", "K", "V", "DO", "DQ"), {}, (4, 1)),
        ]:
            # bfloat16, d = 64, causal, the default block sizes and launch options on a GPU
            constants = {"CAUSAL": True, "BLOCK_M": 64, "BLOCK_N": 64, "D": 64, "D_V": 64} | constants
            signature = dict.fromkeys(pointers, "*bf16") | {"LSE": "*fp32", "DELTA": "*fp32"} | scalars
            signature = {arg: signature[arg] for arg in kernel.arg_names if arg not in constants}
            signature |= dict.fromkeys(constants, "constexpr")
            source = ASTSource(kernel, signature, constexprs=constants)
            compiled = triton.compile(
                source, target=GPUTarget("cuda", 90, 32), options={"num_warps": options[0], "num_stages": options[1]}
            )
            assert "tt.dot" in compiled.asm["ttir"] and len(compiled.asm["cubin"]) > 0, name
            assert compiled.metadata.shared <= 227 * 1024, (name, compiled.metadata.shared)  # an H100's shared memory
            print(type(kernel).__name__)

        from course_utils.exercises import check

        print(check("flash_forward_kernel", flash_triton.flash_forward_kernel, quiet=True).status)
        """
    assert run_script(script) == ["JITFunction"] * 3 + ["passed"]


# Tolerances on a GPU: tl.dot of float32 inputs uses TF32 (10-bit mantissa) by default, of bfloat16 inputs
# bfloat16 products (8-bit mantissa) summed in float32; outputs are rounded to the input dtype.
GPU_TOLERANCE = {torch.float32: 5e-3, torch.float16: 2e-3, torch.bfloat16: 2e-2}


@needs_cuda
@pytest.mark.parametrize("dtype", list(GPU_TOLERANCE), ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_compiled_forward_equals_reference_on_gpu(shape, dtype):
    batch, L_q, L_k, d, d_v, causal, block_m, block_n = shape
    q, k, v = qkv(batch, L_q, L_k, d, d_v, dtype=dtype, device="cuda")
    out, lse = run_forward_kernel(flash_triton.flash_forward_kernel, q, k, v, causal, block_m, block_n)
    expected_out, expected_lse = reference(q, k, v, causal)
    tol = GPU_TOLERANCE[dtype]
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), expected_out, atol=tol, rtol=tol)
    torch.testing.assert_close(lse.double(), expected_lse, atol=tol, rtol=tol)


@needs_cuda
@pytest.mark.parametrize("causal", [False, True])
def test_compiled_forward_and_backward_are_as_accurate_as_pytorch_in_bfloat16(causal):
    """Default block sizes, bf16, n = 1000 (ragged): the errors against float64 stay within twice
    those of PyTorch's own bf16 attention (plus 1e-2)."""
    inputs = qkv((2, 4), 1000, 1000, 64, 64, dtype=torch.bfloat16, device="cuda")
    grad_out = torch.randn(2, 4, 1000, 64, generator=torch.Generator().manual_seed(3)).to("cuda", torch.bfloat16)
    exact = [t.double().requires_grad_() for t in inputs]
    exact_out = reference(*exact, causal)[0]
    exact_results = [exact_out, *torch.autograd.grad(exact_out, exact, grad_out.double())]

    def errors(fn):
        leaves = [t.clone().requires_grad_() for t in inputs]
        out = fn(*leaves)
        results = [out, *torch.autograd.grad(out, leaves, grad_out)]
        return [(got.double() - want).abs().max().item() for got, want in zip(results, exact_results, strict=True)]

    ours = errors(lambda q, k, v: flash_attention_triton(q, k, v, causal))
    theirs = errors(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    for what, mine, pytorch in zip(["output", "dq", "dk", "dv"], ours, theirs, strict=True):
        assert mine <= 2 * pytorch + 1e-2, (what, mine, pytorch)


@needs_cuda
def test_cpu_tensors_on_a_gpu_machine_are_named():
    with pytest.raises(ValueError, match="must be CUDA tensors"):
        flash_attention_triton_forward(*qkv((1,), 8, 8, 16, 16))
