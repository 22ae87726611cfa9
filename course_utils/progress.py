"""My progress: which exercises my saved notebooks show as passed, without running anything.

    make progress                      # or: python -m course_utils.progress [folder]
    from course_utils.progress import progress; progress()     # in a notebook

It reads what each check cell printed the last time it ran (JupyterLab saves outputs with the
notebook), so save the notebook (Ctrl+S) after running a check. It warns when a saved result may
mislead: an exercise cell run again after its check (the check's result is about the code before).
A file it cannot read, or an exercise cell it cannot place, is skipped with a warning that names
it; the other notebooks are still shown. JupyterLab's copies (``02_x-Copy1.ipynb``) are not lessons.
"""

import json
import re
import sys
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
# what `check` prints: "PASSED [id] ...", "NOT YET [id] ...", "NOT ATTEMPTED YET [id] ..."
_RESULT = re.compile(r"^(PASSED|NOT ATTEMPTED YET|NOT YET) \[([\w.-]+)\]", re.MULTILINE)
_STATUS = {"PASSED": "passed", "NOT YET": "not yet", "NOT ATTEMPTED YET": "not attempted"}
_COPY = re.compile(r"-Copy\d+\.ipynb$")  # what File > Duplicate (or copy-paste) names a copy


class Unreadable(Exception):
    """A file that is not a notebook this tool can read; the message says why."""


def _text(output):
    if output.get("output_type") == "stream":
        text = output.get("text", "")
    else:
        text = output.get("data", {}).get("text/plain", "")
    return "".join(text) if isinstance(text, (list, str)) else ""


def _cells(path):
    """The notebook's cells (nbformat 4), or Unreadable saying why not."""
    path = Path(path)
    if not path.is_file():
        raise Unreadable("it is a folder, not a notebook file")
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise Unreadable("it is not UTF-8 text (not a notebook, or damaged)") from None
    except json.JSONDecodeError as e:
        empty = not path.read_bytes().strip()
        raise Unreadable("the file is empty" if empty else f"it is not valid JSON (line {e.lineno})") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        version = data.get("nbformat") if isinstance(data, dict) else None
        if isinstance(version, int) and version < 4:
            raise Unreadable(f"it is in the old notebook format {version}: open it in JupyterLab and save it")
        raise Unreadable("it has no cells")
    return [c for c in data["cells"] if isinstance(c, dict)]


def notebook_progress(path):
    """{"notebook", "exercises": {id: status}, "misleading": [exercise ids], "warnings": [...]}.

    Raises Unreadable for a file that is not a readable notebook."""
    code = [c for c in _cells(path) if c.get("cell_type") == "code"]
    exercises, ran_at, warnings = {}, {}, []
    for cell in code:
        if "exercise" in (cell.get("metadata", {}).get("tags") or []):
            exercise_id = cell["metadata"].get("exercise_id")
            if not isinstance(exercise_id, str):
                first = "".join(cell.get("source", "")).strip().splitlines()[:1]
                warnings.append(f"an exercise cell without an exercise_id ({first[0][:40] if first else 'empty'!r})")
                continue
            exercises[exercise_id] = "not run yet"
            ran_at[exercise_id] = cell.get("execution_count")
    checked_at = {}
    for cell in code:  # later checks of the same exercise overwrite earlier ones
        for output in cell.get("outputs", []) if isinstance(cell.get("outputs"), list) else []:
            for word, exercise_id in _RESULT.findall(_text(output)):
                if exercise_id in exercises:
                    exercises[exercise_id] = _STATUS[word]
                    checked_at[exercise_id] = cell.get("execution_count")
    misleading = [  # the exercise cell ran after its check: the result shown is about older code
        e
        for e, check in checked_at.items()
        if isinstance(check, int) and isinstance(ran_at[e], int) and ran_at[e] > check
    ]
    return {"notebook": Path(path).name, "exercises": exercises, "misleading": misleading, "warnings": warnings}


def lesson_notebooks(folder):
    """(lesson notebooks NN_*.ipynb, JupyterLab's copies of them) in ``folder``."""
    paths = sorted(Path(folder).glob("[0-9][0-9]*.ipynb"))
    return [p for p in paths if not _COPY.search(p.name)], [p for p in paths if _COPY.search(p.name)]


def progress_table(folder=NOTEBOOKS):
    """The table `make progress` prints, as text."""
    paths, copies = lesson_notebooks(folder)
    if not paths:
        return f"no lesson notebooks (NN_*.ipynb) in {folder}"
    rows, totals, warnings = [], {}, []
    for path in paths:
        try:
            result = notebook_progress(path)
        except (Unreadable, OSError) as e:
            warnings.append(f"! {path.name}: skipped, {e}")
            continue
        for exercise_id, status in result["exercises"].items():
            rows.append((result["notebook"].removesuffix(".ipynb"), exercise_id, status))
            totals[status] = totals.get(status, 0) + 1
        warnings += [f"! {path.name}: skipped {w}" for w in result["warnings"]]
        for exercise_id in result["misleading"]:
            warnings.append(
                f"! {path.name}: the exercise cell of {exercise_id} ran again after its check, so the result shown "
                f"is about the code before. Fix: run its check cell again, then save."
            )
    if copies:
        warnings.append(f"(not counted: JupyterLab's copies {', '.join(p.name for p in copies)})")
    width = max([len(r[0]) for r in rows] + [10])
    lines = [f"{'lesson':<{width}}  {'exercise':<30} status", "-" * (width + 45)]
    lines += [f"{lesson:<{width}}  {exercise_id:<30} {status}" for lesson, exercise_id, status in rows]
    order = ["passed", "not yet", "not attempted", "not run yet"]
    lines += ["", f"{totals.get('passed', 0)} of {len(rows)} exercises passed | "]
    lines[-1] += ", ".join(f"{status}: {totals[status]}" for status in order if totals.get(status))
    return "\n".join(lines + warnings)


def progress(folder=NOTEBOOKS):
    """Print my exercises and their status, from the saved notebooks."""
    print(progress_table(folder))


if __name__ == "__main__":
    progress(sys.argv[1] if len(sys.argv) > 1 else NOTEBOOKS)
