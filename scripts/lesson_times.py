"""Estimate each lesson's time from its size, the one method of CONTRIBUTING.md (a lesson's `**Time.**` line).

    python scripts/lesson_times.py                      # every lesson
    python scripts/lesson_times.py notebooks/05b_*.ipynb

The estimate adds, in minutes:
- reading: every word of every markdown cell (answers and maths included) at 150 words a minute;
- code: one minute per code cell, to read it, run it and read what it prints (not the exercise stubs);
- exercises: the minutes on each exercise card ("about 10-15 min"), low and high ends;
- questions: one minute per end-of-lesson question, to try it before reading the answer (read with the words).
Both ends are rounded to the nearest 5 minutes. Prints, per lesson, the parts, the estimate and the time the
lesson states now, then the `**Time.**` sentence that states the estimate.
"""

import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
WORDS_PER_MINUTE = 150
MINUTES_PER_CODE_CELL = 1
MINUTES_PER_QUESTION = 1
CARD_MINUTES = re.compile(r"\*\*Exercise card\*\*.*? · about (\d+)(?:-(\d+))? min ·")
STATED = re.compile(r"\*\*Time[^*]*\*\*\s*About ([\d.]+)(?:-([\d.]+))? (minutes|hours)")


def nearest_five(minutes):
    return int(5 * ((minutes + 2.5) // 5))


def lesson_size(nb):
    """The parts of the estimate: words, code cells, (low, high) exercise minutes, questions."""
    markdown = [c.source for c in nb.cells if c.cell_type == "markdown"]
    words = sum(len(source.split()) for source in markdown)
    code = [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    stubs = [c for c in code if "exercise" in c.metadata.get("tags", [])]
    cards = [m.groups() for source in markdown for m in CARD_MINUTES.finditer(source)]
    low, high = sum(int(a) for a, _ in cards), sum(int(b or a) for a, b in cards)
    after = "\n".join(markdown).split("### Questions", 1)
    questions = len(re.findall(r"^\d+\. ", after[1].split("<details>", 1)[0], re.MULTILINE)) if len(after) == 2 else 0
    return {"words": words, "code cells": len(code) - len(stubs), "exercises": (low, high), "questions": questions}


def estimate(nb):
    """(low, high) minutes, each rounded to the nearest 5."""
    size = lesson_size(nb)
    fixed = (
        size["words"] / WORDS_PER_MINUTE
        + size["code cells"] * MINUTES_PER_CODE_CELL
        + size["questions"] * MINUTES_PER_QUESTION
    )
    low, high = size["exercises"]
    return nearest_five(fixed + low), nearest_five(fixed + high)


def stated(nb):
    """(low, high) minutes the lesson's `**Time.**` line states, or None."""
    opening = next((c.source for c in nb.cells if c.cell_type == "markdown"), "")
    match = STATED.search(opening)
    if not match:
        return None
    per_unit = 60 if match.group(3) == "hours" else 1
    low = float(match.group(1)) * per_unit
    high = float(match.group(2) or match.group(1)) * per_unit
    return round(low), round(high)


def minutes_text(low, high):
    return f"{low}" if low == high else f"{low}-{high}"


def time_sentence(nb):
    """The `**Time.**` sentence that states the estimate (the lesson may add advice after it)."""
    return (
        f"**Time.** About {minutes_text(*estimate(nb))} minutes, estimated from the lesson's size by "
        f"`scripts/lesson_times.py` (CONTRIBUTING.md: words at {WORDS_PER_MINUTE} a minute, a minute per code cell "
        f"and per question, each exercise card's minutes)."
    )


def main(paths):
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        size, now = lesson_size(nb), stated(nb)
        low, high = estimate(nb)
        print(
            f"{Path(path).stem.split('_', 1)[0]:>3}  {size['words']:6,} words  {size['code cells']:3} code cells  "
            f"exercises {minutes_text(*size['exercises']):>5} min  {size['questions']} questions  "
            f"-> {minutes_text(low, high):>7} min  (states {minutes_text(*now) if now else 'nothing'})"
        )
        print(f"     {time_sentence(nb)}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in {"-h", "--help"}:
        sys.exit(__doc__)
    main(sys.argv[1:] or sorted(str(p) for p in (ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb")))
