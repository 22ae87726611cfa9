"""Bad input to the helpers of lessons 06-09 gets an error that says what was expected,
not a message from deep inside PyTorch (and never a silent answer)."""

import pytest
import torch

from course_utils import efficient, modern, pretrained
from course_utils.attention import MultiHeadAttention


@pytest.fixture(scope="module")
def model():
    return pretrained.load_model()


@pytest.mark.parametrize(
    "make, error, words",
    [
        (
            lambda: efficient.tiled_attention(*[torch.randn(2, 5, 8)] * 3, 2, causal="yes"),
            TypeError,
            "causal must be True or False",
        ),
        (lambda: efficient.attention_flops(1, 2, 3.5, 4, 8), ValueError, "n_q must be a positive int"),
        (lambda: efficient.attention_flops(1, 2, 4, -4, 8), ValueError, "n_k must be a positive int"),
        (
            lambda: efficient.generate(MultiHeadAttention(8, 2), [1, 2], 3),
            ValueError,
            r"prompt must be a tensor \[batch, P, d_model=8\]",
        ),
        (lambda: efficient.generate("layer", torch.randn(1, 2, 8), 3), TypeError, "MultiHeadAttention"),
        (lambda: modern.MultiHeadLatentAttention(16, 2, 4, 6, 4)(torch.randn(3, 8)), ValueError, r"d_model=16"),
        (
            lambda: modern.MultiHeadLatentAttention(16, 2, 4, 6, 4).compress(torch.randn(1, 3, 8)),
            ValueError,
            r"d_model=16",
        ),
        (
            lambda: pretrained.mean_pool(torch.randn(2, 5, 8), torch.ones(2, 4, dtype=torch.long)),
            ValueError,
            r"input_ids must be the \[batch, seq_len\] = \[2, 5\]",
        ),
        (
            lambda: pretrained.mean_pool(torch.randn(5, 8), torch.ones(5, dtype=torch.long)),
            ValueError,
            r"states must be a tensor \[batch, seq_len, d\]",
        ),
    ],
)
def test_bad_input_is_named(make, error, words):
    with pytest.raises(error, match=words):
        make()


def test_query_key_vectors_layer_must_be_a_whole_number(model):
    with pytest.raises(ValueError, match=r"layer must be in 0..5 \(a whole number\), got 1.0"):
        pretrained.query_key_vectors("the cat sat", 1.0, model)
    tokens, q, k = pretrained.query_key_vectors("the cat sat", torch.tensor(1), model)
    assert q.shape[0] == model.config.num_heads and len(tokens) == q.shape[1]


def test_attention_flops_accepts_numpy_and_torch_integers():
    import numpy as np

    assert efficient.attention_flops(np.int64(2), torch.tensor(3), 4, 5, 8) == 4 * 2 * 3 * 4 * 5 * 8
