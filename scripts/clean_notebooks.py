"""Tidy executed notebooks before they are committed: `make execute` runs this.

    python scripts/clean_notebooks.py notebooks/*.ipynb

Drops papermill's timestamps and every stderr output (warnings, progress bars):
both change on every run, nbval does not compare stderr, and leaving them out
keeps a re-execution's diff down to the outputs that matter.
"""

import sys

import nbformat


def without_stderr(outputs):
    return [o for o in outputs if not (o.get("output_type") == "stream" and o.get("name") == "stderr")]


def clean(path):
    nb = nbformat.read(path, as_version=4)
    nb.metadata.pop("papermill", None)
    for cell in nb.cells:
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs = without_stderr(cell.outputs)
    nbformat.write(nb, path)


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] in {"-h", "--help"}:
        sys.exit(__doc__)
    for notebook in sys.argv[1:]:
        clean(notebook)
