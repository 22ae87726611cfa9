"""Lesson 01's exercise: the raw attention scores, one dot product per (query, key) pair."""

import torch

from course_utils.attention import attention_scores
from course_utils.exercises import exercise
from course_utils.exercises.checking import (
    Mistake,
    NotAttempted,
    call,
    close,
    describe,
    diagnose_batching,
    expect_plain,
    expect_tensor,
    generator,
)

MISSING_TRANSPOSE = "you multiplied queries @ keys without transposing the keys"
KEYS_FIRST = "you computed keys @ queries^T: that is the transposed score matrix"
QUERIES_TRANSPOSED = "you transposed the queries instead of the keys"
ELEMENTWISE = "you multiplied elementwise (queries * keys) and did not sum over the features"
DIAGONAL_ONLY = "you paired each query only with the key at the same position"
SCALED = "you scaled the scores"
SOFTMAXED = "you applied softmax"

_RIGHT_WAY = "queries @ keys.transpose(-2, -1)"


def _cases():
    g = generator(1)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    return [
        # (description, queries, keys). L_q, L_k and d all differ, so a product taken the wrong way round
        # either does not run or has a shape of its own; then every batch and head size changes.
        ("one sentence: queries [3, 4], keys [5, 4]", r(3, 4), r(5, 4)),
        ("self-attention: queries and keys [6, 4]", r(6, 4), r(6, 4)),
        ("a batch: queries [3, 2, 6], keys [3, 5, 6]", r(3, 2, 6), r(3, 5, 6)),
        ("heads: queries [2, 4, 3, 8], keys [2, 4, 7, 8]", r(2, 4, 3, 8), r(2, 4, 7, 8)),
        ("a batch of one, more queries than keys: queries [1, 5, 3], keys [1, 2, 3]", r(1, 5, 3), r(1, 2, 3)),
    ]


def _mistakes(q, k):
    """(message, what that mistake returns) for every known mistake that runs on these shapes."""
    d = q.shape[-1]
    qt, kt = q.transpose(-2, -1), k.transpose(-2, -1)
    every = [
        (
            f"{SCALED} by sqrt(d): that is lesson 02's step 2; here return the raw dot products q . k.",
            lambda: q @ kt / d**0.5,
        ),
        (f"{SCALED} by d: here return the raw dot products q . k, not scaled at all.", lambda: q @ kt / d),
        (
            f"{SOFTMAXED}: here return the raw scores (any real numbers), not weights that sum to 1.",
            lambda: torch.softmax(q @ kt, dim=-1),
        ),
        (
            f"{KEYS_FIRST} ([L_k, L_q], rows = keys). Put the queries first: row i must be query i, column j "
            f"key j: {_RIGHT_WAY}.",
            lambda: k @ qt,
        ),
        (
            f"{QUERIES_TRANSPOSED} (queries^T @ keys): that sums over the positions, not the features, and gives a "
            f"[d, d] matrix. Each score sums over the d features of one query and one key: {_RIGHT_WAY}.",
            lambda: qt @ k,
        ),
        (
            f"{QUERIES_TRANSPOSED} and put the keys first (keys^T @ queries): that sums over the positions, not the "
            f"features, and gives a [d, d] matrix. Each score sums over the d features of one query and one key: "
            f"{_RIGHT_WAY}.",
            lambda: kt @ q,
        ),
        (
            f"{MISSING_TRANSPOSE}: that pairs query rows with key columns. Transpose the keys to [d, L_k]: "
            f"{_RIGHT_WAY}.",
            lambda: q @ k,
        ),
        (
            f"{ELEMENTWISE}: q * k gives one product per feature; a dot product sums them, and every query "
            f"meets every key: {_RIGHT_WAY}.",
            lambda: q * k,
        ),
        (
            f"{DIAGONAL_ONLY} ((q * k).sum(-1)). Every query must meet every key: the result is an [L_q, L_k] "
            f"matrix, {_RIGHT_WAY}.",
            lambda: (q * k).sum(-1),
        ),
    ]
    runs = []
    for message, compute in every:
        try:
            runs.append((message, compute()))
        except RuntimeError:  # this mistake does not even run on these shapes
            pass
    return runs


def _named(got, q, k):
    """The message of the known mistake whose result ``got`` matches, else None."""
    return next((message for message, wrong in _mistakes(q, k) if close(got, wrong)), None)


def _name_on_square_inputs(candidate):
    """Run the candidate on square inputs (L_q = L_k = d), where every wrong product runs, and name it."""
    g = generator(11)
    q, k = torch.randn(4, 4, generator=g), torch.randn(4, 4, generator=g)
    try:
        got = call(candidate, q, k)
    except (Mistake, NotAttempted):
        return None
    return _named(got, q, k)


def _right_the_other_way(candidate, q, k):
    """True if the candidate gets the first sentence of a batched case right on its own, as 2-D tensors,
    or a 2-D case right when it is given as a batch of one sentence."""
    first = (0,) * (q.dim() - 2)
    q, k = (q[first], k[first]) if q.dim() > 2 else (q[None], k[None])
    try:
        return close(call(candidate, q.clone(), k.clone()), attention_scores(q, k))
    except (Mistake, NotAttempted):
        return False


def _explain_failure(candidate, description, q, k, detail):
    """Name why the candidate failed on a case (it raised, or returned something we do not recognise)."""
    advice = (
        "`keys.T` / `keys.t()` are for 2-D tensors; `keys.transpose(-2, -1)` swaps the last two axes whatever "
        "comes before."
        if q.dim() > 2
        else "It is right on a batch, but `permute(0, 2, 1)` or `transpose(1, 2)` name axes by their place from "
        "the front. `keys.transpose(-2, -1)` counts from the back, so one line works for [L, d], [B, L, d] and "
        "[B, H, L, d]."
    )
    diagnose_batching(q.dim() > 2, lambda: _right_the_other_way(candidate, q, k), description, advice, detail)
    message = _name_on_square_inputs(candidate)
    if message is not None:
        what_happened = detail.splitlines()[0].rstrip(".")
        raise Mistake(
            f"{message}\n(case {description}: {what_happened}. On square inputs [4, 4], where it runs, your "
            f"function gives exactly this mistake's result.)"
        )
    raise Mistake(f"{detail}\n(case: {description})")


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
    for description, q, k in _cases():
        expected = attention_scores(q, k)
        try:
            got = call(candidate, q, k)
        except Mistake as m:
            if "in place" in str(m):  # the framework already says exactly what happened
                raise
            _explain_failure(candidate, description, q, k, str(m))
        expect_tensor(got, what=f"score matrix for {description}")
        expect_plain(got, q.device, f"score matrix for {description}")
        message = _named(got, q, k)
        if message is not None and not close(got, expected):
            raise Mistake(f"{message}\n(case: {description})")
        expect_tensor(got, expected.shape, dtype=expected.dtype, what=f"score matrix for {description}")
        if not close(got, expected):
            _explain_failure(
                candidate,
                description,
                q,
                k,
                f"the scores are not right.\nexpected: {describe(expected)}\ngot:      {describe(got)}",
            )
