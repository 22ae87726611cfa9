"""Grade learners' notebooks: run copies, then call the checkers on the learners' own functions.

    make grade                                  # notebooks/, report in artifacts/grade/
    make grade NOTEBOOKS_DIR=submissions ALLOW_NOT_ATTEMPTED=1 GRADE_TIME_LIMIT=120
    python -m course_utils.tools.grade FOLDER [--out DIR] [--allow-not-attempted] [--time-limit SECONDS]

FOLDER holds one learner's notebooks, or one folder per learner (``submissions/<name>/``): every
learner is graded in the same run, with a report of their own (``<out>/<name>/grade.md`` and
``grade.json``) and one row in ``<out>/gradebook.csv`` (one column per exercise, then the totals),
which opens in a spreadsheet or imports into a learning platform.

Each notebook is copied to a temporary folder and run there in a fresh kernel (the originals are
never touched). After the learner's cells, the grader re-imports the course's checkers (so a notebook
cannot patch them) and checks the function or class each exercise cell defines. What a notebook
prints is never read as a result: a check cell that was edited, or that prints "PASSED" itself,
changes nothing. Functions the checks compare with (``torch.allclose``, ``torch.equal``, ...) are
recorded before the learner's first cell and put back before each check; a notebook that replaced
them is reported as tampered (course_utils/exercises/tamper_guard.py).

One notebook never costs the others: each runs in a folder of its own (deleting it harms no other);
a cell that raises stops that notebook (the exercises defined before it are still graded); a notebook
whose cells run longer than the time limit is interrupted ("timed out", the exercises defined so far
still graded); a kernel that dies ("kernel died") or a file that is not a notebook ("not a notebook")
is recorded, and grading goes on with the next. A learner's folder without lesson notebooks gets a
row that says so. The reports are rewritten after every notebook, so an interrupted run keeps what it
graded.

The kernel talks to the grader over Unix sockets in a folder of its own (on Windows, TCP ports): two
kernels started at the same moment by TCP can be handed the same port, and one of them dies as it
starts. A kernel that still dies while starting is replaced, up to KERNEL_TRIES times; if none starts,
the notebook is reported "kernel failed to start", a fault of the grading machine, not the learner's.
Exit status: 0 when every notebook ran and every exercise passed (or, with --allow-not-attempted,
was not attempted yet); 1 otherwise.
"""

import argparse
import csv
import json
import math
import os
import re
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from course_utils.tools.progress import damage, kind, lesson_notebooks, shown

ROOT = Path(__file__).resolve().parents[2]
OK = {"passed"}
TIME_LIMIT_S = 300  # a notebook's own cells, all together; the checks after them have their own limits
CHECK_BUDGET_S = 60  # the grading cell: per exercise (each check stops learner code after 30 s)
KERNEL_TRIES = 3  # kernels started for one notebook before it is reported "kernel failed to start"

# Runs first, before the learner's cells: the originals of what the checks compare with.
# {token} is new each run, so no notebook can know the names.
_GUARD_CELL = "import course_utils.exercises.tamper_guard as _guard_{token}\n_restore_{token} = _guard_{token}.restore"

# Runs in the learner's kernel after their cells. {marker} is new each run, so no notebook can print it.
_GRADER_CELL = """
_replaced_{token} = _restore_{token}()  # first of all: the originals back (print, json, torch, ...)
import json as _json, sys as _sys
for _name in [m for m in _sys.modules if m.startswith("course_utils.exercises")]:
    del _sys.modules[_name]  # fresh checkers, whatever the notebook did to the loaded ones
from course_utils.exercises import check as _grade_check
_grades = {{}}
for _id, _name in {items!r}:
    if _name not in globals():
        _grades[_id] = ("not run yet", f"`{{_name}}` is not defined: its exercise cell did not run")
        continue
    _r = _guard_{token}.guarded(_grade_check, _id, globals()[_name], quiet=True)
    _grades[_id] = (_r.status, _r.message)
_replaced_{token} += [n for n in _restore_{token}() if n not in _replaced_{token}]
# the learner's own check cells put the originals back too (check() is guarded): count those as well
_replaced_{token} += [n for n in _guard_{token}.EVER_REPLACED if n not in _replaced_{token}]
print("{marker}" + _json.dumps({{"grades": _grades, "replaced": _replaced_{token}}}))
"""


