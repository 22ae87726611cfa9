"""Lesson 06's exercise: the solution passes, each planted mistake gets its own message."""

import pytest
import torch

from course_utils.exercises import check, checking, solution
from course_utils.exercises import pretrained_heads as ph
from course_utils.head_scores import previous_token_score
from tests.exercises.asserts import assert_each_message_names_only_its_mistake

EX = "previous_token_score"


def run(candidate):
    return check(EX, candidate, quiet=True)


def test_solution_is_the_course_reference_and_passes():
    assert solution(EX) is previous_token_score
    result = run(previous_token_score)
    assert result.passed, result.message


def test_a_loop_solution_passes():
    def loops(attn):
        layers, heads, seq, _ = attn.shape
        out = attn.new_zeros(layers, heads)
        for i in range(1, seq):
            out += attn[:, :, i, i - 1]
        return out / (seq - 1)

    assert run(loops).passed


def test_a_result_in_another_dtype_than_the_weights_is_named():
    def loops_in_float32(attn):
        layers, heads, seq, _ = attn.shape
        out = torch.zeros(layers, heads)  # float32, whatever the weights are
        for i in range(1, seq):
            out = out + attn[:, :, i, i - 1].float()
        return out / (seq - 1)

    result = run(loops_in_float32)
    assert not result.passed and f"{checking.KEEP_DTYPE} torch.float64" in result.message, result.message


def test_stub_is_not_attempted():
    def stub(attn):
        raise NotImplementedError

    result = run(stub)
    assert result.status == "not attempted" and not result.passed


def diag(attn, offset):
    return attn.diagonal(offset=offset, dim1=-2, dim2=-1)


MISTAKES = {
    "main diagonal": (lambda a: diag(a, 0).mean(-1), ph.PT_SELF),
    "next token": (lambda a: diag(a, 1).mean(-1), ph.PT_NEXT),
    "transposed": (lambda a: diag(a.transpose(-2, -1), -1).mean(-1), ph.PT_NEXT),
    "first row counted": (lambda a: diag(a, -1).sum(-1) / a.shape[-1], ph.PT_QUERY_0),
    "sum": (lambda a: diag(a, -1).sum(-1), ph.PT_SUMMED),
    "whole block": (lambda a: a[..., 1:, :-1].mean((-2, -1)), ph.PT_WHOLE_BLOCK),
    "no mean": (lambda a: diag(a, -1), ph.ONE_PER_HEAD),
    "mean over layers": (lambda a: diag(a, -1).mean(0), ph.PT_WRONG_AXIS),
    "mean over everything": (lambda a: diag(a, -1).mean(), ph.PT_WRONG_AXIS),
    "default diagonal dims": (lambda a: a.diagonal(offset=-1).mean(-1), ph.PT_DIAGONAL_DIMS),
    "tuple": (lambda a: (diag(a, -1).mean(-1),), checking.RETURNED_A_TUPLE),
    "loop from query 0 (index -1 wraps)": (
        lambda a: sum(a[..., i, i - 1] for i in range(a.shape[-1])) / a.shape[-1],
        ph.PT_WRAPPED,
    ),
    "all earlier tokens": (lambda a: a.tril(-1).sum(-1).mean(-1), ph.PT_ALL_EARLIER),
    "all earlier tokens, in a loop": (
        lambda a: sum(a[..., i, :i].sum(-1) for i in range(1, a.shape[-1])) / (a.shape[-1] - 1),
        ph.PT_ALL_EARLIER,
    ),
}


@pytest.mark.parametrize("name", MISTAKES)
def test_each_mistake_gets_its_own_message(name):
    candidate, needle = MISTAKES[name]
    result = run(candidate)
    assert result.status == "not yet", result
    assert needle in result.message, f"{name}: {result.message}"


def test_each_message_names_only_its_own_mistake():
    assert_each_message_names_only_its_mistake(MISTAKES, run)


def test_in_place_change_is_caught():
    def in_place(attn):
        attn.mul_(1.0)  # harmless value-wise but still in place
        attn[..., 0, 0] = 0.5
        return diag(attn, -1).mean(-1)

    result = run(in_place)
    assert "in place" in result.message


def test_exceptions_are_explained():
    def crashes(attn):
        return attn.view(-1, 3, 7)

    result = run(crashes)
    assert result.status == "not yet" and "raised" in result.message
