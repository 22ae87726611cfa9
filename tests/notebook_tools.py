"""Notebook helpers for the tests and the Makefile.

    python tests/notebook_tools.py strip-metadata notebooks/*.ipynb

Exercise cells carry the tag ``exercise`` and ``"exercise_id": "<id>"`` in
their metadata; the stub defines the learner's function or class.
``inject_solutions`` replaces each stub with the reference solution, bound to
the same name, so a notebook can be run "as if every exercise were solved".
"""

import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"


def lesson_notebooks():
    return sorted(NOTEBOOK_DIR.glob("[0-9][0-9]*_*.ipynb"))


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]


def exercise_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code" and "exercise" in c.metadata.get("tags", [])]


def stub_name(cell):
    match = re.search(r"^(?:def|class)\s+(\w+)", cell.source, re.MULTILINE)
    if not match:
        raise ValueError(f"exercise cell defines no function or class:\n{cell.source}")
    return match.group(1)


def inject_solutions(nb):
    """Replace every exercise stub with the reference solution under the stub's name."""
    for cell in exercise_cells(nb):
        ex_id = cell.metadata["exercise_id"]
        cell.source = f'from course_utils.exercises import solution\n{stub_name(cell)} = solution("{ex_id}")'
    return nb


def execute(path, inject=False, timeout=300):
    """Run a notebook top to bottom in a fresh kernel, from the notebooks folder."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    if inject:
        inject_solutions(nb)
    NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK_DIR)}}
    ).execute()
    return nb


def execute_with_reruns(path, inject=False, timeout=300):
    """Run a notebook in a fresh kernel, running every code cell twice in a row.

    A learner re-runs cells all the time (Shift+Enter twice, or after fixing an
    exercise), so each cell must survive a second run. Returns the notebook with the
    first run's outputs and {cell index: the cell after its second run}.
    """
    import copy

    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    if inject:
        inject_solutions(nb)
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK_DIR)}}
    )
    second_runs = {}
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            again = copy.deepcopy(cell)
            for run, target in (("first", cell), ("second", again)):
                try:
                    client.execute_cell(target, index)
                except CellExecutionError as e:
                    raise AssertionError(
                        f"{Path(path).name} cell {index} fails on its {run} run (every cell before it ran twice):\n{e}"
                    ) from None
            second_runs[index] = again
    return nb, second_runs


def output_text(cell):
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif "data" in out:
            parts.append(str(out["data"].get("text/plain", "")))
        elif out.get("output_type") == "error":
            parts.append(f"{out.get('ename')}: {out.get('evalue')}")
    return "".join(parts)


def strip_metadata(paths):
    """Drop papermill's timestamps so re-executing changes only what matters."""
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        nb.metadata.pop("papermill", None)
        for cell in nb.cells:
            cell.metadata.pop("papermill", None)
            cell.metadata.pop("execution", None)
        nbformat.write(nb, path)


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "strip-metadata":
        sys.exit(__doc__)
    strip_metadata(sys.argv[2:])
