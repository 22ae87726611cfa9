"""nbval, then scrolling back: after Run All, every code cell is re-run alone, with the exercises solved.

`pytest --nbval --scroll-back notebooks` (what `make test` runs) checks each lesson twice in ONE kernel:
first nbval's Run All of the notebook as committed (stubs unsolved, every output compared), then what a
learner does next: scroll back, solve each exercise, re-run its check, and re-run any other cell to look
at it again. So after the last cell, every code cell is re-run once more, alone, top to bottom:

- an exercise cell gets the reference solution under the stub's name, and that name stays solved;
- a check cell must now print PASSED for every exercise that Run All left NOT ATTEMPTED YET;
- every other cell must print what it printed during Run All (nbval's strict comparison, its sanitize file),
  unless it is marked NBVAL_IGNORE_OUTPUT (timings) or NBVAL_SKIP.

Before each re-run, the names Run All left are bound again (objects changed in place stay changed), so each
cell is tested alone, not after the cells above it ran again. A cell breaks here when a later section
reassigns a name it uses, when it draws from the global random state, or when it retrains a model or
appends to a table again. Training cells run twice in all (Run All, re-run), never three times.
"""

import copy
import re

import nbval.plugin
import pytest

from tests.notebook_tools import output_text, stub_name

HINT = (
    "a later section reassigns a name this cell uses (give each section names of its own, or a function); "
    "or the cell draws from the global random state (seed it inside the cell) or changes state it reads"
)
CHECK_HINT = (
    "the check cell should check the function its exercise cell defines, under that exercise's id "
    "(the exercise cell's metadata exercise_id)"
)

# Run in the kernel after Run All: the names Run All left (IPython's own history names excepted)
_SNAPSHOT = """
__scroll_back__ = {k: v for k, v in globals().items()
                   if not (k.startswith("__") or k in ("In", "Out", "_", "_oh", "_ih", "_dh", "exit", "quit")
                           or __import__("re").fullmatch(r"_i*\\d*|_i+", k))}
"""
_RESTORE = "globals().update(__scroll_back__)"
_NOT_ATTEMPTED = re.compile(r"NOT ATTEMPTED YET \[([\w.-]+)\]")


def is_lesson(path):
    """A lesson's file name starts with its number: 05c_cross_attention_translation.ipynb."""
    return re.match(r"\d\d[a-z]?_", path.name) is not None


def _run_silently(kernel, code, timeout=60):
    """Run code in the kernel, outside the notebook's cells; raise if it fails."""
    msg_id = kernel.execute_cell_input(code, allow_stdin=False)
    kernel.await_reply(msg_id, timeout=timeout)
    while True:
        msg = kernel.get_message("iopub", timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "error":
            raise RuntimeError(f"scroll-back bookkeeping failed: {msg['content']['ename']}: {msg['content']['evalue']}")
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return


class ScrollBackCell(nbval.plugin.IPyNbCell):
    """One code cell re-run alone after nbval's Run All, with every exercise above it solved."""

    def __init__(self, name, parent, cell_num, cell, options, stub=None, pending=()):
        super().__init__(name, parent, cell_num, cell, options)
        self.stub, self.pending = stub, pending  # pending: ids this cell's check must now pass

    def setup(self):
        super().setup()
        if getattr(self.parent, "run_all_failed", False):
            pytest.skip("a cell failed during Run All (reported above): scrolling back is not checked")

    def runtest(self):
        kernel = self.parent.kernel
        if not getattr(self.parent, "scroll_back_taken", False):
            _run_silently(kernel, _SNAPSHOT)
            self.parent.scroll_back_taken = True
        _run_silently(kernel, _RESTORE)
        super().runtest()
        if self.stub:  # solved from now on, as for a learner who solved it
            _run_silently(kernel, f"__scroll_back__[{self.stub!r}] = {self.stub}")
        if self.pending:
            printed = output_text(self.test_outputs)
            missing = [i for i in self.pending if f"PASSED [{i}]" not in printed]
            if missing or "NOT YET [" in printed or "NOT ATTEMPTED YET [" in printed:
                self.raise_cell_error(
                    f"with the exercises solved, this check should pass for {missing or list(self.pending)}",
                    f"it printed:\n{printed}",
                    hint=CHECK_HINT,
                )

    def raise_cell_error(self, message, *args, hint=HINT, **kwargs):
        super().raise_cell_error(
            f"re-run alone after Run All (scrolling back): {message}.\nHint: {hint}", *args, **kwargs
        )

    def reportinfo(self):
        path, line, description = super().reportinfo()
        return path, line, description + " (scroll-back re-run)"


def scroll_back_items(notebook_file, cell_items):
    """A ScrollBackCell for every code cell nbval collected, in order."""
    for item in cell_items:
        cell = copy.deepcopy(item.cell)
        options = copy.copy(item.options)  # a defaultdict(bool), as nbval reads it
        stub = None
        if "exercise" in cell.metadata.get("tags", []):
            stub = stub_name(cell)
            ex_id = cell.metadata["exercise_id"]
            cell.source = f'from course_utils.exercises import solution\n{stub} = solution("{ex_id}")'
        pending = tuple(dict.fromkeys(_NOT_ATTEMPTED.findall(output_text(cell))))
        if pending:
            options["check"] = False  # NOT ATTEMPTED YET becomes PASSED: checked by ScrollBackCell instead
        yield ScrollBackCell.from_parent(
            notebook_file,
            name=f"{item.name} re-run after Run All",
            cell_num=item.cell_num,
            cell=cell,
            options=options,
            stub=stub,
            pending=pending,
        )
