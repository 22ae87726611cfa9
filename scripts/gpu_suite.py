"""The whole course on a CUDA GPU: `make test-gpu` (or scripts/gpu_machine.sh on an offline GPU machine).

    python scripts/gpu_suite.py               # strict nbval + unit tests on cuda, then the GPU benchmarks
    python scripts/gpu_suite.py --benchmarks  # only the benchmarks (`make gpu-benchmark`)

1. Every notebook under strict nbval with COURSE_DEVICE=cuda, against the committed (CPU) outputs,
   and the unit tests on the same machine (not the browser test, nor the pins of the CPU install).
2. The GPU benchmarks: lessons 07 and 09 re-run by papermill with GPU-sized parameters.
3. One summary: notebooks passed, seconds per notebook, GPU, PyTorch, CUDA and cuDNN versions.
Everything goes to artifacts/gpu/ (ignored by git); commit the CSVs worth citing to data/ (data/README.md).
It stops at once, saying why, where PyTorch sees no CUDA GPU.
"""

import argparse
import csv
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "artifacts" / "gpu"
# Lessons 07 and 09 at GPU sizes: bfloat16, batch 4, 16 heads, head_dim 64, n up to 8192.
# Each key must be a variable of the lesson's `parameters` cell (tests/tools/test_gpu_suite.py checks it).
BENCHMARKS = {
    "07_efficient_attention": {
        "DTYPE": "bfloat16",
        "SEQ_LENS": [512, 1024, 2048, 4096, 8192],
        "BATCH": 4,
        "HEADS": 16,
        "HEAD_DIM": 64,
        "REPEATS": 10,
        "KV_STEPS": 500,
    },
    # the course's Triton kernel (compiled) against SDPA flash/cuDNN and naive attention, forward and backward
    "09_flash_attention": {
        "DTYPE": "bfloat16",
        "SEQ_LENS": [512, 1024, 2048, 4096, 8192],
        "BATCH": 4,
        "HEADS": 16,
        "HEAD_DIM": 64,
        "REPEATS": 10,
    },
}


def machine():
    """What ran the suite, or exit 2 with the reason where there is no CUDA GPU."""
    import torch

    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        sys.exit(
            f"No CUDA GPU visible to PyTorch {torch.__version__} ({build}), so the GPU suite cannot run here.\n"
            "Run it on a machine with an NVIDIA GPU and a CUDA build of PyTorch (README: 'Running on a GPU'); "
            "on this machine `make test` checks everything on the CPU."
        )
    return {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": str(torch.backends.cudnn.version()),
        "python": sys.version.split()[0],
    }


def run_tests(env):
    """Strict nbval over the notebooks plus the unit tests, on cuda; returns pytest's exit code."""
    workers = str(max(1, min(8, (os.cpu_count() or 2) // 2)))
    command = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", workers, "--dist", "loadscope",
        "--nbval", "--scroll-back", "--nbval-current-env", "--nbval-sanitize-with", "tests/nbval_sanitize.cfg",
        "--nbval-cell-timeout", "300", "-m", "not browser",
        "--ignore", "tests/tools/test_install.py",  # the CPU install's pins, not this machine's
        "--ignore", "tests/notebooks/test_browser.py",  # no Chromium or JupyterLab on a GPU server
        "--junitxml", str(OUT / "junit.xml"), "notebooks", "tests",
    ]  # fmt: skip
    return subprocess.run(command, cwd=ROOT, env=env).returncode


def run_benchmarks(env, peak_tflops):
    """Each lesson of BENCHMARKS (07, 09) at GPU sizes; returns the CSVs written."""
    written = []
    for name, parameters in BENCHMARKS.items():
        csv_path = OUT / f"{name}_benchmark.csv"
        values = {**parameters, "GPU_PEAK_TFLOPS": peak_tflops, "RESULTS_CSV": str(csv_path)}
        command = [sys.executable, "-m", "papermill", "--no-progress-bar", "--cwd", "notebooks", "-k", "python3"]
        command += [f"notebooks/{name}.ipynb", str(OUT / f"{name}_gpu.ipynb")]
        for key, value in values.items():
            command += ["-p", key, str(value)] if isinstance(value, str) else ["-y", f"{key}: {value}"]
        if subprocess.run(command, cwd=ROOT, env=env).returncode == 0 and csv_path.exists():
            written.append(csv_path)
    return written


def stamp(csv_path, info, parameters):
    """Add the machine and the settings to every row, so a committed CSV says where it came from."""
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    settings = {k.lower(): v for k, v in parameters.items() if k not in ("REPEATS", "KV_STEPS", "SEQ_LENS")}
    rows = [{**row, **info, **settings} for row in rows]
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def notebook_results(junit_path):
    """{notebook: (cells passed, cells run, seconds)} from pytest's JUnit XML."""
    results = defaultdict(lambda: [0, 0, 0.0])
    for case in ET.parse(junit_path).iter("testcase"):
        classname = case.get("classname", "")  # e.g. "notebooks.00_welcome.ipynb"
        if not classname.endswith(".ipynb"):
            continue  # a unit test, not a notebook cell
        entry = results[classname.removeprefix("notebooks.")]
        entry[0] += not any(child.tag in ("failure", "error") for child in case)
        entry[1] += 1
        entry[2] += float(case.get("time", 0))
    return dict(results)


def summary(info, code, notebooks, csvs, seconds):
    lines = [
        f"# GPU suite: {'PASSED' if code == 0 else 'FAILED'}",
        "",
        " | ".join(f"{k}: {v}" for k, v in info.items()),
        "",
        "| notebook | cells passed | seconds |",
        "|---|---|---|",
    ]
    lines += [f"| {nb} | {ok}/{n} | {t:.1f} |" for nb, (ok, n, t) in sorted(notebooks.items())]
    passed = sum(ok == n for ok, n, _ in notebooks.values())
    lines += ["", f"notebooks passed: {passed}/{len(notebooks)}; whole run {seconds:.0f} s"]
    lines += [f"benchmark table: {p.relative_to(ROOT)}" for p in csvs]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchmarks", action="store_true", help="only the GPU benchmarks")
    parser.add_argument("--peak-tflops", type=float, default=989, help="dense bf16 peak (989: H100/H200 SXM)")
    args = parser.parse_args(argv)
    info = machine()
    OUT.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "COURSE_DEVICE": "cuda"}
    start = time.perf_counter()
    code = 0 if args.benchmarks else run_tests(env)
    csvs = run_benchmarks(env, args.peak_tflops)
    for path in csvs:
        stamp(path, info, BENCHMARKS[path.name.removesuffix("_benchmark.csv")])
    code = code or (0 if len(csvs) == len(BENCHMARKS) else 1)
    notebooks = {} if args.benchmarks else notebook_results(OUT / "junit.xml")
    text = summary(info, code, notebooks, csvs, time.perf_counter() - start)
    (OUT / "summary.md").write_text(text + "\n")
    print(text)
    return code


if __name__ == "__main__":
    sys.exit(main())
