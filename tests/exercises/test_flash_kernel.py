"""Lesson 09's Triton exercise: the course kernel passes, each planted mistake is named by its own message.

The wrong kernels are the course kernel with one line changed, written to a file and
imported (as a notebook cell would be, so Triton can read their source)."""

import importlib.util
import inspect
import linecache
import textwrap

import pytest
import torch

from course_utils import flash_triton
from course_utils.exercises import check, show_solution, solution
from course_utils.exercises import flash_kernel as ex
from tests.exercises.asserts import assert_caught, assert_passes

needs_triton = pytest.mark.skipif(not flash_triton.TRITON_AVAILABLE, reason="Triton is not installed")

SOURCE = textwrap.dedent(
    inspect.getsource(getattr(flash_triton.flash_forward_kernel, "fn", flash_triton.flash_forward_kernel))
)  # @triton.jit def ...
HEADER = "import triton\nimport triton.language as tl\n\n\n"

# name: ((line of the course kernel, its wrong version) or several such pairs, phrase the checker must name)
MISTAKES = {
    "acc not rescaled": (("acc = acc * alpha[:, None] + ", "acc = acc + "), ex.NO_RESCALE_ACC),
    "l_i not rescaled": (("l_i = l_i * alpha + ", "l_i = l_i + "), ex.NO_RESCALE_L),
    "neither rescaled": (
        (("acc = acc * alpha[:, None] + ", "acc = acc + "), ("l_i = l_i * alpha + ", "l_i = l_i + ")),
        ex.NO_RESCALE,
    ),
    "not divided by l_i": (("out = acc / l_i[:, None]", "out = acc"), ex.NOT_NORMALISED),
    "m_i not updated": (("m_i = m_new\n", "pass\n"), ex.MAX_NOT_KEPT),
    "tl.exp with log2 scores": (("tl.exp2(", "tl.exp("), ex.EXP_OF_LOG2),
    "exp2 with natural scores": (("tl.dot(q, k_t) * qk_scale", "tl.dot(q, k_t) * scale"), ex.EXP2_OF_NATURAL),
    "scores not scaled": (("tl.dot(q, k_t) * qk_scale", "tl.dot(q, k_t)"), ex.UNSCALED),
    "padding keys not masked": (("allowed = keys[None, :] < L_k", "allowed = keys[None, :] >= 0"), ex.PADDING_KEYS),
    "causal <": (("keys[None, :] <= rows[:, None]", "keys[None, :] < rows[:, None]"), ex.CAUSAL_STRICT),
    "causal <= i + 1": (("keys[None, :] <= rows[:, None]", "keys[None, :] <= rows[:, None] + 1"), ex.CAUSAL_NEXT),
    "no causal mask": (("allowed & (keys[None, :] <= rows[:, None])", "allowed"), ex.NOT_CAUSAL),
    "no running max": (("m_new = tl.maximum(m_i, tl.max(s, 1))", "m_new = m_i * 0.0 + 0.0"), ex.OVERFLOW),
    "lse = m_i * ln2": (("(m_i + tl.log2(l_i)) * 0.69", "m_i * 0.69"), ex.LSE_M_ONLY),
    "lse = m_i": (("lse = (m_i + tl.log2(l_i)) * 0.6931471805599453", "lse = m_i"), ex.LSE_M_ONLY),
    "lse in log2 units": (("lse = (m_i + tl.log2(l_i)) * 0.6931471805599453", "lse = m_i + tl.log2(l_i)"), ex.LSE_LOG2),
    "lse m_i + log(l_i)": (
        ("lse = (m_i + tl.log2(l_i)) * 0.6931471805599453", "lse = m_i + tl.log(l_i)"),
        ex.LSE_MIXED,
    ),
    "natural units, log2 epilogue": (
        (("tl.dot(q, k_t) * qk_scale", "tl.dot(q, k_t) * scale"), ("tl.exp2(", "tl.exp(")),
        ex.LSE_NATURAL_LOOP,
    ),
    "sum over an axis p lacks": (("tl.sum(p, 1)", "tl.sum(p, 2)"), "your code raised"),
    "K load unmasked": ((", mask=keys[None, :] < L_k, other=0.0)", ")"), ex.LOAD_PAST_LAST),
    "V load unmasked": ((", mask=keys[:, None] < L_k, other=0.0)", ")"), ex.LOAD_PAST_LAST),
    "K and V loads unmasked": (
        ((", mask=keys[None, :] < L_k, other=0.0)", ")"), (", mask=keys[:, None] < L_k, other=0.0)", ")")),
        ex.LOAD_PAST_LAST,
    ),
    "K load mask <= L_k": (("mask=keys[None, :] < L_k, other", "mask=keys[None, :] <= L_k, other"), ex.LOAD_ONE_PAST),
    "V load mask <= L_k": (("mask=keys[:, None] < L_k, other", "mask=keys[:, None] <= L_k, other"), ex.LOAD_ONE_PAST),
    "K per-head offset with L_q": (("K + bh * L_k * D", "K + bh * L_q * D"), ex.HEAD_OFFSET),
    "V per-head offset with D": (("V + bh * L_k * D_V", "V + bh * L_k * D"), ex.HEAD_OFFSET),
    "score mask keys <= L_k": (
        ("allowed = keys[None, :] < L_k", "allowed = keys[None, :] <= L_k"),
        ex.PADDING_ONE_MORE,
    ),
    "causal mask reversed": (("keys[None, :] <= rows[:, None]", "keys[None, :] >= rows[:, None]"), ex.CAUSAL_REVERSED),
}


