"""Lesson 06's same_word_score exercise: solutions pass, each planted mistake gets its own message."""

import pytest
import torch

from course_utils.exercises import check, checking, solution
from course_utils.exercises import pretrained_heads as ph
from course_utils.head_scores import is_punctuation, same_word_score
from tests.exercises.asserts import assert_each_message_names_only_its_mistake

EX = "same_word_score"
SPECIAL = {"[CLS]", "[SEP]", "[PAD]"}


def run(candidate):
    return check(EX, candidate, quiet=True)


def is_word(token):
    return token not in SPECIAL and not is_punctuation(token)


def loops(attn, tokens, self_too=False, specials=False, punct=False, earlier_only=False):
    """The definition written with loops; the flags plant one mistake each."""

    def counts(t):
        return is_word(t) or (specials and t in SPECIAL) or (punct and is_punctuation(t))

    n = len(tokens)
    per_query = []
    for i in range(n):
        keys = [
            j
            for j in range(n)
            if tokens[j] == tokens[i] and counts(tokens[i]) and (j != i or self_too) and (j < i or not earlier_only)
        ]
        if keys and (not self_too or len(keys) > 1):
            per_query.append(sum(attn[..., i, j] for j in keys))
    return torch.stack(per_query, -1).mean(-1)


def test_solution_is_the_course_reference_and_passes():
    assert solution(EX) is same_word_score
    result = run(same_word_score)
    assert result.passed, result.message


def test_a_loop_solution_passes():
    assert run(loops).passed


def test_stub_is_not_attempted():
    def stub(attn, tokens):
        raise NotImplementedError

    assert run(stub).status == "not attempted"


def test_the_reference_on_a_hand_built_head():
    # "the" (3 times) splits its weight over its two other occurrences; "cat" looks at the other "cat";
    # the rest, commas and [SEP]s included, look at [CLS]: the score is exactly 1
    tokens = ["[CLS]", "the", "cat", ",", "the", "cat", ",", "the", "[SEP]", "[SEP]"]
    attn = torch.zeros(len(tokens), len(tokens))
    attn[:, 0] = 1.0
    for i, others in {1: (4, 7), 4: (1, 7), 7: (1, 4), 2: (5,), 5: (2,)}.items():
        attn[i] = 0.0
        attn[i, list(others)] = 1.0 / len(others)
    assert same_word_score(attn, tokens).item() == 1.0
    assert same_word_score(torch.eye(len(tokens)), tokens).item() == 0.0


def mean_over_all_queries(attn, tokens):
    same = torch.tensor(
        [[a == b and i != j and is_word(a) for j, b in enumerate(tokens)] for i, a in enumerate(tokens)]
    )
    return (attn * same).sum(-1).mean(-1)


def mean_over_keys(attn, tokens):
    same = torch.tensor(
        [[a == b and i != j and is_word(a) for j, b in enumerate(tokens)] for i, a in enumerate(tokens)]
    )
    return (attn * same).mean(-1)[..., same.any(-1)].mean(-1)


def mean_over_occurrences(attn, tokens):
    same = torch.tensor(
        [[a == b and i != j and is_word(a) for j, b in enumerate(tokens)] for i, a in enumerate(tokens)]
    )
    rows = same.any(-1)
    return ((attn * same).sum(-1)[..., rows] / same.sum(-1)[rows]).mean(-1)


def summed_over_queries(attn, tokens):
    same = torch.tensor(
        [[a == b and i != j and is_word(a) for j, b in enumerate(tokens)] for i, a in enumerate(tokens)]
    )
    return (attn * same).sum(-1)[..., same.any(-1)].sum(-1)


MISTAKES = {
    "itself counted": (lambda a, t: loops(a, t, self_too=True), ph.SW_SELF),
    "special tokens as words": (lambda a, t: loops(a, t, specials=True), ph.SW_SPECIALS),
    "punctuation as words": (lambda a, t: loops(a, t, punct=True), ph.SW_PUNCTUATION),
    "both as words": (lambda a, t: loops(a, t, specials=True, punct=True), ph.SW_NEITHER),
    "only earlier occurrences": (lambda a, t: loops(a, t, earlier_only=True), ph.SW_EARLIER),
    "all queries": (mean_over_all_queries, ph.SW_ALL_QUERIES),
    "mean over keys": (mean_over_keys, ph.SW_MEAN_KEYS),
    "mean over other occurrences": (mean_over_occurrences, ph.SW_MEAN_OCCURRENCES),
    "sum over queries": (summed_over_queries, ph.SW_SUMMED_QUERIES),
    "one number per query": (lambda a, t: a.diagonal(dim1=-2, dim2=-1), ph.ONE_PER_HEAD),
    "one number in all": (lambda a, t: same_word_score(a, t).mean(), ph.KEEP_LAYER_HEAD_AXES),
    "tuple": (lambda a, t: (same_word_score(a, t),), checking.RETURNED_A_TUPLE),
}


@pytest.mark.parametrize("name", MISTAKES)
def test_each_mistake_gets_its_own_message(name):
    candidate, needle = MISTAKES[name]
    result = run(candidate)
    assert result.status == "not yet", result
    assert needle in result.message, f"{name}: {result.message}"


def test_each_message_names_only_its_own_mistake():
    assert_each_message_names_only_its_mistake(MISTAKES, run)


def test_changing_the_inputs_is_caught():
    def pops_tokens(attn, tokens):
        score = same_word_score(attn, tokens)
        tokens.pop()
        return score

    def scales_attn(attn, tokens):
        attn.mul_(2.0)
        return same_word_score(attn / 2.0, tokens)

    assert "your function changed `tokens` in place" in run(pops_tokens).message
    assert "in place" in run(scales_attn).message


def test_exceptions_are_explained():
    def crashes(attn, tokens):
        return attn[..., tokens.index("dog"), :].view(-1, 7)

    result = run(crashes)
    assert result.status == "not yet" and "raised" in result.message
