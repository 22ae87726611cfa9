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
