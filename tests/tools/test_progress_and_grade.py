"""`make progress` reads saved notebooks without running them; `make grade` runs copies and calls
the checkers itself, so a notebook that prints "PASSED" on its own fools neither."""

import csv
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from course_utils.grade import grade_folder, markdown
from course_utils.progress import notebook_progress, progress_table

ROOT = Path(__file__).resolve().parents[2]
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
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / name)


def _printed(text):
    return [new_output("display_data", data={"text/plain": text})]


def test_progress_reads_each_status_and_flags_a_result_about_older_code(tmp_path):
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
    # the exercise cell ran (7) after its check (3): the PASSED shown is about the code before
    _write(tmp_path, "05_shuffled.ipynb", _lesson(RIGHT, outputs=_printed("PASSED [causal_mask] ok"), counts=[7, 3]))
    statuses = {p.name: notebook_progress(p) for p in tmp_path.glob("*.ipynb")}
    assert statuses["01_passed.ipynb"]["exercises"] == {"causal_mask": "passed"}
    assert statuses["02_not_yet.ipynb"]["exercises"] == {"causal_mask": "not yet"}
    assert statuses["03_stub.ipynb"]["exercises"] == {"causal_mask": "not attempted"}
    assert statuses["04_unrun.ipynb"]["exercises"] == {"causal_mask": "not run yet"}
    assert [n for n, s in statuses.items() if s["misleading"]] == ["05_shuffled.ipynb"]
    table = progress_table(tmp_path)
    assert "2 of 5 exercises passed" in table and "not run yet: 1" in table
    assert "05_shuffled.ipynb: the exercise cell of causal_mask ran again after its check" in table
    assert "run its check cell again" in table


def test_run_all_then_solving_an_exercise_gives_no_warning(tmp_path):
    """Run All (cells 1-3), then the learner edits the exercise (4) and runs its check (5): all is well,
    although the cell below the check keeps its earlier count."""
    nb = _lesson(RIGHT, outputs=_printed("PASSED [causal_mask] all checks passed."), extra="x = 1", counts=[4, 5, 3])
    _write(tmp_path, "01_solved.ipynb", nb)
    assert notebook_progress(tmp_path / "01_solved.ipynb")["misleading"] == []
    assert "!" not in progress_table(tmp_path)


