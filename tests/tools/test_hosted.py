"""A lesson on a hosted Jupyter (Colab, Kaggle, a JupyterHub): the course is not installed, the environment has
its own PyTorch. The first code cell must install the course from its folder, or from its wheel beside the
lesson, keep that PyTorch, and the lesson must run to the end (`make test-hosted`, minutes: a fresh virtual
environment and the course's dependencies from the package index)."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# another PyTorch than the lock's: the CPU wheel these machines keep locally (pip's find-links), else PyPI's
HOSTED_TORCH = os.environ.get("HOSTED_TORCH", "torch==2.13.0")
LESSON = "02_scaled_dot_product_attention.ipynb"


def _run(*command, cwd=None):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(map(str, command))} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _hosted_environment(folder):
    """A virtual environment with only a PyTorch and Jupyter's kernel and papermill in it."""
    venv.create(folder, with_pip=True)
    python = Path(folder, "bin", "python")
    _run(
        python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", HOSTED_TORCH, "ipykernel", "papermill"
    )
    return python


def _torch_version(python):
    return _run(python, "-c", "import torch; print(torch.__version__)").strip()


def _course_copy(folder):
    """The course's tracked files as they are in this checkout, without its .venv."""
    files = _run("git", "ls-files", "-z", cwd=ROOT).split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, folder / name)
    return folder


def _run_lesson(python, notebook):
    out = notebook.with_name("executed.ipynb")
    _run(python, "-m", "papermill", "--no-progress-bar", "-k", "python3", "--cwd", notebook.parent, notebook, out)
    cells = json.loads(out.read_text())["cells"]
    return [c for c in cells if c["cell_type"] == "code"]


@pytest.mark.hosted
@pytest.mark.parametrize("source", ["folder", "wheel"])
def test_a_lesson_installs_the_course_and_keeps_the_environments_torch(tmp_path, source):
    python = _hosted_environment(tmp_path / "env")
    torch_before = _torch_version(python)
    assert _run(python, "-m", "pip", "list").count("attention-course") == 0
    course = _course_copy(tmp_path / "course")
    if source == "folder":  # a clone of the course, the lesson opened from its notebooks/ folder
        notebook = course / "notebooks" / LESSON
    else:  # the lesson alone with the course's wheel beside it, as uploaded to Colab
        lone = tmp_path / "upload"
        lone.mkdir()
        _run(python, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", lone, course)
        notebook = Path(shutil.copy(course / "notebooks" / LESSON, lone))
        shutil.rmtree(course)  # no folder to fall back on

    cells = _run_lesson(python, notebook)

    assert _torch_version(python) == torch_before, "the first cell changed the environment's PyTorch"
    assert "attention-course" in _run(python, "-m", "pip", "list", "--format=freeze").replace("_", "-")
    first = "".join("".join(o.get("text", "")) for o in cells[0]["outputs"])
    assert "restart the kernel" in first  # %pip's own note: the install ran in the lesson's kernel
    errors = [o for c in cells for o in c["outputs"] if o["output_type"] == "error"]
    assert not errors, errors


def _first_cell_with_pip_as(replacement, course_missing=False):
    """Lesson 00's first code cell run in IPython here, its %pip line replaced: stdout and stderr."""
    from tests.notebook_tools import lesson_notebooks

    cells = json.loads(lesson_notebooks()[0].read_text())["cells"]
    first = next("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    pip = '%pip install --quiet "{course}" {keep}'
    assert first.count(pip) == 1
    first = first.replace(pip, replacement)
    if course_missing:  # before pip, and, where course_missing == "still", after it too
        first = first.replace(
            'importlib.util.find_spec("course_utils") is None', "True", 1 if course_missing is True else 2
        )
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import IPython; IPython.start_ipython(argv=['--quick', '--colors=NoColor', '-c', open(0).read()])",
        ],
        input=first,
        capture_output=True,
        text=True,
        cwd=ROOT / "notebooks",
    )
    return done.stdout + done.stderr


def test_the_first_cell_does_nothing_where_the_course_is_installed():
    # this environment has course_utils (make install's .pth): the cell must not reach pip, and sets up
    said = _first_cell_with_pip_as("print('pip reached')")
    assert "pip reached" not in said and "Seed: 0 | Device: cpu" in said, said


def test_a_failed_install_says_what_to_do():
    # %pip does not raise when pip fails: the cell itself must, with the way out, not a bare import error
    said = _first_cell_with_pip_as("pass", course_missing="still")
    assert "ModuleNotFoundError: The course did not install (pip says why above)" in said, said
    assert "attention_course-*.whl" in said and "restart the kernel" in said


def test_the_first_cell_pins_the_environments_torch_and_triton():
    # pip may then install the course's other dependencies, but never another torch or triton: where the course
    # cannot use them, pip stops and says which requirement conflicts
    from importlib import metadata

    said = _first_cell_with_pip_as("print('pip install', course, keep)", course_missing=True)
    assert said.startswith("pip install .. ") and f" torch=={metadata.version('torch')}" in said, said
    if importlib.util.find_spec("triton"):
        assert f" triton=={metadata.version('triton')}" in said, said
