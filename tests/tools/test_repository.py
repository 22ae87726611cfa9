"""The house rules a maintainer relies on: the README matches the lessons, every exercise has
tests, notebooks are committed clean, the licence, the lock and the template hold."""

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from course_utils.exercises import exercise_ids
from tests.notebook_tools import exercise_cells, lesson_notebooks
from tests.notebooks import test_notebook_hygiene as hygiene
from tests.tools.test_lesson_completeness import _stated_minutes

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
sys.path.insert(0, str(ROOT / "scripts"))
import clean_notebooks  # noqa: E402
import lesson_times  # noqa: E402
import lock_requirements  # noqa: E402


def _sized_lesson():
    """A lesson of known size: 624 words, 3 code cells besides the stub, cards of 10-15 and 5 min, 2 questions."""
    card = "**Exercise card** · difficulty: ★★☆☆☆ · importance: ★★★☆☆ · about {} min · practises: loops"  # 15 words
    ending = (
        "## Summary\n\n### Questions\n1. Why?\n2. How?\n\n<details><summary>Answer 1</summary>\n\nBecause.\n</details>"
    )
    stub = nbformat.v4.new_code_cell("def f():\n    raise NotImplementedError", metadata={"tags": ["exercise"]})
    cells = [nbformat.v4.new_markdown_cell("word " * 582), nbformat.v4.new_code_cell("setup()")]
    cells += [nbformat.v4.new_markdown_cell(card.format("10-15")), stub, nbformat.v4.new_code_cell('check("f", f)')]
    cells += [
        nbformat.v4.new_markdown_cell(card.format(5)),
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_code_cell(""),
    ]
    return nbformat.v4.new_notebook(cells=cells + [nbformat.v4.new_markdown_cell(ending)])  # ending: 12 words


def test_lesson_times_counts_words_code_cells_cards_and_questions():
    nb = _sized_lesson()
    assert lesson_times.lesson_size(nb) == {"words": 624, "code cells": 3, "exercises": (15, 20), "questions": 2}
    # 624 / 150 = 4.16 minutes of reading + 3 + 2 = 9.16; + 15 = 24.16 -> 25; + 20 = 29.16 -> 30
    assert lesson_times.estimate(nb) == (25, 30)
    assert (lesson_times.nearest_five(22.4), lesson_times.nearest_five(22.5)) == (20, 25)
    assert lesson_times.time_sentence(nb).startswith("**Time.** About 25-30 minutes, estimated")


@pytest.mark.parametrize("nb_path", lesson_notebooks(), ids=lambda p: p.name)
def test_a_time_estimated_by_the_script_is_what_the_script_estimates(nb_path):
    nb = nbformat.read(nb_path, as_version=4)
    opening = next(c.source for c in nb.cells if c.cell_type == "markdown")
    time_line = next((line for line in opening.splitlines() if line.startswith("**Time")), "")
    if "scripts/lesson_times.py" not in time_line:
        pytest.skip("this lesson's time is not estimated by scripts/lesson_times.py")
    (low, high), (stated_low, stated_high) = lesson_times.estimate(nb), lesson_times.stated(nb)
    # within one rounding step, so a sentence added later does not force a new line, but a stale estimate fails
    assert abs(stated_low - low) <= 5 and abs(stated_high - high) <= 5, (
        f"{nb_path.name} states {stated_low}-{stated_high} minutes, scripts/lesson_times.py estimates {low}-{high}: "
        f"paste the sentence it prints ({lesson_times.time_sentence(nb)!r}) and the README's minutes"
    )


@pytest.mark.parametrize("exercise_id", exercise_ids())
def test_every_exercise_has_an_exercise_test_file(exercise_id):
    files = [p for p in (ROOT / "tests" / "exercises").glob("test_*.py") if f'"{exercise_id}"' in p.read_text()]
    assert files, f"no tests/exercises/test_*.py names {exercise_id!r}: test its solution and each named mistake"


