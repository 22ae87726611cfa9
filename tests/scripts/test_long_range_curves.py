"""scripts/long_range_curves.py reproduces its stored results (course_utils/data/long_range_curves.json)."""

import json
import sys
from pathlib import Path

import pytest

from course_utils.data import data_path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import long_range_curves  # noqa: E402

STORED = json.loads(data_path("long_range_curves.json").read_text())
STEPS = long_range_curves.FIRST_LOSSES  # the warm-up is the same for every budget, so these losses are too


def test_stored_settings_are_the_scripts():
    assert STORED["settings"] == long_range_curves.SETTINGS
    for kind in long_range_curves.KINDS:
        assert sorted(STORED["loads"][kind], key=int) == [str(k) for k in long_range_curves.SETTINGS["loads"]]
        assert sorted(STORED["hairpins"][kind]) == sorted(str(s) for s in long_range_curves.SETTINGS["seeds"])


def test_every_curve_reaches_the_budget():
    steps = long_range_curves.SETTINGS["steps"]
    for curve in STORED["hairpins"]["GRU"].values():
        assert curve["eval_steps"][-1] == steps and len(curve["1"]) == len(curve["eval_steps"])


@pytest.mark.parametrize(
    "job", [("hairpins", "GRU", None, 2), ("loads", "attention", 16, 3), ("long_only", "GRU", 1, 0)]
)
def test_the_script_reproduces_the_first_losses(job):
    what, kind, k, seed = job
    curve = long_range_curves.run((what, kind, k, seed, STEPS))
    runs = STORED[what][kind] if what != "loads" else STORED[what][kind][str(k)]
    assert curve["first_losses"] == pytest.approx(runs[str(seed)]["first_losses"], abs=1e-4)
