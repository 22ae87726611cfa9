"""Every lesson is committed executed, once, in order, from a fresh kernel, with clean outputs."""

import json
import re

import nbformat
import pytest

from tests import nbval_tolerance
from tests.notebook_tools import ROOT, code_cells, exercise_cells, lesson_notebooks, output_text

NOTEBOOKS = lesson_notebooks()
MAX_BYTES = 3_000_000
NBVAL_MARKERS = {"NBVAL_IGNORE_OUTPUT", "NBVAL_CHECK_OUTPUT", "NBVAL_RAISES_EXCEPTION", "NBVAL_SKIP"}
# absolute paths and user names must not leak into committed outputs
LEAKS = re.compile(r"(/root/|/home/\w+|/work/|/tmp/|/Users/\w+|C:\\\\Users)")


def test_there_are_lessons():
    assert NOTEBOOKS, "no notebooks/NN_*.ipynb found"
    # 00, 01, ... without gaps; a lesson's second part takes a letter (06b after 06)
    numbers = sorted({int(p.name[:2]) for p in NOTEBOOKS})
    assert numbers == list(range(len(numbers))), f"lessons must be numbered 00, 01, ... without gaps: {numbers}"
    for p in NOTEBOOKS:
        assert re.fullmatch(r"\d\d[a-z]?_\w+\.ipynb", p.name), f"lesson file names are NN_name or NNb_name: {p.name}"


@pytest.fixture(params=NOTEBOOKS, ids=lambda p: p.name)
def nb_path(request):
    return request.param


