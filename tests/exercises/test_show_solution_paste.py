"""What show_solution prints passes its checker when pasted into the exercise cell as it stands,
and leaves the learner's other exercises alone.

For every exercise cell of every lesson (exercises added later included), the printed text
is run in a fresh namespace that holds only what the notebook imported before that cell,
as a learner's kernel would, and the object under the stub's name is checked. The pasted
text must not rebind the name of another exercise of the same lesson (an import of the
course's split_heads would replace the learner's, whose check would then pass unsolved).
"""

import ast
import linecache

import nbformat
import pytest

from course_utils.exercises import check, exercise_ids, show_solution
from tests.notebook_tools import code_cells, exercise_cells, lesson_notebooks, stub_name


def _exercises(with_others=False):
    for path in lesson_notebooks():
        nb = nbformat.read(path, as_version=4)
        cells = code_cells(nb)
        for cell in exercise_cells(nb):
            before = cells[: cells.index(cell)] if cell in cells else cells
            others = {stub_name(c) for c in exercise_cells(nb)} - {stub_name(cell)}
            args = (cell, before, others) if with_others else (cell, before)
            yield pytest.param(*args, id=f"{path.name}:{cell.metadata['exercise_id']}")


def _imports(cells):
    """The import statements of the cells (IPython magics and shell lines left out)."""
    lines = []
    for cell in cells:
        source = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
        for node in ast.parse(source).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                lines.append(ast.unparse(node))
    return "\n".join(lines)


def _paste(exercise_id, namespace, capsys):
    """Run what show_solution prints in the namespace, as a learner's pasted cell."""
    show_solution(exercise_id)
    shown = capsys.readouterr().out
    # as IPython does for a cell: the source stays readable (a compiled Triton kernel needs it)
    filename = f"<show_solution {exercise_id}>"
    linecache.cache[filename] = (len(shown), None, shown.splitlines(keepends=True), filename)
    exec(compile(shown, filename, "exec"), namespace)
    return shown


@pytest.mark.parametrize(("cell", "before"), list(_exercises()))
def test_pasted_solution_passes_its_check(cell, before, capsys):
    exercise_id = cell.metadata["exercise_id"]
    namespace = {}
    exec(_imports(before), namespace)
    shown = _paste(exercise_id, namespace, capsys)

    name = stub_name(cell)
    assert name in namespace, f"the shown solution does not define {name!r}, the name the exercise cell defines"
    result = check(exercise_id, namespace[name], quiet=True)
    assert result.passed, f"pasted solution of {exercise_id!r} fails its check: {result.message}\n---\n{shown}"


@pytest.mark.parametrize(("cell", "before", "others"), list(_exercises(with_others=True)))
def test_pasted_solution_leaves_the_other_exercises_alone(cell, before, others, capsys):
    namespace = {}
    exec(_imports(before), namespace)
    learners = {name: object() for name in others}  # stand-ins for the learner's own solutions
    namespace.update(learners)
    _paste(cell.metadata["exercise_id"], namespace, capsys)
    replaced = sorted(name for name, mine in learners.items() if namespace.get(name) is not mine)
    assert not replaced, (
        f"pasting the solution of {cell.metadata['exercise_id']!r} rebinds {replaced}, the learner's own "
        "solution(s) of other exercises of this lesson: their checks would then test the course's code. "
        "Have the solution call them without importing them under the exercises' names."
    )


def test_every_lesson_has_exercises_to_paste():
    assert len(list(_exercises())) >= 7


def test_every_exercise_id_is_pasted_here():
    # an id registered without an exercise cell in a lesson would have its shown solution never run
    pasted = [param.values[0].metadata["exercise_id"] for param in _exercises()]
    assert sorted(pasted) == exercise_ids(), (
        f"ids without an exercise cell: {sorted(set(exercise_ids()) - set(pasted))}; "
        f"exercise cells of unregistered ids: {sorted(set(pasted) - set(exercise_ids()))}"
    )


def _course_like_solution(scores):
    return scores / scores.sum(dim=-1, keepdim=True)


def test_a_solution_named_differently_from_its_exercise_is_bound_to_the_exercise_name(capsys):
    from course_utils.exercises import _REGISTRY, exercise

    exercise("normalise_alias", solution=_course_like_solution)(lambda candidate: None)
    try:
        show_solution("normalise_alias")
    finally:
        _REGISTRY.pop("normalise_alias")
    namespace = {}
    exec(capsys.readouterr().out, namespace)
    assert namespace["normalise_alias"] is namespace["_course_like_solution"]
