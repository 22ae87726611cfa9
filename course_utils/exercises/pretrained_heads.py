"""Lesson 06's exercise: score every head of a model for previous-token attention."""

import torch

from course_utils.exercises import exercise
from course_utils.exercises.checking import Mistake, call, diagnose, expect_tensor
from course_utils.head_scores import previous_token_score


def _random_attention(shape, generator):
    # softmax rows of random scores: valid attention weights with a different value everywhere
    return torch.softmax(2.0 * torch.randn(*shape, generator=generator), dim=-1)


def _previous_token_pattern(layers, heads, seq):
    # every query puts all its weight on the token before it ([CLS] looks at itself)
    attn = torch.zeros(layers, heads, seq, seq)
    attn[..., 0, 0] = 1.0
    for i in range(1, seq):
        attn[..., i, i - 1] = 1.0
    return attn


def _known_mistakes(attn):
    seq = attn.shape[-1]
    below = attn.diagonal(offset=-1, dim1=-2, dim2=-1)  # attn[i, i-1], i = 1..seq-1
    wrapped = (
        "your loop includes query 0, and attn[0, -1] is not a previous token: Python's index -1 wraps around "
        "to the *last* key. Query 0 has no previous token; loop over i = 1..seq-1 and divide by seq-1."
    )
    all_earlier = (
        "you added up the weights on *all* earlier tokens (everything below the diagonal, as with tril(-1)). "
        "The previous-token pattern is only the token right before: attn[i, i-1], the one diagonal just below "
        "the main one."
    )
    return [
        (
            "you took the main diagonal attn[i, i]: that is each token attending to itself. The previous "
            "token of query i is key i-1, the diagonal just *below* the main one: `diagonal(offset=-1, ...)`.",
            attn.diagonal(offset=0, dim1=-2, dim2=-1).mean(-1),
        ),
        (
            "you measured attention to the *next* token, attn[i, i+1] (diagonal offset=+1, or the rows and "
            "columns swapped). Rows are queries, columns keys: the previous token is attn[i, i-1], offset=-1.",
            attn.diagonal(offset=1, dim1=-2, dim2=-1).mean(-1),
        ),
        (
            "you divided by seq, counting query 0 (the [CLS] row), which has no previous token. Average over "
            "the seq-1 queries 1..seq-1 only: the mean of the seq-1 entries on the diagonal below the main one.",
            below.sum(-1) / seq,
        ),
        (
            "you summed the weights attn[i, i-1] instead of averaging them: the score should be a mean "
            "weight between 0 and 1, whatever the sentence length.",
            below.sum(-1),
        ),
        (
            "you averaged the whole block attn[..., 1:, :-1]; only its diagonal entries attn[i, i-1] are "
            "'previous token' weights (take the diagonal first, then the mean).",
            attn[..., 1:, :-1].mean((-2, -1)),
        ),
        (wrapped, (below.sum(-1) + attn[..., 0, -1]) / seq),
        (wrapped, (below.sum(-1) + attn[..., 0, -1]) / (seq - 1)),
        (all_earlier, attn.tril(-1).sum(-1).mean(-1)),  # averaged over all seq queries
        (all_earlier, attn.tril(-1).sum(-1)[..., 1:].mean(-1)),  # over queries 1..seq-1
    ]


def _check_shape(got, attn):
    """Name the usual reasons for a wrong shape before the generic message."""
    layers, heads, seq, _ = attn.shape
    expected = (layers, heads)
    if not isinstance(got, torch.Tensor) or tuple(got.shape) == expected:
        return expect_tensor(got, expected, what="scores [layers, heads]")
    shape = tuple(got.shape)
    if shape[:2] == (seq, seq):
        raise Mistake(
            f"the scores have shape {shape}, expected [layers, heads] = {expected}. `torch.diagonal` "
            f"works on dims 0 and 1 unless told otherwise: pass dim1=-2, dim2=-1 (the query and key axes)."
        )
    if shape[:2] == expected:
        raise Mistake(
            f"the scores have shape {shape}: one number per head is expected, {expected}. "
            f"Average the weights attn[i, i-1] over the query positions (the last axis of the diagonal)."
        )
    if got.dim() <= 2 and (seq - 1 in shape or layers * heads in shape or len(shape) < 2):
        raise Mistake(
            f"the scores have shape {shape}: you averaged over the wrong axis. Keep the layer and head axes "
            f"and average over the query positions only, giving [layers, heads] = {expected}."
        )
    expect_tensor(got, expected, what="scores [layers, heads]")


@exercise(
    "previous_token_score",
    solution=previous_token_score,
    hints=[
        "Row i of attn[l, h] holds query i's weights over the keys; the previous token of query i is key i-1. "
        "Query 0 has no previous token, so it does not count.",
        "The weights attn[..., i, i-1] for i = 1..seq-1 lie on one diagonal of each seq x seq matrix: "
        "just below the main diagonal.",
        "`attn.diagonal(offset=-1, dim1=-2, dim2=-1)` has shape [layers, heads, seq-1]; average it over its last axis.",
    ],
)
def check_previous_token_score(candidate):
    generator = torch.Generator().manual_seed(6)
    # random attention first, of a real model's shape (6 layers x 12 heads) and small/odd sizes:
    # there every known mistake gives a different number, so the message can name it
    # (on a perfect previous-token head, "divided by seq" and "all earlier tokens" agree)
    cases = [
        (_random_attention(shape, generator), f"random attention of shape {shape}")
        for shape in [(6, 12, 9, 9), (2, 3, 5, 5), (1, 4, 2, 2), (3, 1, 12, 12)]
    ]
    # then a perfect previous-token head: every score must be exactly 1
    cases.append((_previous_token_pattern(2, 3, 5), "every query attends only to the token before it: all scores 1"))
    for attn, context in cases:
        got = call(candidate, attn)
        _check_shape(got, attn)
        diagnose(got, previous_token_score(attn), _known_mistakes(attn), what="scores [layers, heads]", context=context)