def kernel_from_source(source, tmp_path, name="learner_kernel"):
    """Import a @triton.jit kernel from its source, written to a file (Triton reads a kernel's source)."""
    path = tmp_path / f"{name}.py"
    path.write_text(HEADER + source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.flash_forward_kernel


def planted_source(changes):
    """The course kernel's source with (old, new) text replaced: one pair, or a tuple of pairs."""
    source = SOURCE
    for old, new in [changes] if isinstance(changes[0], str) else changes:
        assert old in source, f"the course kernel no longer has the line {old!r}: update this test"
        source = source.replace(old, new)
    return source


def planted(changes, tmp_path):
    return kernel_from_source(planted_source(changes), tmp_path)


@needs_triton
@pytest.mark.parametrize("name", MISTAKES)
def test_planted_mistake_is_named(name, tmp_path):
    changes, phrase = MISTAKES[name]
    assert_caught("flash_forward_kernel", planted(changes, tmp_path), phrase)


def test_mistake_phrases_are_distinct():
    phrases = [value for key, value in vars(ex).items() if key.isupper() and isinstance(value, str)]
    phrases = [p for p in phrases if not p.replace(".", "").isdigit()]
    for i, a in enumerate(phrases):
        for b in phrases[i + 1 :]:
            assert a not in b and b not in a, (a, b)


@needs_triton
def test_course_kernel_passes():
    assert_passes("flash_forward_kernel", solution("flash_forward_kernel"))


@needs_triton
def test_natural_units_throughout_pass(tmp_path):
    """A correct alternative: tl.exp of naturally scaled scores, and the logsumexp m_i + log(l_i)."""
    changes = (
        ("tl.dot(q, k_t) * qk_scale", "tl.dot(q, k_t) * scale"),
        ("tl.exp2(", "tl.exp("),
        ("lse = (m_i + tl.log2(l_i)) * 0.6931471805599453", "lse = m_i + tl.log(l_i)"),
    )
    assert_passes("flash_forward_kernel", planted(changes, tmp_path))


@needs_triton
def test_stub_is_not_attempted(tmp_path):
    loop = SOURCE.index("        keys = start_n")
    end = SOURCE.index("    # 5.")
    stub = SOURCE[:loop] + "        raise NotImplementedError\n\n" + SOURCE[end:]
    assert check("flash_forward_kernel", kernel_from_source(stub, tmp_path), quiet=True).status == "not attempted"


@needs_triton
def test_plain_function_is_named(tmp_path):
    kernel = kernel_from_source(SOURCE, tmp_path)
    assert_caught("flash_forward_kernel", kernel.fn, ex.NOT_A_KERNEL)
    assert_caught("flash_forward_kernel", "flash_forward_kernel", ex.NOT_A_KERNEL)


def test_without_triton_the_check_says_so(monkeypatch):
    monkeypatch.setattr(flash_triton, "TRITON_AVAILABLE", False)
    assert_caught("flash_forward_kernel", flash_triton.flash_forward_kernel, ex.NO_TRITON)


@needs_triton
def test_shown_solution_runs_when_pasted(capsys):
    show_solution("flash_forward_kernel")
    shown = capsys.readouterr().out
    assert "@triton.jit" in shown and "import triton.language as tl" in shown
    # A notebook cell's source is in linecache (IPython puts it there), where a compiled kernel reads it.
    filename = "<pasted flash_forward_kernel>"
    linecache.cache[filename] = (len(shown), None, shown.splitlines(keepends=True), filename)
    namespace = {}
    exec(compile(shown, filename, "exec"), namespace)
    assert_passes("flash_forward_kernel", namespace["flash_forward_kernel"])


def test_variant_without_mistakes_is_the_reference():
    for case in ex._cases():
        description, q, k, v, causal, block_m, block_n = case
        out, lse = ex._variant(q, k, v, causal, block_m, block_n)
        ref_out, ref_lse = ex._reference(q, k, v, causal)
        assert (out - ref_out).abs().max() < 1e-5, description
        assert (lse - ref_lse).abs().max() < 1e-4, description


@needs_triton
@pytest.mark.parametrize("name", ["K load unmasked", "K and V loads unmasked"])
def test_an_unmasked_load_is_caught_in_10_of_10_runs(name, tmp_path):
    """Before the guards, K and V unmasked passed one run in six (whatever lay past the tensor decided)."""
    changes, phrase = MISTAKES[name]
    for run in range(10):
        kernel = kernel_from_source(planted_source(changes), tmp_path, name=f"learner_kernel_{run}")
        result = check("flash_forward_kernel", kernel, quiet=True)
        assert not result.passed and phrase in result.message, (run, result.message)
        assert "your load of K" in result.message and "keys[None, :] < L_k" in result.message, result.message


@needs_triton
def test_guarded_buffers_hold_nan_around_the_tensor():
    x = torch.arange(6.0).view(2, 3)
    inner = ex._guarded(x)
    buffer = torch.empty(0).set_(inner.untyped_storage())
    assert torch.equal(inner, x) and inner.is_contiguous()
    assert buffer.numel() == 18 and buffer[:6].isnan().all() and buffer[12:].isnan().all()


def test_variant_with_the_reversed_causal_mask_differs_from_the_reference():
    description, q, k, v, causal, block_m, block_n = ex._cases()[1]
    out, _ = ex._variant(q, k, v, causal, block_m, block_n, causal_reversed=True)
    assert not torch.allclose(out, ex._reference(q, k, v, causal)[0], equal_nan=True)
