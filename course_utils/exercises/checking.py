"""Helpers every checker uses: call a candidate safely, compare, name mistakes.

A checker raises ``Mistake(message)``; ``check`` turns that into a "not yet"
with the message. ``call`` runs the learner's code: it turns a stub's
NotImplementedError into ``NotAttempted`` and any other exception into a
Mistake that explains it and names the arguments it was called with. So an
exception that reaches ``check`` some other way comes from the checker itself.
"""

import contextlib
import functools
import inspect
import random
import signal
import sys
import threading
import time
from pathlib import Path
from typing import NamedTuple

import torch
from torch.overrides import TorchFunctionMode

__all__ = [
    "Mistake",
    "KnownMistake",
    "NotAttempted",
    "TimeLimitExceeded",
    "TIME_LIMIT_S",
    "EXIT_ADVICE",
    "FLOAT64_OUTPUT",
    "NO_FORWARD",
    "NOT_CALLABLE",
    "MAX_IS_A_PAIR",
    "call",
    "explain_exception",
    "expect_tensor",
    "diagnose",
    "diagnose_batching",
    "ONLY_UNBATCHED",
    "ONLY_BATCHED",
    "REDUCTIONS",
    "TorchCall",
    "torch_calls",
    "first_difference",
    "describe",
    "describe_arguments",
    "close",
    "comparable",
    "generator",
    "expect_plain",
    "expect_same_dtype",
    "KEEP_DTYPE",
    "expect_ids",
    "NOT_IDS",
    "LOW_PRECISION_TOLERANCE",
    "FLOAT32_PRECISION",
    "tolerance",
    "OTHER_DEVICE",
    "RETURNED_A_TUPLE",
    "RETURNED_NONE",
    "NOT_DENSE",
    "preserved_state",
    "time_limit",
    "is_learner_code",
    "raised_in_learner_code",
]

TIME_LIMIT_S = 30  # a check stops learner code that runs longer than this (seconds; None: no limit)


class Mistake(Exception):
    """The candidate is wrong; the message says how, as specifically as we can."""


class KnownMistake(Mistake):
    """A mistake the checker recognised and named, not a generic 'not right' or an error the code raised."""


class NotAttempted(Exception):
    """The candidate still raises NotImplementedError.

    ``stub`` is None when the candidate itself is the stub, else the name of the
    learner's own helper (called by the candidate) that still is one."""

    def __init__(self, stub=None):
        super().__init__(stub)
        self.stub = stub


class TimeLimitExceeded(BaseException):
    """Learner code ran past the time limit. A BaseException, so `except Exception` cannot swallow it."""

    def __init__(self, seconds):
        super().__init__(seconds)
        self.seconds = seconds
        self.arguments = ""  # what the candidate was called with, if the limit hit inside `call`


# Phrases of the messages below, one per mistake (the tests look for them)
FLOAT64_OUTPUT = "your output is float64, but the inputs were float32"
NO_FORWARD = "your module has no `forward` method"
NOT_CALLABLE = "check needs your function (or class) itself"
RETURNED_NONE = "your function returned None: did you forget the `return` line?"
RETURNED_A_TUPLE = "did you return a tuple where one tensor was expected?"
OTHER_DEVICE = "is on another device"  # an output the comparisons cannot read ...
NOT_DENSE = "not an ordinary dense tensor"  # ... or one they could not compare
KEEP_DTYPE = "should keep the input's dtype"
NOT_IDS = "should hold integer ids (torch.long)"
ONLY_UNBATCHED = "works on a single sample but not on a batch of several"
ONLY_BATCHED = "counts axes from the front, so it fails on a single unbatched sample"
EXIT_ADVICE = (
    "your code called sys.exit() or exit(), which would stop the whole program: "
    "return a value (or raise an exception) instead."
)

MAX_IS_A_PAIR = "x.max(dim=...) gives values and indices"

