"""Everything a new lesson touches besides its notebook, each checked (CONTRIBUTING.md, "A lesson").

`make test-lesson` always runs this file (tests/lesson_tests.py, ALWAYS): whoever writes a lesson sees
here what is still missing (the README's count and tables, lesson 00's course map, course_utils' list,
the checker's test file, a bad input for each reference with input checks).
"""

import inspect
import re
from pathlib import Path

import nbformat
import pytest

import course_utils
from course_utils.exercises import exercise_ids, solution
from tests.exercises import test_show_solution_algorithm
from tests.notebook_tools import exercise_cells, lesson_notebooks

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
CONTRIBUTING = (ROOT / "CONTRIBUTING.md").read_text()
# course_utils/exercises/ modules that are the framework, not a lesson's checker
FRAMEWORK = {"__init__", "checking", "tamper_guard"}


def _table_after(heading, text=README):
    """Rows of the first markdown table after a heading, as lists of cells."""
    section = text.split(heading, 1)[1]
    rows = []
    for line in section.splitlines():
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
        elif rows:
            break
    return [r for r in rows[2:]]  # without the header and the --- line


def _lesson(path):
    return path.name.split("_", 1)[0]


def _stated_minutes(nb):
    """The notebook's own time, in minutes: 'About 85 minutes' -> '85', 'About 2.5-3 hours' -> '150-180'."""
    opening = next(c.source for c in nb.cells if c.cell_type == "markdown")
    match = re.search(r"\*\*Time[^*]*\*\*\s*About ([\d.]+(?:-[\d.]+)?) (minutes|hours)", opening)
    assert match, f"the opening cell should say '**Time.** About N minutes' (or hours): {opening[:200]!r}"
    per_unit = 60 if match.group(2) == "hours" else 1
    return "-".join(f"{float(n) * per_unit:g}" for n in match.group(1).split("-"))


def test_readme_lesson_map_lists_every_notebook_with_its_time():
    rows = {row[0]: row for row in _table_after("## Lesson map")}
    notebooks = {_lesson(p): p for p in lesson_notebooks()}
    assert sorted(rows) == sorted(notebooks), "the README's lesson map and notebooks/ list different lessons"
    for lesson, path in notebooks.items():
        row = rows[lesson]
        assert row[1] == f"`{path.stem}`", f"lesson {lesson}: the map names {row[1]}, the file is {path.stem}"
        minutes = _stated_minutes(nbformat.read(path, as_version=4))
        stated = row[-1].split(" ", 1)[0]
        assert stated == minutes, f"lesson {lesson}: the map says {row[-1]} min, the notebook says {minutes}"


def test_readme_exercise_table_matches_the_notebooks():
    rows = {row[0]: set(re.findall(r"`(\w+)`", row[1])) for row in _table_after("## How exercises and checkers work")}
    in_notebooks = {}
    for path in lesson_notebooks():
        ids = {c.metadata["exercise_id"] for c in exercise_cells(nbformat.read(path, as_version=4))}
        if ids:
            in_notebooks[_lesson(path)] = ids
    assert rows == in_notebooks, "the README's exercise table differs from the notebooks' exercise cells"
    assert set().union(*rows.values()) == set(exercise_ids())


def test_readme_counts_the_notebooks():
    words = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    words += "seventeen eighteen nineteen twenty twenty-one twenty-two twenty-three twenty-four twenty-five"
    match = re.search(r"(\S+) Jupyter\s+notebooks", README.split("\n\n", 2)[1])
    assert match, "the README's opening paragraph should say how many Jupyter notebooks the course has"
    count = len(lesson_notebooks())
    assert match.group(1).lower() == words.split()[count], (
        f"the README's opening paragraph says {match.group(1)} Jupyter notebooks; notebooks/ holds {count} lessons: "
        f"update the count, and say what the new lesson adds in that paragraph"
    )


def test_lesson_00s_course_map_lists_every_lesson():
    welcome = nbformat.read(next(p for p in lesson_notebooks() if _lesson(p) == "00"), as_version=4)
    course_map = next(c.source for c in welcome.cells if c.cell_type == "markdown" and "### The course map" in c.source)
    rows = [row[0] for row in _table_after("### The course map", course_map)]
    assert rows == sorted(_lesson(p) for p in lesson_notebooks()), (
        f"lesson 00's course map lists {rows}; add a row for each lesson in notebooks/, in order"
    )


def _package_modules():
    """course_utils' modules and subpackages, as the names its docstring's list uses."""
    package = ROOT / "course_utils"
    names = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    return names | {p.name for p in package.iterdir() if (p / "__init__.py").exists()}


def test_course_utils_list_names_every_module():
    listed = set(re.findall(r"(?:^- |; )(\w+):", course_utils.__doc__, re.MULTILINE))
    assert listed == _package_modules(), (
        f"course_utils/__init__.py's list misses {sorted(_package_modules() - listed)} and names "
        f"{sorted(listed - _package_modules())}, which is not a module: one line per module, '- name: what, (lesson NN)'"
    )


def test_every_checker_module_has_a_test_file_of_its_name():
    checkers = {p.stem for p in (ROOT / "course_utils" / "exercises").glob("*.py")} - FRAMEWORK
    missing = sorted(c for c in checkers if not (ROOT / "tests" / "exercises" / f"test_{c}.py").exists())
    assert not missing, f"no tests/exercises/test_<checker>.py for {missing}: test its solution and each named mistake"


def test_every_lesson_module_has_a_unit_test_file_of_its_name():
    modules = {p.stem for p in (ROOT / "course_utils").glob("*.py") if not p.stem.startswith("_")}
    missing = sorted(m for m in modules if not (ROOT / "tests" / "unit" / f"test_{m}.py").exists())
    assert not missing, f"no tests/unit/test_<module>.py for course_utils/{missing}: test its functions against oracles"


def test_every_reference_with_input_checks_has_bad_inputs():
    bad_inputs = test_show_solution_algorithm.BAD_INPUTS
    checked = {i for i in exercise_ids() if "_validate." in inspect.getsource(solution(i))}
    assert checked == set(bad_inputs), (
        f"in tests/exercises/test_show_solution_algorithm.py's BAD_INPUTS, add a bad input for "
        f"{sorted(checked - set(bad_inputs))}; drop {sorted(set(bad_inputs) - checked)}"
    )


# What CONTRIBUTING's list of a new lesson's files must name: each is checked above or in the files it names.
LESSON_FILES = [
    "course_utils/<concept>.py",
    "course_utils/_validate.py",
    "course_utils/exercises/<concept>.py",
    "tests/unit/test_<concept>.py",
    "tests/exercises/test_<concept>.py",
    "`BAD_INPUTS`",
    "lesson map and exercise table",
    "lesson 00's course map",
    "`course_utils/__init__.py`'s list",
    "count of notebooks",
]


@pytest.mark.parametrize("item", LESSON_FILES)
def test_contributing_lists_what_a_new_lesson_touches(item):
    the_list = CONTRIBUTING.split("Adding a lesson needs", 1)[1].split("test_lesson_completeness.py` fails", 1)[0]
    assert item in the_list, f"CONTRIBUTING.md's list under 'Adding a lesson needs' should name {item}"
