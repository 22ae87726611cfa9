"""Run every notebook under nbval once per perturbation of floating-point order (`make test-perturbed`).

Another CPU, a GPU or the next PyTorch sums in another order; this CPU can stand in for some of that by
changing which kernels run: PyTorch's vector kernels (ATEN_CPU_CAPABILITY), MKL's code path (MKL_CBWR,
MKL_ENABLE_INSTRUCTIONS), oneDNN's instruction set (ONEDNN_MAX_CPU_ISA) and the thread count. Each run
compares the committed outputs with nbval as `make test` does (exact, or within a cell's NBVAL_TOLERANCE)
and records how far every cell's numbers moved (conftest.py's --nbval-spread). Every run must pass.

    python scripts/perturbed_runs.py                  # all perturbations, then the table of spreads
    python scripts/perturbed_runs.py --only as-is     # some of them
    python scripts/perturbed_runs.py --notebooks notebooks/10_language_model.ipynb   # one lesson, all of them
    python scripts/perturbed_runs.py --write-spread   # also store the spreads in tests/nbval_spread.json
    python scripts/perturbed_runs.py --notebooks notebooks/14_long_context.ipynb --write-spread   # one lesson's

tests/nbval_spread.json keeps each machine's measurements (a new machine adds its own); the tolerance of a
cell must be at least twice every deviation stored there (tests/notebooks/test_nbval_tolerance.py).
"""

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "artifacts" / "perturbed"
SPREAD_FILE = ROOT / "tests" / "nbval_spread.json"

ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
PERTURBATIONS = {
    "as-is": {},  # this CPU's own kernels: it differs from the CPU that executed the notebooks
    "two-threads": {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"},  # sums split over threads
    "aten-avx2": {"ATEN_CPU_CAPABILITY": "avx2"},  # an AVX2 CPU's PyTorch kernels (no-op on one)
    "aten-default": {"ATEN_CPU_CAPABILITY": "default"},  # PyTorch's kernels without vector code
    "mkl-compatible": {"MKL_CBWR": "COMPATIBLE"},  # MKL's code path that runs on any x86 CPU
    "mkl-sse42": {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},  # MKL held to an old instruction set
    "onednn-sse41": {"ONEDNN_MAX_CPU_ISA": "SSE41"},  # oneDNN held to an old instruction set
    "aten-default+mkl-compatible": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
    "all-generic-two-threads": {
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_CBWR": "COMPATIBLE",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
        "OMP_NUM_THREADS": "2",
        "MKL_NUM_THREADS": "2",
    },
}


def cpu_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine():
    """This machine in words: CPU, its widest vector unit, PyTorch's version."""
    import torch

    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    vector = "AVX-512" if has_avx512() else "AVX2" if "avx2" in flags else platform.machine()
    return f"{cpu_name()} ({vector}), torch {torch.__version__}"


def has_avx512():
    """aten-avx2 changes nothing on a CPU whose widest kernels are AVX2 already: it is then skipped."""
    return "avx512f" in (Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else "")


def run(name, env_changes, notebooks=("notebooks",)):
    """nbval over the notebooks with these environment variables; returns (exit code, spread lines)."""
    OUT.mkdir(parents=True, exist_ok=True)
    spread = OUT / f"{name}.jsonl"
    spread.unlink(missing_ok=True)
    env = {**os.environ, **ONE_THREAD, **env_changes}
    # two workers of two threads each on two cores run up to 10x slower, and timings go wild: one worker then
    workers = "1" if int(env["OMP_NUM_THREADS"]) > 1 else "2"
    command = [sys.executable, "-m", "pytest", "-n", workers, "--dist", "loadscope", "--nbval", "--nbval-current-env"]
    command += ["--nbval-sanitize-with", "tests/nbval_sanitize.cfg", "--nbval-cell-timeout", "300"]
    command += ["--nbval-spread", str(spread), "-q", "-p", "no:cacheprovider", *notebooks]
    print(f"== {name}: {' '.join(f'{k}={v}' for k, v in env_changes.items()) or 'no change'}", flush=True)
    code = subprocess.run(command, cwd=ROOT, env=env).returncode
    (OUT / f"{name}.rc").write_text(f"{code}\n")
    return load(name)


def load(name):
    """(exit code, spread lines) of the last run of this perturbation, from artifacts/perturbed/."""
    spread, rc = OUT / f"{name}.jsonl", OUT / f"{name}.rc"
    if not rc.exists():
        raise SystemExit(f"no stored run of {name!r} in {OUT}: run it first")
    lines = [json.loads(line) for line in spread.read_text().splitlines()] if spread.exists() else []
    return int(rc.read_text()), lines


def moved(lines, numbers_only=False):
    """{"NB:Cell N": line} for the cells whose numbers (or, unless numbers_only, words) moved."""
    return {
        f"{x['notebook']}:Cell {x['cell']}": x
        for x in lines
        if (x["max_abs"] > 0 and x["same_words"]) or not (x["same_words"] or numbers_only)
    }


def table(results):
    """Print, per cell that moved in any run, its tolerance and the largest deviation of each run."""
    cells = sorted({key for _, lines in results.values() for key in moved(lines)})
    print(f"\n{len(cells)} cells moved in at least one run (numbers: largest |fresh - stored|, largest relative):")
    for key in cells:
        seen = {name: moved(lines).get(key) for name, (_, lines) in results.items()}
        first = next(x for x in seen.values() if x)
        print(f"  {key}  tolerance: {first['tolerance'] or 'exact'}  ({first['first_line']})")
        for name, x in seen.items():
            if x:
                words = "" if x["same_words"] else "  WORDS DIFFER"
                print(f"      {name:28s} abs {x['max_abs']:.3g}  rel {x['max_rel']:.3g}{words}")


def write_spread(results, only=()):
    """Store this machine's spreads in tests/nbval_spread.json, keeping other machines' measurements.

    only: the notebook files that were run, when not all of them: the other notebooks' cells are kept."""
    stored = json.loads(SPREAD_FILE.read_text()) if SPREAD_FILE.exists() else {"machines": {}}
    this = stored["machines"].setdefault(machine(), {})
    for name, (_, lines) in results.items():
        kept = {}
        if only:  # a run of some notebooks replaces their cells only
            kept = {k: v for k, v in this.get(name, {}).get("cells", {}).items() if k.split(":Cell ")[0] not in only}
        this[name] = {
            "environment": PERTURBATIONS[name],
            "cells": kept
            | {
                key: {k: x[k] for k in ("first_line", "max_abs", "max_rel", "pairs", "same_words")}
                for key, x in moved(lines, numbers_only=True).items()  # changed words fail the run itself
            },
        }
    SPREAD_FILE.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
    print(f"wrote {SPREAD_FILE.relative_to(ROOT)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=list(PERTURBATIONS), help="run only these perturbations")
    parser.add_argument("--write-spread", action="store_true", help="store the spreads in tests/nbval_spread.json")
    parser.add_argument("--stored", action="store_true", help="run nothing: read the last runs from artifacts/")
    parser.add_argument("--notebooks", nargs="+", default=["notebooks"], help="only these notebooks (a quick check)")
    args = parser.parse_args()
    print(f"this machine: {machine()}")
    names = args.only or [name for name in PERTURBATIONS if name != "aten-avx2" or has_avx512()]
    results = {name: load(name) if args.stored else run(name, PERTURBATIONS[name], args.notebooks) for name in names}
    table(results)
    if args.write_spread:
        write_spread(results, [Path(n).name for n in args.notebooks if n != "notebooks"])
    failed = [name for name, (code, _) in results.items() if code != 0]
    print(f"\n{len(results) - len(failed)} of {len(results)} runs passed" + (f"; failed: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