# Known error messages -> what a learner should do about them. First match wins.
_EXPLANATIONS = [
    (
        ("return_types",),  # torch.return_types.max: what x.max(dim=...) returns
        f"{MAX_IS_A_PAIR}: with a `dim`, `x.max(dim=-1)` returns (values, indices). Take `.values`, or use "
        f"`x.amax(dim=-1, keepdim=True)`, which returns the values only.",
    ),
    (
        ("view size is not compatible with input tensor's size and stride",),
        "`.view()` needs a contiguous tensor, and a permuted/transposed tensor is not contiguous: "
        "use `.contiguous().view(...)` or `.reshape(...)`.",
    ),
    (
        ("Boolean value of Tensor with more than one value is ambiguous",),
        "`if mask:` (or `and`/`or`/`not` on a tensor) asks for one True/False, but a tensor holds many. "
        "To test whether an argument was given, write `if mask is not None:`.",
    ),
    (
        ("before Module.__init__() call",),
        "your class's `__init__` must call `super().__init__()` first, before it creates any layer "
        "(nn.Module sets up its bookkeeping there).",
    ),
    (
        ("must be tuple of ints,but got float", "must be tuple of ints, not float", "got (float"),
        "a shape got a float: `/` always gives a float in Python (8 / 2 == 4.0). "
        "Use // for integer division: `d_model // num_heads`.",
    ),
    (
        ("'float' object cannot be interpreted as an integer",),
        "a float was used where an int is needed (a size or a range): `/` always gives a float. "
        "Use // for integer division: `d_model // num_heads`.",
    ),
    (
        ("'tuple' and 'Tensor'", "'Tensor' and 'tuple'", "must be Tensor, not tuple", "'tuple' object has no attr"),
        "a tuple arrived where a tensor was expected. scaled_dot_product_attention returns (output, weights): "
        "unpack it, `output, weights = scaled_dot_product_attention(q, k, v, mask)`, and pass on `output`.",
    ),
    (
        ("where expected condition to be a boolean tensor", "only supports boolean masks"),
        "a 0/1 integer mask is not a condition: turn it into True/False first, `mask.bool()` or `mask == 1` "
        "(and `mask == 0` for the positions that may not attend).",
    ),
    (
        ("mat1 and mat2 shapes cannot be multiplied",),
        "a matrix product got shapes that do not line up: print the shapes; did you forget a transpose?",
    ),
    (
        ("must match the size of tensor",),
        "two tensors' shapes do not line up: print the shapes of what you combine "
        "(often a missing transpose or permute, or a reduction without keepdim=True)",
    ),
    (
        ("Dimension out of range",),
        "an index or `dim=` points past the tensor's dimensions: count the dimensions with `.dim()`.",
    ),
    (
        ("positional argument", "unexpected keyword argument", "required keyword-only argument"),
        "a function got more or fewer arguments than its `def` line has parameters. If it is yours, keep the "
        "parameters of the exercise cell (the checker calls it as shown above); else compare your call with "
        "the function's parameters.",
    ),
    (("expected scalar type",), "two tensors have different dtypes: keep everything in the input's dtype."),
    (
        ("shape '[",),
        "a reshape/view asked for a shape whose size does not match the tensor: check the numbers you pass.",
    ),
    (("NoneType",), "something is None: did you forget a `return`?"),
]


def explain_exception(exc, arguments=""):
    """'your code raised ...', the call that triggered it, and advice for known errors."""
    text = f"{type(exc).__name__}: {exc}"
    where = f"\n(while called with {arguments})" if arguments else ""
    for needles, advice in _EXPLANATIONS:
        if any(needle in str(exc) for needle in needles):
            return f"your code raised {text}{where}\n-> {advice}"
    return f"your code raised {text}{where}\n-> read the error above, fix the cell, run it and check again."


# --------------------------------------------------------------------------- whose code is it?

_COURSE_DIR = str(Path(__file__).resolve().parent.parent)  # course_utils/
_LIBRARY_DIRS = tuple({str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})


def is_learner_code(code):
    """True for code written by the learner: not the course's package, not Python or an installed library."""
    filename = code.co_filename
    if filename.startswith("<frozen"):
        return False
    if filename.startswith("<"):  # exec'd or typed-in code
        return True
    path = str(Path(filename).resolve())
    return not path.startswith(_COURSE_DIR) and not path.startswith(_LIBRARY_DIRS)


