"""Which tests belong to one lesson: `make test-lesson LESSON=05c` (pytest --lesson 05c).

A lesson's tests are found from the lesson itself, so a new lesson needs no list:
its notebook (strict nbval), every test whose id names the notebook (hygiene, run-all),
the unit tests of the course_utils modules the notebook imports (tests/unit/test_<module>[_*].py),
and every test file that names one of the lesson's exercise ids. The completeness checks (ALWAYS) run
for every lesson: they find what a new lesson still lacks (the README's tables, lesson 00's map, ...).
"""

import ast
import re
from pathlib import Path

import nbformat

from tests.notebook_tools import NOTEBOOK_DIR, code_cells, exercise_cells

TESTS = Path(__file__).resolve().parent
ALWAYS = {TESTS / "tools" / "test_lesson_completeness.py"}


def lesson_notebook(lesson):
    matches = sorted(NOTEBOOK_DIR.glob(f"{lesson}_*.ipynb"))
    if len(matches) != 1:
        known = sorted(p.name.split("_", 1)[0] for p in NOTEBOOK_DIR.glob("[0-9][0-9]*_*.ipynb"))
        raise ValueError(f"--lesson {lesson!r}: expected one notebook notebooks/{lesson}_*.ipynb; lessons: {known}")
    return matches[0]


def imported_modules(nb):
    """Names of the course_utils modules a notebook's code cells import."""
    names = set()
    for cell in code_cells(nb):
        source = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "course_utils":
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("course_utils."):
                names.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                names.update(a.name.split(".")[1] for a in node.names if a.name.startswith("course_utils."))
    return names - {"exercises", "setup"}


def lesson_test_files(nb):
    ids = {cell.metadata["exercise_id"] for cell in exercise_cells(nb)}
    files = set(ALWAYS)
    for module in imported_modules(nb):
        files.update((TESTS / "unit").glob(f"test_{module}.py"))
        files.update((TESTS / "unit").glob(f"test_{module}_*.py"))  # test_viz_data.py, test_ablation_inputs.py
    for path in TESTS.rglob("test_*.py"):
        text = path.read_text()
        if any(re.search(rf"[\"']{re.escape(i)}[\"']", text) for i in ids):
            files.add(path)
    return files, ids


def select(items, lesson):
    """(kept, dropped) test items for one lesson."""
    notebook = lesson_notebook(lesson)
    files, ids = lesson_test_files(nbformat.read(notebook, as_version=4))
    tokens = {notebook.stem, notebook.name, *ids}

    def names_lesson(item):
        return any(token in item.nodeid for token in tokens)

    # a file that tests every exercise or notebook (parametrized by them) keeps only this lesson's cases
    files_with_lesson_cases = {Path(i.path) for i in items if "[" in i.nodeid and names_lesson(i)}

    kept, dropped = [], []
    for item in items:
        path = Path(item.path)
        wanted = path == notebook or names_lesson(item) or path in files
        other_lessons_case = "[" in item.nodeid and path in files_with_lesson_cases and not names_lesson(item)
        (kept if wanted and not other_lessons_case else dropped).append(item)
    return kept, dropped
