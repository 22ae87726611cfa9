"""Lesson 00's warm-up exercise: turn non-negative scores into weights that sum to 1."""

import torch

from course_utils.exercises import exercise
from course_utils.exercises.checking import Mistake, call, diagnose, expect_like
from course_utils.softmax import normalise_scores


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
                    "your function works for one row but not for a batch of rows: `scores.sum(dim=-1)` drops the "
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
                    "you divided by the largest score; divide by the sum so the weights add up to 1.",
                    scores / scores.amax(dim=-1, keepdim=True),
                ),
                ("you divided by the number of scores (a mean); divide by their sum.", scores / scores.shape[-1]),
                (
                    "you applied softmax: it also gives weights that sum to 1, but changes their ratios "
                    "(exp(3)/exp(1) is not 3/1). Here the scores are already non-negative: divide them by their sum.",
                    torch.softmax(scores, dim=-1),
                ),
                (
                    "for a batch of rows, each row must sum to 1: sum over the last axis with keepdim=True, "
                    "not over the whole tensor.",
                    scores / scores.sum(),
                ),
            ],
            context=f"scores {scores.tolist()}",
            nonfinite_advice="every row here has a positive sum, so dividing by it gives finite weights.",
        )
