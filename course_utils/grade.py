"""Grade learners' notebooks: run copies, then call the checkers on the learners' own functions.

    make grade                                  # notebooks/, report in artifacts/grade/
    make grade NOTEBOOKS_DIR=submissions/ana ALLOW_NOT_ATTEMPTED=1
    python -m course_utils.grade FOLDER [--out DIR] [--allow-not-attempted]

Each notebook is copied to a temporary folder and run there in a fresh kernel (the originals are
never touched). After the learner's cells, the grader re-imports the course's checkers (so a notebook
cannot patch them) and checks the function or class each exercise cell defines. What a notebook
prints is never read as a result: a check cell that was edited, or that prints "PASSED" itself,
changes nothing. A cell that raises stops that notebook (reported with the cell); the exercises
defined before it are still graded, and grading goes on with the next notebook.
Exit status: 0 when every exercise passed (or, with --allow-not-attempted, was not attempted yet).
"""

import argparse
import json
import re
import secrets
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
OK = {"passed"}

# Runs in the learner's kernel after their cells. {marker} is new each run, so no notebook can print it.
_GRADER_CELL = """
import json as _json, sys as _sys
for _name in [m for m in _sys.modules if m.startswith("course_utils.exercises")]:
    del _sys.modules[_name]  # fresh checkers, whatever the notebook did to the loaded ones
from course_utils.exercises import check as _grade_check
_grades = {{}}
for _id, _name in {items!r}:
    if _name not in globals():
        _grades[_id] = ("not run yet", f"`{{_name}}` is not defined: its exercise cell did not run")
        continue
    _r = _grade_check(_id, globals()[_name], quiet=True)
    _grades[_id] = (_r.status, _r.message)
print("{marker}" + _json.dumps(_grades))
"""


def _exercises(nb):
    """[(exercise id, name the exercise cell defines)] in notebook order."""
    items = []
    for cell in nb.cells:
        if cell.cell_type == "code" and "exercise" in cell.metadata.get("tags", []):
            match = re.search(r"^(?:def|class)\s+(\w+)", cell.source, re.MULTILINE)
            items.append((cell.metadata["exercise_id"], match.group(1) if match else None))
    return items


def grade_notebook(path, timeout=600):
    """{"notebook", "error", "exercises": {id: {"status", "message"}}} for one notebook."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    items = [(i, name) for i, name in _exercises(nb) if name]
    report = {"notebook": Path(path).name, "error": None, "exercises": {}}
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(Path(path).parent)}}
    )
    marker = f"@@grade-{secrets.token_hex(8)}@@"
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            try:
                client.execute_cell(cell, index)
            except CellExecutionError as e:
                error = next((o for o in cell.outputs if o.output_type == "error"), None)
                what = f"{error.ename}: {error.evalue}" if error else str(e).splitlines()[-1]
                report["error"] = f"cell {index} raised {what}"
                break
        grader = nbformat.v4.new_code_cell(_GRADER_CELL.format(items=items, marker=marker))
        nb.cells.append(grader)
        client.execute_cell(grader, len(nb.cells) - 1)
    printed = "".join(o.get("text", "") for o in grader.outputs if o.output_type == "stream")
    found = [line[len(marker) :] for line in printed.splitlines() if line.startswith(marker)]
    grades = json.loads(found[-1]) if found else {}
    for exercise_id, _ in _exercises(nb):
        status, message = grades.get(exercise_id, ("not run yet", "the grader could not check it"))
        report["exercises"][exercise_id] = {"status": status, "message": message}
    return report


def grade_folder(folder, allow_not_attempted=False):
    """Grade every NN_*.ipynb in ``folder`` from temporary copies; returns (reports, all good?)."""
    paths = sorted(Path(folder).glob("[0-9][0-9]*.ipynb"))
    if not paths:
        raise FileNotFoundError(f"no lesson notebooks (NN_*.ipynb) in {folder}")
    ok = OK | ({"not attempted"} if allow_not_attempted else set())
    reports = []
    with tempfile.TemporaryDirectory(prefix="grade-") as work:
        for path in paths:
            copy = Path(work) / path.name
            shutil.copyfile(path, copy)
            print(f"grading {path.name} ...", flush=True)
            reports.append(grade_notebook(copy))
    good = all(r["error"] is None and all(e["status"] in ok for e in r["exercises"].values()) for r in reports)
    return reports, good


def markdown(reports):
    lines = ["| notebook | exercise | status | message |", "|---|---|---|---|"]
    for r in reports:
        if r["error"]:
            lines.append(f"| {r['notebook']} | (notebook) | **raised** | {r['error']} |")
        for exercise_id, e in r["exercises"].items():
            first = e["message"].splitlines()[0].replace("|", "\\|") if e["message"] else ""
            lines.append(f"| {r['notebook']} | {exercise_id} | {e['status']} | {first} |")
    counts = [e["status"] for r in reports for e in r["exercises"].values()]
    lines += ["", f"{counts.count('passed')} of {len(counts)} exercises passed."]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", nargs="?", default=str(ROOT / "notebooks"))
    parser.add_argument("--out", default=str(ROOT / "artifacts" / "grade"))
    parser.add_argument("--allow-not-attempted", action="store_true")
    args = parser.parse_args(argv)
    reports, good = grade_folder(args.folder, args.allow_not_attempted)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "grade.json").write_text(json.dumps(reports, indent=2))
    (out / "grade.md").write_text(markdown(reports) + "\n")
    print(markdown(reports))
    print(f"\nreport: {out / 'grade.md'} and grade.json")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