def test_readme_layout_names_every_top_level_entry_and_only_those():
    block = README.split("## Layout", 1)[1].split("```", 2)[1]
    named = {line.split()[0].rstrip("/") for line in block.splitlines() if line and not line.startswith(" ")}
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    top = {path.split("/", 1)[0] for path in tracked.splitlines()}
    top -= {
        "README.md",
        ".gitignore",
        ".gitattributes",
        "requirements.txt",
    }  # this page; git's; the lock, with its list
    assert named == top, f"README's layout names {sorted(named - top)} (not in the tree); misses {sorted(top - named)}"
    for folder in re.findall(r"\b(\w+)/ \(", block):  # viz/ (, unit/ (, ...: the folders a line names inside one
        assert list(ROOT.glob(f"*/{folder}")), f"README's layout names {folder}/, which no top-level folder holds"


def test_licence_covers_code_and_lessons_and_the_readme_says_so():
    licence = (ROOT / "LICENSE").read_text()
    assert "MIT License" in licence and "Permission is hereby granted" in licence
    assert "CC BY 4.0" in licence and "creativecommons.org/licenses/by/4.0" in licence
    assert "MIT" in README and "CC BY 4.0" in README


def test_sources_are_named_as_sources_not_by_file_name():
    # the course's sources are "the slides", "the article", "the notes on visualising"; in a lesson "seed" is a random seed
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    texts = [p for p in tracked.splitlines() if p.endswith((".py", ".md", ".ipynb"))]
    found = [
        f"{path}:{n}"
        for path in texts
        for n, line in enumerate((ROOT / path).read_text().splitlines(), 1)
        if re.search(r"seed[ _]?00\d", line, re.IGNORECASE)
    ]
    assert not found, f"these lines name a source by its file name (seed 00N); name it as a source instead: {found}"


@pytest.mark.parametrize("nb_path", lesson_notebooks(), ids=lambda p: p.name)
def test_notebooks_are_committed_without_stderr(nb_path):
    nb = nbformat.read(nb_path, as_version=4)
    streams = [i for i, c in enumerate(nb.cells) for o in c.get("outputs", []) if o.get("name") == "stderr"]
    assert not streams, f"{nb_path.name}: cells {streams} keep stderr outputs; re-execute with `make execute`"


def test_clean_notebooks_drops_stderr_and_papermill_metadata(tmp_path):
    nb = nbformat.v4.new_notebook(metadata={"papermill": {"duration": 1.0}})
    cell = nbformat.v4.new_code_cell(
        "print(1)",
        metadata={"papermill": {}, "execution": {"iopub.status.busy": "2026-12-01T00:00:00Z"}, "tags": ["x"]},
    )
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="1\n"),
        nbformat.v4.new_output("stream", name="stderr", text="\r 50%|#####     |"),
    ]
    nb.cells = [cell]
    path = tmp_path / "a.ipynb"
    nbformat.write(nb, path)
    clean_notebooks.clean(path)
    cleaned = nbformat.read(path, as_version=4)
    assert "papermill" not in cleaned.metadata
    assert cleaned.cells[0].metadata == {"tags": ["x"]}
    assert [o.get("name") for o in cleaned.cells[0].outputs] == ["stdout"]


def _pins(path):
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            pins[canonicalize_name(req.name)] = req
    return pins


def test_every_direct_dependency_is_locked_at_its_version_and_marker():
    direct, locked = _pins(ROOT / "requirements.in"), _pins(ROOT / "requirements.txt")
    for name, req in direct.items():
        assert name in locked, f"{req.name} is in requirements.in but not in the lock: run `make lock`"
        assert str(req.specifier) == str(locked[name].specifier), f"{req.name}: {req} here, {locked[name]} locked"
        assert str(req.marker) == str(locked[name].marker), f"{req.name}: the lock lost its marker"


def test_the_lock_keeps_a_direct_dependencys_marker(tmp_path):
    requirements_in = tmp_path / "requirements.in"
    requirements_in.write_text('# c\ntriton==3.9.0 ; sys_platform == "linux"\ntorch==2.13.0\n')
    frozen = ["torch==2.13.0", "triton==3.9.0", "pip==25.0", "filelock==3.0", "rfc3987-syntax==1.1.0"]
    lines = lock_requirements.lock_lines(frozen, lock_requirements.direct_markers(requirements_in), ["# header"])
    assert lines == ["# header", "filelock==3.0", "torch==2.13.0", 'triton==3.9.0; sys_platform == "linux"']


