"""What is wrong with this machine for the course, and how to fix it: `make doctor`.

    make doctor                      # or: .venv/bin/python -m course_utils.tools.doctor

Each line is `ok`, `FIX` (the course will not work until you do what it says) or `note` (an
optional part, e.g. the browser test). Paste the whole output into a bug report. Exit status 1
when there is something to fix. It imports each package inside its own check, so one broken
package does not hide the others; every package pinned in requirements.txt is checked by name
and version, and the kernel JupyterLab starts is run once to see that it imports what the
lessons use. A fix is a command that does something: `make install` alone does nothing once it
has run (its stamp file is there), so the fixes remove the stamp first.
"""

import importlib
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

from course_utils.tools.bootstrap import python_problem  # standard library only

ROOT = Path(__file__).resolve().parents[2]  # the checkout: .venv, requirements.txt, notebooks/

# `make install` does nothing while its stamp exists: removing the stamp makes it install again,
# which puts back every package that is missing or at another version than its pin
REINSTALL = "rm -f .venv/.installed-* && make install"
REBUILD = "make clean install"  # a new .venv from scratch, for what reinstalling cannot repair
# what the lessons import in the kernel (the rest of requirements.txt is checked by name and version)
KERNEL_IMPORTS = ("ipykernel", "IPython", "matplotlib", "pandas", "seaborn", "torch", "course_utils")


def check_python():
    problem = python_problem()
    return ("FIX", problem) if problem else ("ok", f"Python {sys.version.split()[0]} at {sys.executable}")


def check_environment():
    """Is this the course's .venv, and can its kernel import course_utils?"""
    if not (ROOT / ".venv").is_dir():
        return "FIX", "no .venv in the course folder\n     fix: `make install`"
    pth = Path(sysconfig.get_paths()["purelib"], "attention_course.pth")
    if not pth.exists():
        return "FIX", f"{sys.executable} is not the course's environment: run `make doctor` (it uses .venv)"
    return "ok", f"course environment: {sys.prefix}"


def check_torch():
    try:
        torch = importlib.import_module("torch")
    except Exception as e:
        return "FIX", f"PyTorch does not import ({type(e).__name__}: {e})\n     fix: `{REINSTALL}`"
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


