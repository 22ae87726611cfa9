"""The course installs with pip (`pip install .`, `pip install -e .`) and its lessons load what they need from there.

Each install goes into a fresh virtual environment that sees the packages of the one running the tests
(torch and the rest, through a .pth file) but not the checkout, and the lessons' loading code runs in a
folder outside the checkout. No network: setuptools comes from the running environment (torch needs it).
"""

import json
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from course_utils.tools.bootstrap import NEWEST_MINOR, OLDEST
from tests.unit.test_toy import SLIDE_ORANGE_ROW

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# What the lessons load, read the way the lessons read it; prints where it all came from.
LESSON_LOADING = """
import json
import course_utils
from course_utils import induction, language_model, recall, toy
from course_utils.data import DATA_DIR, data_path
from course_utils.viz import interactive

stored = recall.stored_results()
model, tokenizer = language_model.load_trained_model(seed=0)
induction_model = induction.load_model(0)
print(json.dumps({
    "package": course_utils.__file__,
    "data_files": sorted(p.name for p in DATA_DIR.iterdir() if p.suffix in (".json", ".pt")),
    "recall_runs": len(stored["runs"]),
    "recall_file": str(data_path("recall_results.json")),
    "lm_parameters": sum(p.numel() for p in model.parameters()),
    "induction_seeds": len(induction.load_runs()["runs"]),
    "orange_row": [round(w, 2) for w in toy.orange_attention()[1][0].tolist()],
    "views_js": len(interactive._views_js()),
}))
"""


def _source_copy(tmp_path):
    """What pip needs of the checkout, copied (building writes build/ and *.egg-info/ next to the sources)."""
    src = tmp_path / "course"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "course_utils", src / "course_utils", ignore=shutil.ignore_patterns("__pycache__"))
    return src


def _venv_with_the_tests_packages(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    # a path line only: the .pth files there (the checkout's attention_course.pth among them) are not read
    here = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(site, "course_test_deps.pth").write_text("\n".join(sorted(here)) + "\n")
    return venv / "bin" / "python"


def _pip_install(python, *args):
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--disable-pip-version-check",
         "--no-deps", "--no-build-isolation", "--no-index", *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, f"pip install {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"


def _load_lessons_data(python, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(
        [str(python), "-c", LESSON_LOADING], cwd=elsewhere, capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def _checkout_data_files():
    return sorted(p.name for p in (ROOT / "course_utils" / "data").iterdir() if p.suffix in (".json", ".pt"))


def _assert_the_lessons_data(loaded, package_dir):
    assert Path(loaded["package"]).parent == package_dir, loaded["package"]
    assert loaded["data_files"] == _checkout_data_files()  # every stored file shipped, none left behind
    assert Path(loaded["recall_file"]) == package_dir / "data" / "recall_results.json"
    assert loaded["recall_runs"] > 0 and loaded["lm_parameters"] > 10_000
    assert loaded["induction_seeds"] == 5  # lesson 11: five seeds
    assert loaded["orange_row"] == SLIDE_ORANGE_ROW  # lesson 01's toy, from its stored embeddings
    assert loaded["views_js"] == len((ROOT / "course_utils" / "views" / "attention_views.js").read_text())


def test_pip_install_ships_the_data_and_views_the_lessons_load(tmp_path):
    python = _venv_with_the_tests_packages(tmp_path)
    _pip_install(python, str(_source_copy(tmp_path)))  # builds the wheel, then installs it
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())  # fmt: skip
    _assert_the_lessons_data(_load_lessons_data(python, tmp_path), site / "course_utils")


def test_an_editable_install_loads_from_the_sources(tmp_path):
    src = _source_copy(tmp_path)
    python = _venv_with_the_tests_packages(tmp_path)
    _pip_install(python, "--editable", str(src))
    _assert_the_lessons_data(_load_lessons_data(python, tmp_path), src / "course_utils")


def _pins():
    """{name: (version, marker or None)} of requirements.txt."""
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (version,) = [s.version for s in req.specifier]
            pins[canonicalize_name(req.name)] = (version, str(req.marker) if req.marker else None)
    return pins


def _declared():
    project = PYPROJECT["project"]
    return [Requirement(r) for r in project["dependencies"]] + [
        Requirement(r) for extra in project["optional-dependencies"].values() for r in extra
    ]


def test_the_lock_satisfies_every_declared_range():
    pins = _pins()
    for req in _declared():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is a dependency of the package but not in requirements.txt"
        version, marker = pins[name]
        assert req.specifier.contains(version), f"requirements.txt pins {req.name}=={version}, outside {req.specifier}"
        assert (str(req.marker) if req.marker else None) == marker, f"{req.name}: the lock's marker differs"
        assert req.specifier and all(s.operator in (">=", "<") for s in req.specifier), f"{req}: a range, not a pin"


def test_requires_python_is_what_the_install_check_accepts():
    bounds = PYPROJECT["project"]["requires-python"]
    assert bounds == f">={'.'.join(map(str, OLDEST))},<{NEWEST_MINOR[0]}.{NEWEST_MINOR[1] + 1}"