def test_valid_and_bounded(nb_path):
    assert nb_path.stat().st_size < MAX_BYTES, f"{nb_path.name} is {nb_path.stat().st_size} bytes"
    nb = nbformat.read(nb_path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"


def test_executed_once_in_order(nb_path):
    nb = nbformat.read(nb_path, as_version=4)
    counts = [c.execution_count for c in code_cells(nb)]
    assert counts == list(range(1, len(counts) + 1)), (
        f"{nb_path.name}: execution counts {counts}; re-execute with `make execute`"
    )


def test_no_errors_or_leaks(nb_path):
    nb = nbformat.read(nb_path, as_version=4)
    for i, cell in enumerate(code_cells(nb)):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                assert "raises-exception" in cell.metadata.get("tags", []), (
                    f"{nb_path.name} cell {i}: stored error {out.get('ename')}"
                )
        text = json.dumps([o for o in cell.get("outputs", []) if "image/png" not in o.get("data", {})])
        leak = LEAKS.search(text)
        assert not leak, f"{nb_path.name} cell {i}: output contains a machine path {leak.group(0)!r}"


def test_lesson_conventions(nb_path):
    nb = nbformat.read(nb_path, as_version=4)
    first_md = next(c.source for c in nb.cells if c.cell_type == "markdown")
    for needed in ("Goals", "Time", "Prerequisites"):
        assert needed in first_md, f"{nb_path.name}: the opening cell should state {needed}"
    assert "Summary" in "".join(c.source for c in nb.cells if c.cell_type == "markdown"), (
        f"{nb_path.name}: a lesson ends with a summary"
    )
    first_code = code_cells(nb)[0].source
    assert "setup(" in first_code, f"{nb_path.name}: the first code cell calls course_utils' setup()"
    template = nbformat.read(ROOT / "templates" / "lesson_template.ipynb", as_version=4)
    assert first_code == code_cells(template)[0].source, (
        f"{nb_path.name}: the first code cell is the template's, word for word (it installs the course on a hosted "
        f"Jupyter, tests/tools/test_hosted.py)"
    )
    assert any("parameters" in c.metadata.get("tags", []) for c in nb.cells), (
        f"{nb_path.name}: needs a cell tagged `parameters` for papermill"
    )
    for c in code_cells(nb):
        assert not c.source.rstrip().endswith(";"), f"{nb_path.name}: trailing ';' does not hide output"
        for line in c.source.splitlines():
            # nbval only honours a marker alone on its comment line; anything else is silently compared
            if "NBVAL_TOLERANCE" in line:
                nbval_tolerance.parse(line)  # a malformed tolerance raises, naming what it expects
            elif "NBVAL_" in line:
                assert line.strip().lstrip("#").strip() in NBVAL_MARKERS, (
                    f"{nb_path.name}: put the nbval marker alone on its line: {line.strip()!r}"
                )


# Outputs that vary by design (timings, throughput). A trained result is compared within a tolerance
# (NBVAL_TOLERANCE), never ignored: this count may shrink, not grow.
MAX_IGNORED_CELLS = 31


def test_no_more_cells_ignore_their_output():
    ignored = [
        f"{p.name} cell {i}"
        for p in NOTEBOOKS
        for i, c in enumerate(c for c in nbformat.read(p, as_version=4).cells if c.cell_type == "code")
        if re.search(r"^\s*#\s*NBVAL_IGNORE_OUTPUT\s*$", c.source, re.MULTILINE)
    ]
    assert len(ignored) <= MAX_IGNORED_CELLS, (
        f"{len(ignored)} cells ignore their output (at most {MAX_IGNORED_CELLS}): a trained result declares "
        f"NBVAL_TOLERANCE instead (CONTRIBUTING.md); {ignored}"
    )


def test_sections_are_numbered_in_order(nb_path):
    # "## 1.", "## 2.", ...: a learner told "section 5" must find it, so no number is skipped or repeated
    nb = nbformat.read(nb_path, as_version=4)
    markdown = [c.source for c in nb.cells if c.cell_type == "markdown"]
    numbers = [int(n) for source in markdown for n in re.findall(r"^## (\d+)\.", source, re.MULTILINE)]
    assert numbers == list(range(1, len(numbers) + 1)), f"{nb_path.name}: sections numbered {numbers}"


def test_exercise_stubs_are_unsolved(nb_path):
    """Learner notebooks keep the stubs; later cells use course_utils' reference."""
    nb = nbformat.read(nb_path, as_version=4)
    for cell in exercise_cells(nb):
        assert "exercise_id" in cell.metadata, f"{nb_path.name}: exercise cell without exercise_id"
        assert "NotImplementedError" in cell.source, (
            f"{nb_path.name}: exercise {cell.metadata['exercise_id']} is not a stub"
        )
        assert "NOT ATTEMPTED" in "".join(output_text(c) for c in nb.cells if c.cell_type == "code"), (
            f"{nb_path.name}: the stored check output should show the stub as not attempted"
        )


CARD = re.compile(
    r"\*\*Exercise card\*\* · difficulty: [★☆]{5} · importance: [★☆]{5} · about \d+(-\d+)? min · practises: \S"
)


def test_every_exercise_has_a_card(nb_path):
    """Difficulty, importance, minutes and what it practises, just before the stub."""
    nb = nbformat.read(nb_path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell in exercise_cells(nb):
            before = nb.cells[i - 1]
            assert before.cell_type == "markdown" and CARD.search(before.source), (
                f"{nb_path.name}: exercise {cell.metadata.get('exercise_id')!r} needs an exercise card in the "
                f"markdown cell just before it: {CARD.pattern!r}"
            )


def test_every_question_has_an_answer(nb_path):
    """A self-learner can reveal an answer to each end-of-lesson question after trying."""
    nb = nbformat.read(nb_path, as_version=4)
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    questions = markdown.split("### Questions", 1)
    assert len(questions) == 2, f"{nb_path.name}: a lesson ends with a `### Questions` section"
    numbered = re.findall(r"^(\d+)\. ", questions[1].split("<details>", 1)[0], re.MULTILINE)
    assert numbered, f"{nb_path.name}: the questions are a numbered list"
    answers = re.findall(r"<details>\s*<summary>\s*Answer (\d+)\s*</summary>", questions[1])
    assert answers == numbered, (
        f"{nb_path.name}: questions {numbered} but answers {answers} (all questions first, then one "
        "<details><summary>Answer N</summary> block each: a question after the first <details> is not counted)"
    )


def test_no_solution_shown_unasked(nb_path):
    """A learner sees a solution only when they call show_solution themselves."""
    nb = nbformat.read(nb_path, as_version=4)
    for cell in code_cells(nb):
        calls = [line for line in cell.source.splitlines() if "show_solution(" in line and "import" not in line]
        assert not calls, f"{nb_path.name}: a code cell shows a solution unasked: {calls[0]!r}"
