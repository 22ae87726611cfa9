"""Lesson 04's exercise `most_attended_tokens`: the solution passes, each planted mistake gets its own message."""

import pytest
import torch

from course_utils.exercises import check, solution
from course_utils.viz import most_attended_tokens


def run(candidate):
    return check("most_attended_tokens", candidate, quiet=True)


def test_reference_solution_passes():
    assert solution("most_attended_tokens") is most_attended_tokens
    result = run(most_attended_tokens)
    assert result.passed, result.message


def test_an_independent_solution_passes():
    def by_sums(weights, tokens):  # column sums instead of means, plain Python loops
        answers = []
        for head in weights:
            totals = [sum(float(head[i, j]) for i in range(head.shape[0])) for j in range(head.shape[1])]
            answers.append(tokens[totals.index(max(totals))])
        return tuple(answers)

    assert run(by_sums).passed


def test_stub_is_not_attempted():
    def stub(weights, tokens):
        raise NotImplementedError

    assert run(stub).status == "not attempted"


@pytest.mark.parametrize(
    "mistake, words",
    [
        (lambda w, t: [t[i] for i in w.max(dim=-2).values.argmax(dim=-1).tolist()], "single largest weight"),
        (
            lambda w, t: [t[i] for i in torch.mode(w.argmax(dim=-1), dim=-1).values.tolist()],
            "counted which key wins for each query",
        ),
        (
            lambda w, t: [
                t[i] for i in torch.stack([h.argmax(-1).bincount(minlength=len(t)) for h in w]).argmax(-1).tolist()
            ],
            "counted which key wins for each query",
        ),
        (lambda w, t: [t[i] for i in w.sum(dim=-1).argmax(dim=-1).tolist()], "averaged over the keys (dim=-1)"),
        (lambda w, t: [t[w.mean(dim=(0, 1)).argmax().item()]] * w.shape[0], "one answer for all heads"),
        (lambda w, t: w.mean(dim=-2).argmax(dim=-1), "return the tokens themselves"),
        (lambda w, t: w.mean(dim=-2).argmax(dim=-1).tolist(), "not their positions"),
        (lambda w, t: [t[w.mean(dim=(0, 1)).argmax().item()]], "one token per head"),
        (lambda w, t: ", ".join(t[i] for i in w.mean(dim=-2).argmax(dim=-1).tolist()), "return a list"),
    ],
    ids=["max", "mode-vote", "bincount-vote", "wrong-axis", "all-heads", "tensor", "indices", "one-answer", "string"],
)
def test_each_planted_mistake_is_named(mistake, words):
    result = run(mistake)
    assert not result.passed and result.status == "not yet"
    assert words in result.message, result.message


def test_other_wrong_answers_show_expected_and_got():
    result = run(lambda w, t: [t[-1]] * w.shape[0])
    assert not result.passed
    assert "expected ['fruit', 'my', 'favorite', 'Orange']" in result.message


def test_in_place_changes_are_caught():
    def in_place(weights, tokens):
        weights /= weights.sum(dim=-1, keepdim=True)
        weights.mul_(1.0001)
        return most_attended_tokens(weights, tokens)

    assert "in place" in run(in_place).message


def test_exceptions_are_explained():
    def broken(weights, tokens):
        return [tokens[i] for i in weights.mean(dim=3).argmax(dim=-1)]

    result = run(broken)
    assert not result.passed and "Dimension out of range" in result.message
