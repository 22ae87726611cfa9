"""The exercise framework: ``check``, ``hint``, ``show_solution``.

    from course_utils.exercises import check
    result = check("scaled_dot_product_attention", my_fn)
    result.passed, result.message

``check`` never raises (only Ctrl-C / KeyboardInterrupt stops it). It shows a pass,
a "not attempted yet" (the stub still raises NotImplementedError) or a specific
hint naming the mistake, as a coloured block in a notebook and as plain text in a
terminal, and returns a CheckResult. While it runs, learner code gets at most
``checking.TIME_LIMIT_S`` seconds, and whatever it changes globally (random seeds,
default dtype, grad mode, ...) is put back afterwards. An error in a checker's own
code is reported as a bug in the course, never as the learner's mistake.

Exercises are registered by the modules in this package (one per lesson) with
``@exercise(id, solution=..., hints=[...])`` on a checker function. A checker
takes the candidate and raises ``Mistake("...")`` naming what is wrong; the
helpers in ``course_utils.exercises.checking`` do the common work.
"""

import ast
import importlib
import inspect
import pkgutil
import sys
import textwrap
import traceback
from dataclasses import dataclass
from pathlib import Path

from course_utils.exercises import checking, tamper_guard
from course_utils.exercises.checking import (
    Mistake,
    NotAttempted,
    TimeLimitExceeded,
    explain_exception,
    preserved_state,
    raised_in_learner_code,
    time_limit,
)

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
        # pre-wrap keeps the message's line breaks and the alignment of expected/got rows
        return (
            f'<div style="border-left:6px solid {colour};padding:6px 10px;margin:4px 0;'
            f'font-family:monospace;white-space:pre-wrap">{html.escape(str(self))}</div>'
        )


@dataclass(frozen=True)
class _Exercise:
    checker: object
    solution: object
    hints: tuple


def exercise(exercise_id, solution, hints=()):
    """Decorator that registers a checker under an exercise id (each id once)."""

    def register(checker):
        if exercise_id in _REGISTRY:
            raise ValueError(
                f"the exercise id {exercise_id!r} is registered twice (by {_REGISTRY[exercise_id].checker.__module__} "
                f"and {checker.__module__}): every exercise needs an id of its own"
            )
        _REGISTRY[exercise_id] = _Exercise(checker, solution, tuple(hints))
        return checker

    return register


def _load_all():
    # Every module in this package registers its lesson's exercises on import.
    for info in pkgutil.iter_modules(__path__):
        if info.name not in ("checking", "tamper_guard"):  # the framework, not a lesson
            importlib.import_module(f"{__name__}.{info.name}")


def exercise_ids():
    _load_all()
    return sorted(_REGISTRY)


def _lookup(exercise_id):
    _load_all()
    if not isinstance(exercise_id, str) or exercise_id not in _REGISTRY:
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


_NOT_ATTEMPTED = (
    "your code still raises NotImplementedError: fill in the cell above, run it, then run this check again."
)


def _wrong_call(exercise_id, candidate):
    """check() was called with something other than an exercise id first."""
    if isinstance(candidate, str):
        return CheckResult(
            candidate,
            False,
            f"the arguments are swapped: the exercise id comes first, then your code: "
            f'check("{candidate}", {getattr(exercise_id, "__name__", "my_function")}).',
            "not yet",
        )
    example = getattr(candidate, "__name__", "my_function")
    return CheckResult(
        str(exercise_id),
        False,
        f"the first argument of check() should be the exercise id, a string, but it is "
        f'{type(exercise_id).__name__} {exercise_id!r:.60}. Call it as check("exercise_id", {example}); '
        f"the exercise cell's check line has the right id.",
        "not yet",
    )


def _course_version(name):
    """An import line for the course's own version of a function or class called ``name``, or None."""
    for exercise_id, ex in _REGISTRY.items():
        solution_name = getattr(ex.solution, "__name__", None)
        if name in (exercise_id, solution_name):
            alias = "" if name == solution_name else f" as {name}"
            return f"from {ex.solution.__module__} import {solution_name}{alias}"
    return None


def _helper_stub(exercise_id, stub):
    line = _course_version(stub)
    instead = f"or use the course's version instead of yours: `{line}`" if line else "or write that function now"
    return CheckResult(
        exercise_id,
        False,
        f"your code calls `{stub}`, which still raises NotImplementedError (it is a stub). "
        f"Solve the exercise for `{stub}` first, {instead}; then run this check again.",
        "not yet",
    )


