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


# Run in the kernel, outside the notebook's cells: keep the names Run All left behind, and
# put them back before each re-run, so every cell is re-run alone in the state after Run All
# (IPython's own history names, _ _i1 In Out ..., are left alone).
_SNAPSHOT = """
__scroll_back__ = {k: v for k, v in globals().items()
                   if not (k.startswith("__") or k in ("In", "Out", "_", "_oh", "_ih", "_dh", "exit", "quit")
                           or __import__("re").fullmatch(r"_i*\\d*|_i+", k))}
"""
_RESTORE = "globals().update(__scroll_back__)"


def execute_then_rerun_each_cell(path, inject=False, timeout=300):
    """Run All in a fresh kernel, then re-run every code cell alone, in order, in that kernel.

    After Run All a learner scrolls back and re-runs one earlier cell (to look at it
    again, or after fixing an exercise): that cell sees the names every later section
    has set, and its own earlier output must come back. Before each re-run the names
    are bound again to what Run All left (objects changed in place stay changed), so
    each cell is tested alone, not after the cells above it ran again. Two executions
    in all: training cells run twice, never three times. Returns the notebook with
    Run All's outputs and {cell index: (the cell after its re-run, its error or None)}.
    A cell that fails during Run All raises AssertionError naming it.
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
    code = [(index, cell) for index, cell in enumerate(nb.cells) if cell.cell_type == "code"]
    reruns = {}
    with client.setup_kernel():
        for index, cell in code:
            try:
                client.execute_cell(cell, index)
            except CellExecutionError as e:
                raise AssertionError(f"{Path(path).name} cell {index} fails during Run All:\n{e}") from None
        last = code[-1][0] if code else 0
        client.execute_cell(nbformat.v4.new_code_cell(_SNAPSHOT), last, store_history=False)
        for index, cell in code:
            client.execute_cell(nbformat.v4.new_code_cell(_RESTORE), index, store_history=False)
            again = copy.deepcopy(cell)
            # nbclient sends display updates (progress bars) to the notebook's cell at this index
            # and to earlier displays by id: let them reach the re-run's own outputs only
            nb.cells[index] = again
            client._display_id_map.clear()
            error = None
            try:
                client.execute_cell(again, index)
            except CellExecutionError as e:
                error = str(e)
            reruns[index] = (again, error)
        for index, cell in code:
            nb.cells[index] = cell  # execute_cell stores the cell it ran in the notebook: keep Run All's
    return nb, reruns


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
