"""The course's toy sentence: "Orange is my favorite fruit".

Five tokens with hand-made, readable embeddings (one named feature per
dimension) and query/key/value projections, stored in ``data/orange_toy.json``.
Every number is chosen by hand except one column of the query projection: the
"colour" column, which only "Orange" uses, was solved for (and rounded to two
decimals) so that the query "Orange" gives the slide's weights
.21 .03 .05 .31 .40 (Orange, is, my, favorite, fruit); lesson 01 redoes that
calculation. The attention weights are computed here, at run time, with the
course's reference ``scaled_dot_product_attention``.
"""

import json
from functools import lru_cache
from typing import NamedTuple

import torch
import torch.nn as nn

from course_utils.attention import scaled_dot_product_attention
from course_utils.data import data_path

__all__ = ["toy_data", "toy_sentence", "toy_projections", "toy_qkv", "orange_attention", "ToyProjections"]

TOY_FILE = "orange_toy.json"


class ToyProjections(NamedTuple):
    """The three learned projections of self-attention (no bias, as in the slides)."""

    query_linear: nn.Linear
    key_linear: nn.Linear
    value_linear: nn.Linear


@lru_cache(maxsize=1)
def _load():
    with open(data_path(TOY_FILE), encoding="utf-8") as f:
        return json.load(f)


def toy_data():
    """The whole JSON file as a dict (a fresh copy, so callers may change it)."""
    return json.loads(json.dumps(_load()))


def toy_sentence(device=None):
    """-> (tokens, embeddings [5, d_model] float32 tensor, feature_names)."""
    data = _load()
    embeddings = torch.tensor(data["embeddings"], dtype=torch.float32, device=device)
    return list(data["tokens"]), embeddings, list(data["feature_names"])


def _linear(weight, device):
    # nn.Linear stores its weight as [out_features, in_features] and computes x @ weight.T
    weight = torch.tensor(weight, dtype=torch.float32)
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=False, dtype=torch.float32)
    with torch.no_grad():
        layer.weight.copy_(weight)
    return layer.to(device)


def toy_projections(device=None):
    """-> ToyProjections(query_linear, key_linear, value_linear), each nn.Linear(bias=False)."""
    data = _load()
    return ToyProjections(
        _linear(data["query_weight"], device),
        _linear(data["key_weight"], device),
        _linear(data["value_weight"], device),
    )


def toy_qkv(device=None):
    """-> (Q [5, d_k], K [5, d_k], V [5, d_v]): the toy embeddings through the three projections."""
    _, embeddings, _ = toy_sentence(device)
    projections = toy_projections(device)
    with torch.no_grad():
        return tuple(layer(embeddings) for layer in projections)


def orange_attention(device=None):
    """-> (tokens, weights [5, 5]): row i = how much token i attends to each token.

    Computed with the reference scaled_dot_product_attention, so row 0 (the
    query "Orange") is the slide's .21 .03 .05 .31 .40 up to rounding.
    """
    tokens, _, _ = toy_sentence(device)
    q, k, v = toy_qkv(device)
    _, weights = scaled_dot_product_attention(q, k, v)
    return tokens, weights
