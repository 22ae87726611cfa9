"""`make grade` runs copies of a learner's notebooks and calls the checkers itself (so a notebook that
prints "PASSED" on its own does not fool it: test_grade_class.py); its exit status and reports."""

import copy
import hashlib
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell

from course_utils.tools import grade
from course_utils.tools.grade import grade_folder, markdown
from tests.tools.learner_notebooks import RIGHT, ROOT, WRONG, lesson, save


def test_grade_runs_copies_and_grades_what_ran_before_an_error(tmp_path):
    # a right notebook, and one that prints "PASSED" itself (not fooled): test_grade_class.py
    folder = tmp_path / "learner"
    save(folder, "02_wrong.ipynb", lesson(WRONG))
    save(folder, "03_crash.ipynb", lesson(RIGHT, extra="raise ValueError('boom')"))
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}
    reports, good = grade_folder(folder)
    after = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}
    assert before == after, "grading must never modify the learner's notebooks"
    by_name = {r["notebook"]: r for r in reports}
    assert by_name["02_wrong.ipynb"]["exercises"]["causal_mask"]["status"] == "not yet"
    assert by_name["03_crash.ipynb"]["error"] == "cell 3 raised ValueError: boom"
    assert by_name["03_crash.ipynb"]["exercises"]["causal_mask"]["status"] == "passed"  # graded all the same
    assert not good
    assert "**raised** | cell 3 raised ValueError: boom" in markdown(reports)


def test_grade_exit_status_and_reports(tmp_path, monkeypatch):
    # one notebook: causal_mask solved, split_heads still the stub
    nb = lesson(RIGHT)
    split_stub = "def split_heads(x, num_heads):\n    raise NotImplementedError"
    nb.cells += [
        new_code_cell(split_stub, metadata={"tags": ["exercise"], "exercise_id": "split_heads"}),
        new_code_cell('from course_utils.exercises import check\n\ncheck("split_heads", split_heads)'),
    ]
    folder = tmp_path / "learner"
    save(folder, "01_two_exercises.ipynb", nb)
    out = tmp_path / "report"
    command = [sys.executable, "-m", "course_utils.tools.grade", str(folder), "--out", str(out)]
    strict = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert strict.returncode == 1, strict.stdout + strict.stderr
    (report,) = json.loads((out / "grade.json").read_text())
    assert {e: v["status"] for e, v in report["exercises"].items()} == {
        "causal_mask": "passed",
        "split_heads": "not attempted",
    }
    assert "1 of 2 exercises passed" in (out / "grade.md").read_text()
    # the same grades with --allow-not-attempted: exit status 0 (the report reused: no second kernel)
    monkeypatch.setattr(grade, "_grade_copy", lambda path, time_limit: copy.deepcopy(report))
    assert grade.main([str(folder), "--out", str(tmp_path / "lenient"), "--allow-not-attempted"]) == 0
    assert grade.main([str(folder), "--out", str(tmp_path / "strict")]) == 1


def test_grade_writes_the_report_after_every_notebook(tmp_path):
    folder = tmp_path / "learner"
    save(folder, "01_right.ipynb", lesson(RIGHT))
    (folder / "02_dir.ipynb").mkdir()  # a folder named like a notebook
    (folder / "03_v3.ipynb").write_text(json.dumps({"nbformat": 3, "worksheets": [{"cells": []}], "metadata": {}}))
    seen = []
    reports, good = grade_folder(folder, on_report=lambda so_far: seen.append([r["notebook"] for r in so_far]))
    assert seen == [["01_right.ipynb"], ["01_right.ipynb", "02_dir.ipynb"], [r["notebook"] for r in reports]]
    assert [r["result"] for r in reports] == ["ran", "not a notebook", "not a notebook"]
    assert "nbformat 3" in reports[2]["error"] and not good


def _damaged(change):
    data = json.loads(nbformat.writes(lesson(RIGHT)))
    change(data["cells"][1])  # the exercise cell
    return json.dumps(data)


def test_grade_says_what_is_not_a_notebook_and_grades_the_rest(tmp_path, monkeypatch):
    """No kernel runs here: each file is refused before, with the reason, and grading goes on."""
    folder = tmp_path / "learner"
    folder.mkdir()
    (folder / "01_loop.ipynb").symlink_to("01_loop.ipynb")
    (folder / "02_gone.ipynb").symlink_to("moved.ipynb")
    (folder / "03_tags.ipynb").write_text(_damaged(lambda cell: cell["metadata"].update(tags=None)))
    (folder / "04_source.ipynb").write_text(_damaged(lambda cell: cell.update(source=5)))
    (folder / "05_locked.ipynb").write_text("{}")
    (folder / "06_deep.ipynb").write_text("[" * 100_000 + "]" * 100_000)
    copy = shutil.copyfile

    def locked(source, target, **kwargs):  # what a file the grader may not read does (as root, chmod cannot)
        if Path(source).name == "05_locked.ipynb":
            raise PermissionError(13, "Permission denied", str(source))
        return copy(source, target, **kwargs)

    monkeypatch.setattr(shutil, "copyfile", locked)
    reports, good = grade_folder(folder)
    assert [(r["notebook"], r["result"]) for r in reports] == [
        (f"0{i}_{name}.ipynb", "not a notebook")
        for i, name in enumerate(["loop", "gone", "tags", "source", "locked", "deep"], 1)
    ]
    errors = [r["error"] for r in reports]
    assert errors[0] == "01_loop.ipynb is a symbolic link loop (it leads back to itself), not a notebook file"
    assert errors[1] == "02_gone.ipynb is a symbolic link to moved.ipynb, which does not exist, not a notebook file"
    assert errors[2] == "cell 1 is damaged: its tags are null, not a list"
    assert errors[3] == "cell 1 is damaged: its source is 5, not text"
    assert errors[4] == "it cannot be read (Permission denied)"
    assert errors[5] == "its JSON is nested too deeply to be a notebook"
    assert not good


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_grade_reads_a_folder_whose_name_has_a_space(tmp_path):
    folder, out = tmp_path / "my notebooks", tmp_path / "report"
    folder.mkdir()
    (folder / "01_empty.ipynb").write_text("")  # refused before a kernel starts: the test stays fast
    # the command line `make grade` runs (--old-file: without running `make install` first)
    make = ["make", "--dry-run", "--no-print-directory", "--old-file=install", "grade"]
    dry = subprocess.run(
        make + [f"NOTEBOOKS_DIR={folder}", f"PY={sys.executable}"], cwd=ROOT, capture_output=True, text=True
    )
    (command,) = [line for line in dry.stdout.splitlines() if "course_utils.tools.grade" in line]
    done = subprocess.run(
        ["bash", "-c", f"{command} --out {shlex.quote(str(out))}"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stdout + done.stderr
    (report,) = json.loads((out / "grade.json").read_text())
    assert (report["notebook"], report["result"]) == ("01_empty.ipynb", "not a notebook")
