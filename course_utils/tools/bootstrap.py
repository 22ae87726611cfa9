"""Checks `make install` runs before it installs anything (standard library only).

    python3 course_utils/tools/bootstrap.py python         # is this Python one the pins can serve?
    python3 course_utils/tools/bootstrap.py venv .venv     # is .venv usable, or must it be rebuilt?

Each prints what is wrong and how to fix it, and exits 1; silent with exit 0 when all is well.
It runs with the machine's Python before .venv exists, so it imports nothing from the course.
"""

import subprocess
import sys
from pathlib import Path

# The pins in requirements.txt: soupsieve needs 3.11.5 or newer; the course is tested on 3.11
# and the pinned numpy/torch wheels exist up to 3.13.
OLDEST = (3, 11, 5)
NEWEST_MINOR = (3, 13)


def python_problem(version=None):
    """None if a Python of this version (major, minor, micro) can install the course, else why not."""
    version = tuple(version or sys.version_info[:3])
    shown = ".".join(map(str, version))
    if OLDEST <= version and version[:2] <= NEWEST_MINOR:
        return None
    return (
        f"Python {shown} cannot install the course's pinned packages: it needs Python "
        f"{'.'.join(map(str, OLDEST))} to {'.'.join(map(str, NEWEST_MINOR))}.x.\n"
        f"Install one (e.g. `sudo apt install python3.11`, `brew install python@3.11`, or from python.org), "
        f"then run `make install PYTHON=python3.11` (PYTHON names the interpreter to build .venv with)."
    )


def venv_problem(venv):
    """None if ``venv`` has a Python the course can use, with pip inside, else why it must be rebuilt."""
    python = Path(venv) / "bin" / "python"
    if not python.exists() and not python.is_symlink():
        return None  # nothing there yet: make creates it
    probe = "import sys, pip; print(*sys.version_info[:3])"
    try:
        done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=60)
    except OSError as e:
        return f"{venv} has a Python that does not start ({e})"
    if done.returncode != 0:
        return f"{venv} is incomplete (made by an interrupted install?): its Python has no pip"
    version = tuple(int(part) for part in done.stdout.split())
    if python_problem(version):
        return f"{venv} was made with Python {'.'.join(map(str, version))}, which the pins cannot serve"
    return None


def main(argv):
    if argv[:1] == ["python"] and len(argv) == 1:
        problem = python_problem()
    elif argv[:1] == ["venv"] and len(argv) == 2:
        problem = venv_problem(argv[1])
    else:
        sys.exit(__doc__)
    if problem:
        print(problem, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
