"""Learners' notebooks as `make progress` and `make grade` get them: one exercise (causal_mask), its check."""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

ROOT = Path(__file__).resolve().parents[2]
STUB = "def causal_mask(seq_len):\n    raise NotImplementedError"
RIGHT = "import torch\n\ndef causal_mask(seq_len):\n    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()"
WRONG = "import torch\n\ndef causal_mask(seq_len):\n    return torch.ones(seq_len, seq_len, dtype=torch.bool).triu()"
CHECK = 'from course_utils.exercises import check\n\nresult = check("causal_mask", causal_mask)'


def lesson(exercise_source, check_source=CHECK, extra=None, outputs=None, counts=None):
    exercise = new_code_cell(exercise_source, metadata={"tags": ["exercise"], "exercise_id": "causal_mask"})
    check = new_code_cell(check_source, outputs=outputs or [])
    cells = [new_markdown_cell("# A lesson"), exercise, check] + ([new_code_cell(extra)] if extra else [])
    for cell, count in zip([c for c in cells if c.cell_type == "code"], counts or [], strict=False):
        cell.execution_count = count
    nb = new_notebook(cells=cells)
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def save(folder, name, nb):
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / name)


def printed(text):
    return [new_output("display_data", data={"text/plain": text})]
