"""My progress: which exercises my saved notebooks show as passed, without running anything.

    make progress                      # or: python -m course_utils.progress [folder]
    from course_utils.progress import progress; progress()     # in a notebook

It reads what each check cell printed the last time it ran (JupyterLab saves outputs with the
notebook), so save the notebook (Ctrl+S) after running a check. It also flags notebooks whose
cells ran out of order: their saved results may not be what a fresh run gives.
"""

import json
import re
import sys
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
# what `check` prints: "PASSED [id] ...", "NOT YET [id] ...", "NOT ATTEMPTED YET [id] ..."
_RESULT = re.compile(r"^(PASSED|NOT ATTEMPTED YET|NOT YET) \[([\w.-]+)\]", re.MULTILINE)
_STATUS = {"PASSED": "passed", "NOT YET": "not yet", "NOT ATTEMPTED YET": "not attempted"}


def _text(output):
    if output.get("output_type") == "stream":
        return "".join(output.get("text", ""))
    return "".join(output.get("data", {}).get("text/plain", ""))


def notebook_progress(path):
    """{"notebook", "exercises": {id: status}, "out_of_order": bool} for one saved notebook."""
    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    exercises = {}
    for cell in code:
        if "exercise" in cell.get("metadata", {}).get("tags", []):
            exercises[cell["metadata"]["exercise_id"]] = "not run yet"
    for cell in code:  # later checks of the same exercise overwrite earlier ones
        for output in cell.get("outputs", []):
            for word, exercise_id in _RESULT.findall(_text(output)):
                if exercise_id in exercises:
                    exercises[exercise_id] = _STATUS[word]
    counts = [c["execution_count"] for c in code if c.get("execution_count") is not None]
    out_of_order = any(b <= a for a, b in zip(counts, counts[1:], strict=False))
    return {"notebook": Path(path).name, "exercises": exercises, "out_of_order": out_of_order}


def progress_table(folder=NOTEBOOKS):
    """The table `make progress` prints, as text."""
    paths = sorted(Path(folder).glob("[0-9][0-9]*.ipynb"))
    if not paths:
        return f"no lesson notebooks (NN_*.ipynb) in {folder}"
    rows, totals, warnings = [], {}, []
    for path in paths:
        result = notebook_progress(path)
        for exercise_id, status in result["exercises"].items():
            rows.append((result["notebook"].removesuffix(".ipynb"), exercise_id, status))
            totals[status] = totals.get(status, 0) + 1
        if result["out_of_order"]:
            warnings.append(
                f"! {result['notebook']}: cells ran out of order, so its saved results may not hold in a fresh "
                f"run. Fix: Kernel > Restart Kernel and Run All Cells, then save."
            )
    width = max(len(r[0]) for r in rows) if rows else 10
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