def _frames(exc):
    tb = exc.__traceback__
    while tb is not None:
        yield tb.tb_frame
        tb = tb.tb_next


def raised_in_learner_code(exc, checker=None):
    """True if the exception passed through learner code on its way up (the checker itself does not count)."""
    skip = getattr(checker, "__code__", None)
    return any(is_learner_code(frame.f_code) and frame.f_code is not skip for frame in _frames(exc))


def _own_code(candidate):
    """The code objects of the candidate itself: the function, or the methods of the learner's class."""
    if inspect.ismethod(candidate):
        candidate = candidate.__func__
    if inspect.isfunction(candidate):
        return {inspect.unwrap(candidate).__code__}
    cls = candidate if inspect.isclass(candidate) else type(candidate)
    return {
        f.__code__
        for klass in cls.__mro__
        for f in vars(klass).values()
        if inspect.isfunction(f) and is_learner_code(f.__code__)
    }


def _not_implemented(candidate, exc, arguments):
    """NotAttempted if a stub of the learner raised it, else a Mistake that says what happened."""
    frame = list(_frames(exc))[-1]  # where it was raised
    code = frame.f_code
    if code in _own_code(candidate):
        return NotAttempted()
    if is_learner_code(code):
        return NotAttempted(stub=code.co_name)
    if code.co_name == "_forward_unimplemented":  # nn.Module without a `forward`
        return Mistake(
            f"{NO_FORWARD}, so nn.Module does not know what to compute. Define "
            f"`def forward(self, ...)` inside the class (check the spelling and the indentation).\n({exc})"
        )
    return Mistake(explain_exception(exc, arguments))


# --------------------------------------------------------------------------- calling learner code


def _clone(x):
    """A copy to compare with after the call: tensors, and lists of them (or of tokens), by value."""
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    return [_clone(e) for e in x] if isinstance(x, list) else x


def _unchanged(before, after):
    if isinstance(before, list):
        return len(before) == len(after) and all(map(_unchanged, before, after))
    if not isinstance(before, torch.Tensor):
        return before is after or before == after
    if before.shape != after.shape or before.dtype != after.dtype:
        return False
    if before.is_floating_point():
        return torch.allclose(before, after, rtol=0, atol=0, equal_nan=True)
    return torch.equal(before, after)


def _named_arguments(candidate, args, kwargs):
    """(parameter name, value) pairs as the candidate sees them; 'argument i' if its signature does not fit."""
    target = candidate.forward if isinstance(candidate, torch.nn.Module) else candidate
    try:
        signature = inspect.signature(target)
        bound = signature.bind(*args, **kwargs)
    except (TypeError, ValueError):
        return [(f"argument {i + 1}", a) for i, a in enumerate(args)] + list(kwargs.items())
    bound.apply_defaults()
    pairs = []
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind == inspect.Parameter.VAR_POSITIONAL:
            pairs += [(f"{name}[{i}]", v) for i, v in enumerate(value)]
        elif kind == inspect.Parameter.VAR_KEYWORD:
            pairs += list(value.items())
        else:
            pairs.append((name, value))
    return pairs


def describe_arguments(pairs):
    """'q [2, 3, 5, 8] float32, k [2, 3, 7, 8], mask=None': shapes, and dtypes where they change."""
    parts, last_dtype = [], None
    for name, value in pairs:
        if isinstance(value, torch.Tensor):
            dtype = "" if value.dtype == last_dtype else f" {str(value.dtype).removeprefix('torch.')}"
            parts.append(f"{name} {list(value.shape)}{dtype}")
            last_dtype = value.dtype
        elif value is None or isinstance(value, (bool, int, float, str, list, tuple)):
            shown = " ".join(repr(value).split())
            parts.append(f"{name}={shown if len(shown) <= 40 else shown[:37] + '...'}")
        else:  # a layer, an optimizer, ...: its type says enough
            parts.append(f"{name} (a {type(value).__name__})")
    return ", ".join(parts)


def _tensors(result):
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)):
        return [t for t in result if isinstance(t, torch.Tensor)]
    return []


