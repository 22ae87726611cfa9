"""Each exercise's stub asks for what its solution is: the same parameters, in the same order.

A solution may add parameters the lesson does not ask for (multi-head attention's `qkv_bias`), but
only after the stub's and with defaults, so the learner's call of the stub works on the solution.
"""

import ast
import inspect

import nbformat
import pytest

from course_utils.exercises import solution
from tests.notebook_tools import exercise_cells, lesson_notebooks, stub_name


def _stubs():
    for path in lesson_notebooks():
        for cell in exercise_cells(nbformat.read(path, as_version=4)):
            yield pytest.param(path.name, cell, id=f"{path.stem}:{cell.metadata['exercise_id']}")


def _definition(source, name):
    return next(
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name
    )


def _parameters(args):
    return [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs if a.arg != "self"]


def _stub_and_solution_parameters(cell):
    name = stub_name(cell)
    stub = _definition(cell.source, name)
    sol = solution(cell.metadata["exercise_id"])
    if isinstance(stub, ast.ClassDef):
        methods = {m.name: m for m in stub.body if isinstance(m, ast.FunctionDef)}
        return {
            method: (_parameters(node.args), inspect.signature(getattr(sol, method)))
            for method, node in methods.items()
            if method in ("__init__", "forward")
        }
    return {name: (_parameters(stub.args), inspect.signature(sol))}


@pytest.mark.parametrize(("notebook", "cell"), _stubs())
def test_stub_parameters_lead_the_solutions(notebook, cell):
    for where, (asked, signature) in _stub_and_solution_parameters(cell).items():
        given = [p for p in signature.parameters.values() if p.name != "self"]
        names = [p.name for p in given]
        assert names[: len(asked)] == asked, (
            f"{notebook}, {cell.metadata['exercise_id']} ({where}): the stub takes {asked}, the solution {names}"
        )
        extra = [
            p.name for p in given[len(asked) :] if p.default is inspect.Parameter.empty and p.kind != p.VAR_KEYWORD
        ]
        assert not extra, f"{notebook} ({where}): the solution needs {extra}, which the stub does not ask for"


def test_a_stub_that_asks_for_other_parameters_is_caught():
    cell = nbformat.v4.new_code_cell(
        "def causal_mask(length, device):\n    raise NotImplementedError", metadata={"exercise_id": "causal_mask"}
    )
    with pytest.raises(AssertionError, match="the stub takes"):
        test_stub_parameters_lead_the_solutions("fake.ipynb", cell)