def test_the_lock_marks_torchs_cuda_libraries_linux_only(tmp_path):
    # a Mac or Windows `pip install --no-deps -r requirements.txt` must skip the CUDA build's libraries
    requirements_in = tmp_path / "requirements.in"
    requirements_in.write_text("torch==2.15.0\n")
    frozen = ["torch==2.15.0", "nvidia-cublas==13.1.0.3", "cuda-bindings==13.5.0", "numpy==2.4.6"]
    lines = lock_requirements.lock_lines(frozen, lock_requirements.direct_markers(requirements_in), [])
    linux = ' ; platform_system == "Linux"'
    assert lines == [
        "cuda-bindings==13.5.0" + linux,
        "numpy==2.4.6",
        "nvidia-cublas==13.1.0.3" + linux,
        "torch==2.15.0",
    ]
    assert str(Requirement(lines[0]).marker) == 'platform_system == "Linux"'


def test_nbformat_imports_without_the_slow_grammar():
    # every nbval, papermill and `make grade` process imports nbformat: keep rfc3987-syntax out of the lock
    assert "rfc3987-syntax" not in (ROOT / "requirements.txt").read_text()
    code = "import sys, nbformat; print('rfc3987_syntax' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False", "rfc3987_syntax is installed: it costs 2.7 s per process (see LEFT_OUT)"


TEMPLATE = ROOT / "templates" / "lesson_template.ipynb"


def test_the_lesson_template_follows_the_lesson_rules():
    nbformat.validate(nbformat.read(TEMPLATE, as_version=4))
    hygiene.test_lesson_conventions(TEMPLATE)
    hygiene.test_every_exercise_has_a_card(TEMPLATE)
    hygiene.test_every_question_has_an_answer(TEMPLATE)
    hygiene.test_no_solution_shown_unasked(TEMPLATE)
    # a copied template fails the README map test until its Time line says the estimated minutes
    with pytest.raises(AssertionError, match=r"About N minutes"):
        _stated_minutes(nbformat.read(TEMPLATE, as_version=4))


def test_the_template_names_its_stub_by_its_exercise_id_and_reads_the_reference_through_its_module():
    """A stub named like its exercise id, so the learner's function and the course's never share a name:
    later cells read the reference as module.name (import course_utils.x as x), which no stub replaces."""
    nb = nbformat.read(TEMPLATE, as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    (stub,) = exercise_cells(nb)
    exercise_id = stub.metadata["exercise_id"]
    assert re.search(rf"^def {exercise_id}\(", stub.source, re.MULTILINE), "the stub is named like its exercise id"
    assert f'check("{exercise_id}", {exercise_id})' in "\n".join(code)
    after = "\n".join(code[code.index(stub.source) + 1 :])
    module = re.search(r"^import course_utils\.(\w+) as (\w+)", after, re.MULTILINE)
    assert module and f"{module.group(2)}.{exercise_id}(" in after, "later cells use module.exercise_id"
    assert not re.search(rf"from course_utils\S* import .*\b{exercise_id}\b", "\n".join(code))


def test_the_commit_hook_refuses_a_long_subject(tmp_path):
    hook = ROOT / ".githooks" / "commit-msg"
    cases = {"A short subject\n\nThe reasoning.\n": 0, "x" * 73 + "\n": 1, "Subject\nno blank line\n": 1, "\n": 1}
    for message, expected in cases.items():
        path = tmp_path / "MSG"
        path.write_text(message)
        assert subprocess.run(["bash", str(hook), str(path)], capture_output=True).returncode == expected, message


def test_test_lesson_selects_one_lessons_tests():
    from tests.lesson_tests import imported_modules, lesson_notebook, lesson_test_files

    notebook = lesson_notebook("05c")
    nb = nbformat.read(notebook, as_version=4)
    assert "translation" in imported_modules(nb)
    files, ids = lesson_test_files(nb)
    assert ROOT / "tests" / "exercises" / "test_translation.py" in files
    assert ROOT / "tests" / "unit" / "test_translation.py" in files
    assert ROOT / "tests" / "unit" / "test_flash.py" not in files
    assert {"cross_attention", "decode_greedily"} <= ids
    assert ROOT / "tests" / "tools" / "test_lesson_completeness.py" in files  # for every lesson
    files_04, _ = lesson_test_files(nbformat.read(lesson_notebook("04"), as_version=4))
    assert ROOT / "tests" / "unit" / "test_viz_data.py" in files_04  # a module's second unit-test file
    with pytest.raises(ValueError, match="lessons:"):
        lesson_notebook("99")
