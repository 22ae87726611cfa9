"""pytest configuration shared by tests/ and the nbval run over notebooks/.

nbval compares every output in strict mode; stderr is left out of the
comparison, because it carries warnings and progress bars that differ between
machines and library versions (the lessons assert what matters instead). A cell marked
NBVAL_TOLERANCE compares its numbers within that tolerance (tests/nbval_tolerance.py).
--scroll-back adds, after each lesson's cells, a re-run of every cell in the same
kernel (tests/scroll_back.py); --lesson keeps one lesson's tests (tests/lesson_tests.py).
Each notebook's kernel listens on Unix sockets and is started again if it fails to (tests/kernels.py).
"""

import nbval.plugin

from tests import kernels

kernels.install_in_nbval()


def _without_stderr(outputs):
    return [o for o in outputs if not (o.get("output_type") == "stream" and o.get("name") == "stderr")]


_compare_outputs = nbval.plugin.IPyNbCell.compare_outputs


def _compare_outputs_within_tolerance(self, test, ref, skip_compare=None):
    """nbval's comparison without stderr; a cell marked NBVAL_TOLERANCE compares its numbers within it."""
    from tests import nbval_tolerance

    # sanitized first (addresses, view ids, ...), as nbval compares them; sanitizing twice changes nothing
    test = nbval_tolerance.sanitized(_without_stderr(test), self.sanitize)
    ref = nbval_tolerance.sanitized(_without_stderr(ref), self.sanitize)
    source = self.cell.get("source", "")
    try:
        tolerance = nbval_tolerance.parse(source)
    except ValueError as error:
        self.comparison_traceback = [f"this cell's marker is malformed: {error}"]
        return False
    spread_file = self.config.getoption("--nbval-spread")
    if spread_file:
        nb = self.parent.path.name
        nbval_tolerance.record(spread_file, nb, self.cell_num, source, tolerance, test, ref)
    too_far = []
    if tolerance:
        test, too_far = nbval_tolerance.within(test, ref, tolerance)
    same = _compare_outputs(self, test, ref, skip_compare)
    if not same and too_far:
        self.comparison_traceback.append(
            f"NBVAL_TOLERANCE {tolerance}: (fresh, stored) numbers beyond it: {too_far[:10]}"
        )
    return same


nbval.plugin.IPyNbCell.compare_outputs = _compare_outputs_within_tolerance

_collect_cells = nbval.plugin.IPyNbFile.collect


def _collect_cells_then_scroll_back(self):
    """nbval's items for the notebook's cells; with --scroll-back, then each cell re-run alone (a lesson's)."""
    items = list(_collect_cells(self))
    yield from items
    if self.config.getoption("--scroll-back"):
        from tests.scroll_back import is_lesson, scroll_back_items

        if is_lesson(self.path):
            yield from scroll_back_items(self, items)


nbval.plugin.IPyNbFile.collect = _collect_cells_then_scroll_back


def pytest_addoption(parser):
    parser.addoption(
        "--scroll-back",
        action="store_true",
        help="with --nbval: after each lesson's Run All, re-run every code cell alone with the exercises solved, "
        "as a learner who scrolls back does (tests/scroll_back.py)",
    )
    parser.addoption(
        "--nbval-spread",
        metavar="FILE",
        help="with --nbval: append, for every compared cell, how far its fresh numbers are from the stored ones "
        "(a JSON line each; make test-perturbed, tests/nbval_tolerance.py)",
    )
    parser.addoption(
        "--lesson",
        metavar="NN",
        help="only one lesson's tests: its notebook (nbval, scroll-back), hygiene checks, its exercise tests and the "
        "unit tests of the course_utils modules it imports (e.g. --lesson 05c; make test-lesson LESSON=05c)",
    )


# The slowest test modules (10-40 s: they drive a browser or grade notebooks), then the notebooks (5-25 s
# each), then the rest: under `-n 2 --dist loadscope`, which hands out modules in this order (see
# pytest_configure), neither worker is left with a long one at the end while the other has nothing to do.
SLOWEST_FIRST = (
    "tests/notebooks/test_browser.py",
    "tests/tools/test_grade_class.py",
    "tests/tools/test_grade.py",
    "tests/tools/test_grade_kernel.py",
    "tests/unit/test_long_context.py",
)


def pytest_configure(config):
    # xdist's loadscope would hand out the modules with the most tests first (the grading and browser tests,
    # with a few tests each, came last and left one worker idle for half a minute): keep the order below
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def _order(item):
    if item.nodeid.startswith(SLOWEST_FIRST):
        return 0
    return 1 if item.nodeid.startswith("notebooks/") else 2


def pytest_collection_modifyitems(config, items):
    items.sort(key=_order)  # stable: within each group, collection order
    lesson = config.getoption("--lesson")
    if lesson:
        from tests.lesson_tests import select

        kept, dropped = select(items, lesson)
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_runtest_makereport(item, call):
    # a cell that fails during nbval's Run All: that notebook's scroll-back re-runs are skipped, not piled on
    if call.when == "call" and call.excinfo is not None and type(item) is nbval.plugin.IPyNbCell:
        item.parent.run_all_failed = True
