"""pytest configuration shared by tests/ and the nbval run over notebooks/.

nbval compares every output in strict mode; stderr is left out of the
comparison, because it carries warnings and progress bars that differ between
machines and library versions (the lessons assert what matters instead).
"""

import nbval.plugin


def _without_stderr(outputs):
    return [o for o in outputs if not (o.get("output_type") == "stream" and o.get("name") == "stderr")]


_compare_outputs = nbval.plugin.IPyNbCell.compare_outputs


def _compare_outputs_without_stderr(self, test, ref, skip_compare=None):
    return _compare_outputs(self, _without_stderr(test), _without_stderr(ref), skip_compare)


nbval.plugin.IPyNbCell.compare_outputs = _compare_outputs_without_stderr


def pytest_addoption(parser):
    parser.addoption(
        "--lesson",
        metavar="NN",
        help="only one lesson's tests: its notebook, hygiene and run-all checks, its exercise tests and the "
        "unit tests of the course_utils modules it imports (e.g. --lesson 05c; make test-lesson LESSON=05c)",
    )


def pytest_collection_modifyitems(config, items):
    lesson = config.getoption("--lesson")
    if lesson:
        from tests.lesson_tests import select

        kept, dropped = select(items, lesson)
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
