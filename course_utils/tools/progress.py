"""My progress: which exercises my saved notebooks show as passed, without running anything.

    make progress                      # or: python -m course_utils.tools.progress [folder]
    from course_utils.tools.progress import progress; progress()     # in a notebook

It reads what each check cell printed the last time it ran (JupyterLab saves outputs with the
notebook), so save the notebook (Ctrl+S) after running a check. It warns when a saved result may
mislead: an exercise cell run again after its check (the check's result is about the code before).
A file it cannot read, a damaged cell (valid JSON that is not a notebook cell), or an exercise cell
it cannot place, is skipped with a warning that names it; the other notebooks are still shown. JupyterLab's copies (``02_x-Copy1.ipynb``) are not lessons.
"""

import errno
import json
import os
import re
import stat
import sys
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
# what `check` prints: "PASSED [id] ...", "NOT YET [id] ...", "NOT ATTEMPTED YET [id] ..."
_RESULT = re.compile(r"^(PASSED|NOT ATTEMPTED YET|NOT YET) \[([\w.-]+)\]", re.MULTILINE)
_STATUS = {"PASSED": "passed", "NOT YET": "not yet", "NOT ATTEMPTED YET": "not attempted"}
_COPY = re.compile(r"-Copy\d+\.ipynb$")  # what File > Duplicate (or copy-paste) names a copy


class Unreadable(Exception):
    """A file that is not a notebook this tool can read; the message says why."""


def shown(name):
    """A file name or path as text that always prints: bytes that are not UTF-8 are shown as \\xNN."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def kind(path):
    """What ``path`` is, in words: "a file", "a folder", "a symbolic link loop ...", ..."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "a symbolic link loop (it leads back to itself)"
        if os.path.islink(path):
            return f"a symbolic link to {shown(os.readlink(path))}, which does not exist"
        return "not there" if e.errno == errno.ENOENT else f"unreadable ({e.strerror})"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "a file" if stat.S_ISREG(mode) else "not a regular file (a pipe, a socket or a device)"


def _is_text(value):
    return isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))


def _not(what, value, expected, verb="is"):
    return f"{what} {verb} {json.dumps(value)[:40]}, not {expected}"


def damage(cell):
    """What is damaged in a cell's JSON, or None. A file can be valid JSON and still not hold notebook cells."""
    if not isinstance(cell, dict):
        return _not("the cell", cell, "a mapping")
    metadata, outputs = cell.get("metadata", {}), cell.get("outputs", [])
    if not isinstance(metadata, dict):
        return _not("its metadata", metadata, "a mapping")
    if not isinstance(metadata.get("tags", []), list):
        return _not("its tags", metadata["tags"], "a list", verb="are")
    if not _is_text(cell.get("source", "")):
        return _not("its source", cell["source"], "text")
    if not isinstance(outputs, list):
        return _not("its outputs", outputs, "a list", verb="are")
    for output in outputs:
        if not isinstance(output, dict):
            return _not("an output", output, "a mapping")
        if not isinstance(output.get("data", {}), dict):
            return _not("an output's data", output["data"], "a mapping")
        for text in (output.get("text", ""), output.get("data", {}).get("text/plain", "")):
            if not _is_text(text):
                return _not("an output's text", text, "text")
    return None


def _text(output):
    text = (
        output.get("text", "")
        if output.get("output_type") == "stream"
        else output.get("data", {}).get("text/plain", "")
    )
    return "".join(text)


def _cells(path):
    """The notebook's cells (nbformat 4, some maybe damaged), or Unreadable saying why not."""
    path = Path(path)
    if not path.is_file():
        raise Unreadable(f"it is {kind(path)}, not a notebook file")
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise Unreadable("it is not UTF-8 text (not a notebook, or damaged)") from None
    except json.JSONDecodeError as e:
        empty = not path.read_bytes().strip()
        raise Unreadable("the file is empty" if empty else f"it is not valid JSON (line {e.lineno})") from None
    except RecursionError:
        raise Unreadable("its JSON is nested too deeply to be a notebook") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        version = data.get("nbformat") if isinstance(data, dict) else None
        if isinstance(version, int) and version < 4:
            raise Unreadable(f"it is in the old notebook format {version}: open it in JupyterLab and save it")
        raise Unreadable("it has no cells")
    return data["cells"]


def notebook_progress(path):
    """{"notebook", "exercises": {id: status}, "misleading": [exercise ids], "warnings": [...]}.

    Raises Unreadable for a file that is not a readable notebook."""
    code, exercises, ran_at, warnings = [], {}, {}, []
    for index, cell in enumerate(_cells(path)):
        why = damage(cell)
        if why:
            warnings.append(f"cell {index}, which is damaged: {why}")
        elif cell.get("cell_type") == "code":
            code.append(cell)
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
        for output in cell.get("outputs", []):
            for word, exercise_id in _RESULT.findall(_text(output)):
                if exercise_id in exercises:
                    exercises[exercise_id] = _STATUS[word]
                    checked_at[exercise_id] = cell.get("execution_count")
    misleading = [  # the exercise cell ran after its check: the result shown is about older code
        e
        for e, check in checked_at.items()
        if isinstance(check, int) and isinstance(ran_at[e], int) and ran_at[e] > check
    ]
    return {"notebook": shown(Path(path).name), "exercises": exercises, "misleading": misleading, "warnings": warnings}


def lesson_notebooks(folder):
    """(lesson notebooks NN_*.ipynb, JupyterLab's copies of them) in ``folder``."""
    paths = sorted(Path(folder).glob("[0-9][0-9]*.ipynb"))
    return [p for p in paths if not _COPY.search(p.name)], [p for p in paths if _COPY.search(p.name)]


def progress_table(folder=NOTEBOOKS):
    """The table `make progress` prints, as text."""
    paths, copies = lesson_notebooks(folder)
    if not paths:
        return f"no lesson notebooks (NN_*.ipynb) in {shown(folder)}"
    rows, totals, warnings = [], {}, []
    for path in paths:
        try:
            result = notebook_progress(path)
        except (Unreadable, OSError) as e:
            warnings.append(f"! {shown(path.name)}: skipped, {e}")
            continue
        for exercise_id, status in result["exercises"].items():
            rows.append((result["notebook"].removesuffix(".ipynb"), exercise_id, status))
            totals[status] = totals.get(status, 0) + 1
        warnings += [f"! {result['notebook']}: skipped {w}" for w in result["warnings"]]
        for exercise_id in result["misleading"]:
            warnings.append(
                f"! {result['notebook']}: the exercise cell of {exercise_id} ran again after its check, so the result shown "
                f"is about the code before. Fix: run its check cell again, then save."
            )
    if copies:
        warnings.append(f"(not counted: JupyterLab's copies {', '.join(shown(p.name) for p in copies)})")
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