def _check_result(result, pairs, arguments):
    input_dtypes = {v.dtype for _, v in pairs if isinstance(v, torch.Tensor) and v.is_floating_point()}
    if input_dtypes == {torch.float32} and any(t.dtype == torch.float64 for t in _tensors(result)):
        raise Mistake(_float64_message(f"(called with {arguments})"))


def _float64_message(where=""):
    return (
        f"{FLOAT64_OUTPUT}{' ' + where if where else ''}. Something in your code made a float64 "
        "tensor (from a numpy array, with dtype=torch.float64, or after torch.set_default_dtype(torch.float64)) "
        "and PyTorch promoted the result to float64. Keep the input's dtype: use Python numbers such as "
        "math.sqrt(d_k), and make new tensors with dtype=x.dtype (or torch.ones_like(x), x.new_tensor(...))."
    )


def call(candidate, *args, **kwargs):
    """Call learner code; explain what goes wrong, naming the arguments it was called with.

    Fails if the candidate changes an input tensor in place or turns float32 inputs
    into a float64 output."""
    if not callable(candidate):
        raise Mistake(
            f"{NOT_CALLABLE}, but got {type(candidate).__name__} {describe(candidate)}. "
            f'Pass the name without calling it: check("exercise_id", my_function), not my_function(...).'
        )
    pairs = _named_arguments(candidate, args, kwargs)
    arguments = describe_arguments(pairs)
    originals = [(name, _clone(value)) for name, value in pairs]
    try:
        result = candidate(*args, **kwargs)
    except NotImplementedError as exc:
        raise _not_implemented(candidate, exc, arguments) from None
    except Mistake:
        raise
    except SystemExit:
        raise Mistake(f"{EXIT_ADVICE}\n(while called with {arguments})") from None
    except TimeLimitExceeded as stop:
        stop.arguments = arguments
        raise
    except Exception as exc:
        raise Mistake(explain_exception(exc, arguments)) from None
    for (name, before), (_, after) in zip(originals, pairs, strict=True):
        if not _unchanged(before, after):
            raise Mistake(
                f"your function changed `{name}` in place. Use out-of-place operations (`x = x - m`, not "
                f"`x -= m` or `x.sub_(m)`; a copy of a list, `list(tokens)`), so the caller's argument stays as it was."
            )
    _check_result(result, pairs, arguments)
    return result


# --------------------------------------------------------------------------- comparing results


def describe(t, n=4):
    """Short, readable preview of a tensor for messages."""
    if not isinstance(t, torch.Tensor):
        return repr(t)[:200]
    flat = t.detach().flatten()[:n].tolist()
    shown = ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in flat)
    more = ", ..." if t.numel() > n else ""
    return f"shape {tuple(t.shape)}, {t.dtype}, values [{shown}{more}]"


SDPA_TUPLE_HINT = (
    "scaled_dot_product_attention returns (output, weights): unpack it, "
    "`output, weights = scaled_dot_product_attention(...)`"
)


ONE_TENSOR_HINT = "a comma at the end of the return line, or `return a, b`, makes one: return the tensor alone"


def expect_tensor(got, shape=None, dtype=None, what="output", tuple_hint=SDPA_TUPLE_HINT):
    """got is a tensor (of ``shape`` and ``dtype`` where given); tuple_hint: the likely cause of a tuple instead."""
    if got is None:
        raise Mistake(f"{RETURNED_NONE} (the {what} is None)")
    if not isinstance(got, torch.Tensor):
        hint = ""
        if isinstance(got, tuple):
            hint = f" ({RETURNED_A_TUPLE} {tuple_hint})"
        raise Mistake(f"the {what} should be a torch.Tensor, but it is {type(got).__name__}{hint}.")
    if dtype is not None and got.dtype != dtype and (dtype, got.dtype) == (torch.float32, torch.float64):
        raise Mistake(_float64_message(f"({what})"))
    if shape is not None and tuple(got.shape) != tuple(shape):
        raise Mistake(f"the {what} should have shape {tuple(shape)}, but has shape {tuple(got.shape)}.")
    if dtype is not None:
        expect_same_dtype(got, dtype, what)


