"""`make grade` over a class's submissions: one learner's broken or forged notebook never costs the
others their grade, and the gradebook has a row per learner."""

import csv
import json
import os
import subprocess
import sys

from nbformat.v4 import new_code_cell

from course_utils.tools.grade import main
from tests.tools.learner_notebooks import RIGHT, ROOT, STUB, WRONG, lesson, save

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
    nb = lesson(
        source, check_source='from course_utils.exercises import check\ncheck("normalise_scores", normalise_scores)'
    )
    nb.cells[1].metadata["exercise_id"] = "normalise_scores"
    return nb


def _no_exercise_id():
    nb = lesson(RIGHT)
    second = new_code_cell(STUB.replace("causal_mask", "split_heads"), metadata={"tags": ["exercise"]})
    nb.cells.insert(3, second)  # tagged as an exercise, but its exercise_id was lost
    return nb


def _submissions(root):
    """Two learners' folders, each with the kinds of notebook a class hands in."""
    ana, ben = root / "ana", root / "ben"
    save(ana, "01_right.ipynb", lesson(RIGHT))
    save(ana, "02_loops.ipynb", lesson(RIGHT, extra="import time\nwhile True:\n    time.sleep(1)"))
    save(ana, "03_exits.ipynb", lesson(RIGHT, extra="import os\nos._exit(1)"))
    save(ana, "04_no_id.ipynb", _no_exercise_id())
    (ana / "05_corrupt.ipynb").write_text('{"cells": [')
    save(ana, "01_right-Copy1.ipynb", lesson(WRONG))  # JupyterLab's duplicate: not a lesson
    save(ben, "01_equal.ipynb", lesson(EQUAL_FORGED))
    save(ben, "02_allclose.ipynb", _normalise_lesson(ALLCLOSE_FORGED))
    save(ben, "03_inside.ipynb", lesson(FORGED_INSIDE))
    (ben / "04_empty.ipynb").write_text("")
    save(ben, "05_printed.ipynb", lesson(STUB, check_source='print("PASSED [causal_mask] all checks passed.")'))


def test_grade_a_class_one_notebook_never_costs_the_others(tmp_path):
    _submissions(tmp_path / "submissions")
    out = tmp_path / "report"
    command = [sys.executable, "-m", "course_utils.tools.grade", str(tmp_path / "submissions"), "--out", str(out)]
    done = subprocess.run(command + ["--time-limit", "4"], cwd=ROOT, capture_output=True, text=True, timeout=400)
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


def _gradebook(out):
    with open(out / "gradebook.csv", newline="", encoding="utf-8") as f:
        return {row["learner"]: row for row in csv.DictReader(f)}


def test_a_notebook_that_deletes_its_folder_costs_no_other_notebook(tmp_path, capsys):
    submissions, out = tmp_path / "submissions", tmp_path / "report"
    deletes = "import os, shutil\nshutil.rmtree(os.getcwd())"
    save(submissions / "ana", "01_deletes.ipynb", lesson(RIGHT, extra=deletes))
    save(submissions / "ana", "02_wrong.ipynb", lesson(WRONG))
    (submissions / "ben").mkdir()
    (submissions / "ben" / "01_empty.ipynb").write_text("")
    assert main([str(submissions), "--out", str(out)]) == 1
    ana = json.loads((out / "ana" / "grade.json").read_text())
    assert [(r["notebook"], r["result"], r["exercises"]["causal_mask"]["status"]) for r in ana] == [
        ("01_deletes.ipynb", "ran", "passed"),
        ("02_wrong.ipynb", "ran", "not yet"),
    ]
    rows = _gradebook(out)
    assert (rows["ana"]["causal_mask"], rows["ana"]["passed"]) == ("not yet", "0")  # the last notebook decides
    assert rows["ben"]["notebook problems"] == "01_empty.ipynb: not a notebook"


def test_file_names_that_are_not_utf8_lose_no_learner(tmp_path):
    submissions, out = tmp_path / "submissions", tmp_path / "report"
    cafe = submissions / os.fsdecode(b"caf\xe9")  # Latin-1 names, as an old archive tool writes them
    cafe.mkdir(parents=True)
    (cafe / os.fsdecode(b"01_\xe9t\xe9.ipynb")).write_text("")
    (submissions / "zoe").mkdir()
    (submissions / "zoe" / "01_empty.ipynb").write_text("")
    command = [sys.executable, "-m", "course_utils.tools.grade", str(submissions), "--out", str(out)]
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}  # a UTF-8 terminal
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    rows = _gradebook(out)
    assert list(rows) == ["caf\\xe9", "zoe"]
    assert rows["caf\\xe9"]["notebook problems"] == "01_\\xe9t\\xe9.ipynb: not a notebook"
    assert "| 01_\\xe9t\\xe9.ipynb | (notebook) | **not a notebook** |" in (out / "caf\\xe9" / "grade.md").read_text()
    assert "01_empty.ipynb" in (out / "zoe" / "grade.md").read_text()


def test_a_learner_without_lesson_notebooks_has_a_row_that_says_so(tmp_path):
    submissions, out = tmp_path / "submissions", tmp_path / "report"
    (submissions / "ana").mkdir(parents=True)
    (submissions / "ana" / "01_empty.ipynb").write_text("")
    save(submissions / "ben", "lesson1.ipynb", lesson(RIGHT))  # not named NN_*.ipynb
    save(submissions / "ben" / "notebooks", "01_right.ipynb", lesson(RIGHT))  # one folder too deep
    (submissions / "cleo").mkdir()
    (submissions / "dan").symlink_to("dan")
    (submissions / ".ipynb_checkpoints").mkdir()  # JupyterLab's, not a learner
    assert main([str(submissions), "--out", str(out)]) == 1
    rows = _gradebook(out)
    assert list(rows) == ["ana", "ben", "cleo", "dan"]
    assert rows["ben"]["notebook problems"] == (
        "no lesson notebooks (NN_*.ipynb) in it; it has lesson1.ipynb, notebooks/01_right.ipynb"
    )
    assert rows["cleo"]["notebook problems"] == "no lesson notebooks (NN_*.ipynb) in it"
    assert rows["dan"]["notebook problems"] == (
        "dan is a symbolic link loop (it leads back to itself), not a folder of notebooks"
    )
    assert "**no lesson notebooks**" in (out / "ben" / "grade.md").read_text()
