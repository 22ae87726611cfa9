"""Numerically stable softmax (lesson 02), and the plain normalisation of lesson 00.

softmax(x)_i = exp(x_i) / sum_j exp(x_j) is unchanged when the same number is
subtracted from every x_j. Subtracting the row's maximum makes the largest
exponent exp(0) = 1, so exp() can neither overflow (exp(1000) = inf in float32)
nor make the whole row underflow to 0/0. ``torch.softmax`` does the same inside.

``normalise_scores`` is lesson 00's warm-up: scores that are already non-negative
become weights that sum to 1 by dividing by their total (softmax first makes them
positive with exp).
"""

import torch

from course_utils import _validate

__all__ = ["stable_softmax", "naive_softmax", "normalise_scores"]


def normalise_scores(scores):
    """Divide each score by the total, so the weights sum to 1 along the last axis."""
    return scores / scores.sum(dim=-1, keepdim=True)


def naive_softmax(x, dim=-1):
    """The textbook formula, for comparison only: overflows for scores above ~88 in float32."""
    _validate.softmax_input(x)
    exp = torch.exp(x)
    return exp / exp.sum(dim=dim, keepdim=True)


def stable_softmax(x, dim=-1):
    """Softmax along ``dim`` that works for any finite scores and for -inf (masked) entries.

    A row that is entirely -inf has no softmax (0/0): it gives NaN, as torch.softmax does.
    """
    _validate.softmax_input(x)
    # each row's own maximum, kept as a size-1 axis so it broadcasts back over the row
    row_max = x.amax(dim=dim, keepdim=True)
    exp = torch.exp(x - row_max)  # out of place: the caller's x stays as it was
    return exp / exp.sum(dim=dim, keepdim=True)
