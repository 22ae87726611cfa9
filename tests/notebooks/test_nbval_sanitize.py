"""The nbval sanitize file masks exactly what may differ between machines, and no more."""

import re
from pathlib import Path

import numpy as np
from nbval.plugin import get_sanitize_patterns

from course_utils import viz

PATTERNS = get_sanitize_patterns((Path(__file__).resolve().parents[1] / "nbval_sanitize.cfg").read_text())


def sanitize(text):
    for regex, replace in PATTERNS:
        text = re.sub(regex, replace, text)
    return text


def _weights(seed, tokens=4):
    w = np.random.default_rng(seed).random((2, 3, tokens, tokens))
    return w / w.sum(-1, keepdims=True)


def test_device_names_and_tensor_suffixes_are_masked():
    assert sanitize("Seed: 0 | Device: cuda:0") == sanitize("Seed: 0 | Device: cpu")
    assert sanitize("tensor([1., 2.], device='cuda:0')") == "tensor([1., 2.])"
    assert sanitize("tensor(0.5000, device='cuda:0', dtype=torch.float64)") == "tensor(0.5000, dtype=torch.float64)"


def test_views_compare_structure_not_last_digits_of_weights():
    tokens = ["a", "b", "c", "d"]
    w = _weights(0)
    nudged = w + 4e-4 * np.eye(4)  # moves some thousandths, as GPU rounding can
    nudged /= nudged.sum(-1, keepdims=True)
    a, b = viz.head_view(w, tokens).html, viz.head_view(nudged, tokens).html
    assert a != b, "the test needs views whose weights differ"
    assert sanitize(a) == sanitize(b)
    assert sanitize(viz.model_view(w, tokens).html) == sanitize(viz.model_view(nudged, tokens).html)


def test_views_with_other_tokens_or_heads_still_differ():
    w = _weights(0)
    base = sanitize(viz.head_view(w, ["a", "b", "c", "d"]).html)
    assert base != sanitize(viz.head_view(w, ["a", "b", "c", "e"]).html)
    assert base != sanitize(viz.head_view(w, ["a", "b", "c", "d"], heads=[0, 1]).html)
