"""Lesson 04's exercise `most_attended_tokens`: the solution passes, each planted mistake gets its own message."""

import math

import pytest
import torch

from course_utils.exercises import check, solution
from course_utils.exercises import visualising as vis
from course_utils.head_scores import most_attended_tokens


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
        (lambda w, t: [t[i] for i in w.max(dim=-2).values.argmax(dim=-1).tolist()], vis.MA_LARGEST_WEIGHT),
        (
            lambda w, t: [t[i] for i in torch.mode(w.argmax(dim=-1), dim=-1).values.tolist()],
            vis.MA_VOTE,
        ),
        (
            lambda w, t: [
                t[i] for i in torch.stack([h.argmax(-1).bincount(minlength=len(t)) for h in w]).argmax(-1).tolist()
            ],
            vis.MA_VOTE,
        ),
        (lambda w, t: [t[i] for i in w.sum(dim=-1).argmax(dim=-1).tolist()], vis.MA_WRONG_AXIS),
        (lambda w, t: [t[w.mean(dim=(0, 1)).argmax().item()]] * w.shape[0], vis.MA_ALL_HEADS),
        (lambda w, t: w.mean(dim=-2).argmax(dim=-1), vis.MA_NOT_TOKENS),
        (lambda w, t: w.mean(dim=-2).argmax(dim=-1).tolist(), vis.MA_NOT_TOKENS),
        (lambda w, t: [t[w.mean(dim=(0, 1)).argmax().item()]], vis.MA_HEAD_COUNT),
        (lambda w, t: ", ".join(t[i] for i in w.mean(dim=-2).argmax(dim=-1).tolist()), vis.MA_NOT_A_LIST),
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


@pytest.mark.parametrize("heads", [1, 4, 6])
def test_a_hard_coded_head_count_fails(heads):
    def hard_coded(weights, tokens):  # written for the lesson's 4 heads (or the test's first cases)
        return [tokens[int(weights[h].mean(dim=0).argmax())] for h in range(heads)]

    result = run(hard_coded)
    assert not result.passed
    assert vis.MA_HEAD_COUNT in result.message or "out of range" in result.message or "raised" in result.message


def test_square_weights_are_not_assumed():
    def keys_from_rows(weights, tokens):  # takes the key count from the query axis
        n = weights.shape[-2]
        return [tokens[int(h.mean(dim=0)[:n].argmax())] for h in weights]

    assert not run(keys_from_rows).passed


# ---------------------------------------------------------------------------------------------
# attention_entropy: the row entropies of each head, averaged over the queries


def run_entropy(candidate):
    return check("attention_entropy", candidate, quiet=True)


def test_entropy_reference_against_a_loop():
    from course_utils.exercises.visualising import attention_entropy

    weights = torch.tensor([[[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]], [[1 / 3, 1 / 3, 1 / 3], [0.2, 0.3, 0.5]]])
    expected = []
    for head in weights.tolist():
        rows = [-sum(w * math.log(w) for w in row if w > 0) for row in head]
        expected.append(sum(rows) / len(rows))
    torch.testing.assert_close(attention_entropy(weights), torch.tensor(expected))
    assert attention_entropy(weights[None]).shape == (1, 2)  # [layers, heads, q, k] -> [layers, heads]
    assert run_entropy(attention_entropy).passed


def test_entropy_independent_solutions_pass():
    def clamped(w):
        return -(w * w.clamp_min(1e-30).log()).sum(-1).mean(-1)

    def by_where(w):
        return torch.where(w > 0, -w * w.log(), torch.zeros_like(w)).sum(-1).mean(-1)

    assert run_entropy(clamped).passed
    assert run_entropy(by_where).passed


def test_entropy_stub_is_not_attempted():
    def stub(weights):
        raise NotImplementedError

    assert run_entropy(stub).status == "not attempted"


@pytest.mark.parametrize(
    "mistake, words",
    [
        (lambda w: -(w * torch.log(w)).sum(-1).mean(-1), vis.E_NAN),
        (lambda w: (w * w.clamp_min(1e-30).log()).sum(-1).mean(-1), vis.E_NEGATIVE),
        (lambda w: -(w * w.clamp_min(1e-30).log2()).sum(-1).mean(-1), vis.E_LOG2),
        (lambda w: -(w * w.clamp_min(1e-30).log()).sum(-1).mean(-1) / math.log(w.shape[-1]), vis.E_NORMALISED),
        (lambda w: -(w * w.clamp_min(1e-30).log()).sum(-1).sum(-1), vis.E_SUMMED),
        (lambda w: -(w * w.clamp_min(1e-30).log()).sum(-2).mean(-1), vis.E_COLUMNS),
        (lambda w: -(w.mean(-2) * w.mean(-2).clamp_min(1e-30).log()).sum(-1), vis.E_AVERAGE_FIRST),
        (lambda w: -(w * w.clamp_min(1e-30).log()).sum(-1), vis.E_PER_QUERY),
        (lambda w: -(w * w.clamp_min(1e-30).log()).sum(dim=(-1, -2, -3)), vis.E_PER_HEAD),
        (lambda w: [float(-(h * h.clamp_min(1e-30).log()).sum(-1).mean()) for h in w], "torch.Tensor"),
    ],
    ids=[
        "nan",
        "sign",
        "log2",
        "normalised",
        "sum-queries",
        "columns",
        "average-first",
        "per-query",
        "all-heads",
        "list",
    ],
)
def test_entropy_mistakes_are_named(mistake, words):
    result = run_entropy(mistake)
    assert not result.passed and result.status == "not yet"
    assert words in result.message, result.message


def test_entropy_hard_coded_heads_fail():
    def three_heads(w):
        return torch.stack([-(w[h] * w[h].clamp_min(1e-30).log()).sum(-1).mean() for h in range(3)])

    assert not run_entropy(three_heads).passed


def test_entropy_in_place_log_is_caught():
    def in_place(w):
        w.clamp_(min=1e-30)
        return -(w * w.log()).sum(-1).mean(-1)

    assert "in place" in run_entropy(in_place).message


def test_entropy_in_another_dtype_than_the_weights_is_named():
    def in_float32(w):
        return -torch.xlogy(w.float(), w.float()).sum(-1).mean(-1)

    result = check("attention_entropy", in_float32, quiet=True)
    assert not result.passed and "should keep the input's dtype torch.float64" in result.message, result.message