def _pins(requirements):
    """[(name, version)] of every pin in requirements.txt that applies to this machine."""
    pins = []
    for number, line in enumerate(Path(requirements).read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#") or "==" not in line:
            continue
        spec, _, marker = line.partition(";")
        if spec.count("==") != 1 or not all(part.strip() for part in spec.split("==")):
            raise ValueError(f"line {number} of {requirements} is not `name==version`: {line!r}")
        if marker.strip():
            try:
                from packaging.markers import Marker

                if not Marker(marker).evaluate():
                    continue  # e.g. triton: Linux only
            except ImportError:
                continue  # cannot tell without `packaging`: check_triton covers the one such pin
        name, version = (part.strip() for part in spec.split("=="))
        pins.append((name, version))
    return pins


def check_packages(requirements=ROOT / "requirements.txt", version=metadata.version):
    """Every pinned package installed, at its pinned version (a local build tag such as +cpu is fine)."""
    missing, drifted = [], []
    for name, pinned in _pins(requirements):
        try:
            installed = version(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
            continue
        if installed.split("+")[0] != pinned:
            drifted.append(f"{name} {installed} (pinned {pinned})")
    if not missing and not drifted:
        return "ok", f"all {len(_pins(requirements))} pinned packages installed at their pinned versions"
    parts = ([f"missing: {', '.join(missing)}"] if missing else []) + (
        [f"other versions: {', '.join(drifted)}"] if drifted else []
    )
    return "FIX", f"{'; '.join(parts)}\n     fix: `{REINSTALL}`"


def _kernel_python(spec):
    # what Jupyter does: a kernel command starting with plain `python` runs the server's own Python
    first = spec.argv[0]
    return sys.executable if first in {"python", "python3", f"python3.{sys.version_info[1]}"} else first


def _kernel_folder(specs):
    """The folder of the 'python3' kernel Jupyter finds first, None if it has no kernel.json there (ipykernel's
    built-in one). Once it is removed, Jupyter uses the next: the course environment's own, or ipykernel's."""
    try:
        folder = specs.find_kernel_specs().get("python3")
    except Exception:
        return None
    return folder if folder and Path(folder, "kernel.json").is_file() else None


def check_kernel(spec_manager=None, run=subprocess.run):
    """The kernel JupyterLab starts for the lessons: this environment's Python, able to import what they use."""
    try:
        from jupyter_client.kernelspec import KernelSpecManager

        specs = spec_manager or KernelSpecManager()
    except Exception as e:
        return "FIX", f"jupyter_client does not import ({type(e).__name__}: {e})\n     fix: `{REINSTALL}`"
    try:
        spec = specs.get_kernel_spec("python3")
        python = _kernel_python(spec)
    except Exception as e:  # e.g. a kernel.json that is not JSON, or has no command
        folder = _kernel_folder(specs)
        if folder is None:
            return "FIX", f"no Python kernel for JupyterLab ({type(e).__name__}: {e})\n     fix: `{REINSTALL}`"
        return "FIX", (
            f"JupyterLab's 'python3' kernel is broken: {Path(folder, 'kernel.json')} ({type(e).__name__}: {e})"
            f"\n     fix: `rm -rf {shlex.quote(folder)}`"
        )
    if Path(python).resolve() != Path(sys.executable).resolve():
        folder = str(spec.resource_dir)
        return "FIX", (
            f"JupyterLab's 'python3' kernel runs {python}, not the course's {sys.executable}: the lessons would "
            f"not find their packages. Its definition is in {folder}\n     fix: `rm -rf {shlex.quote(folder)}`"
        )
    code = "import " + ", ".join(KERNEL_IMPORTS)
    try:
        done = run([python, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT / "notebooks")
    except (OSError, subprocess.TimeoutExpired) as e:
        return "FIX", f"the kernel's Python does not start ({type(e).__name__}: {e})\n     fix: `{REBUILD}`"
    if done.returncode != 0:
        error = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        return "FIX", f"the kernel cannot import what the lessons use: {error}\n     fix: `{REINSTALL}`"
    return "ok", f"kernel 'python3' runs {python} and imports {', '.join(KERNEL_IMPORTS)}"


def check_jupyter():
    try:
        lab = importlib.import_module("jupyterlab")
    except Exception as e:
        return "FIX", f"JupyterLab is missing ({type(e).__name__}: {e})\n     fix: `{REINSTALL}`"
    return "ok", f"JupyterLab {lab.__version__}"


def check_lab_settings(prefix=sys.prefix):
    """The course's JupyterLab settings (no news prompt, no fetching from the internet)."""
    installed = Path(prefix, "share", "jupyter", "lab", "settings", "overrides.json")
    course = ROOT / "jupyter" / "overrides.json"
    if not installed.exists() or (course.exists() and installed.read_bytes() != course.read_bytes()):
        return (
            "note",
            f"the course's JupyterLab settings are not installed (JupyterLab will ask about news)\n     fix: `{REINSTALL}`",
        )
    return "ok", f"the course's JupyterLab settings: {installed}"


def check_model(path=None):
    try:
        from course_utils.pretrained import model_path

        found = model_path(path)
    except ImportError as e:
        return "FIX", f"cannot look for the pretrained model: {e} (see PyTorch above)"
    except Exception as e:
        first, *rest = str(e).splitlines()
        fix = next((line.strip() for line in rest if "pip install" in line), REINSTALL)
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
        return "FIX", f"Triton does not import ({type(e).__name__}: {e}); lesson 09 needs it\n     fix: `{REINSTALL}`"
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


CHECKS = [check_python, check_environment, check_packages, check_torch, check_device, check_jupyter, check_kernel]
CHECKS += [check_lab_settings, check_model, check_triton, check_chromium, check_disk]


def _run(check):
    """The check's (status, message); one that fails is reported as such, and the others still run."""
    try:
        return check()
    except Exception as e:
        return "FIX", f"{getattr(check, '__name__', 'a check')} failed: {type(e).__name__}: {e}"


def report(checks=CHECKS):
    """[(status, message)] of every check, and the text `make doctor` prints."""
    results = [_run(check) for check in checks]
    lines = [f"{status:<4} {message}" for status, message in results]
    fixes = sum(status == "FIX" for status, _ in results)
    lines.append("All good: `make lab` to learn." if not fixes else f"{fixes} thing(s) to fix, see FIX above.")
    return results, "\n".join(lines)


if __name__ == "__main__":
    results, text = report()
    print(text)
    sys.exit(1 if any(status == "FIX" for status, _ in results) else 0)
