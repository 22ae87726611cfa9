"""`make progress` reads saved notebooks without running them; `make grade` runs copies and calls
the checkers itself, so a notebook that prints "PASSED" on its own fools neither."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from course_utils.grade import grade_folder, markdown
from course_utils.progress import notebook_progress, progress_table

ROOT = Path(__file__).resolve().parent.parent
STUB = "def causal_mask(seq_len):\n    raise NotImplementedError"
RIGHT = "import torch\n\ndef causal_mask(seq_len):\n    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()"
WRONG = "import torch\n\ndef causal_mask(seq_len):\n    return torch.ones(seq_len, seq_len, dtype=torch.bool).triu()"
CHECK = 'from course_utils.exercises import check\n\nresult = check("causal_mask", causal_mask)'


def _lesson(exercise_source, check_source=CHECK, extra=None, outputs=None, counts=None):
    exercise = new_code_cell(exercise_source, metadata={"tags": ["exercise"], "exercise_id": "causal_mask"})
    check = new_code_cell(check_source, outputs=outputs or [])
    cells = [new_markdown_cell("# A lesson"), exercise, check] + ([new_code_cell(extra)] if extra else [])
    for cell, count in zip([c for c in cells if c.cell_type == "code"], counts or [], strict=False):
        cell.execution_count = count
    nb = new_notebook(cells=cells)
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def _write(folder, name, nb):
    folder.mkdir(exist_ok=True)
    nbformat.write(nb, folder / name)


def _printed(text):
    return [new_output("display_data", data={"text/plain": text})]


def test_progress_reads_each_status_and_flags_out_of_order_runs(tmp_path):
    _write(
        tmp_path,
        "01_passed.ipynb",
        _lesson(RIGHT, outputs=_printed("PASSED [causal_mask] all checks passed."), counts=[1, 2]),
    )
    _write(
        tmp_path,
        "02_not_yet.ipynb",
        _lesson(WRONG, outputs=_printed("NOT YET [causal_mask] the output is not right"), counts=[1, 2]),
    )
    _write(
        tmp_path,
        "03_stub.ipynb",
        _lesson(STUB, outputs=_printed("NOT ATTEMPTED YET [causal_mask] your code ..."), counts=[1, 2]),
    )
    _write(tmp_path, "04_unrun.ipynb", _lesson(STUB))
    _write(tmp_path, "05_shuffled.ipynb", _lesson(RIGHT, outputs=_printed("PASSED [causal_mask] ok"), counts=[7, 3]))
    statuses = {p.name: notebook_progress(p) for p in tmp_path.glob("*.ipynb")}
    assert statuses["01_passed.ipynb"]["exercises"] == {"causal_mask": "passed"}
    assert statuses["02_not_yet.ipynb"]["exercises"] == {"causal_mask": "not yet"}
    assert statuses["03_stub.ipynb"]["exercises"] == {"causal_mask": "not attempted"}
    assert statuses["04_unrun.ipynb"]["exercises"] == {"causal_mask": "not run yet"}
    assert [n for n, s in statuses.items() if s["out_of_order"]] == ["05_shuffled.ipynb"]
    table = progress_table(tmp_path)
    assert "2 of 5 exercises passed" in table and "not run yet: 1" in table
    assert "05_shuffled.ipynb: cells ran out of order" in table and "Restart Kernel and Run All" in table


def test_make_progress_is_fast_and_reads_the_course(tmp_path):
    done = subprocess.run(
        [sys.executable, "course_utils/progress.py"], cwd=ROOT, capture_output=True, text=True, timeout=10
    )
    assert done.returncode == 0 and "scaled_dot_product_attention" in done.stdout
    assert "import torch" not in (ROOT / "course_utils" / "progress.py").read_text()  # stays well under 2 s


def test_grade_runs_copies_and_is_not_fooled(tmp_path):
    folder = tmp_path / "learner"
    _write(folder, "01_right.ipynb", _lesson(RIGHT))
    _write(folder, "02_wrong.ipynb", _lesson(WRONG))
    _write(folder, "03_crash.ipynb", _lesson(RIGHT, extra="raise ValueError('boom')"))
    tampered = 'print("PASSED [causal_mask] all checks passed. Well done!")'
    _write(folder, "04_tampered.ipynb", _lesson(STUB, check_source=tampered))
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}
    reports, good = grade_folder(folder)
    after = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}
    assert before == after, "grading must never modify the learner's notebooks"
    by_name = {r["notebook"]: r for r in reports}
    assert by_name["01_right.ipynb"]["exercises"]["causal_mask"]["status"] == "passed"
    assert by_name["02_wrong.ipynb"]["exercises"]["causal_mask"]["status"] == "not yet"
    assert by_name["03_crash.ipynb"]["error"] == "cell 3 raised ValueError: boom"
    assert by_name["03_crash.ipynb"]["exercises"]["causal_mask"]["status"] == "passed"  # graded all the same
    assert by_name["04_tampered.ipynb"]["exercises"]["causal_mask"]["status"] == "not attempted"
    assert not good
    assert "**raised** | cell 3 raised ValueError: boom" in markdown(reports)


def test_grade_exit_status_and_reports(tmp_path):
    folder = tmp_path / "learner"
    _write(folder, "01_right.ipynb", _lesson(RIGHT))
    _write(folder, "02_stub.ipynb", _lesson(STUB))
    out = tmp_path / "report"
    command = [sys.executable, "-m", "course_utils.grade", str(folder), "--out", str(out)]
    strict = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert strict.returncode == 1, strict.stdout + strict.stderr
    lenient = subprocess.run(command + ["--allow-not-attempted"], cwd=ROOT, capture_output=True, text=True)
    assert lenient.returncode == 0, lenient.stdout + lenient.stderr
    report = json.loads((out / "grade.json").read_text())
    assert [r["exercises"]["causal_mask"]["status"] for r in report] == ["passed", "not attempted"]
    assert "1 of 2 exercises passed" in (out / "grade.md").read_text()
