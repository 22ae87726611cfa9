"""Lessons 00-03 and 07: a legal but unusual output (another dtype or device, not contiguous, a numpy
array, NaN ...) gets a named mistake or passes, and never makes the checker itself fail."""

import pytest
import torch

from course_utils.exercises import check, solution

EXERCISES = [
    "normalise_scores",
    "attention_scores",
    "stable_softmax",
    "scaled_dot_product_attention",
    "causal_mask",
    "split_heads",
    "combine_heads",
    "multi_head_attention",
    "online_softmax",
    "tiled_attention",
]


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
MASK_ACCEPTS = {"int64", "float16", "float64"}  # a 0/1 causal mask may have any dtype


def _converted(exercise_id, convert):
    reference = solution(exercise_id)
    if exercise_id == "multi_head_attention":

        class Converted(reference):
            def forward(self, *args, **kwargs):
                return convert(super().forward(*args, **kwargs))

        return Converted
    if exercise_id == "scaled_dot_product_attention":
        return lambda *args, **kwargs: tuple(convert(t) for t in reference(*args, **kwargs))
    return lambda *args, **kwargs: convert(reference(*args, **kwargs))


@pytest.mark.parametrize("name", WRONG)
@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_unusual_output_is_a_named_mistake(exercise_id, name):
    convert, phrase = WRONG[name]
    result = check(exercise_id, _converted(exercise_id, convert), quiet=True)
    assert "checker itself" not in result.message, result.message
    if exercise_id == "causal_mask" and name in MASK_ACCEPTS:
        assert result.passed, result.message
        return
    assert not result.passed and result.status == "not yet", result.message
    assert phrase in result.message, f"expected {phrase!r} in:\n{result.message}"


@pytest.mark.parametrize("name", RIGHT)
@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_unusual_but_right_output_passes(exercise_id, name):
    result = check(exercise_id, _converted(exercise_id, RIGHT[name]), quiet=True)
    assert result.passed, result.message
