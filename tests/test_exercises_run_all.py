"""'Run All' with every exercise solved, each code cell run twice in a row.

The notebook runs to the end, every check passes, and every cell survives being
run a second time (what a learner does constantly): no error, and the same output
unless the cell is marked NBVAL_IGNORE_OUTPUT (timings). A cell that draws from the
global random state, retrains an already trained model or appends to a table again
fails here. (nbval runs the notebooks as committed, with the stubs unsolved.)
"""

import re

import nbformat

from course_utils.exercises import exercise_ids
from tests.notebook_tools import execute_with_reruns, exercise_cells, lesson_notebooks, output_text


def _varies_by_design(cell):
    first = cell.source.lstrip().splitlines()[0] if cell.source.strip() else ""
    return first.strip().lstrip("#").strip() in {"NBVAL_IGNORE_OUTPUT", "NBVAL_SKIP"}


def _run_all_solved_and_every_cell_twice(nb_path):
    nb, second_runs = execute_with_reruns(nb_path, inject=True)
    text = "\n".join(output_text(c) for c in nb.cells if c.cell_type == "code")
    ids = {c.metadata["exercise_id"] for c in exercise_cells(nb)}
    for ex_id in ids:
        assert f"PASSED [{ex_id}]" in text, f"{nb_path.name}: check for {ex_id!r} did not pass with the solution"
    assert "NOT YET" not in text and "NOT ATTEMPTED" not in text
    for index, again in second_runs.items():
        first = nb.cells[index]
        if _varies_by_design(first):
            continue
        assert output_text(again) == output_text(first), (
            f"{nb_path.name} cell {index} prints something else when run a second time "
            f"(seed it inside the cell, or build its state afresh):\n{first.source[:300]}\n"
            f"--- first run:\n{output_text(first)[:600]}\n--- second run:\n{output_text(again)[:600]}"
        )


# One test class per notebook: pytest-xdist's loadscope spreads classes over the workers
# (a parametrized function would keep every notebook on one worker).
for _path in lesson_notebooks():
    _name = "TestRunAll_" + re.sub(r"\W", "_", _path.stem)
    globals()[_name] = type(
        _name, (), {"test_solved_and_every_cell_twice": lambda self, p=_path: _run_all_solved_and_every_cell_twice(p)}
    )


def test_every_exercise_appears_in_a_lesson():
    used = {
        c.metadata["exercise_id"] for p in lesson_notebooks() for c in exercise_cells(nbformat.read(p, as_version=4))
    }
    missing = set(exercise_ids()) - used
    assert not missing, f"exercises with a checker but no notebook cell: {sorted(missing)}"
