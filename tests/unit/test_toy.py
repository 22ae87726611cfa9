"""The toy sentence: the slide's Orange row, computed (not stored) from course_utils/data/orange_toy.json."""

import json
import math

import pytest
import torch
import torch.nn as nn

from course_utils import orange_attention
from course_utils.data import data_path
from course_utils.toy import toy_projections, toy_qkv, toy_sentence

# The slide: query "Orange" over Orange, is, my, favorite, fruit. This is the spec.
SLIDE_ORANGE_ROW = [0.21, 0.03, 0.05, 0.31, 0.40]
TOKENS = ["Orange", "is", "my", "favorite", "fruit"]


def _raw():
    with open(data_path("orange_toy.json"), encoding="utf-8") as f:
        return json.load(f)


def _independent_weights():
    """softmax(Q K^T / sqrt(d_k)) straight from the JSON numbers, in float64, without course_utils."""
    raw = _raw()
    x = torch.tensor(raw["embeddings"], dtype=torch.float64)
    q = x @ torch.tensor(raw["query_weight"], dtype=torch.float64).T
    k = x @ torch.tensor(raw["key_weight"], dtype=torch.float64).T
    return torch.softmax(q @ k.T / math.sqrt(k.shape[-1]), dim=-1)


def test_tokens_are_the_slide_sentence():
    tokens, weights = orange_attention()
    assert tokens == TOKENS
    assert weights.shape == (5, 5)
    assert weights.dtype == torch.float32


def test_orange_row_rounds_to_the_slide():
    _, weights = orange_attention()
    assert [round(w, 2) for w in weights[0].tolist()] == SLIDE_ORANGE_ROW


def test_orange_row_is_not_on_a_rounding_edge():
    # at least 0.001 away from the rounding boundaries, so float32/GPU noise cannot flip a digit
    _, weights = orange_attention()
    for got, want in zip(weights[0].tolist(), SLIDE_ORANGE_ROW, strict=True):
        assert abs(got - want) < 0.004


def test_rows_sum_to_one_and_are_positive():
    _, weights = orange_attention()
    torch.testing.assert_close(weights.sum(-1), torch.ones(5))
    assert (weights > 0).all()


def test_weights_equal_an_independent_softmax():
    _, weights = orange_attention()
    torch.testing.assert_close(weights.double(), _independent_weights(), atol=1e-6, rtol=1e-6)


def test_other_rows_tell_the_lesson_story():
    # the explanations in lessons 01/02/04 rely on these argmaxes
    _, weights = orange_attention()
    best = {TOKENS[i]: TOKENS[int(weights[i].argmax())] for i in range(5)}
    assert best == {"Orange": "fruit", "is": "Orange", "my": "favorite", "favorite": "fruit", "fruit": "Orange"}


def test_sentence_and_projection_shapes():
    tokens, embeddings, features = toy_sentence()
    raw = _raw()
    assert tokens == TOKENS
    assert features == raw["feature_names"] and len(features) == embeddings.shape[1]
    assert embeddings.shape == (5, len(features)) and embeddings.dtype == torch.float32
    projections = toy_projections()
    for name in ("query_linear", "key_linear", "value_linear"):
        layer = getattr(projections, name)
        assert isinstance(layer, nn.Linear) and layer.bias is None
        assert layer.in_features == len(features)
    assert projections.query_linear.out_features == projections.key_linear.out_features == len(raw["qk_channel_names"])
    q, k, v = toy_qkv()
    torch.testing.assert_close(v, embeddings)  # identity value projection: values read in feature names
    assert q.shape == k.shape == (5, 4)


def test_projections_are_fresh_copies():
    # a lesson that trains or edits the projections must not change the stored toy for later calls
    projections = toy_projections()
    with torch.no_grad():
        projections.query_linear.weight.zero_()
    _, weights = orange_attention()
    assert round(weights[0, 4].item(), 2) == 0.40


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_same_row_on_gpu():
    _, weights = orange_attention(device="cuda")
    assert [round(w, 2) for w in weights[0].cpu().tolist()] == SLIDE_ORANGE_ROW
