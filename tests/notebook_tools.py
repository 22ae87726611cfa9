"""Reading the lessons for the tests: their notebooks, code cells, exercise cells and outputs.

Exercise cells carry the tag ``exercise`` and ``"exercise_id": "<id>"`` in
their metadata; the stub defines the learner's function or class (``stub_name``).
"""

import re
from pathlib import Path

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


def output_text(cell):
    """What a cell (or a list of its outputs) printed and displayed, as text."""
    parts = []
    for out in cell.get("outputs", []) if isinstance(cell, dict) else cell:
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif "data" in out:
            parts.append(str(out["data"].get("text/plain", "")))
        elif out.get("output_type") == "error":
            parts.append(f"{out.get('ename')}: {out.get('evalue')}")
    return "".join(parts)
