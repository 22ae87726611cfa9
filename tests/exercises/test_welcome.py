"""Lesson 00's warm-up checker (course_utils/exercises/welcome.py): normalise_scores, each planted mistake
named by its own phrase; correct variants pass. (The framework's own behaviour, which uses this exercise as
its example, is tested in test_exercise_framework.py and test_checker_robustness.py.)"""

import pytest
import torch
import torch.nn.functional as F

from course_utils.exercises import check, solution
from course_utils.exercises import welcome as w
from course_utils.softmax import normalise_scores
from tests.exercises.asserts import assert_caught, assert_each_message_names_only_its_mistake, assert_passes

ID = "normalise_scores"

MISTAKES = {
    "divided by the largest": (lambda s: s / s.amax(dim=-1, keepdim=True), w.BY_LARGEST),
    "divided by the count": (lambda s: s / s.shape[-1], w.BY_COUNT),
    "softmax": (lambda s: torch.softmax(s, dim=-1), w.SOFTMAXED),
    "summed over the whole tensor": (lambda s: s / s.sum(), w.WHOLE_TENSOR),
    "sum without keepdim": (lambda s: s / s.sum(dim=-1), w.NO_KEEPDIM),
}


def test_the_solution_is_the_course_reference_and_passes():
    assert solution(ID) is normalise_scores
    assert_passes(ID, normalise_scores)


def test_stub_is_not_attempted():
    def stub(scores):
        raise NotImplementedError

    assert check(ID, stub, quiet=True).status == "not attempted"


@pytest.mark.parametrize("name", MISTAKES)
def test_each_mistake_is_named(name):
    candidate, phrase = MISTAKES[name]
    assert_caught(ID, candidate, phrase)


def test_each_message_names_only_its_own_mistake():
    assert_each_message_names_only_its_mistake(MISTAKES, lambda c: check(ID, c, quiet=True))


def test_the_batch_mistake_says_how_to_keep_the_axis():
    assert_caught(ID, MISTAKES["sum without keepdim"][0], w.NO_KEEPDIM, "keepdim=True")


@pytest.mark.parametrize(
    "candidate",
    [
        lambda s: s / s.sum(dim=-1, keepdim=True),
        lambda s: F.normalize(s, p=1, dim=-1),  # the scores are non-negative, so the L1 norm is their sum
        lambda s: s / s.sum(-1)[..., None],
        lambda s: torch.stack([row / row.sum() for row in s.reshape(-1, s.shape[-1])]).reshape(s.shape),
    ],
    ids=["keepdim", "F.normalize p=1", "None index", "row by row"],
)
def test_correct_variants_pass(candidate):
    assert_passes(ID, candidate)


@pytest.mark.parametrize(
    "convert, phrase",
    [(lambda t: t.double(), "float64"), (lambda t: t.tolist(), "torch.Tensor")],
    ids=["float64", "a list"],
)
def test_unusual_outputs_get_a_mistake_not_a_crash(convert, phrase):
    assert_caught(ID, lambda s: convert(s / s.sum(dim=-1, keepdim=True)), phrase)