def _checker_failed(exercise_id, exc):
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (in {Path(frames[-1].filename).name}, line {frames[-1].lineno})" if frames else ""
    return CheckResult(
        exercise_id,
        False,
        f"the checker itself failed. This is a bug in the course, not in your code:\n"
        f"  {type(exc).__name__}: {str(exc)[:300]}{where}\n"
        f"Please report it to the course maintainers with the exercise id and this message. Meanwhile, "
        f'compare your code with show_solution("{exercise_id}").',
        "not yet",
    )


def _too_slow(exercise_id, stop, checker):
    if not stop.arguments and not raised_in_learner_code(stop, checker=checker):
        return _checker_failed(exercise_id, RuntimeError(f"the check ran longer than {stop.seconds} s"))
    called = f" (called with {stop.arguments})" if stop.arguments else ""
    return CheckResult(
        exercise_id,
        False,
        f"your code ran longer than {stop.seconds} s{called} and was stopped: an endless loop? Check that "
        f"every `while` loop's condition eventually becomes False. (Or very slow: a Python loop over every "
        f"number where one tensor operation would do?)",
        "not yet",
    )


def _run(exercise_id, candidate):
    if not isinstance(exercise_id, str):
        return _wrong_call(exercise_id, candidate)
    try:
        ex = _lookup(exercise_id)
    except KeyError as e:
        return CheckResult(exercise_id, False, e.args[0], "not yet")
    except Exception as e:  # an exercise module that fails to import
        return _checker_failed(exercise_id, e)
    try:
        with preserved_state(), time_limit(checking.TIME_LIMIT_S):
            ex.checker(candidate)
    except NotAttempted as n:
        if n.stub is not None:
            return _helper_stub(exercise_id, n.stub)
        return CheckResult(exercise_id, False, _NOT_ATTEMPTED, "not attempted")
    except Mistake as m:
        return CheckResult(exercise_id, False, str(m), "not yet")
    except TimeLimitExceeded as stop:
        return _too_slow(exercise_id, stop, ex.checker)
    except SystemExit:  # learner code the checker ran without `call`
        return CheckResult(exercise_id, False, checking.EXIT_ADVICE, "not yet")
    except Exception as e:
        if raised_in_learner_code(e, checker=ex.checker):
            return CheckResult(exercise_id, False, explain_exception(e), "not yet")
        return _checker_failed(exercise_id, e)
    return CheckResult(exercise_id, True, "all checks passed. Well done!", "passed")


def check(exercise_id, candidate, quiet=False):
    """Check a candidate for an exercise; show and return a CheckResult. Never raises."""
    result = tamper_guard.guarded(_run, exercise_id, candidate)  # a check cannot be forged
    if not quiet:
        _show(result, {"text/html": result._html()})
    return result


def hint(exercise_id, level=1):
    """Show the hints of an exercise up to ``level``, mildest first, and say how many remain.

    hint(id) shows the first (mildest) hint, hint(id, 2) the first two, and so on; the last
    hint is close to the answer. The same call always shows the same hints."""
    try:
        hints = _lookup(exercise_id).hints
    except KeyError as e:
        return _show(e.args[0])
    if not hints:
        return _show("No hints for this one.")
    if isinstance(level, bool) or not isinstance(level, int) or level < 1:
        return _show(f'level should be a whole number from 1 to {len(hints)}: hint("{exercise_id}", 2), got {level!r}.')
    shown = hints[:level]
    lines = [f"Hint {i} of {len(hints)}: {h}" for i, h in enumerate(shown, 1)]
    left = len(hints) - len(shown)
    if left:
        more = "1 more hint" if left == 1 else f"{left} more hints"
        lines.append(f'({more}: hint("{exercise_id}", {len(shown) + 1}) shows the next one.)')
    else:
        lines.append(f'(That was the last hint; show_solution("{exercise_id}") shows the whole solution.)')
    _show("\n".join(lines))


def solution(exercise_id):
    """The reference solution object (function or class) for an exercise."""
    return _lookup(exercise_id).solution


