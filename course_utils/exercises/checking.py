"""Helpers every checker uses: call a candidate safely, compare, name mistakes.

A checker raises ``Mistake(message)``; ``check`` turns that into a "not yet"
with the message. ``call`` turns a stub's NotImplementedError into
``NotAttempted`` and any other exception into a Mistake that explains it.
"""

import torch

__all__ = [
    "Mistake",
    "NotAttempted",
    "call",
    "explain_exception",
    "expect_tensor",
    "diagnose",
    "describe",
    "close",
    "generator",
]


class Mistake(Exception):
    """The candidate is wrong; the message says how, as specifically as we can."""


class NotAttempted(Exception):
    """The candidate still raises NotImplementedError."""


# Known error messages -> what a learner should do about them.
_EXPLANATIONS = [
    (
        "view size is not compatible with input tensor's size and stride",
        "`.view()` needs a contiguous tensor, and a permuted/transposed tensor is not contiguous: "
        "use `.contiguous().view(...)` or `.reshape(...)`.",
    ),
    (
        "mat1 and mat2 shapes cannot be multiplied",
        "a matrix product got shapes that do not line up: print the shapes; did you forget a transpose?",
    ),
    (
        "must match the size of tensor",
        "two tensors' shapes do not line up: print the shapes of what you combine "
        "(often a missing transpose or permute, or a reduction without keepdim=True)",
    ),
    (
        "Dimension out of range",
        "an index or `dim=` points past the tensor's dimensions: count the dimensions with `.dim()`.",
    ),
    ("expected scalar type", "two tensors have different dtypes: keep everything in the input's dtype."),
    ("shape '[", "a reshape/view asked for a shape whose size does not match the tensor: check the numbers you pass."),
    ("NoneType", "something is None: did you forget a `return`?"),
]


def explain_exception(exc):
    text = f"{type(exc).__name__}: {exc}"
    for needle, advice in _EXPLANATIONS:
        if needle in str(exc):
            return f"your code raised {text}\n-> {advice}"
    return f"your code raised {text}\n-> read the error above, fix the cell, run it and check again."


def _clone(x):
    return x.detach().clone() if isinstance(x, torch.Tensor) else x


def call(candidate, *args, **kwargs):
    """Call the candidate on copies of the inputs and fail if it changes them in place."""
    originals = [_clone(a) for a in args]
    try:
        result = candidate(*args, **kwargs)
    except NotImplementedError:
        raise NotAttempted() from None
    except Mistake:
        raise
    except Exception as exc:
        raise Mistake(explain_exception(exc)) from None
    for i, (before, after) in enumerate(zip(originals, args, strict=True)):
        if isinstance(before, torch.Tensor) and not torch.equal(before, after):
            raise Mistake(
                f"your function changed its input (argument {i + 1}) in place. Use out-of-place "
                f"operations (`x = x - m`, not `x -= m` or `x.sub_(m)`), so the caller's tensor stays as it was."
            )
    return result


def describe(t, n=4):
    """Short, readable preview of a tensor for messages."""
    if not isinstance(t, torch.Tensor):
        return repr(t)[:200]
    flat = t.detach().flatten()[:n].tolist()
    shown = ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in flat)
    more = ", ..." if t.numel() > n else ""
    return f"shape {tuple(t.shape)}, {t.dtype}, values [{shown}{more}]"


def expect_tensor(got, shape=None, dtype=None, what="output"):
    if not isinstance(got, torch.Tensor):
        hint = " (did you return a tuple where one tensor was expected?)" if isinstance(got, tuple) else ""
        raise Mistake(f"the {what} should be a torch.Tensor, but it is {type(got).__name__}{hint}.")
    if shape is not None and tuple(got.shape) != tuple(shape):
        raise Mistake(f"the {what} should have shape {tuple(shape)}, but has shape {tuple(got.shape)}.")
    if dtype is not None and got.dtype != dtype:
        raise Mistake(f"the {what} should have dtype {dtype}, but has dtype {got.dtype}.")


def close(a, b, atol=1e-5, rtol=1e-4):
    """True if ``a`` is a tensor of ``b``'s shape with the same values (NaN equals NaN)."""
    return (
        isinstance(a, torch.Tensor)
        and a.shape == b.shape
        and torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol, equal_nan=True)
    )


def generator(seed):
    """A private random generator, so checking never disturbs the learner's random stream."""
    return torch.Generator().manual_seed(seed)


def diagnose(got, expected, known_mistakes=(), what="output", atol=1e-5, rtol=1e-4, context="", nonfinite_advice=None):
    """Pass if ``got`` matches ``expected``; otherwise name the mistake it matches.

    known_mistakes: (message, tensor the mistake would produce) pairs.
    nonfinite_advice: what to say when the output has NaN/inf that the reference has not.
    """
    expect_tensor(got, expected.shape, what=what)
    if close(got, expected, atol, rtol):
        return
    for message, wrong in known_mistakes:
        if close(got, wrong, atol, rtol):
            raise Mistake(message)
    where = f" ({context})" if context else ""
    if not torch.isfinite(got).all() and torch.isfinite(expected).all():
        advice = nonfinite_advice or "large inputs overflow exp()? subtract the row maximum first."
        raise Mistake(f"your {what} contains NaN or inf where the reference has none{where}: {advice}")
    diff = (got.double() - expected.double()).abs().max().item()
    raise Mistake(
        f"the {what} is not right{where}: largest difference {diff:.3g}.\n"
        f"expected: {describe(expected)}\n"
        f"got:      {describe(got)}"
    )
