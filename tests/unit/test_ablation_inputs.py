"""Lesson 06b's helpers refuse input they would get silently wrong: labels, heads to draw."""

import numpy as np
import pytest
import torch

from course_utils import ablation


def _pairs(n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 8, generator=g), torch.randn(n, 8, generator=g)


def test_paraphrase_gap_with_0_1_labels_equals_bool_labels():
    a, b = _pairs()
    labels = torch.tensor([True, False, True, True, False, False])
    expected = ablation.paraphrase_gap(a, b, labels)
    for other in (labels.long(), labels.int(), labels.float(), labels.tolist(), [int(x) for x in labels]):
        torch.testing.assert_close(ablation.paraphrase_gap(a, b, other), expected)


def test_paraphrase_gap_is_the_difference_of_the_two_group_means():
    a, b = _pairs()
    labels = [1, 0, 1, 1, 0, 0]
    cos = [torch.nn.functional.cosine_similarity(a[i], b[i], dim=0).item() for i in range(6)]
    by_hand = np.mean([c for c, y in zip(cos, labels, strict=True) if y]) - np.mean(
        [c for c, y in zip(cos, labels, strict=True) if not y]
    )
    assert abs(ablation.paraphrase_gap(a, b, labels).item() - by_hand) < 1e-6


@pytest.mark.parametrize(
    "labels, words",
    [
        (torch.ones(6, dtype=torch.bool), "every pair is marked as one kind (paraphrases)"),
        (torch.zeros(6, dtype=torch.long), "every pair is marked as one kind (non-paraphrases)"),
        (torch.tensor([0, 1, 2, 1, 0, 1]), "True/False (or 1/0)"),
        (torch.tensor([True, False]), "one label per pair (6)"),
        ("yes", "1-d tensor"),
    ],
)
def test_paraphrase_gap_refuses_labels_it_cannot_use(labels, words):
    a, b = _pairs()
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        ablation.paraphrase_gap(a, b, labels)


def test_paraphrase_gap_refuses_mismatched_sides():
    a, b = _pairs()
    with pytest.raises(ValueError, match=r"same shape \[pairs, d\]"):
        ablation.paraphrase_gap(a, b[:4], torch.tensor([True, False] * 3))


def test_random_heads_refuses_more_heads_than_there_are():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="k=100 distinct heads asked for, but only 72"):
        ablation.random_heads(100, g)
    with pytest.raises(ValueError, match="only 70 can be drawn .* minus 2 excluded"):
        ablation.random_heads(71, g, exclude=[(0, 0), (1, 1)])
    with pytest.raises(ValueError, match="k must be a whole number"):
        ablation.random_heads(2.5, g)
    assert len(ablation.random_heads(72, g)) == 72  # every head, once
    assert len(ablation.random_heads(np.int64(3), g)) == 3
    assert ablation.random_heads(0, g) == []