def _is_input_check(statement):
    """``_validate.<check>(...)`` or ``x = _validate.<check>(...)``: a call of course_utils._validate."""
    call = statement.value if isinstance(statement, (ast.Expr, ast.Assign)) else None
    function = getattr(call, "func", None) if isinstance(call, ast.Call) else None
    return (
        isinstance(function, ast.Attribute)
        and isinstance(function.value, ast.Name)
        and function.value.id == "_validate"
    )


def _without_input_checks(source):
    """``source`` without the input checks that open each function and method: the algorithm a learner
    writes. The checks are whole statements (a call over several lines goes whole), found by the AST."""
    drop = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = node.body
        first = body[0]
        start = 1 if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) else 0
        checks = []
        for statement in body[start:]:
            if not _is_input_check(statement):
                break
            checks.append(statement)
        if len(checks) < len(body) - start:  # a body of checks only stays: a function needs a body
            drop.update(line for s in checks for line in range(s.lineno, s.end_lineno + 1))
    return "".join(line for number, line in enumerate(source.splitlines(keepends=True), 1) if number not in drop)


def _names_used(source):
    return {node.id for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Name)}


def _imports_for(source, module, leave_out=()):
    """Import lines for the module-level names ``source`` uses from ``module``, so it runs when pasted."""
    plain, from_lines = set(), {}
    for name in sorted(_names_used(source) & set(vars(module)) - set(leave_out)):
        obj = vars(module)[name]
        if inspect.ismodule(obj):
            plain.add(f"import {obj.__name__}" + ("" if obj.__name__ == name else f" as {name}"))
            continue
        home = getattr(obj, "__module__", None)  # import functions and classes from where they are defined
        if not (isinstance(home, str) and getattr(sys.modules.get(home), name, None) is obj):
            home = module.__name__
        from_lines.setdefault(home, []).append(name)
    froms = []
    for home, names in sorted(from_lines.items()):
        line = f"from {home} import {', '.join(names)}"
        froms.append(
            line if len(line) <= 100 else f"from {home} import (\n" + "".join(f"    {n},\n" for n in names) + ")"
        )
    return sorted(plain) + froms


def _other_exercises_used(exercise_id, source, module):
    """Names in ``source`` that are other exercises' solutions: importing them at the top of the pasted
    cell would replace the learner's own solutions of those exercises."""
    others = set()
    for other_id, ex in _REGISTRY.items():
        if other_id != exercise_id:
            others.update({other_id, getattr(ex.solution, "__name__", None)})
    return sorted(_names_used(source) & others & set(vars(module)))


def _with_local_import(source, import_line):
    """The function's source with ``import_line`` as the first statement of its body (after a docstring)."""
    function = ast.parse(source).body[0]
    first = function.body[0]
    has_docstring = isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant)
    lines = source.splitlines(keepends=True)
    at = first.end_lineno if has_docstring and len(function.body) > 1 else first.lineno - 1
    statement = function.body[1] if has_docstring and len(function.body) > 1 else first
    indent = lines[statement.lineno - 1][: statement.col_offset]
    note = f"{indent}# the course's versions, here only: delete this line to use your own from the exercises above\n"
    return "".join(lines[:at] + [note, f"{indent}{import_line}\n"] + lines[at:])


def show_solution(exercise_id):
    """Show the reference solution (the code course_utils runs), ready to paste into the exercise cell:
    its source without its input checks (the ``_validate`` calls at the top of each function), preceded
    by the imports of everything it uses (helpers of the course included)."""
    try:
        sol = solution(exercise_id)
    except KeyError as e:
        return _show(e.args[0])
    source = _without_input_checks(textwrap.dedent(inspect.getsource(sol)))
    module = sys.modules[sol.__module__]
    others = _other_exercises_used(exercise_id, source, module) if inspect.isfunction(sol) else []
    imports = "\n".join(_imports_for(source, module, leave_out=others))
    if others:
        source = _with_local_import(source, f"from {module.__name__} import {', '.join(others)}")
    text = f"# {sol.__module__}.{sol.__qualname__}\n" + (f"{imports}\n\n\n" if imports else "") + source
    if inspect.isfunction(sol) and exercise_id.isidentifier() and exercise_id != sol.__name__:
        # the exercise cell defines a function named like the exercise id: bind the solution to that name
        text += f"\n\n{exercise_id} = {sol.__name__}\n"
    _show(text, {"text/markdown": f"```python\n{text}```"})
