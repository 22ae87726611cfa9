"""'Run All' with every exercise solved, then every code cell re-run alone, in order.

The notebook runs to the end and every check passes. Then, as a learner does who
scrolls back after Run All, each code cell is run once more on its own, top to
bottom, in the same kernel: it must run without error and print what it printed
during Run All, unless it starts with NBVAL_IGNORE_OUTPUT (timings). A cell breaks
here when a later section reassigns a name it uses (give each section names of its
own, or put the work in a function), when it draws from the global random state
(seed inside the cell), or when it retrains a model or appends to a table again.
Two executions in all. (nbval runs the notebooks as committed, with the stubs unsolved.)

Re-running one cell can also break another: an earlier section's cell that binds a name
a later section uses (re-run it, then the later cell) is found without running anything,
from the names each cell reads and the sections that bind them.
"""

import ast
import builtins
import re

import nbformat
import pytest

from course_utils.exercises import exercise_ids
from tests.notebook_tools import execute_then_rerun_each_cell, exercise_cells, lesson_notebooks, output_text

HINT = (
    "a later section reassigns a name this cell uses (give each section names of its own, or a function); "
    "or the cell draws from the global random state (seed it inside the cell) or changes state it reads"
)


def _varies_by_design(cell):
    first = cell.source.lstrip().splitlines()[0] if cell.source.strip() else ""
    return first.strip().lstrip("#").strip() in {"NBVAL_IGNORE_OUTPUT", "NBVAL_SKIP"}


def _excerpt(text, limit=600):
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} more characters]"


def rerun_failures(nb, reruns):
    """One report per cell whose re-run after Run All fails or prints something else."""
    failures = []
    for index, (again, error) in reruns.items():
        first = nb.cells[index]
        if error is None and (_varies_by_design(first) or output_text(again) == output_text(first)):
            continue
        what = "fails" if error is not None else "prints something else"
        second = _excerpt(output_text(again))  # an error shows as its last line, "KeyError: 'a'"
        failures.append(
            f"cell {index} {what} when re-run alone after Run All.\n"
            f"Hint: {HINT}.\n--- the cell:\n{_excerpt(first.source, 400)}\n"
            f"--- during Run All it printed:\n{_excerpt(output_text(first))}\n"
            f"--- re-run alone it printed:\n{second}"
        )
    return failures


def _run_all_solved_then_each_cell_again(nb_path):
    nb, reruns = execute_then_rerun_each_cell(nb_path, inject=True)
    text = "\n".join(output_text(c) for c in nb.cells if c.cell_type == "code")
    ids = {c.metadata["exercise_id"] for c in exercise_cells(nb)}
    for ex_id in ids:
        assert f"PASSED [{ex_id}]" in text, f"{nb_path.name}: check for {ex_id!r} did not pass with the solution"
    assert "NOT YET" not in text and "NOT ATTEMPTED" not in text
    failures = rerun_failures(nb, reruns)
    assert not failures, f"{nb_path.name}: {len(failures)} cell(s) break on scrolling back:\n\n" + "\n\n".join(failures)


# One test class per notebook: pytest-xdist's loadscope spreads classes over the workers
# (a parametrized function would keep every notebook on one worker).
for _path in lesson_notebooks():
    _name = "TestRunAll_" + re.sub(r"\W", "_", _path.stem)
    globals()[_name] = type(
        _name,
        (),
        {"test_solved_then_each_cell_rerun_alone": lambda self, p=_path: _run_all_solved_then_each_cell_again(p)},
    )


def test_every_exercise_appears_in_a_lesson():
    used = {
        c.metadata["exercise_id"] for p in lesson_notebooks() for c in exercise_cells(nbformat.read(p, as_version=4))
    }
    missing = set(exercise_ids()) - used
    assert not missing, f"exercises with a checker but no notebook cell: {sorted(missing)}"


def test_a_cell_broken_by_a_later_section_is_named_with_both_outputs(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("tokens = [1, 2, 3]\nprint(len(tokens))"),  # 0: fine
        nbformat.v4.new_code_cell("print(sum(tokens))"),  # 1: later section rebinds tokens
        nbformat.v4.new_code_cell("# NBVAL_IGNORE_OUTPUT\nimport time\nprint(time.time())"),  # 2: varies, allowed
        nbformat.v4.new_code_cell("weights = {'a': 1}"),  # 3: fine
        nbformat.v4.new_code_cell("print(weights['a'])"),  # 4: fails once weights loses 'a'
        nbformat.v4.new_markdown_cell("## A later section"),
        nbformat.v4.new_code_cell("tokens = [10]\nweights = {}\nprint('later')"),  # 6: fine
    ]
    path = tmp_path / "scroll_back.ipynb"
    nbformat.write(nb, path)
    ran, reruns = execute_then_rerun_each_cell(path)
    failures = rerun_failures(ran, reruns)
    assert len(failures) == 2, failures
    assert failures[0].startswith("cell 1 prints something else")
    assert "during Run All it printed:\n6\n" in failures[0] and "re-run alone it printed:\n10\n" in failures[0]
    assert failures[1].startswith("cell 4 fails") and "re-run alone it printed:\nKeyError: 'a'" in failures[1]
    assert all("a later section reassigns a name this cell uses" in f for f in failures)


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
