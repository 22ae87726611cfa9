"""scripts/copying_levers.py and its stored results (course_utils/data/copying_levers.json), read by lesson 10."""

import json
import sys
from pathlib import Path

from course_utils.data import data_path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import copying_levers  # noqa: E402
import train_language_model  # noqa: E402

STORED = json.loads(data_path("copying_levers.json").read_text())


def test_every_lever_is_stored_with_the_settings_the_script_trains():
    assert sorted(STORED) == sorted(copying_levers.LEVERS)
    for name, lever in STORED.items():
        assert lever["changed"] == copying_levers.LEVERS[name]
        assert lever["settings"] == {**train_language_model.SETTINGS, **copying_levers.LEVERS[name]}


def test_the_control_differs_from_the_stored_model_in_the_repeats_only():
    """Lesson 10's control: the stored model's budget, no repeated strings."""
    control = STORED["stories only"]["settings"]
    stored_model = train_language_model.SETTINGS
    assert control["repeats"] == 0 < stored_model["repeats"]
    assert {k: v for k, v in control.items() if k != "repeats"} == {
        k: v for k, v in stored_model.items() if k != "repeats"
    }


def test_every_curve_is_measured_to_the_end_of_its_budget():
    for lever in STORED.values():
        curves = lever["curves"]
        assert curves["eval_steps"][-1] == lever["settings"]["steps"]
        assert all(len(values) == len(curves["eval_steps"]) for values in curves.values())