def expect_plain(got, device, what="output"):
    """An ordinary (dense) tensor on the inputs' device: comparing anything else would fail inside the checker."""
    if got.layout != torch.strided:
        raise Mistake(
            f"your {what} is a {got.layout} tensor, {NOT_DENSE}: leave out .to_sparse() (or add .to_dense())."
        )
    if got.device != device:
        raise Mistake(
            f"your {what} {OTHER_DEVICE} ({got.device}) than the inputs ({device}). Make new tensors on the "
            f"inputs' device (`device=x.device`, `torch.zeros_like(...)`) and leave out .to(...) / .cuda()."
        )


# (atol, rtol) for comparing float16 and bfloat16 results: about 3 and 2 correct digits
LOW_PRECISION_TOLERANCE = {torch.float16: (2e-3, 2e-3), torch.bfloat16: (2e-2, 2e-2)}

FLOAT32_PRECISION = "right only to float32's precision"


def tolerance(dtype, atol=1e-5, rtol=1e-4):
    """(atol, rtol) for a result computed in ``dtype``. float64 keeps about 16 digits and float32 about 7:
    a float64 case is compared a million times tighter, so float32 arithmetic inside it shows."""
    return (atol * 1e-6, rtol * 1e-6) if dtype == torch.float64 else (atol, rtol)


_DTYPE_ADVICE = (
    "Something in your code made a tensor of another dtype (torch.tensor(...), torch.zeros(...) without dtype=, "
    ".float()) and PyTorch promoted the result to it: make new tensors with dtype=x.dtype (or torch.zeros_like(x))."
)


def expect_like(got, reference, what="output"):
    """A dense tensor of the reference's dtype, on its device: named mistakes for anything else."""
    expect_tensor(got, dtype=reference.dtype, what=what)
    expect_plain(got, reference.device, what)


def expect_same_dtype(got, dtype, what="output", context="", advice=_DTYPE_ADVICE):
    """The candidate's result keeps the input's dtype (a float64 result of float32 input is diagnose's to name)."""
    if not isinstance(got, torch.Tensor) or got.dtype == dtype or (dtype, got.dtype) == (torch.float32, torch.float64):
        return
    where = f" ({context})" if context else ""
    raise Mistake(f"the {what} {KEEP_DTYPE} {dtype}, but it is {got.dtype}{where}. {advice}")


def expect_ids(got, device, what="output", context="", advice="", tuple_hint=SDPA_TUPLE_HINT):
    """A dense tensor of integer ids (tokens, words) on the inputs' device; float or bool values are no ids."""
    expect_tensor(got, what=what, tuple_hint=tuple_hint)
    expect_plain(got, device, what)
    if got.is_floating_point() or got.dtype == torch.bool:
        where = f" ({context})" if context else ""
        raise Mistake(f"the {what} {NOT_IDS}, but it is {got.dtype}{where}. {advice}".rstrip())


def comparable(a, b):
    """True if ``a`` is a dense tensor of ``b``'s shape on its device: one a checker can index like ``b``."""
    return isinstance(a, torch.Tensor) and a.layout == torch.strided and a.device == b.device and a.shape == b.shape


def close(a, b, atol=1e-5, rtol=1e-4):
    """True if ``a`` is a dense tensor of ``b``'s shape, on its device, with the same values (NaN equals NaN),
    whatever the dtypes. Anything else is never close, so a comparison cannot fail inside the checker."""
    return (
        isinstance(a, torch.Tensor)
        and a.layout == torch.strided
        and a.device == b.device
        and a.shape == b.shape
        and torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol, equal_nan=True)
    )


def generator(seed):
    """A private random generator, so checking never disturbs the learner's random stream."""
    return torch.Generator().manual_seed(seed)


