"""course_utils imports no module that imports it back, directly or through others.

Imports inside functions count too: they run as soon as the function is called, and a cycle closed
by one only works while every caller happens to import the modules in the right order.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def modules(package_dir):
    """{dotted name: file} of every module in the package, its subpackages included."""
    found = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported(name, path, known):
    """The package's modules that ``name`` imports anywhere in its file: at the top or inside a function."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # from . import x, from ..y import z
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            # `from a import b` imports the module a.b when there is one, else a name of module a
            targets.update(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names)
    imported = set()
    for target in targets:
        while target and target not in known:  # `import a.b.c` of a name inside a module: that module
            target = target.rpartition(".")[0]
        if target and target != name:
            imported.add(target)
    return imported


def import_graph(package_dir):
    known = modules(package_dir)
    return {name: _imported(name, path, known) for name, path in known.items()}


def find_cycle(graph):
    """One cycle as [a, b, ..., a], or None. Depth-first search, in name order so the answer is stable."""
    state = {}  # name -> "open" while on the current path, "done" once everything below it is searched

    def visit(name, path):
        state[name] = "open"
        for nxt in sorted(graph.get(name, ())):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt, [*path, nxt])):
                return cycle
        state[name] = "done"
        return None

    for name in sorted(graph):
        if name not in state and (cycle := visit(name, [name])):
            return cycle
    return None


def test_course_utils_has_no_import_cycle():
    graph = import_graph(ROOT / "course_utils")
    assert len(graph) > 40 and "course_utils.tools.grade" in graph  # the walk reaches the subpackages
    cycle = find_cycle(graph)
    assert cycle is None, (
        f"import cycle: {' -> '.join(cycle)}. Break it without hiding it in a function: move what both "
        f"need into the module lower down, or pass it in as an argument"
    )


def _package(tmp_path, files):
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return import_graph(tmp_path / "pkg")


def test_a_cycle_closed_by_an_import_inside_a_function_is_found(tmp_path):
    graph = _package(
        tmp_path,
        {
            "__init__.py": "",
            "check.py": "import torch\nfrom pkg.low import helper\n",
            "low.py": "from pkg import mid\n",
            "mid.py": "def f():\n    from pkg.check import x\n    return x\n",
        },
    )
    assert graph["pkg.mid"] == {"pkg.check"}
    assert find_cycle(graph) == ["pkg.check", "pkg.low", "pkg.mid", "pkg.check"]


def test_relative_and_subpackage_imports_are_followed(tmp_path):
    graph = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from .tools import b\n",
            "tools/__init__.py": "",
            "tools/b.py": "import pkg.tools.c as c\n",
            "tools/c.py": "from ..a import name\n",
        },
    )
    assert graph["pkg.a"] == {"pkg.tools.b"} and graph["pkg.tools.c"] == {"pkg.a"}
    assert find_cycle(graph) == ["pkg.a", "pkg.tools.b", "pkg.tools.c", "pkg.a"]


def test_no_cycle_is_none(tmp_path):
    graph = _package(
        tmp_path, {"__init__.py": "def f():\n    from pkg import a\n", "a.py": "import pkg.b\n", "b.py": ""}
    )
    assert find_cycle(graph) is None
