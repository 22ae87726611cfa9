"""The GPU suite's parts that can be checked without a GPU: it refuses clearly, reads pytest's
report per notebook, stamps benchmark tables with the machine and settings, and passes each
benchmarked lesson only parameters its `parameters` cell defines."""

import ast
import csv
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from scripts.gpu_suite import BENCHMARKS, notebook_results, stamp, summary

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: `make test-gpu` runs for real")
def test_without_a_gpu_it_stops_and_says_why():
    done = subprocess.run([sys.executable, "scripts/gpu_suite.py"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode != 0
    assert "No CUDA GPU" in done.stderr and "make test" in done.stderr


def test_offline_recipe_needs_pytorch_and_wheels(tmp_path):
    without_torch = subprocess.run(
        ["bash", "scripts/gpu_machine.sh"], cwd=ROOT, capture_output=True, text=True,
        env={**os.environ, "PYTHON": _python_without_torch(tmp_path)},
    )  # fmt: skip
    assert without_torch.returncode == 2 and "has no PyTorch" in without_torch.stderr
    no_wheels = subprocess.run(
        ["bash", "scripts/gpu_machine.sh"], cwd=ROOT, capture_output=True, text=True,
        env={**os.environ, "PYTHON": sys.executable, "COURSE_GPU_WHEELS": str(tmp_path / "none")},
    )  # fmt: skip
    assert no_wheels.returncode == 2 and "make gpu-wheels" in no_wheels.stderr


def _python_without_torch(tmp_path):
    import venv

    venv.create(tmp_path / "bare", with_pip=False)
    return str(tmp_path / "bare" / "bin" / "python")


def test_notebook_results_per_notebook(tmp_path):
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="notebooks.00_welcome.ipynb" name="Cell 0" time="1.5"/>'
        '<testcase classname="notebooks.00_welcome.ipynb" name="Cell 1" time="0.5"><failure message="x"/></testcase>'
        '<testcase classname="notebooks.02_sdpa.ipynb" name="Cell 0" time="2.0"/>'
        '<testcase classname="tests.test_attention" name="test_x" time="9.0"/>'
        "</testsuite></testsuites>"
    )
    results = notebook_results(report)
    assert results == {"00_welcome.ipynb": [1, 2, 2.0], "02_sdpa.ipynb": [1, 1, 2.0]}
    text = summary({"gpu": "H200"}, 1, results, [], 10.0)
    assert "FAILED" in text and "| 00_welcome.ipynb | 1/2 | 2.0 |" in text and "notebooks passed: 1/2" in text


def test_benchmark_table_is_stamped_with_machine_and_settings(tmp_path):
    table = tmp_path / "bench.csv"
    table.write_text("method,n,time (ms)\ncourse (naive),512,1.5\nSDPA flash,512,0.2\n")
    stamp(table, {"gpu": "NVIDIA H200", "torch": "2.11.0"}, {"DTYPE": "bfloat16", "BATCH": 4, "SEQ_LENS": [512]})
    rows = list(csv.DictReader(table.open()))
    assert [r["method"] for r in rows] == ["course (naive)", "SDPA flash"]
    assert all(r["gpu"] == "NVIDIA H200" and r["dtype"] == "bfloat16" and r["batch"] == "4" for r in rows)


def _parameters_cell_names(notebook):
    """The names the notebook's `parameters` cell assigns (what papermill can change)."""
    nb = nbformat.read(ROOT / "notebooks" / f"{notebook}.ipynb", as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"{notebook}: expected one cell tagged `parameters`, found {len(cells)}"
    tree = ast.parse(cells[0].source)
    return {target.id for node in tree.body if isinstance(node, ast.Assign) for target in node.targets}


@pytest.mark.parametrize("notebook", sorted(BENCHMARKS))
def test_benchmark_parameters_exist_in_the_lessons_parameters_cell(notebook):
    # papermill silently injects a name the notebook never reads: a misspelt or removed
    # parameter would leave the GPU run at the CPU's committed sizes
    names = _parameters_cell_names(notebook)
    passed = set(BENCHMARKS[notebook]) | {"GPU_PEAK_TFLOPS", "RESULTS_CSV"}  # the last two from run_benchmarks
    assert passed <= names, f"{notebook}: parameters cell lacks {sorted(passed - names)}"


def test_lesson_09_benchmark_is_the_issues_setting():
    # issue 12: bfloat16, batch 4, 16 heads, head_dim 64, sequences up to at least 8192
    entry = BENCHMARKS["09_flash_attention"]
    assert (entry["DTYPE"], entry["BATCH"], entry["HEADS"], entry["HEAD_DIM"]) == ("bfloat16", 4, 16, 64)
    assert max(entry["SEQ_LENS"]) >= 8192 and entry["SEQ_LENS"] == sorted(entry["SEQ_LENS"])