def randn(g, *shape, scale=1.0, dtype=torch.float32):
    """Normal draws from generator g, made in float64 and then cast, so every dtype's case holds the
    same numbers (up to rounding)."""
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def diagnose(
    got,
    expected,
    known_mistakes=(),
    what="output",
    atol=1e-5,
    rtol=1e-4,
    context="",
    nonfinite_advice=None,
    dtype=None,
    tuple_hint=SDPA_TUPLE_HINT,
):
    """Pass if ``got`` matches ``expected``; otherwise name the mistake it matches.

    known_mistakes: (message, tensor the mistake would produce) pairs.
    nonfinite_advice: what to say when the output has NaN/inf that the reference has not.
    tuple_hint: the likely cause of a tuple instead of a tensor (expect_tensor).
    dtype: the inputs' dtype, if the tolerance depends on it: a float64 case is compared at
    ``tolerance(dtype, atol, rtol)``, and a result right only to float32's precision is named.
    A float64 output where the reference is float32 is a mistake of its own; so is an output
    that is not a dense tensor on the reference's device, or has another dtype than a
    reference that is not float64.
    """
    where = f" ({context})" if context else ""
    if isinstance(got, torch.Tensor) and (expected.dtype, got.dtype) == (torch.float32, torch.float64):
        raise Mistake(_float64_message(f"({context})" if context else ""))
    expect_tensor(got, expected.shape, what=what, tuple_hint=tuple_hint)
    expect_plain(got, expected.device, f"{what}{where}")
    if expected.dtype != torch.float64:  # a float64 reference is an oracle for any floating dtype
        expect_same_dtype(got, expected.dtype, what, context)
    loose = atol, rtol
    if dtype is not None:
        atol, rtol = tolerance(dtype, atol, rtol)
    if close(got, expected, atol, rtol):
        return
    for message, wrong in known_mistakes:
        if close(got, wrong, atol, rtol):
            raise KnownMistake(message)
    if close(got, expected, *loose):
        raise KnownMistake(
            f"your {what} is {FLOAT32_PRECISION}{where}: the inputs are {str(dtype).removeprefix('torch.')}, but part of your code computed in "
            f"float32 (a .float(), or a tensor made without dtype=, such as torch.zeros(...) or torch.tensor(...)). "
            f"Keep the inputs' dtype throughout: dtype=x.dtype, x.new_zeros(...), torch.zeros_like(x)."
        )
    if not torch.isfinite(got).all() and torch.isfinite(expected).all():
        advice = nonfinite_advice or "large inputs overflow exp()? subtract the row maximum first."
        raise Mistake(f"your {what} contains NaN or inf where the reference has none{where}: {advice}")
    raise Mistake(f"the {what} is not right{where}: {first_difference(got, expected, atol, rtol)}")


def first_difference(got, expected, atol=1e-5, rtol=1e-4):
    """The largest difference, and the values of both from the first position where they differ.

    The first values of a tensor are often right (position 0 of RoPE, the first row of a causal
    mask): the place where the numbers part tells the learner more."""
    g, e = got.detach().double().cpu(), expected.detach().double().cpu()
    differs = ~torch.isclose(g, e, atol=atol, rtol=rtol, equal_nan=True)
    gap = torch.where(differs, (g - e).abs().nan_to_num(float("inf")), torch.zeros_like(g))
    if g.dim() == 0 or not differs.any():
        return f"largest difference {gap.max().item():.3g}.\nexpected: {describe(expected)}\ngot:      {describe(got)}"
    first = [int(i) for i in differs.nonzero()[0]]
    largest = [int(i) for i in torch.unravel_index(gap.argmax(), gap.shape)]
    row = tuple(first[:-1])
    end = min(first[-1] + 4, g.shape[-1])

    def values(t):
        shown = ", ".join(f"{v:.4g}" for v in t[row][first[-1] : end].tolist())
        return f"[{shown}{', ...' if end < t.shape[-1] else ''}]"

    dtype = str(got.dtype).removeprefix("torch.")
    if got.dtype != expected.dtype:
        dtype += f", the reference {str(expected.dtype).removeprefix('torch.')}"
    kind = f"shape {tuple(got.shape)}, {dtype}"
    return (
        f"largest difference {gap.max().item():.3g} (at index {largest}).\n"
        f"The first difference is at index {first}; from there along the last axis ({kind}):\n"
        f"expected: {values(e)}\n"
        f"got:      {values(g)}"
    )


# --------------------------------------------------------------------------- right on one sample, not on a batch


