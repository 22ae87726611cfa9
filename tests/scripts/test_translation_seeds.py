"""scripts/translation_seeds.py reproduces its stored results (course_utils/data/translation_seeds.json), seed 0 here."""

import json
import sys
from pathlib import Path

import pytest

from course_utils.data import data_path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import translation_seeds  # noqa: E402

STORED = json.loads(data_path("translation_seeds.json").read_text())


def test_stored_settings_are_the_scripts():
    assert STORED["settings"] == translation_seeds.SETTINGS
    assert sorted(STORED["runs"], key=int) == [str(s) for s in translation_seeds.SETTINGS["seeds"]]


@pytest.mark.parametrize("seed", [0])
def test_the_script_reproduces_a_stored_run(seed):
    from course_utils.translation import TranslationTask

    model, history = translation_seeds.trained(seed)
    stored = STORED["runs"][str(seed)]
    assert [round(v, 5) for v in history["loss"][: translation_seeds.LOSSES_KEPT]] == pytest.approx(
        stored["loss"], abs=1e-4
    )
    held_out = TranslationTask().held_out(translation_seeds.SETTINGS["held_out"], seed=1)
    measured = translation_seeds.measure(model, held_out)
    assert measured == {k: v for k, v in stored.items() if k != "loss"}
