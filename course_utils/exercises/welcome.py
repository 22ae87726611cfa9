"""Lesson 00's warm-up exercise: turn non-negative scores into weights that sum to 1."""

import torch

from course_utils.exercises import exercise
from course_utils.exercises.checking import Mistake, call, diagnose, expect_like
from course_utils.softmax import normalise_scores

# Distinctive phrases, one per mistake (the tests look for them).
BY_LARGEST = "you divided by the largest score"
BY_COUNT = "you divided by the number of scores"
SOFTMAXED = "you applied softmax"
WHOLE_TENSOR = "each row must sum to 1"
NO_KEEPDIM = "your function works for one row but not for a batch of rows"


@exercise(
    "normalise_scores",
    solution=normalise_scores,
    hints=[
        "Weights that sum to 1: divide every score by the sum of all scores.",
        "For a batch of rows, sum over the last axis and keep it: `scores.sum(dim=-1, keepdim=True)`.",
    ],
)
def check_normalise_scores(candidate):
    cases = [
        torch.tensor([1.0, 3.0]),
        torch.tensor([2.0, 1.0, 1.0, 4.0]),
        torch.tensor([[1.0, 1.0, 2.0], [5.0, 0.0, 5.0]]),  # one row per query
        torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0]]),  # more rows, longer
    ]
    for scores in cases:
        try:
            got = call(candidate, scores)
        except Mistake as m:
            if scores.dim() > 1 and "must match the size" in str(m):
                error = str(m).splitlines()[0]  # "your code raised RuntimeError: ..."
                raise Mistake(
                    f"{NO_KEEPDIM}: `scores.sum(dim=-1)` drops the "
                    "summed axis, so the sums no longer line up with their rows. Keep the axis: "
                    f"`scores.sum(dim=-1, keepdim=True)`.\n({error})"
                ) from None
            raise
        expected = normalise_scores(scores)
        expect_like(got, scores, "weights")
        diagnose(
            got,
            expected,
            known_mistakes=[
                (
                    f"{BY_LARGEST}; divide by the sum so the weights add up to 1.",
                    scores / scores.amax(dim=-1, keepdim=True),
                ),
                (f"{BY_COUNT} (a mean); divide by their sum.", scores / scores.shape[-1]),
                (
                    f"{SOFTMAXED}: it also gives weights that sum to 1, but changes their ratios "
                    "(exp(3)/exp(1) is not 3/1). Here the scores are already non-negative: divide them by their sum.",
                    torch.softmax(scores, dim=-1),
                ),
                (
                    f"for a batch of rows, {WHOLE_TENSOR}: sum over the last axis with keepdim=True, "
                    "not over the whole tensor.",
                    scores / scores.sum(),
                ),
            ],
            context=f"scores {scores.tolist()}",
            nonfinite_advice="every row here has a positive sum, so dividing by it gives finite weights.",
        )