def diagnose_batching(batched, right_the_other_way, description, advice, detail=""):
    """Name a failure that goes away when the same numbers come batched the other way; else return.

    batched: whether the failed case has batch axes. right_the_other_way: a function, True if the
    candidate is right on one sample of the case on its own (batched) or on the case as a batch of
    one (not batched). It is called only here, as a probe costs a call of learner code."""
    if not right_the_other_way():
        return
    phrase = ONLY_UNBATCHED if batched else ONLY_BATCHED
    raise Mistake(f"your code {phrase} ({description}). {advice}" + (f"\n{detail}" if detail else ""))


# --------------------------------------------------------------------------- watching the torch calls of learner code

# Functions that reduce along an axis: one over more than a block shows the code did not go block by block
REDUCTIONS = {
    "max",
    "amax",
    "sum",
    "logsumexp",
    "softmax",
    "log_softmax",
    "_softmax",
    "mean",
    "cumsum",
    "cummax",
    "nansum",
}


class TorchCall(NamedTuple):
    name: str  # the torch function or tensor method
    first_shape: tuple | None  # the shape of its first tensor argument
    out_shapes: list  # the shapes of the tensors it returned
    inputs: tuple  # id() of every tensor it read, also inside list arguments


class _Watch(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        read = [t for a in (*args, *kwargs.values()) for t in (a if isinstance(a, (list, tuple)) else (a,))]
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        self.calls.append(
            TorchCall(
                getattr(func, "__name__", str(func)),
                tuple(first.shape) if first is not None else None,
                [tuple(o.shape) for o in outs if isinstance(o, torch.Tensor)],
                tuple(id(t) for t in read if isinstance(t, torch.Tensor)),
            )
        )
        return out


def torch_calls(candidate, *args):
    """Run the candidate through ``call``; the torch calls its own code made, in order (TorchCall records).

    How a result was computed shows what the numbers cannot: a reduction over the whole row, or
    a tensor as wide as all the keys, in code that should go block by block."""
    watch = _Watch()

    @functools.wraps(candidate)
    def watched(*args, **kwargs):  # only the candidate's own calls count (not `call` copying its arguments)
        with watch:
            return candidate(*args, **kwargs)

    call(watched, *args)
    return watch.calls


# --------------------------------------------------------------------------- guarding the learner's session


@contextlib.contextmanager
def preserved_state():
    """Put back what learner code may change for the whole session: random states, default dtype,
    grad mode, thread count and print options. A `torch.manual_seed` in a candidate must not
    change the numbers of later cells."""
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    saved = (
        torch.get_rng_state(),
        torch.cuda.get_rng_state_all() if cuda else None,
        random.getstate(),
        _numpy_random_state(),
        torch.get_default_dtype(),
        torch.is_grad_enabled(),
        torch.get_num_threads(),
        torch._tensor_str.get_printoptions(),
    )
    try:
        yield
    finally:
        torch_rng, cuda_rng, python_rng, numpy_rng, dtype, grad, threads, print_options = saved
        torch.set_rng_state(torch_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
        random.setstate(python_rng)
        if numpy_rng is not None:
            sys.modules["numpy"].random.set_state(numpy_rng)
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad)
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        torch.set_printoptions(**print_options)


def _numpy_random_state():
    numpy = sys.modules.get("numpy")  # only if something imported it already
    return numpy.random.get_state() if numpy is not None else None


@contextlib.contextmanager
def time_limit(seconds):
    """Raise TimeLimitExceeded in the code inside after ``seconds``.

    Uses SIGALRM, which exists on Linux and macOS and only on the main thread (where
    Jupyter runs cells). Elsewhere, or if an earlier timer would fire first, no limit."""
    usable = seconds and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    earlier = signal.getitimer(signal.ITIMER_REAL) if usable else (0.0, 0.0)
    if not usable or 0 < earlier[0] <= seconds:
        yield
        return

    def stop(signum, frame):
        raise TimeLimitExceeded(seconds)

    previous_handler = signal.signal(signal.SIGALRM, stop)
    start = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler if previous_handler is not None else signal.SIG_DFL)
        if earlier[0] > 0:  # someone else's timer was running: give back what is left of it
            left = max(earlier[0] - (time.monotonic() - start), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, left, earlier[1])
