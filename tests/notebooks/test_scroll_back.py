"""Scrolling back after Run All: the plugin that re-runs each cell (tests/scroll_back.py), and what runs nothing.

`make test-scroll-back` (and `make test-lesson`) run nbval with --scroll-back: after each lesson's Run All, every code cell is re-run
alone in the same kernel, with the exercises solved (see tests/scroll_back.py). The first tests
here show that this check fails where it should, on a small notebook of planted mistakes.

Re-running one cell can also break another: an earlier section's cell that binds a name a later
section uses (re-run it, then the later cell) is found without running anything, from the names
each cell reads and the sections that bind them.
"""

import ast
import builtins
import re
import subprocess
import sys

import nbformat
import pytest

from course_utils.exercises import exercise_ids
from tests.notebook_tools import ROOT, exercise_cells, lesson_notebooks


def test_every_exercise_appears_in_a_lesson():
    used = {
        c.metadata["exercise_id"] for p in lesson_notebooks() for c in exercise_cells(nbformat.read(p, as_version=4))
    }
    missing = set(exercise_ids()) - used
    assert not missing, f"exercises with a checker but no notebook cell: {sorted(missing)}"


STUB = "def causal_mask(seq_len):\n    raise NotImplementedError"
# its output is not compared during Run All (the message may change); scrolling back, it must say PASSED
CHECK = "# NBVAL_IGNORE_OUTPUT\nfrom course_utils.exercises import check\nprint(check('causal_mask', {}))"
NOT_ATTEMPTED = "NOT ATTEMPTED YET [causal_mask] (what Run All printed)\n"

# Notebooks named like lessons (only lessons are scrolled back), with planted mistakes: each cell is
# (source, what Run All printed, exercise id or None); outputs written here, as `make execute` would leave them
PLANTED = {
    "00_planted.ipynb": [
        ("tokens = [1, 2, 3]\nprint(len(tokens))", "3\n", None),  # cell 0: fine
        ("print(sum(tokens))", "6\n", None),  # 1: a later section rebinds tokens
        ("# NBVAL_IGNORE_OUTPUT\nimport time\nprint(time.time())", "0.0\n", None),  # 2: varies by design, allowed
        ("weights = {'a': 1}", "", None),  # 3: fine
        ("print(weights['a'])", "1\n", None),  # 4: fails once weights loses 'a'
        ("tokens = [10]\nweights = {}\nprint('later')", "later\n", None),  # 5: the later section
        (STUB, "", "causal_mask"),  # 6: the exercise, solved on scrolling back
        (CHECK.format("causal_mask"), NOT_ATTEMPTED, None),  # 7: PASSED once solved
        # 8: the exercise cell names the wrong exercise: "solved", it holds split_heads' solution
        (STUB.replace("causal_mask", "mask_for"), "", "split_heads"),
        (CHECK.format("mask_for"), NOT_ATTEMPTED, None),  # 9: still not right once "solved"
    ],
    # its last cell fails when nbval runs it
    "01_fails.ipynb": [("x = 1", "", None), ("print(x)", "1\n", None), ("print(open('missing.txt'))", "", None)],
}


