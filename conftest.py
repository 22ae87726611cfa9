"""pytest configuration shared by tests/ and the nbval run over notebooks/.

nbval compares every output in strict mode; stderr is left out of the
comparison, because it carries warnings and progress bars that differ between
machines and library versions (the lessons assert what matters instead).
--scroll-back adds, after each lesson's cells, a re-run of every cell in the same
kernel (tests/scroll_back.py); --lesson keeps one lesson's tests (tests/lesson_tests.py).
"""

import nbval.plugin


def _without_stderr(outputs):
    return [o for o in outputs if not (o.get("output_type") == "stream" and o.get("name") == "stderr")]


_compare_outputs = nbval.plugin.IPyNbCell.compare_outputs


def _compare_outputs_without_stderr(self, test, ref, skip_compare=None):
    return _compare_outputs(self, _without_stderr(test), _without_stderr(ref), skip_compare)


nbval.plugin.IPyNbCell.compare_outputs = _compare_outputs_without_stderr

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
        "--lesson",
        metavar="NN",
        help="only one lesson's tests: its notebook (nbval, scroll-back), hygiene checks, its exercise tests and the "
        "unit tests of the course_utils modules it imports (e.g. --lesson 05c; make test-lesson LESSON=05c)",
    )


def pytest_collection_modifyitems(config, items):
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
