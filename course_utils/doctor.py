"""What is wrong with this machine for the course, and how to fix it: `make doctor`.

    make doctor                      # or: .venv/bin/python course_utils/doctor.py

Each line is `ok`, `FIX` (the course will not work until you do what it says) or `note` (an
optional part, e.g. the browser test). Paste the whole output into a bug report. Exit status 1
when there is something to fix. It imports each package inside its own check, so one broken
package does not hide the others.
"""

import importlib
import os
import shutil
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the course's package, also when run as a plain script

from course_utils.bootstrap import python_problem  # noqa: E402  (standard library only)


def check_python():
    problem = python_problem()
    return ("FIX", problem) if problem else ("ok", f"Python {sys.version.split()[0]} at {sys.executable}")


def check_environment():
    """Is this the course's .venv, and can its kernel import course_utils?"""
    if not (ROOT / ".venv").is_dir():
        return "FIX", "no .venv in the course folder: run `make install`"
    pth = Path(sysconfig.get_paths()["purelib"], "attention_course.pth")
    if not pth.exists():
        return "FIX", f"{sys.executable} is not the course's environment: run `make doctor` (it uses .venv)"
    return "ok", f"course environment: {sys.prefix}"


def check_torch():
    try:
        torch = importlib.import_module("torch")
    except Exception as e:
        return "FIX", f"PyTorch does not import ({type(e).__name__}: {e}): run `make install`"
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only build"
    gpu = f", GPU: {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ", no CUDA GPU visible"
    return "ok", f"PyTorch {torch.__version__} ({build}{gpu})"


def check_device():
    try:
        from course_utils.environment import pick_device

        device = pick_device()
    except ImportError as e:
        return "FIX", f"cannot pick a device: {e} (see PyTorch above)"
    except Exception as e:
        return "FIX", f"{e}\n     fix: set COURSE_DEVICE to one of the accepted values, or unset it"
    source = f"COURSE_DEVICE={os.environ['COURSE_DEVICE']!r}" if os.environ.get("COURSE_DEVICE") else "default"
    return "ok", f"lessons will run on: {device} ({source})"


def check_jupyter():
    try:
        lab = importlib.import_module("jupyterlab")
        from jupyter_client.kernelspec import KernelSpecManager

        spec = KernelSpecManager().get_kernel_spec("python3")
    except Exception as e:
        return "FIX", f"JupyterLab or its Python kernel is missing ({type(e).__name__}: {e}): run `make install`"
    return "ok", f"JupyterLab {lab.__version__}, kernel 'python3' runs {spec.argv[0]}"


def check_model(path=None):
    try:
        from course_utils.pretrained import model_path

        found = model_path(path)
    except ImportError as e:
        return "FIX", f"cannot look for the pretrained model: {e} (see PyTorch above)"
    except Exception as e:
        first, *rest = str(e).splitlines()
        fix = next((line.strip() for line in rest if "pip install" in line), "make install")
        return "FIX", f"{first} (lessons 06 and 06b need it)\n     fix: {fix}"
    return "ok", f"pretrained MiniLM found at {found}"


def check_triton(platform=sys.platform, import_module=importlib.import_module):
    """Lesson 09's kernels: compiled on a CUDA GPU, or run by Triton's interpreter on the CPU."""
    try:
        triton = import_module("triton")
    except Exception as e:
        if platform != "linux":
            return (
                "note",
                f"no Triton (there is none for {platform}): lesson 09 explains its kernel but does not run it",
            )
        return "FIX", f"Triton does not import ({type(e).__name__}: {e}); lesson 09 needs it: run `make install`"
    return "ok", f"Triton {triton.__version__} for lesson 09's kernels"


def check_chromium(which=shutil.which):
    found = which("chromium")
    if not found:
        return "note", "no Chromium: the real-browser test is skipped. Fix (Debian/Ubuntu, as root): `make browser`"
    return "ok", f"Chromium for the browser test: {found}"


def check_disk(folder=ROOT, need_gib=3.0):
    free = shutil.disk_usage(folder).free / 2**30
    if free < need_gib:
        return "FIX", f"only {free:.1f} GiB free on the course's disk; the install needs about {need_gib:.0f} GiB"
    return "ok", f"{free:.0f} GiB free on the course's disk"


CHECKS = [check_python, check_environment, check_torch, check_device, check_jupyter, check_model]
CHECKS += [check_triton, check_chromium, check_disk]


def report(checks=CHECKS):
    """[(status, message)] of every check, and the text `make doctor` prints."""
    results = [check() for check in checks]
    lines = [f"{status:<4} {message}" for status, message in results]
    fixes = sum(status == "FIX" for status, _ in results)
    lines.append("All good: `make lab` to learn." if not fixes else f"{fixes} thing(s) to fix, see FIX above.")
    return results, "\n".join(lines)


if __name__ == "__main__":
    results, text = report()
    print(text)
    sys.exit(1 if any(status == "FIX" for status, _ in results) else 0)
