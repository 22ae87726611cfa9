"""Lesson 01's checker (course_utils/exercises/qkv.py): each planted mistake in attention_scores is named by
its own message; correct variants pass."""

import pytest
import torch

from course_utils.attention import attention_scores
from course_utils.exercises import check, checking, qkv, solution
from tests.exercises.asserts import assert_caught, assert_each_message_names_only_its_mistake, assert_passes

SCORE_MISTAKES = {
    "missing transpose": (lambda q, k: q @ k, qkv.MISSING_TRANSPOSE),
    "keys first": (lambda q, k: k @ q.transpose(-2, -1), qkv.KEYS_FIRST),
    "elementwise": (lambda q, k: q * k, qkv.ELEMENTWISE),
    "diagonal only": (lambda q, k: (q * k).sum(-1), qkv.DIAGONAL_ONLY),
    "scaled": (lambda q, k: q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, qkv.SCALED),
    "softmaxed": (lambda q, k: torch.softmax(q @ k.transpose(-2, -1), dim=-1), qkv.SOFTMAXED),
    "queries transposed": (lambda q, k: q.transpose(-2, -1) @ k, qkv.QUERIES_TRANSPOSED),
    "keys transposed and first": (lambda q, k: k.mT @ q, qkv.QUERIES_TRANSPOSED),
    "keys first with .T (2-D habit)": (lambda q, k: k @ q.T, qkv.KEYS_FIRST),
    "k.T": (lambda q, k: q @ k.T, checking.ONLY_UNBATCHED),
    "k.transpose(0, 1)": (lambda q, k: q @ k.transpose(0, 1), checking.ONLY_UNBATCHED),
    "torch.mm": (lambda q, k: torch.mm(q, k.t()), checking.ONLY_UNBATCHED),
    "k.transpose(1, 2)": (lambda q, k: q @ k.transpose(1, 2), checking.ONLY_BATCHED),
    "divided by d": (lambda q, k: q @ k.transpose(-2, -1) / q.shape[-1], "scaled the scores by d:"),
    "in place": (lambda q, k: q.mul_(1.0).add_(1.0) @ k.transpose(-2, -1), "in place"),
}


def test_the_solution_is_the_course_reference_and_passes():
    assert solution("attention_scores") is attention_scores
    assert_passes("attention_scores", attention_scores)


def test_stub_is_not_attempted():
    def stub(queries, keys):
        raise NotImplementedError

    assert check("attention_scores", stub, quiet=True).status == "not attempted"


def test_each_message_names_only_its_own_mistake():
    named = (
        "missing transpose",
        "keys first",
        "elementwise",
        "diagonal only",
        "scaled",
        "softmaxed",
        "queries transposed",
    )
    assert_each_message_names_only_its_mistake(
        {name: SCORE_MISTAKES[name] for name in named}, lambda c: check("attention_scores", c, quiet=True)
    )


@pytest.mark.filterwarnings("ignore:The use of `x.T`")
@pytest.mark.parametrize("name", SCORE_MISTAKES)
def test_scores_mistake_is_named(name):
    candidate, phrase = SCORE_MISTAKES[name]
    assert_caught("attention_scores", candidate, phrase)


@pytest.mark.parametrize(
    "candidate",
    [
        solution("attention_scores"),
        lambda q, k: torch.einsum("...id,...jd->...ij", q, k),
        lambda q, k: torch.matmul(q, k.mT),
        lambda q, k: (q.unsqueeze(-2) * k.unsqueeze(-3)).sum(-1),
    ],
    ids=["reference", "einsum", "matmul mT", "broadcast and sum"],
)
def test_scores_correct_alternatives_pass(candidate):
    assert_passes("attention_scores", candidate)


def test_scores_first_case_is_not_square():
    """On a square first case a product taken the wrong way round runs with the right shape and hides."""
    _, q, k = qkv._cases()[0]
    assert len({q.shape[-2], k.shape[-2], q.shape[-1]}) == 3


def test_scores_transposed_products_are_named_with_the_case_where_they_fail():
    for candidate in (lambda q, k: q.transpose(-2, -1) @ k, lambda q, k: q @ k):
        message = check("attention_scores", candidate, quiet=True).message
        assert "one sentence: queries [3, 4], keys [5, 4]" in message, message
        assert "On square inputs [4, 4]" in message, message


def test_scores_sizes_vary_across_cases():
    cases = qkv._cases()
    batches = {q.shape[0] for _, q, _ in cases if q.dim() > 2}
    assert len(batches) >= 2 and any(q.shape[-2] > k.shape[-2] for _, q, k in cases)
    assert len({q.shape[-1] for _, q, _ in cases}) >= 3


@pytest.mark.parametrize(
    "convert, phrase",
    [
        (lambda t: t.long(), "dtype"),
        (lambda t: t.double(), "float64"),
        (lambda t: t.to("meta"), checking.OTHER_DEVICE),
    ],
    ids=["int", "float64", "meta device"],
)
def test_scores_unusual_outputs_get_a_mistake_not_a_crash(convert, phrase):
    assert_caught("attention_scores", lambda q, k: convert(q @ k.transpose(-2, -1)), phrase)


def test_scores_non_contiguous_output_passes():
    assert_passes("attention_scores", lambda q, k: (k @ q.transpose(-2, -1)).transpose(-2, -1))