@pytest.fixture(scope="module")
def scroll_back_report(tmp_path_factory):
    """nbval --scroll-back over the planted notebooks, in one pytest run: pytest's report."""
    folder = tmp_path_factory.mktemp("scroll_back")
    for name, cells in PLANTED.items():
        nb = nbformat.v4.new_notebook()
        for count, (source, printed, exercise_id) in enumerate(cells, start=1):
            outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed)] if printed else []
            metadata = {"tags": ["exercise"], "exercise_id": exercise_id} if exercise_id else {}
            nb.cells.append(
                nbformat.v4.new_code_cell(source, outputs=outputs, metadata=metadata, execution_count=count)
            )
        nbformat.write(nb, folder / name)
    # the repository's conftest.py (nbval's stderr rule, --scroll-back) as a plugin: the notebooks lie outside
    command = [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q", "-rfs"]
    command += ["--nbval", "--nbval-current-env", "--scroll-back", str(folder)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    return done.stdout + done.stderr


def _failure_sections(report):
    """{'Cell 1': the text pytest reports for that scroll-back failure} (the FAILURES part only)."""
    failures = report.split("short test summary info")[0]
    parts = re.split(r"^_+ \S*::(Cell \d+) \(scroll-back re-run\) _+$", failures, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _failed(report, notebook):
    return sorted(re.findall(rf"^FAILED \S*{notebook}::(Cell \d+.*?)(?: - |$)", report, re.MULTILINE))


def test_scroll_back_names_each_cell_a_later_section_breaks(scroll_back_report):
    report = scroll_back_report
    failed = [f for f in _failed(report, "00_planted.ipynb") if f != "Cell 9 re-run after Run All"]
    assert failed == ["Cell 1 re-run after Run All", "Cell 4 re-run after Run All"], report
    assert "'6\\n' == '10\\n'" in report and "KeyError" in report, report
    sections = _failure_sections(report)
    for cell in ("Cell 1", "Cell 4"):
        assert "a later section reassigns a name this cell uses" in sections[cell], report


def test_scroll_back_fails_a_check_that_does_not_pass_once_solved(scroll_back_report):
    assert "Cell 9 re-run after Run All" in _failed(scroll_back_report, "00_planted.ipynb"), scroll_back_report
    assert "this check should pass for ['causal_mask']" in scroll_back_report
    section = _failure_sections(scroll_back_report)["Cell 9"]
    assert "the check cell should check the function its exercise cell defines" in section
    assert "a later section reassigns" not in section  # the hint for a check, not the scroll-back one
    assert "Cell 7 re-run after Run All" not in _failed(scroll_back_report, "00_planted.ipynb")  # solved: PASSED


def test_scroll_back_is_not_checked_after_a_cell_fails_during_run_all(scroll_back_report):
    assert _failed(scroll_back_report, "01_fails.ipynb") == ["Cell 2"], scroll_back_report
    assert re.search(r"SKIPPED \[3\] .*a cell failed during Run All", scroll_back_report), scroll_back_report
    # 10 + 3 cells, each with its re-run: 4 failures, the failed notebook's 3 re-runs skipped
    assert "4 failed, 19 passed, 3 skipped" in scroll_back_report, scroll_back_report


class _Names(ast.NodeVisitor):
    """The names a cell's top level binds, and those it reads before binding them."""

    def __init__(self):
        self.bound, self.read = set(), set()

    def visit_Assign(self, node):  # the value is read before the targets are bound
        self.visit(node.value)
        for target in node.targets:
            self.visit(target)

    def visit_AugAssign(self, node):  # x += 1 reads x
        if isinstance(node.target, ast.Name) and node.target.id not in self.bound:
            self.read.add(node.target.id)
        self.visit(node.value)
        self.visit(node.target)

    def visit_AnnAssign(self, node):
        if node.value is not None:
            self.visit(node.value)
        self.visit(node.target)

    def visit_For(self, node):
        self.visit(node.iter)
        self.visit(node.target)
        for statement in node.body + node.orelse:
            self.visit(statement)

    def visit_NamedExpr(self, node):
        self.visit(node.value)
        self.visit(node.target)

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Store):
            self.bound.add(node.id)
        elif node.id not in self.bound:
            self.read.add(node.id)

    def visit_FunctionDef(self, node):  # its body reads names when called, not here
        self.bound.add(node.name)

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_Import(self, node):
        self.bound.update((a.asname or a.name).split(".")[0] for a in node.names)

    visit_ImportFrom = visit_Import

    def visit_Lambda(self, node):  # comprehensions and lambdas have their own scope
        pass

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_Lambda


def names_shared_by_sections(nb):
    """'cell i reads NAME, bound in the sections ...' for every name two sections (## headings) bind."""
    section, sections, cells = "(before the first section)", {}, []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and (heading := re.search(r"^##\s+(.+)$", cell.source, re.MULTILINE)):
            section = heading.group(1).strip()
        if cell.cell_type != "code":
            continue
        source = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
        names = _Names()
        for statement in ast.parse(source).body:
            names.visit(statement)
        cells.append((index, names))
        for name in names.bound:
            sections.setdefault(name, {}).setdefault(section, []).append(index)
    problems = []
    for index, names in cells:
        for name in sorted(names.read - set(dir(builtins))):
            binders = sections.get(name, {})
            if len(binders) > 1:
                where = "; ".join(f"{s!r} (cell {', '.join(map(str, c))})" for s, c in binders.items())
                problems.append(f"cell {index} reads {name!r}, which two sections bind: {where}")
    return problems


@pytest.mark.parametrize("nb_path", lesson_notebooks(), ids=lambda p: p.name)
def test_each_section_has_names_of_its_own(nb_path):
    problems = names_shared_by_sections(nbformat.read(nb_path, as_version=4))
    assert not problems, (
        f"{nb_path.name}: re-running a cell of one section breaks a cell of the other (rename it in one "
        "section, or keep it inside a function):\n" + "\n".join(problems)
    )


def test_a_name_two_sections_bind_is_found():
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("## 1. One head"),
        nbformat.v4.new_code_cell("import torch\nd_k = 4\nx = torch.zeros(d_k)"),
        nbformat.v4.new_code_cell("print(x.sum(), d_k)\nfor h in range(2):\n    print(h)"),
        nbformat.v4.new_markdown_cell("## 2. Many heads"),
        nbformat.v4.new_code_cell("import torch\nd_k = 8\ny = [t for t in range(d_k)]\nfor h in y:\n    pass"),
        nbformat.v4.new_code_cell("def f():\n    return h\ny = y + [1]\nprint(y, d_k)"),
    ]
    where = "which two sections bind: '1. One head' (cell 1); '2. Many heads' (cell 4)"
    assert names_shared_by_sections(nb) == [f"cell 2 reads 'd_k', {where}", f"cell 5 reads 'd_k', {where}"]
