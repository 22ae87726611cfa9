"""Every lesson runs from any folder: no code cell reads a file by a path relative to where it runs.

A learner's copy of a lesson (or the grader's) runs outside notebooks/, so a cell that opens
"../course_utils/data/x.json" fails there. Stored files are read through course_utils (data_path, or a module's
loader such as recall.stored_results()), which finds its data/ folder from the package itself.
The scan reads every notebook's code; lesson 12, which used to read its table by such a path,
also runs from a temporary folder up to the cell that loads the table.
"""

import ast
import os
import re
import shutil

import nbformat
import pytest

from tests.kernels import unix_sockets_config
from tests.notebook_tools import ROOT, lesson_notebooks

NOTEBOOKS = lesson_notebooks() + sorted((ROOT / "templates").glob("*.ipynb"))
TOP_FOLDERS = "|".join(sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")))
# "../x", "./x", or a path into one of the repository's own folders ("course_utils/data/x.json")
RELATIVE = re.compile(rf"^(\.\.?/|({TOP_FOLDERS})/)")
FILE_NAME = re.compile(r"(/|\.[A-Za-z0-9]{1,10}$)")  # a folder in it, or an extension
READERS = re.compile(r"^(open|Path|PurePath|read_\w*|load\w*|fromfile)$")  # what reads the file it is given


def _called_name(call):
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def relative_paths(source):
    """The string literals in ``source`` that name a file relative to the folder the code runs in."""
    # IPython lines (%magic, !shell) are not Python: blank them, keeping the line numbers
    tree = ast.parse("\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and RELATIVE.match(node.value):
            found.add(node.value)
        if isinstance(node, ast.Call) and READERS.match(_called_name(node)):
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    if FILE_NAME.search(arg.value) and not os.path.isabs(arg.value):
                        found.add(arg.value)
    return sorted(found)


@pytest.mark.parametrize(
    "source, expected",
    [
        ('stored = json.loads(Path("../data/recall_results.json").read_text())', ["../data/recall_results.json"]),
        ('with open("course_utils/data/x.json") as f:\n    pass', ["course_utils/data/x.json"]),
        ('table = pd.read_csv("results.csv")', ["results.csv"]),
        ("weights = torch.load(f='./w.pt')", ["./w.pt"]),
        ('runs = json.loads(data_path("long_range_seeds.json").read_text())', []),
        ('sweep = ablation.load_sweep("zero")\nprint("a / b")', []),
        ('RESULTS_CSV = None  # e.g. "../artifacts/07_benchmark.csv"', []),  # a comment reads nothing
        ('%matplotlib inline\nx = open("/abs/file.txt")', []),
    ],
)
def test_the_scan_finds_relative_paths_and_only_them(source, expected):
    assert relative_paths(source) == expected


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_cell_reads_a_file_relative_to_where_it_runs(path):
    nb = nbformat.read(path, as_version=4)
    found = {i: relative_paths(cell.source) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"}
    found = {f"cell {i}": paths for i, paths in found.items() if paths}
    assert not found, (
        f"{path.name} reads files by a path relative to the folder it runs in, so a copy outside notebooks/ "
        f"fails: {found}. Read stored files through course_utils (course_utils.data.data_path(name), or the "
        f"module's loader)"
    )


def _cells_up_to(nb, pattern):
    """The notebook cut after its first code cell that matches ``pattern``."""
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and re.search(pattern, cell.source, re.MULTILINE):
            nb.cells = nb.cells[: i + 1]
            return nb
    raise AssertionError(f"no code cell matches {pattern!r}")


def test_lesson_12_loads_its_stored_table_from_another_folder(tmp_path, monkeypatch):
    from nbclient import NotebookClient

    folder = tmp_path / "a copy of the lesson"
    folder.mkdir()
    copy = shutil.copy(ROOT / "notebooks" / "12_beyond_softmax.ipynb", folder)
    nb = _cells_up_to(nbformat.read(copy, as_version=4), r"^stored\s*=")
    # as papermill would: a shorter decoding in section 1 (at least 256 tokens, its table's last row) saves seconds
    position = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])) + 1
    nb.cells.insert(position, nbformat.v4.new_code_cell("DECODE_LENGTH = 256"))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the kernel imports this checkout's course_utils
    monkeypatch.setenv("MPLBACKEND", "Agg")
    resources = {"metadata": {"path": str(folder)}}
    settings = {"resources": resources, "config": unix_sockets_config(), "shutdown_kernel": "immediate"}
    NotebookClient(nb, timeout=60, kernel_name="python3", **settings).execute()
    printed = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.output_type == "stream")
    assert "held-out accuracy, mean of 3 seeds" in printed
