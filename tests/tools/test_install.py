"""`make install`: refuses a Python the pins cannot serve, rebuilds a broken .venv, installs
PyTorch with its dependencies and everything else exactly as pinned."""

import subprocess
import sys
import venv
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from course_utils.tools.bootstrap import python_problem, venv_problem

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("version", [(3, 11, 2), (3, 10, 14), (3, 14, 0), (2, 7, 18)])
def test_unsuitable_python_is_refused_with_the_fix(version):
    problem = python_problem(version)
    assert problem and "3.11.5" in problem and "PYTHON=" in problem


@pytest.mark.parametrize("version", [(3, 11, 5), (3, 11, 7), (3, 12, 3), (3, 13, 0)])
def test_supported_python_passes(version):
    assert python_problem(version) is None


def test_this_python_is_supported():
    assert python_problem() is None


def test_missing_venv_is_fine_and_a_good_one_passes(tmp_path):
    assert venv_problem(tmp_path / "nothing") is None
    assert venv_problem(Path(sys.prefix)) is None  # the course's own .venv


def test_venv_without_pip_must_be_rebuilt(tmp_path):
    venv.create(tmp_path / "half", with_pip=False)  # what an interrupted `python -m venv` leaves
    assert "no pip" in venv_problem(tmp_path / "half")


def test_venv_whose_python_does_not_start_must_be_rebuilt(tmp_path):
    bin_dir = tmp_path / "broken" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(tmp_path / "gone")
    assert venv_problem(tmp_path / "broken")


def test_bootstrap_script_exits_1_with_a_message(tmp_path):
    venv.create(tmp_path / "half", with_pip=False)
    done = subprocess.run(
        [sys.executable, "course_utils/tools/bootstrap.py", "venv", str(tmp_path / "half")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and "incomplete" in done.stderr


def _pip_commands(**variables):
    """The pip commands `make install` would run on a fresh checkout (a dry run), one string each."""
    args = [f"{k}={v}" for k, v in variables.items()]
    done = subprocess.run(
        ["make", "-n", "-B", "install", "VENV=/nonexistent-venv", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    commands = done.stdout.replace("\\\n", " ").splitlines()  # join continued lines
    return [" ".join(c.split()) for c in commands if "-m pip install" in c]


def test_torch_is_installed_with_its_dependencies_and_the_rest_without():
    torch_step, rest_step = _pip_commands()
    assert '"torch==2.15.0"' in torch_step and "--no-deps" not in torch_step
    assert "-c requirements.txt" in torch_step  # its dependencies, the CUDA libraries too, held to the pins
    assert "--no-deps -r <(grep -vE '^(nvidia|cuda)-' requirements.txt)" in rest_step and "torch==" not in rest_step


def test_a_cpu_build_of_torch_gets_no_cuda_libraries():
    # the rest step reads the lock without the CUDA build's libraries: only the torch step may bring them
    _, rest_step = _pip_commands(TORCH_INDEX_URL="https://example.invalid/whl/cpu")
    listed = subprocess.run(
        ["bash", "-c", rest_step.split(" -r ", 1)[1].strip()[2:-1]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert "numpy==" in " ".join(listed) and len(listed) > 100
    assert not [line for line in listed if line.startswith(("nvidia-", "cuda-"))]
    lock = (ROOT / "requirements.txt").read_text()
    assert "\nnvidia-cublas==" in lock  # the lock does hold them, for the CUDA build's step


def test_torch_build_can_be_chosen():
    torch_step, rest_step = _pip_commands(TORCH_INDEX_URL="https://example.invalid/whl/cpu")
    assert "--index-url https://example.invalid/whl/cpu" in torch_step
    assert "--index-url" not in rest_step


def _installed(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def test_installed_packages_match_the_pins():
    """Nothing drifted: every pin in requirements.txt is what this environment has."""
    drift = []
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if "==" not in line or line.startswith("#"):
            continue
        pin = Requirement(line)
        if pin.marker is not None and not pin.marker.evaluate():
            continue  # e.g. triton: Linux only
        if pin.name.startswith(("nvidia-", "cuda-")) and not _installed(pin.name):
            continue  # a CPU build of torch needs none of the CUDA build's libraries
        (version,) = [spec.version for spec in pin.specifier]
        installed = metadata.version(pin.name)
        if installed.split("+")[0] != version:
            drift.append(f"{pin.name}: pinned {version}, installed {installed}")
    assert not drift, drift


def test_a_skipped_test_says_why_in_the_summary(tmp_path):
    """`make test` on a machine without Chromium must say why the browser test did not run."""
    (tmp_path / "test_skips.py").write_text(
        "import pytest\n\ndef test_browser():\n    pytest.skip('no chromium here')\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(ROOT / "pyproject.toml"),
            "--rootdir",
            str(tmp_path),
            "-p",
            "no:cacheprovider",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    summary = done.stdout.split("short test summary info", 1)[-1]
    assert "SKIPPED" in summary and "no chromium here" in summary, done.stdout


def test_install_puts_the_course_jupyterlab_settings_where_jupyterlab_reads_them():
    """No 'notified about official Jupyter news?' prompt: the default is off in the course's settings."""
    import json

    settings = json.loads((ROOT / "jupyter" / "overrides.json").read_text())
    notification = settings["@jupyterlab/apputils-extension:notification"]
    assert notification == {"fetchNews": "false", "checkForUpdates": False}
    done = subprocess.run(
        ["make", "-n", "-B", "install", "VENV=/nonexistent-venv"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    # JupyterLab reads default overrides from <prefix>/share/jupyter/lab/settings/overrides.json
    assert "cp jupyter/overrides.json /nonexistent-venv/share/jupyter/lab/settings/" in done.stdout
