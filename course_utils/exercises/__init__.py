"""The exercise framework: ``check``, ``hint``, ``show_solution``.

    from course_utils.exercises import check
    result = check("scaled_dot_product_attention", my_fn)
    result.passed, result.message

``check`` never raises. It shows a pass, a "not attempted yet" (the stub still
raises NotImplementedError) or a specific hint naming the mistake, as a coloured
block in a notebook and as plain text in a terminal, and returns a CheckResult.

Exercises are registered by the modules in this package (one per lesson) with
``@exercise(id, solution=..., hints=[...])`` on a checker function. A checker
takes the candidate and raises ``Mistake("...")`` naming what is wrong; the
helpers in ``course_utils.exercises.checking`` do the common work.
"""

import importlib
import inspect
import pkgutil
from dataclasses import dataclass

from course_utils.exercises.checking import Mistake, NotAttempted, explain_exception

__all__ = ["check", "hint", "show_solution", "solution", "exercise_ids", "CheckResult", "Mistake"]

_REGISTRY = {}


@dataclass(frozen=True)
class CheckResult:
    exercise_id: str
    passed: bool
    message: str
    status: str  # "passed", "not attempted", "not yet"

    def __str__(self):
        icon = {"passed": "PASSED", "not attempted": "NOT ATTEMPTED YET", "not yet": "NOT YET"}[self.status]
        return f"{icon} [{self.exercise_id}] {self.message}"

    def _html(self):
        import html

        colour = {"passed": "#1a7f37", "not attempted": "#6e7781", "not yet": "#b35900"}[self.status]
        text = html.escape(str(self)).replace("\n", "<br>")
        return (
            f'<div style="border-left:6px solid {colour};padding:6px 10px;margin:4px 0;'
            f'font-family:monospace;white-space:normal">{text}</div>'
        )


@dataclass(frozen=True)
class _Exercise:
    checker: object
    solution: object
    hints: tuple


def exercise(exercise_id, solution, hints=()):
    """Decorator that registers a checker under an exercise id."""

    def register(checker):
        _REGISTRY[exercise_id] = _Exercise(checker, solution, tuple(hints))
        return checker

    return register


def _load_all():
    # Every module in this package registers its lesson's exercises on import.
    for info in pkgutil.iter_modules(__path__):
        if info.name != "checking":
            importlib.import_module(f"{__name__}.{info.name}")


def exercise_ids():
    _load_all()
    return sorted(_REGISTRY)


def _lookup(exercise_id):
    _load_all()
    if exercise_id not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY))
        raise KeyError(f"unknown exercise id {exercise_id!r}; known ids: {known}")
    return _REGISTRY[exercise_id]


def _in_notebook():
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return get_ipython() is not None


def _show(text, rich=None):
    """Show plain text, plus a rich form (mime type -> data) in a notebook."""
    if _in_notebook():
        from IPython.display import display

        display({"text/plain": str(text), **(rich or {})}, raw=True)
    else:
        print(text)


def _run(exercise_id, candidate):
    try:
        ex = _lookup(exercise_id)
    except KeyError as e:
        return CheckResult(str(exercise_id), False, e.args[0], "not yet")
    try:
        ex.checker(candidate)
    except NotAttempted:
        return CheckResult(
            exercise_id,
            False,
            "your code still raises NotImplementedError: fill in the cell above, run it, then run this check again.",
            "not attempted",
        )
    except Mistake as m:
        return CheckResult(exercise_id, False, str(m), "not yet")
    except Exception as e:  # a bug in the candidate that escaped the checker's helpers
        return CheckResult(exercise_id, False, explain_exception(e), "not yet")
    return CheckResult(exercise_id, True, "all checks passed. Well done!", "passed")


def check(exercise_id, candidate, quiet=False):
    """Check a candidate for an exercise; show and return a CheckResult. Never raises."""
    result = _run(exercise_id, candidate)
    if not quiet:
        _show(result, {"text/html": result._html()})
    return result


def hint(exercise_id):
    """Show the hints for an exercise, mildest first."""
    try:
        hints = _lookup(exercise_id).hints
    except KeyError as e:
        return _show(e.args[0])
    text = "\n".join(f"Hint {i}: {h}" for i, h in enumerate(hints, 1)) or "No hints for this one."
    _show(text)


def solution(exercise_id):
    """The reference solution object (function or class) for an exercise."""
    return _lookup(exercise_id).solution


def show_solution(exercise_id):
    """Show the source of the reference solution (the code course_utils runs)."""
    try:
        sol = solution(exercise_id)
    except KeyError as e:
        return _show(e.args[0])
    source = f"# {sol.__module__}.{sol.__qualname__}\n" + inspect.getsource(sol)
    _show(source, {"text/markdown": f"```python\n{source}```"})
