"""Checks that cannot be fooled by replacing the functions they compare with.

A checker decides "right" or "wrong" with functions such as ``torch.allclose``, ``torch.equal``
or ``torch.testing.assert_close``. A notebook cell can rebind any of them
(``torch.allclose = lambda *a, **k: True``), and then every wrong answer would pass. So this
module keeps the original objects, taken when it is first imported (the grader imports it
before the learner's first cell runs), and before and after every check it compares what the
names point to now with those originals, puts back the originals and reports what had been
replaced:

    replaced = restore()                      # [] when nothing was touched
    result = guarded(run_check, exercise_id, candidate)   # a tampered check never passes

A replacement made before this module was imported is still found when it is the learner's own
code (a lambda or a function defined in the notebook); functions written in C are then put back
from the place PyTorch defines them.
"""

import builtins
import dataclasses
import inspect
import json
import math

import torch
import torch.nn.functional
import torch.testing

from course_utils.exercises.checking import is_learner_code

__all__ = ["restore", "guarded", "message"]

# The namespaces a checker's verdict depends on. Modules: their public functions and classes;
# torch.Tensor: every method (its own, and those it inherits from PyTorch's C type).
_MODULES = {
    "torch": torch,
    "torch.nn.functional": torch.nn.functional,
    "torch.testing": torch.testing,
    "torch.linalg": torch.linalg,
    "math": math,
    "json": json,
}
_BUILTINS = ("abs", "all", "any", "isinstance", "len", "max", "min", "sum", "round", "sorted", "print", "repr")
# where a function written in C is defined, to put it back if it was replaced before the snapshot
_DEFINED_IN = {"torch": torch._C._VariableFunctions, "torch.testing": torch.testing._comparison}


def _wrapped(value):
    """``value`` and what it wraps (functools.wraps sets __wrapped__), outermost first."""
    chain = [value]
    while hasattr(chain[-1], "__wrapped__") and len(chain) < 20:
        chain.append(chain[-1].__wrapped__)
    return chain


def _is_learner_code(value):
    """True if ``value``, or anything it wraps, is a function written in the notebook."""
    codes = [getattr(v, "__code__", None) for v in _wrapped(value)] if callable(value) else []
    return any(code is not None and is_learner_code(code) for code in codes)


def _library_wrapper(now, original):
    """A library wrapping the original, as PyTorch does to torch.manual_seed when torch._dynamo loads."""
    return original in _wrapped(now)[1:] and not _is_learner_code(now)


def _watched(module):
    return {
        name: value
        for name, value in vars(module).items()
        if not name.startswith("_") and callable(value) and not inspect.ismodule(value)
    }


def _original(where, name, value):
    """The object ``where.name`` should be: ``value`` unless that is the learner's own code."""
    if not _is_learner_code(value):
        return value
    home = _DEFINED_IN.get(where)
    return getattr(home, name, None) if home is not None else None  # None: cannot be put back


def _snapshot():
    originals = {}
    for where, module in _MODULES.items():
        for name, value in _watched(module).items():
            originals[(where, name)] = _original(where, name, value)
    for name in _BUILTINS:
        originals[("builtins", name)] = getattr(builtins, name)
    return originals


_ORIGINALS = _snapshot()
_TENSOR_OWN = {name: value for name, value in vars(torch.Tensor).items() if not _is_learner_code(value)}


def _namespace(where):
    return builtins if where == "builtins" else _MODULES[where]


def _restore_tensor():
    """torch.Tensor's methods: its own as at import time, none hiding one it inherits from C."""
    replaced = []
    for name, value in list(vars(torch.Tensor).items()):
        original = _TENSOR_OWN.get(name)
        if original is value:
            continue
        if original is not None and _library_wrapper(value, original):
            _TENSOR_OWN[name] = value
            continue
        shadows = original is None and hasattr(torch._C.TensorBase, name)
        if original is None and not (shadows or _is_learner_code(value)):
            continue  # a new attribute that hides nothing of PyTorch's: not what a check compares with
        replaced.append(f"torch.Tensor.{name}")
        if original is not None:
            setattr(torch.Tensor, name, original)
        elif shadows:
            delattr(torch.Tensor, name)
    return replaced


EVER_REPLACED = []  # every name restore() has put back in this process: the grader reports them all


def restore():
    """Put back every replaced function the checks depend on; return the names that had been replaced."""
    replaced = []
    for (where, name), original in _ORIGINALS.items():
        namespace = _namespace(where)
        now = getattr(namespace, name, None)
        if original is None:  # replaced before this module was imported, and not recoverable
            if now is not None and _is_learner_code(now):
                replaced.append(f"{where}.{name}")
            continue
        if now is original:
            continue
        if _library_wrapper(now, original):
            _ORIGINALS[(where, name)] = now  # the library's own change: the new original
            continue
        replaced.append(f"{where}.{name}")
        setattr(namespace, name, original)
    replaced += _restore_tensor()
    EVER_REPLACED.extend(name for name in replaced if name not in EVER_REPLACED)
    return replaced


def message(replaced):
    """What the learner reads when a check found replaced functions."""
    names = ", ".join(f"`{name}`" for name in replaced[:5]) + (" and more" if len(replaced) > 5 else "")
    unrecoverable = [n for n in replaced if _ORIGINALS.get(tuple(n.rsplit(".", 1))) is None and "Tensor" not in n]
    again = (
        "restart the kernel (Kernel > Restart Kernel), remove that line and run the notebook again"
        if unrecoverable
        else "they have been put back: remove the line that replaced them and run this check again"
    )
    return (
        f"your notebook replaced {names}, which the checks compare with, so this check cannot say "
        f"whether your code is right. Do not assign to PyTorch's (or Python's) own functions: {again}."
    )


def guarded(run, exercise_id, candidate, **kwargs):
    """``run(exercise_id, candidate, **kwargs)`` (a CheckResult) with the originals in place, before and
    after: a check during which something was replaced is "not yet", with a message that says so."""
    replaced = restore()
    result = run(exercise_id, candidate, **kwargs)
    replaced += [name for name in restore() if name not in replaced]
    if not replaced:
        return result
    return dataclasses.replace(result, passed=False, status="not yet", message=message(replaced))
