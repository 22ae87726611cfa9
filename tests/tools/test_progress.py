"""`make progress` reads saved notebooks without running them: statuses, what it skips, and its speed."""

import json
import os
import shutil
import subprocess
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell

from course_utils.tools.progress import notebook_progress, progress_table
from tests.tools.learner_notebooks import RIGHT, ROOT, STUB, WRONG, lesson, printed, save


def test_progress_reads_each_status_and_flags_a_result_about_older_code(tmp_path):
    save(
        tmp_path,
        "01_passed.ipynb",
        lesson(RIGHT, outputs=printed("PASSED [causal_mask] all checks passed."), counts=[1, 2]),
    )
    save(
        tmp_path,
        "02_not_yet.ipynb",
        lesson(WRONG, outputs=printed("NOT YET [causal_mask] the output is not right"), counts=[1, 2]),
    )
    save(
        tmp_path,
        "03_stub.ipynb",
        lesson(STUB, outputs=printed("NOT ATTEMPTED YET [causal_mask] your code ..."), counts=[1, 2]),
    )
    save(tmp_path, "04_unrun.ipynb", lesson(STUB))
    # the exercise cell ran (7) after its check (3): the PASSED shown is about the code before
    save(tmp_path, "05_shuffled.ipynb", lesson(RIGHT, outputs=printed("PASSED [causal_mask] ok"), counts=[7, 3]))
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
    nb = lesson(RIGHT, outputs=printed("PASSED [causal_mask] all checks passed."), extra="x = 1", counts=[4, 5, 3])
    save(tmp_path, "01_solved.ipynb", nb)
    assert notebook_progress(tmp_path / "01_solved.ipynb")["misleading"] == []
    assert "!" not in progress_table(tmp_path)


def test_progress_skips_what_it_cannot_read_and_shows_the_rest(tmp_path):
    save(tmp_path, "01_good.ipynb", lesson(RIGHT, outputs=printed("PASSED [causal_mask] ok"), counts=[1, 2]))
    save(tmp_path, "01_good-Copy1.ipynb", lesson(WRONG, outputs=printed("NOT YET [causal_mask] no"), counts=[1, 2]))
    (tmp_path / "02_corrupt.ipynb").write_text('{"cells": [{"cell_type": "code"')
    (tmp_path / "03_empty.ipynb").write_text("")
    (tmp_path / "04_braces.ipynb").write_text("{}")
    (tmp_path / "05_v3.ipynb").write_text(json.dumps({"nbformat": 3, "worksheets": [{"cells": []}], "metadata": {}}))
    (tmp_path / "06_latin1.ipynb").write_bytes(b'{"cells": [], "metadata": {"note": "caf\xe9"}}')  # Latin-1, not UTF-8
    (tmp_path / "07_folder.ipynb").mkdir()
    nb = lesson(RIGHT, outputs=printed("PASSED [causal_mask] ok"), counts=[1, 2])
    nb.cells.append(
        new_code_cell("def split_heads(x):\n    raise NotImplementedError", metadata={"tags": ["exercise"]})
    )
    save(tmp_path, "08_no_id.ipynb", nb)
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
        [sys.executable, "-m", "course_utils.tools.progress", str(tmp_path)], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr and "2 of 2 exercises passed" in done.stdout


def test_make_progress_is_fast_and_reads_the_course(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "course_utils.tools.progress"], cwd=ROOT, capture_output=True, text=True, timeout=10
    )
    assert done.returncode == 0 and "scaled_dot_product_attention" in done.stdout
    assert "import torch" not in (ROOT / "course_utils" / "tools" / "progress.py").read_text()  # stays well under 2 s


def _damaged(nb, change):
    """The notebook's JSON after ``change(cells)``: still valid JSON, no longer a valid notebook."""
    data = json.loads(nbformat.writes(nb))
    change(data["cells"])
    return json.dumps(data)


def test_progress_names_a_damaged_cell_and_keeps_the_table(tmp_path):
    passed = printed("PASSED [causal_mask] ok")
    save(tmp_path, "01_good.ipynb", lesson(RIGHT, outputs=passed, counts=[1, 2]))
    damaged = {
        "02_metadata": (lambda cells: cells[1].update(metadata=None), "cell 1, which is damaged: its metadata is null"),
        "03_output": (
            lambda cells: cells[2].update(outputs=["PASSED [causal_mask] ok"]),
            'cell 2, which is damaged: an output is "PASSED [causal_mask] ok", not a mapping',
        ),
        "04_data": (
            lambda cells: cells[2]["outputs"][0].update(data=None),
            "cell 2, which is damaged: an output's data is null, not a mapping",
        ),
    }
    for name, (change, _) in damaged.items():
        (tmp_path / f"{name}.ipynb").write_text(_damaged(lesson(RIGHT, outputs=passed, counts=[1, 2]), change))
    table = progress_table(tmp_path)
    # 01 passed; 02 has no readable exercise cell; 03 and 04 lost their check's output
    assert "1 of 3 exercises passed" in table and "not run yet: 2" in table, table
    for name, (_, why) in damaged.items():
        assert f"! {name}.ipynb: skipped {why}" in table, table
    done = subprocess.run(
        [sys.executable, "-m", "course_utils.tools.progress", str(tmp_path)], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr and "1 of 3 exercises passed" in done.stdout


def test_progress_says_what_a_link_that_leads_nowhere_is(tmp_path):
    save(tmp_path, "01_good.ipynb", lesson(RIGHT, outputs=printed("PASSED [causal_mask] ok"), counts=[1, 2]))
    (tmp_path / "02_loop.ipynb").symlink_to("02_loop.ipynb")
    (tmp_path / "03_gone.ipynb").symlink_to("elsewhere.ipynb")
    table = progress_table(tmp_path)
    assert "! 02_loop.ipynb: skipped, it is a symbolic link loop (it leads back to itself)" in table, table
    assert "! 03_gone.ipynb: skipped, it is a symbolic link to elsewhere.ipynb, which does not exist" in table
    assert "folder" not in table and "1 of 1 exercises passed" in table


def test_progress_shows_a_file_name_that_is_not_utf8(tmp_path):
    nb = lesson(RIGHT, outputs=printed("PASSED [causal_mask] ok"), counts=[1, 2])
    (tmp_path / os.fsdecode(b"01_caf\xe9.ipynb")).write_text(nbformat.writes(nb))  # "café" in Latin-1
    save(tmp_path, "02_next.ipynb", lesson(STUB))
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}  # a UTF-8 terminal
    done = subprocess.run(
        [sys.executable, "-m", "course_utils.tools.progress", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "01_caf\\xe9 " in done.stdout and "02_next " in done.stdout and "1 of 2 exercises passed" in done.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_progress_reads_a_folder_whose_name_has_a_space(tmp_path):
    folder = tmp_path / "my notebooks"
    save(folder, "01_good.ipynb", lesson(RIGHT, outputs=printed("PASSED [causal_mask] ok"), counts=[1, 2]))
    command = [
        "make",
        "--silent",
        "--no-print-directory",
        "progress",
        f"NOTEBOOKS_DIR={folder}",
        f"PY={sys.executable}",
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "1 of 1 exercises passed" in done.stdout, done.stdout + done.stderr