def test_progress_skips_what_it_cannot_read_and_shows_the_rest(tmp_path):
    _write(tmp_path, "01_good.ipynb", _lesson(RIGHT, outputs=_printed("PASSED [causal_mask] ok"), counts=[1, 2]))
    _write(tmp_path, "01_good-Copy1.ipynb", _lesson(WRONG, outputs=_printed("NOT YET [causal_mask] no"), counts=[1, 2]))
    (tmp_path / "02_corrupt.ipynb").write_text('{"cells": [{"cell_type": "code"')
    (tmp_path / "03_empty.ipynb").write_text("")
    (tmp_path / "04_braces.ipynb").write_text("{}")
    (tmp_path / "05_v3.ipynb").write_text(json.dumps({"nbformat": 3, "worksheets": [{"cells": []}], "metadata": {}}))
    (tmp_path / "06_latin1.ipynb").write_bytes(b'{"cells": [], "metadata": {"note": "caf\xe9"}}')  # Latin-1, not UTF-8
    (tmp_path / "07_folder.ipynb").mkdir()
    nb = _lesson(RIGHT, outputs=_printed("PASSED [causal_mask] ok"), counts=[1, 2])
    nb.cells.append(
        new_code_cell("def split_heads(x):\n    raise NotImplementedError", metadata={"tags": ["exercise"]})
    )
    _write(tmp_path, "08_no_id.ipynb", nb)
    table = progress_table(tmp_path)
    assert "2 of 2 exercises passed" in table, table  # 01 and 08, not the copy
    for name, why in [
        ("02_corrupt", "not valid JSON"),
        ("03_empty", "empty"),
        ("04_braces", "no cells"),
        ("05_v3", "old notebook format 3"),
        ("06_latin1", "not UTF-8"),
        ("07_folder", "a folder"),
    ]:
        assert (
            f"! {name}.ipynb: skipped, " in table
            and why in table.split(f"! {name}.ipynb: skipped, ")[1].splitlines()[0]
        )
    assert "! 08_no_id.ipynb: skipped an exercise cell without an exercise_id ('def split_heads(x):')" in table
    assert "01_good-Copy1" not in table.split("\n\n")[0]  # not a row of the table
    assert "not counted: JupyterLab's copies 01_good-Copy1.ipynb" in table
    done = subprocess.run(
        [sys.executable, "course_utils/progress.py", str(tmp_path)], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr and "2 of 2 exercises passed" in done.stdout


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


# ---------------------------------------------------------------- a class's submissions, as an instructor gets them

ALLCLOSE_FORGED = (
    "import torch\ntorch.allclose = lambda *a, **k: True\n\ndef normalise_scores(scores):\n    return scores * 2"
)
EQUAL_FORGED = WRONG.replace("def causal_mask", "torch.equal = lambda *a, **k: True\n\ndef causal_mask")
# replaced while the checker runs the learner's function: the check compares afterwards
FORGED_INSIDE = (
    "import torch\nimport torch.testing\n\ndef causal_mask(seq_len):\n"
    "    torch.equal = lambda *a, **k: True\n    torch.testing.assert_close = lambda *a, **k: None\n"
    "    return torch.ones(seq_len, seq_len, dtype=torch.bool).triu()"
)


def _normalise_lesson(source):
    nb = _lesson(
        source, check_source='from course_utils.exercises import check\ncheck("normalise_scores", normalise_scores)'
    )
    nb.cells[1].metadata["exercise_id"] = "normalise_scores"
    return nb


def _no_exercise_id():
    nb = _lesson(RIGHT)
    second = new_code_cell(STUB.replace("causal_mask", "split_heads"), metadata={"tags": ["exercise"]})
    nb.cells.insert(3, second)  # tagged as an exercise, but its exercise_id was lost
    return nb


def _submissions(root):
    """Two learners' folders, each with the kinds of notebook a class hands in."""
    ana, ben = root / "ana", root / "ben"
    _write(ana, "01_right.ipynb", _lesson(RIGHT))
    _write(ana, "02_loops.ipynb", _lesson(RIGHT, extra="import time\nwhile True:\n    time.sleep(1)"))
    _write(ana, "03_exits.ipynb", _lesson(RIGHT, extra="import os\nos._exit(1)"))
    _write(ana, "04_no_id.ipynb", _no_exercise_id())
    (ana / "05_corrupt.ipynb").write_text('{"cells": [')
    _write(ana, "01_right-Copy1.ipynb", _lesson(WRONG))  # JupyterLab's duplicate: not a lesson
    _write(ben, "01_equal.ipynb", _lesson(EQUAL_FORGED))
    _write(ben, "02_allclose.ipynb", _normalise_lesson(ALLCLOSE_FORGED))
    _write(ben, "03_inside.ipynb", _lesson(FORGED_INSIDE))
    (ben / "04_empty.ipynb").write_text("")
    _write(ben, "05_printed.ipynb", _lesson(STUB, check_source='print("PASSED [causal_mask] all checks passed.")'))


def test_grade_a_class_one_notebook_never_costs_the_others(tmp_path):
    _submissions(tmp_path / "submissions")
    out = tmp_path / "report"
    command = [sys.executable, "-m", "course_utils.grade", str(tmp_path / "submissions"), "--out", str(out)]
    done = subprocess.run(command + ["--time-limit", "15"], cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert done.returncode == 1, done.stdout + done.stderr
    ana = {r["notebook"]: r for r in json.loads((out / "ana" / "grade.json").read_text())}
    ben = {r["notebook"]: r for r in json.loads((out / "ben" / "grade.json").read_text())}
    assert sorted(ana) == ["01_right.ipynb", "02_loops.ipynb", "03_exits.ipynb", "04_no_id.ipynb", "05_corrupt.ipynb"]
    assert ana["01_right.ipynb"]["result"] == "ran"
    assert ana["01_right.ipynb"]["exercises"]["causal_mask"]["status"] == "passed"
    loops = ana["02_loops.ipynb"]
    assert loops["result"] == "timed out" and "cell 3" in loops["error"]
    assert loops["exercises"]["causal_mask"]["status"] == "passed"  # defined before the loop: still graded
    exits = ana["03_exits.ipynb"]
    assert exits["result"] == "kernel died" and exits["exercises"]["causal_mask"]["status"] == "not graded"
    no_id = ana["04_no_id.ipynb"]
    assert (
        no_id["result"] == "bad exercise cell"
        and "cell 3 is tagged `exercise` but has no exercise_id" in no_id["error"]
    )
    assert no_id["exercises"] == {"causal_mask": {"status": "passed", "message": "all checks passed. Well done!"}}
    assert (
        ana["05_corrupt.ipynb"]["result"] == "not a notebook" and "not valid JSON" in ana["05_corrupt.ipynb"]["error"]
    )

    # forged passes: the wrong solutions are "not yet", and each notebook is reported as tampered
    for name, replaced in [("01_equal.ipynb", "torch.equal"), ("02_allclose.ipynb", "torch.allclose")]:
        assert ben[name]["result"] == "tampered" and replaced in ben[name]["error"], ben[name]
        (status,) = [e["status"] for e in ben[name]["exercises"].values()]
        assert status == "not yet", ben[name]
    inside = ben["03_inside.ipynb"]["exercises"]["causal_mask"]
    assert inside["status"] == "not yet" and "torch.equal" in inside["message"]
    assert "torch.testing.assert_close" in inside["message"]
    assert ben["04_empty.ipynb"]["result"] == "not a notebook" and "empty" in ben["04_empty.ipynb"]["error"]
    assert ben["05_printed.ipynb"]["exercises"]["causal_mask"]["status"] == "not attempted"
    assert "**timed out**" in (out / "ana" / "grade.md").read_text()

    # the gradebook: one row per learner, one column per exercise, then the totals
    with open(out / "gradebook.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["learner"] for r in rows] == ["ana", "ben"]
    assert list(rows[0])[:3] == ["learner", "causal_mask", "normalise_scores"]
    assert rows[0]["causal_mask"] == "passed" and rows[0]["normalise_scores"] == "missing"
    assert rows[1]["causal_mask"] == "not attempted"  # the last notebook with it decides
    assert (rows[0]["passed"], rows[0]["exercises"]) == ("1", "2")
    assert "02_loops.ipynb: timed out" in rows[0]["notebook problems"]
    assert "01_equal.ipynb: tampered" in rows[1]["notebook problems"]


def test_grade_writes_the_report_after_every_notebook(tmp_path):
    folder = tmp_path / "learner"
    _write(folder, "01_right.ipynb", _lesson(RIGHT))
    (folder / "02_dir.ipynb").mkdir()  # a folder named like a notebook
    (folder / "03_v3.ipynb").write_text(json.dumps({"nbformat": 3, "worksheets": [{"cells": []}], "metadata": {}}))
    seen = []
    reports, good = grade_folder(folder, on_report=lambda so_far: seen.append([r["notebook"] for r in so_far]))
    assert seen == [["01_right.ipynb"], ["01_right.ipynb", "02_dir.ipynb"], [r["notebook"] for r in reports]]
    assert [r["result"] for r in reports] == ["ran", "not a notebook", "not a notebook"]
    assert "nbformat 3" in reports[2]["error"] and not good
