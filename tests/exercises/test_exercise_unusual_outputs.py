"""Every exercise: a legal but unusual output (another dtype or device, not contiguous, a numpy array,
NaN ...) gets a named mistake or passes, and never makes the checker itself fail.

The unusual output is the solution's own, converted: each tensor it returns (alone, or in a tuple)
goes through the conversion. So a new exercise is covered without a line here; only an exercise
that rightly answers a conversion in its own way is listed in OTHERWISE, and one whose output is
no tensor at all in NO_TENSOR_OUTPUT.
"""

import inspect

import pytest
import torch

from course_utils.exercises import check, checking, exercise_ids, language_model, long_range, solution, translation


def _strided(t):
    return torch.stack([t, t], dim=-1)[..., 0]  # the same values, not contiguous


WRONG = {  # conversion -> a phrase the message must hold
    "int64": (lambda t: t.long(), "dtype"),
    "float16": (lambda t: t.half(), "dtype"),
    "float64": (lambda t: t.double(), "float64"),
    "meta device": (lambda t: t.to("meta"), "meta"),
    "sparse": (lambda t: t.to_sparse(), "sparse"),
    "numpy array": (lambda t: t.detach().numpy(), "torch.Tensor"),
    "list": (lambda t: t.tolist(), "torch.Tensor"),
    "0-d": (lambda t: t.sum(), "shape"),
    "extra axis": (lambda t: t[None], "shape"),
    "NaN": (lambda t: t.float() * float("nan"), ""),
    "inf": (lambda t: t.float() * float("inf"), ""),
}
RIGHT = {
    "not contiguous": _strided,
    "requires grad": lambda t: t.detach().requires_grad_(t.is_floating_point()),
    "nn.Parameter": lambda t: torch.nn.Parameter(t, requires_grad=False),
}

PASSES = None
# exercise id -> {conversion: the phrase its message holds instead, or PASSES}, and why
OTHERWISE = {
    "ablation_effects": {"float64": PASSES},  # a float64 effect table is fine
    "causal_mask": {"int64": PASSES, "float16": PASSES, "float64": PASSES},  # a 0/1 mask may have any dtype
    "sliding_window_mask": {"int64": PASSES, "float16": PASSES, "float64": PASSES},
    "chunk_mask": {"int64": PASSES, "float16": PASSES, "float64": PASSES},
    # token ids: int64 is what they are already
    "decode_greedily": {
        "int64": PASSES,
        "float16": checking.NOT_IDS,
        "0-d": translation.G_NOT_GREEDY,
        "extra axis": translation.G_NOT_GREEDY,
    },
    "decode_with_cache": {"int64": PASSES},
    "recall_sequences": {"int64": PASSES, "float16": checking.NOT_IDS},
    "sample_next_token": {"int64": PASSES, "float16": checking.NOT_IDS},
    "gradient_by_distance": {"list": long_range.G_NOT_A_TENSOR},  # the card asks for a tensor
    # speeds computed from Python numbers: no input dtype to keep, and float64 holds them better than float32
    "yarn_frequencies": {"float64": PASSES},
    # a loss: 0-d already, and it must stay attached to the logits
    "next_token_loss": {
        "int64": language_model.LOSS_DETACHED,
        "list": language_model.LOSS_FLOAT,
        "numpy array": language_model.LOSS_FLOAT,  # a 0-d array: a number, like .item()
        "0-d": PASSES,
        "nn.Parameter": language_model.LOSS_DETACHED,
    },
}
NO_TENSOR_OUTPUT = {  # exercise id -> what it returns instead
    "document_mask_mod": "a mask_mod function",
    "most_attended_tokens": "tokens, as strings",
    "swap_and_translate": "translations, as strings",
    "training_step": "the loss as a Python float",
    "admit": "a count, as a Python int",
    "flash_forward_kernel": "nothing: a Triton kernel writes its outputs into buffers",
}
CONVERTED = [i for i in exercise_ids() if i not in NO_TENSOR_OUTPUT]


def _convert_tensors(result, convert, seen):
    if isinstance(result, torch.Tensor):
        seen.append(True)
        return convert(result)
    if isinstance(result, tuple) and any(isinstance(t, torch.Tensor) for t in result):
        seen.append(True)
        return tuple(convert(t) if isinstance(t, torch.Tensor) else t for t in result)
    return result


def _converted(exercise_id, convert, seen):
    """The solution, with each tensor it returns converted (and recorded in ``seen``)."""
    reference = solution(exercise_id)
    if inspect.isclass(reference):

        class Converted(reference):
            def forward(self, *args, **kwargs):
                return _convert_tensors(super().forward(*args, **kwargs), convert, seen)

        return Converted

    def converted(*args, **kwargs):
        return _convert_tensors(reference(*args, **kwargs), convert, seen)

    converted.__signature__ = inspect.signature(reference)  # so messages name the exercise's parameters
    return converted


def _check_converted(exercise_id, convert):
    seen = []
    result = check(exercise_id, _converted(exercise_id, convert, seen), quiet=True)
    assert "checker itself" not in result.message, result.message
    assert seen, (
        f"{exercise_id}: its solution returned no tensor during the check, so no conversion was tested; "
        f"add it to NO_TENSOR_OUTPUT with what it returns"
    )
    return result


def _expected(exercise_id, name, default):
    return OTHERWISE.get(exercise_id, {}).get(name, default)


@pytest.mark.parametrize("name", WRONG)
@pytest.mark.parametrize("exercise_id", CONVERTED)
def test_unusual_output_is_a_named_mistake(exercise_id, name):
    convert, phrase = WRONG[name]
    result = _check_converted(exercise_id, convert)
    phrase = _expected(exercise_id, name, phrase)
    if phrase is PASSES:
        assert result.passed, f"{exercise_id} should accept a {name} output (OTHERWISE says so):\n{result.message}"
        return
    assert not result.passed and result.status == "not yet", (
        f"{exercise_id} passed a {name} output: name the mistake, or add it to OTHERWISE with the reason\n"
        f"{result.message}"
    )
    assert phrase in result.message, f"expected {phrase!r} in:\n{result.message}\n(or add it to OTHERWISE)"


@pytest.mark.parametrize("name", RIGHT)
@pytest.mark.parametrize("exercise_id", CONVERTED)
def test_unusual_but_right_output_passes(exercise_id, name):
    result = _check_converted(exercise_id, RIGHT[name])
    phrase = _expected(exercise_id, name, PASSES)
    if phrase is PASSES:
        assert result.passed, f"{result.message}\n(if {exercise_id} rightly refuses it, add it to OTHERWISE)"
    else:
        assert not result.passed and phrase in result.message, result.message


def test_the_tables_name_registered_exercises_and_conversions():
    ids = set(exercise_ids())
    assert set(OTHERWISE) <= ids and set(NO_TENSOR_OUTPUT) <= ids, "a table names an exercise that is gone"
    assert not set(OTHERWISE) & set(NO_TENSOR_OUTPUT)
    for exercise_id, conversions in OTHERWISE.items():
        assert set(conversions) <= set(WRONG) | set(RIGHT), exercise_id


@pytest.mark.parametrize("exercise_id", [i for i in NO_TENSOR_OUTPUT if inspect.isfunction(solution(i))])
def test_an_exercise_listed_without_tensor_output_has_none(exercise_id):
    seen = []
    assert check(exercise_id, _converted(exercise_id, lambda t: t, seen), quiet=True).passed
    assert not seen, f"{exercise_id} returns tensors after all: remove it from NO_TENSOR_OUTPUT"
