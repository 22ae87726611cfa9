"""'Run All' with every exercise solved: the notebook runs to the end and every check passes.

(nbval runs the notebooks as committed, with the stubs unsolved.)
"""

import nbformat
import pytest

from course_utils.exercises import exercise_ids
from tests.notebook_tools import execute, exercise_cells, lesson_notebooks, output_text

WITH_EXERCISES = [p for p in lesson_notebooks() if exercise_cells(nbformat.read(p, as_version=4))]


@pytest.mark.parametrize("nb_path", WITH_EXERCISES, ids=lambda p: p.name)
def test_run_all_with_solutions_injected(nb_path):
    nb = execute(nb_path, inject=True)
    text = "\n".join(output_text(c) for c in nb.cells if c.cell_type == "code")
    ids = {c.metadata["exercise_id"] for c in exercise_cells(nb)}
    for ex_id in ids:
        assert f"PASSED [{ex_id}]" in text, f"{nb_path.name}: check for {ex_id!r} did not pass with the solution"
    assert "NOT YET" not in text and "NOT ATTEMPTED" not in text


def test_every_exercise_appears_in_a_lesson():
    used = {
        c.metadata["exercise_id"] for p in lesson_notebooks() for c in exercise_cells(nbformat.read(p, as_version=4))
    }
    missing = set(exercise_ids()) - used
    assert not missing, f"exercises with a checker but no notebook cell: {sorted(missing)}"
