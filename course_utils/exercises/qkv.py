"""Lesson 01's exercise: the raw attention scores, one dot product per (query, key) pair."""

import torch

from course_utils.exercises import exercise
from course_utils.exercises.checking import Mistake, call, describe, expect_tensor


def attention_scores(queries, keys):
    """scores[..., i, j] = queries[..., i, :] . keys[..., j, :]  ->  [..., L_q, L_k].

    transpose(-2, -1) swaps the last two axes only, so the same line works for
    one sentence [L, d], a batch [B, L, d] and heads [B, H, L, d].
    """
    return queries @ keys.transpose(-2, -1)


MISSING_TRANSPOSE = "you multiplied queries @ keys without transposing the keys"
KEYS_FIRST = "you computed keys @ queries^T: that is the transposed score matrix"
ELEMENTWISE = "you multiplied elementwise (queries * keys) and did not sum over the features"
DIAGONAL_ONLY = "you paired each query only with the key at the same position"
SCALED = "you scaled the scores"
SOFTMAXED = "you applied softmax"
ONLY_UNBATCHED = "works on one sentence (2-D) but not on a batch"


def _cases():
    g = torch.Generator().manual_seed(1)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    return [
        # (description, queries, keys). Square first: a missing transpose or an elementwise product
        # still runs there and can be named by its value; then L_q != L_k != d, then batches and heads.
        ("self-attention: queries and keys [4, 4]", r(4, 4), r(4, 4)),
        ("one sentence: queries [3, 4], keys [5, 4]", r(3, 4), r(5, 4)),
        ("a batch: queries [2, 3, 6], keys [2, 5, 6]", r(2, 3, 6), r(2, 5, 6)),
        ("heads: queries [2, 3, 4, 8], keys [2, 3, 6, 8]", r(2, 3, 4, 8), r(2, 3, 6, 8)),
    ]


def _wrong_outputs(q, k):
    """(message, what that mistake returns) for the mistakes we can recognise by value."""
    d = q.shape[-1]
    scores = attention_scores(q, k)
    wrongs = [
        (SCALED + " by sqrt(d): that is lesson 02's step 2; here return the raw dot products q . k.", scores / d**0.5),
        (
            SOFTMAXED + ": here return the raw scores (any real numbers), not weights that sum to 1.",
            torch.softmax(scores, dim=-1),
        ),
        (
            KEYS_FIRST + " (rows = keys). Put the queries first: row i must be query i, column j key j.",
            scores.transpose(-2, -1),
        ),
    ]
    if q.shape[-2] == k.shape[-2]:
        wrongs += [
            (
                ELEMENTWISE + ": q * k gives one product per feature; a dot product sums them, and "
                "every query meets every key: queries @ keys.transpose(-2, -1).",
                q * k,
            ),
            (
                DIAGONAL_ONLY + " ((q * k).sum(-1)). Every query must meet every key: the result is an "
                "[L_q, L_k] matrix, queries @ keys.transpose(-2, -1).",
                (q * k).sum(-1),
            ),
        ]
    if q.shape[-2] == k.shape[-2] == d:
        wrongs.append(
            (
                MISSING_TRANSPOSE + ". With square inputs this runs but pairs query rows with key "
                "columns; transpose the keys: queries @ keys.transpose(-2, -1).",
                q @ k,
            )
        )
    return wrongs


@exercise(
    "attention_scores",
    solution=attention_scores,
    hints=[
        "Score (i, j) is the dot product of query i with key j: sum over the features of q_i * k_j.",
        "All pairs at once is a matrix product: [L_q, d] @ [d, L_k]. The keys need their last two axes swapped.",
        "`queries @ keys.transpose(-2, -1)` (not `keys.T`, which only transposes 2-D tensors correctly).",
    ],
)
def check_attention_scores(candidate):
    one_sentence_ok = False
    for description, q, k in _cases():
        expected = attention_scores(q, k)
        try:
            got = call(candidate, q, k)
        except Mistake as m:
            text = str(m)
            if q.dim() > 2 and one_sentence_ok:
                raise Mistake(
                    f"your function {ONLY_UNBATCHED} ({description}). `keys.T` / `keys.t()` are for 2-D "
                    f"tensors; `keys.transpose(-2, -1)` swaps the last two axes whatever comes before.\n{text}"
                ) from None
            if "cannot be multiplied" in text or "Expected size for first two dimensions" in text:
                raise Mistake(
                    f"{MISSING_TRANSPOSE} ({description}): [L_q, d] @ [L_k, d] does not line up. "
                    f"Transpose the keys to [d, L_k]: queries @ keys.transpose(-2, -1).\n{text}"
                ) from None
            raise
        for message, wrong in _wrong_outputs(q, k):
            if isinstance(got, torch.Tensor) and got.shape == wrong.shape and torch.allclose(got, wrong, atol=1e-5):
                if not (got.shape == expected.shape and torch.allclose(got, expected, atol=1e-5)):
                    raise Mistake(f"{message}\n(case: {description})")
        expect_tensor(got, expected.shape, what=f"score matrix for {description}")
        if not torch.allclose(got, expected, atol=1e-5, rtol=1e-4):
            if q.dim() > 2 and one_sentence_ok:
                raise Mistake(
                    f"your function {ONLY_UNBATCHED} ({description}): the batch/head axes must be left alone; "
                    f"only the last two axes of the keys are swapped: keys.transpose(-2, -1).\n"
                    f"expected: {describe(expected)}\ngot:      {describe(got)}"
                )
            raise Mistake(
                f"the scores are not right ({description}).\nexpected: {describe(expected)}\ngot:      {describe(got)}"
            )
        if q.dim() == 2:
            one_sentence_ok = True
