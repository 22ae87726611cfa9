"""Each exercise's stub asks for what its solution is: the same parameters, in the same order.

A solution may take more than its stub only where ``EXTRA_PARAMETERS`` below says so, with the
reason: the rest of the course calls the reference with those parameters, and each has a default
that gives what the stub asks for, so a call of the stub works on the solution unchanged. Any
other difference (a missing, renamed, reordered or unlisted parameter, an extra without a default,
or a default of the stub's the solution does not share) fails.
"""

import ast
import inspect

import nbformat
import pytest

from course_utils.exercises import solution
from tests.notebook_tools import exercise_cells, lesson_notebooks, stub_name

# (exercise id, function or method) -> {extra parameter of the solution: why the stub leaves it out}
EXTRA_PARAMETERS = {
    ("causal_mask", "causal_mask"): {
        "device": "the lessons build masks on the GPU too; the exercise is the pattern, not where it lives",
    },
    ("scaled_dot_product_attention", "scaled_dot_product_attention"): {
        "key_padding_mask": "padding arrives in lesson 05c; lesson 02 teaches one mask",
    },
    ("multi_head_attention", "__init__"): {
        "qkv_bias": "the article's (and BERT's) biased Q/K/V projections; False is the slides' version, the stub's",
        "dropout": "dropout on the weights for the training lessons; 0.0 is the stub's attention",
    },
    ("multi_head_attention", "forward"): {
        "key_padding_mask": "padding for the translation lesson (05c); None is the stub's attention",
    },
    ("tiled_attention", "tiled_attention"): {
        "causal": "lesson 07 measures the causal case with the same function; False is the exercise",
    },
    ("grouped_query_attention", "grouped_query_attention"): {
        "rope_base": "RoPE's base, and None for no RoPE; 10000.0 is the exercise's RoPE",
    },
    ("sliding_window_mask", "sliding_window_mask"): {
        "causal": "the two-sided window of encoders; True is the exercise's causal window",
        "device": "masks on the GPU too; the exercise is the pattern",
    },
    ("block_backward", "block_backward"): {
        "q_start": "where the blocks sit, for the causal mask of flash_attention_backward; 0 with causal=False",
        "k_start": "as q_start, for the key block",
        "causal": "the causal mask of flash_attention_backward; the exercise is the unmasked block",
    },
}


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
    """{name: default as source text, or None} of a stub's parameters, in order, without self."""
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + [ast.unparse(d) for d in args.defaults]
    named = list(zip(positional, defaults, strict=True)) + [
        (a, None if d is None else ast.unparse(d)) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
    ]
    return {a.arg: default for a, default in named if a.arg != "self"}


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


def _differences(exercise_id, where, asked, signature):
    given = [p for p in signature.parameters.values() if p.name != "self"]
    names = [p.name for p in given]
    if names[: len(asked)] != list(asked):
        return [f"the stub takes {list(asked)}, the solution {names}"]
    problems = []
    for p in given[: len(asked)]:
        if asked[p.name] is not None and (p.default is p.empty or repr(p.default) != asked[p.name]):
            shown = "none" if p.default is p.empty else repr(p.default)
            problems.append(f"{p.name} has the default {asked[p.name]} in the stub, {shown} in the solution")
    allowed = EXTRA_PARAMETERS.get((exercise_id, where), {})
    extra = [p for p in given[len(asked) :] if p.kind != p.VAR_KEYWORD]
    unlisted = [p.name for p in extra if p.name not in allowed]
    if unlisted:
        problems.append(
            f"the solution takes {unlisted} as well, which the stub does not ask for: add the parameter(s) "
            "to the stub, or to EXTRA_PARAMETERS with the reason the exercise leaves them out"
        )
    without_default = [p.name for p in extra if p.default is p.empty]
    if without_default:
        problems.append(f"the solution needs {without_default}, which the stub does not ask for")
    stale = sorted(set(allowed) - {p.name for p in extra})
    if stale:
        problems.append(f"EXTRA_PARAMETERS lists {stale}, which the solution does not take (or the stub now asks)")
    return problems


@pytest.mark.parametrize(("notebook", "cell"), list(_stubs()))
def test_stub_parameters_lead_the_solutions(notebook, cell):
    exercise_id = cell.metadata["exercise_id"]
    for where, (asked, signature) in _stub_and_solution_parameters(cell).items():
        problems = _differences(exercise_id, where, asked, signature)
        assert not problems, f"{notebook}, {exercise_id} ({where}): " + "; ".join(problems)


def test_every_listed_extra_parameter_belongs_to_an_exercise_stub():
    seen = {
        (cell.metadata["exercise_id"], where)
        for _, cell in (p.values for p in _stubs())
        for where in _stub_and_solution_parameters(cell)
    }
    assert not set(EXTRA_PARAMETERS) - seen, f"no stub for {sorted(set(EXTRA_PARAMETERS) - seen)}"


def _cell(source, exercise_id):
    return nbformat.v4.new_code_cell(source, metadata={"exercise_id": exercise_id})


def test_a_stub_that_asks_for_other_parameters_is_caught():
    cell = _cell("def causal_mask(length, device):\n    raise NotImplementedError", "causal_mask")
    with pytest.raises(AssertionError, match="the stub takes"):
        test_stub_parameters_lead_the_solutions("fake.ipynb", cell)


def test_an_unlisted_extra_parameter_is_caught():
    # the solution's key_padding_mask is listed for scaled_dot_product_attention, not for this made-up stub
    cell = _cell("def split_heads(x):\n    raise NotImplementedError", "split_heads")
    with pytest.raises(AssertionError, match=r"takes \['num_heads'\] as well"):
        test_stub_parameters_lead_the_solutions("fake.ipynb", cell)


def test_a_listed_extra_the_stub_now_asks_for_is_caught():
    source = "def causal_mask(seq_len, device=None):\n    raise NotImplementedError"
    with pytest.raises(AssertionError, match=r"EXTRA_PARAMETERS lists \['device'\]"):
        test_stub_parameters_lead_the_solutions("fake.ipynb", _cell(source, "causal_mask"))


def test_a_default_the_solution_does_not_share_is_caught():
    source = "def scaled_dot_product_attention(q, k, v, mask=0):\n    raise NotImplementedError"
    with pytest.raises(AssertionError, match="mask has the default 0 in the stub, None in the solution"):
        test_stub_parameters_lead_the_solutions("fake.ipynb", _cell(source, "scaled_dot_product_attention"))
