"""scripts/vision_seeds.py reproduces its stored results (course_utils/data/vision_seeds.json), seed 0 here."""

import json
import sys
from pathlib import Path

import pytest

from course_utils.data import data_path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import vision_seeds  # noqa: E402

STORED = json.loads(data_path("vision_seeds.json").read_text())


def test_stored_settings_are_the_scripts():
    assert STORED["settings"] == vision_seeds.SETTINGS
    assert sorted(STORED["runs"], key=int) == [str(s) for s in vision_seeds.SETTINGS["seeds"]]


def test_the_script_reproduces_a_stored_run():
    vit, history = vision_seeds.trained(0)
    stored = STORED["runs"]["0"]
    assert [round(v, 5) for v in history["loss"][: vision_seeds.LOSSES_KEPT]] == pytest.approx(stored["loss"], abs=1e-4)
    assert vision_seeds.measure(vit, *vision_seeds.held_out_set()) == {k: v for k, v in stored.items() if k != "loss"}


def test_what_the_lesson_says_holds_in_every_stored_seed():
    for run in STORED["runs"].values():
        occluded = run["occlusion"]
        assert occluded["the patches that hold the shape"] < 0.3
        assert occluded["the patch the last layer's [CLS] attends to most"] < occluded["one random patch"]
        assert min(run["share_by_layer"][0]) > 3 * run["even_share"]