class NotANotebook(Exception):
    """The file cannot be read as a Jupyter notebook (version 4)."""


class KernelDidNotStart(Exception):
    """No kernel started for the notebook: the grading machine's problem, not the learner's."""


def read_notebook(path):
    """The notebook at ``path``; NotANotebook (saying why) for anything else."""
    path = Path(path)
    if not path.is_file():
        raise NotANotebook(f"{shown(path.name)} is {kind(path)}, not a notebook file")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise NotANotebook(f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    if not text.strip():
        raise NotANotebook("the file is empty")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise NotANotebook(f"not valid JSON ({e.msg}, line {e.lineno})") from None
    except RecursionError:
        raise NotANotebook("its JSON is nested too deeply to be a notebook") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        version = data.get("nbformat") if isinstance(data, dict) else None
        old = f" (nbformat {version}: open and save it in JupyterLab to update it)" if version else ""
        raise NotANotebook(f"no list of cells in it{old}")
    for index, cell in enumerate(data["cells"]):
        if damage(cell):
            raise NotANotebook(f"cell {index} is damaged: {damage(cell)}")
    try:
        return nbformat.reads(text, as_version=4)
    except Exception as e:
        raise NotANotebook(f"nbformat cannot read it ({type(e).__name__}: {str(e)[:200]})") from None


def exercise_cells(nb):
    """([(exercise id, name the exercise cell defines)] in notebook order, [problems found])."""
    items, problems = [], []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and "exercise" in cell.metadata.get("tags", []):
            exercise_id = cell.metadata.get("exercise_id")
            if not isinstance(exercise_id, str) or not exercise_id:
                problems.append(f"cell {index} is tagged `exercise` but has no exercise_id: not graded")
                continue
            match = re.search(r"^(?:def|class)\s+(\w+)", cell.source, re.MULTILINE)
            items.append((exercise_id, match.group(1) if match else None))
    return items, problems


def _error_of(cell):
    error = next(o for o in cell.outputs if o.output_type == "error")
    return f"{error.ename}: {error.evalue}"


def _join(*parts):
    return "; ".join(p for p in parts if p) or None


def _run_cells(client, nb, learner_cells, deadline):
    """Run the learner's cells until the deadline; (result, error): ("ran", None) if all ran."""
    from nbclient.exceptions import DeadKernelError

    for index, cell in enumerate(nb.cells[:learner_cells]):
        if cell.cell_type != "code":
            continue
        client.timeout = limit = max(1, math.ceil(deadline - time.monotonic()))
        started = time.monotonic()
        try:  # past the timeout the kernel is interrupted (the cells above keep what they defined)
            client.execute_cell(cell, index)  # an error does not raise here (allow_errors): see _execute
        except DeadKernelError:
            return "kernel died", f"the kernel died in cell {index} (os._exit, a crash, or out of memory)"
        if time.monotonic() - started >= limit:
            return "timed out", f"cell {index} still ran when the notebook's time limit was reached"
        if any(output.output_type == "error" for output in cell.outputs):
            return "raised", f"cell {index} raised {_error_of(cell)}"
    return "ran", None


def grade_notebook(path, time_limit=TIME_LIMIT_S):
    """{"notebook", "result", "error", "exercises": {id: {"status", "message"}}} for one notebook.

    result: "ran", "raised", "timed out", "kernel died", "not a notebook", "bad exercise cell",
    "tampered", "kernel failed to start" or "grader failed" (the last two: not the learner's doing).
    """
    report = {"notebook": shown(Path(path).name), "result": "ran", "error": None, "exercises": {}}
    try:
        nb = read_notebook(path)
    except NotANotebook as e:
        return {**report, "result": "not a notebook", "error": str(e)}
    items, problems = exercise_cells(nb)
    try:
        grades, replaced, result, error = _execute(nb, Path(path).parent, items, time_limit)
    except KernelDidNotStart as e:
        grades, replaced, result, error = {}, [], "kernel failed to start", str(e)
    except Exception as e:  # the grader itself failed: this notebook only
        grades, replaced, result, error = {}, [], "grader failed", f"{type(e).__name__}: {str(e)[:300]}"
    if replaced:
        result = "tampered"
        error = _join(error, f"the notebook replaced {', '.join(replaced)} (put back before checking)")
    not_graded = {"timed out": "timed out", "kernel died": "kernel died"}.get(result, f"not checked ({result})")
    for exercise_id, _ in items:
        status, message = grades.get(exercise_id, ("not graded", not_graded))
        report["exercises"][exercise_id] = {"status": status, "message": message}
    error = _join(error, *problems)
    return {**report, "result": "bad exercise cell" if result == "ran" and problems else result, "error": error}


def _start_kernel(client, tries=KERNEL_TRIES):
    """Start the client's kernel; one that dies while starting is replaced by a fresh one."""
    for attempt in range(1, tries + 1):
        client.km = client.create_kernel_manager()  # new connection details each time
        try:
            client.start_new_kernel()
            client.start_new_kernel_client()  # waits for the kernel's first reply
            return
        except Exception as e:
            why = f"{type(e).__name__}: {str(e)[:200]}"
            if client.km is not None and client.km.has_kernel:  # nbclient cleans up when the client fails
                client._cleanup_kernel()
            client.km = client.kc = None
            print(f"  the kernel did not start (try {attempt} of {tries}): {why}", flush=True)
    raise KernelDidNotStart(
        f"no kernel started in {tries} tries (last: {why}): a problem of the grading machine, not of the "
        f"notebook; grade it again"
    )


def _kernel_config(sockets):
    """Unix sockets in a folder of this kernel's own: no port another kernel can take (TCP on Windows)."""
    from traitlets.config import Config

    if os.name != "posix":
        return Config()
    return Config({"KernelManager": {"transport": "ipc", "ip": os.path.join(sockets, "kernel")}})


def _execute(nb, folder, items, time_limit):
    """Run the notebook, then the grading cell, in one kernel: (grades, replaced, result, error)."""
    with tempfile.TemporaryDirectory(prefix="grade-kernel-", ignore_cleanup_errors=True) as sockets:
        return _execute_with(nb, folder, items, time_limit, _kernel_config(sockets))


def _execute_with(nb, folder, items, time_limit, config):
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    token = secrets.token_hex(8)
    marker = f"@@grade-{token}@@"
    guard = nbformat.v4.new_code_cell(_GUARD_CELL.format(token=token))
    grader = nbformat.v4.new_code_cell(
        _GRADER_CELL.format(items=[(i, n) for i, n in items if n], marker=marker, token=token)
    )
    learner_cells = len(nb.cells)
    nb.cells += [guard, grader]  # nbclient runs cells of the notebook: the two are added at its end
    # allow_errors: the kernel must not drop the grading cell because the cell before it raised or was
    # interrupted (_run_cells stops at the first error itself); past a timeout, nbclient interrupts it
    client = NotebookClient(
        nb,
        timeout=120,
        kernel_name="python3",
        allow_errors=True,
        interrupt_on_timeout=True,
        error_on_timeout={"ename": "TimeoutError", "evalue": "the time limit was reached", "traceback": []},
        resources={"metadata": {"path": str(folder)}},
        config=config,
        shutdown_kernel="immediate",  # its outputs are read by then: stopped at once, not asked to exit (0.8 s less)
    )
    _start_kernel(client)
    with client.setup_kernel():  # shuts the kernel down at the end
        client.execute_cell(guard, learner_cells)  # runs first, before the learner's first cell
        result, error = _run_cells(client, nb, learner_cells, time.monotonic() + time_limit)
        if result == "kernel died":
            return {}, [], result, error
        client.timeout = budget = CHECK_BUDGET_S * max(1, len(items))
        started = time.monotonic()
        try:
            client.execute_cell(grader, learner_cells + 1)
        except DeadKernelError:
            return {}, [], "kernel died", _join(error, "the kernel died while checking")
        if time.monotonic() - started >= budget:
            return {}, [], "timed out", _join(error, f"the checks did not finish within {budget} s")
    printed = "".join(o.get("text", "") for o in grader.outputs if o.output_type == "stream")
    found = [line[len(marker) :] for line in printed.splitlines() if line.startswith(marker)]
    graded = json.loads(found[-1]) if found else {"grades": {}, "replaced": []}
    names = {exercise_id: name for exercise_id, name in items}
    for exercise_id, name in names.items():
        if name is None:
            graded["grades"][exercise_id] = ("not yet", "the exercise cell defines no function or class")
    return graded["grades"], graded["replaced"], result, error


def _good(report, ok):
    return report["result"] == "ran" and all(e["status"] in ok for e in report["exercises"].values())


def learner_folders(folder):
    """{learner: folder}: ``folder`` itself when it has lesson notebooks, else each of its subfolders
    (hidden ones aside), those without lesson notebooks too: their reports say so."""
    folder = Path(folder)
    if lesson_notebooks(folder)[0]:
        return {shown(folder.resolve().name): folder}
    subfolders = sorted(folder.iterdir()) if folder.is_dir() else []
    return {shown(sub.name): sub for sub in subfolders if not sub.name.startswith(".") and not sub.is_file()}


def _no_notebooks(folder):
    """The report of a learner's folder without lesson notebooks: what is there instead."""
    folder = Path(folder)
    if not folder.is_dir():
        why = f"{shown(folder.name)} is {kind(folder)}, not a folder of notebooks"
    else:
        found = sorted(shown(p.relative_to(folder)) for p in [*folder.glob("*.ipynb"), *folder.glob("*/*.ipynb")])
        why = "no lesson notebooks (NN_*.ipynb) in it" + (f"; it has {', '.join(found[:5])}" if found else "")
    return {"notebook": "(none)", "result": "no lesson notebooks", "error": why, "exercises": {}}


def _grade_copy(path, time_limit):
    """grade_notebook on a copy of ``path`` in a folder of its own, which the notebook may even delete."""
    work = tempfile.mkdtemp(prefix="grade-")
    try:
        if not path.is_file():
            return grade_notebook(path, time_limit)  # a folder, a broken link...: read_notebook says so
        copy = Path(work) / path.name
        shutil.copyfile(path, copy)
        return grade_notebook(copy, time_limit)
    except OSError as e:  # the learner's file cannot be read (permissions, a bad disk): this notebook only
        error = f"it cannot be read ({e.strerror or e})"
        return {"notebook": shown(path.name), "result": "not a notebook", "error": error, "exercises": {}}
    except Exception as e:  # a fault of the grader: this notebook only
        error = f"{type(e).__name__}: {str(e)[:300]}"
        return {"notebook": shown(path.name), "result": "grader failed", "error": error, "exercises": {}}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def grade_folder(folder, allow_not_attempted=False, time_limit=TIME_LIMIT_S, on_report=None):
    """Grade every NN_*.ipynb in ``folder`` from temporary copies; returns (reports, all good?).

    on_report(reports so far) is called after each notebook (the reports are written incrementally).
    A folder without lesson notebooks gives one report that says so (result "no lesson notebooks")."""
    paths, _ = lesson_notebooks(folder)  # JupyterLab's -Copy1 duplicates are not lessons
    if not paths:
        reports = [_no_notebooks(folder)]
        if on_report is not None:
            on_report(reports)
        return reports, False
    ok = OK | ({"not attempted"} if allow_not_attempted else set())
    reports = []
    for path in paths:
        print(f"grading {shown(path)} ...", flush=True)
        reports.append(_grade_copy(path, time_limit))
        if on_report is not None:
            on_report(reports)
    return reports, all(_good(r, ok) for r in reports)


def markdown(reports):
    lines = ["| notebook | exercise | status | message |", "|---|---|---|---|"]
    for r in reports:
        if r["error"] or r.get("result", "ran") != "ran":
            what, why = r.get("result", "raised"), (r["error"] or "").replace("|", "\\|")
            lines.append(f"| {r['notebook']} | (notebook) | **{what}** | {why} |")
        for exercise_id, e in r["exercises"].items():
            first = e["message"].splitlines()[0].replace("|", "\\|") if e["message"] else ""
            lines.append(f"| {r['notebook']} | {exercise_id} | {e['status']} | {first} |")
    counts = [e["status"] for r in reports for e in r["exercises"].values()]
    lines += ["", f"{counts.count('passed')} of {len(counts)} exercises passed."]
    return "\n".join(lines)


def _write_report(out, reports):
    out.mkdir(parents=True, exist_ok=True)
    (out / "grade.json").write_text(json.dumps(reports, indent=2), encoding="utf-8")
    (out / "grade.md").write_text(markdown(reports) + "\n", encoding="utf-8", errors="backslashreplace")


def _problem(report):
    if report["result"] == "no lesson notebooks":
        return report["error"]
    return f"{report['notebook']}: {report['result']}"


def write_gradebook(path, learners):
    """gradebook.csv: one row per learner, one column per exercise (its status), then the totals."""
    columns = []
    for reports in learners.values():
        for r in reports:
            columns += [e for e in r["exercises"] if e not in columns]
    with open(path, "w", newline="", encoding="utf-8", errors="backslashreplace") as f:
        writer = csv.writer(f)
        writer.writerow(["learner", *columns, "passed", "exercises", "notebook problems"])
        for learner, reports in learners.items():
            statuses = {e: v["status"] for r in reports for e, v in r["exercises"].items()}
            problems = [_problem(r) for r in reports if r.get("result", "ran") != "ran"]
            row = [statuses.get(c, "missing") for c in columns]
            writer.writerow([learner, *row, row.count("passed"), len(columns), "; ".join(problems)])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", nargs="?", default=str(ROOT / "notebooks"))
    parser.add_argument("--out", default=str(ROOT / "artifacts" / "grade"))
    parser.add_argument("--allow-not-attempted", action="store_true")
    parser.add_argument(
        "--time-limit", type=float, default=TIME_LIMIT_S, help="seconds for one notebook's cells (default %(default)s)"
    )
    args = parser.parse_args(argv)
    learners = learner_folders(args.folder)
    if not learners:
        where = "or in its subfolders" if Path(args.folder).is_dir() else f"({kind(args.folder)})"
        print(f"no lesson notebooks (NN_*.ipynb) in {shown(args.folder)} {where}", file=sys.stderr)
        return 2
    out, single = Path(args.out), bool(lesson_notebooks(args.folder)[0])
    out.mkdir(parents=True, exist_ok=True)
    graded, all_good = {}, True
    for learner, folder in learners.items():
        target = out if single else out / learner

        def save(reports, learner=learner, target=target):
            graded[learner] = reports
            _write_report(target, reports)
            write_gradebook(out / "gradebook.csv", graded)

        reports, good = grade_folder(folder, args.allow_not_attempted, args.time_limit, on_report=save)
        all_good &= good
        print(("" if single else f"\n## {learner}\n") + markdown(reports))
    print(f"\nreports: {shown(out)} (grade.md and grade.json{'' if single else ' per learner'}, gradebook.csv)")
    return 0 if all_good else 1


if __name__ == "__main__":
    sys.exit(main())
