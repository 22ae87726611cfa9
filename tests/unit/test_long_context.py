"""course_utils.long_context: RoPE scaling's frequencies against transformers' reference, and bad input."""

import logging
import math

import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from course_utils.language_model import load_trained_model
from course_utils.long_context import logits_with_rope, rope_inverse_frequencies
from course_utils.modern import rope_frequencies

OPTIONS = {"linear": {}, "dynamic": {}, "yarn": {}, "llama3": {"low_freq_factor": 1.0, "high_freq_factor": 4.0}}


def _reference(kind, head_dim, base, factor, original_length, seq_len=None):
    params = {"rope_type": kind, "rope_theta": base, "factor": factor, **OPTIONS[kind]}
    if kind in ("yarn", "llama3"):
        params["original_max_position_embeddings"] = original_length
    longer = original_length * factor if kind in ("yarn", "llama3") else original_length
    logging.getLogger("transformers").setLevel(logging.ERROR)
    config = LlamaConfig(
        hidden_size=4 * head_dim,
        num_attention_heads=4,
        head_dim=head_dim,
        max_position_embeddings=int(longer),
        rope_parameters=params,
    )
    return ROPE_INIT_FUNCTIONS[kind](config, "cpu", seq_len)


@pytest.mark.parametrize("kind", ["linear", "dynamic", "yarn", "llama3"])
@pytest.mark.parametrize("head_dim", [16, 64, 128])
@pytest.mark.parametrize("factor", [2.0, 4.0, 8.0, 32.0])
@pytest.mark.parametrize("original_length", [128, 8192])
def test_frequencies_equal_transformers_reference(kind, head_dim, factor, original_length):
    seq_len = 3 * original_length if kind == "dynamic" else None
    expected, expected_scaling = _reference(kind, head_dim, 10000.0, factor, original_length, seq_len)
    options = {"seq_len": seq_len} if seq_len else OPTIONS[kind]
    got, scaling = rope_inverse_frequencies(kind, head_dim, 10000.0, factor, original_length, **options)
    assert got.shape == (head_dim // 2,) and got.dtype == torch.float32
    assert (got - expected).abs().max() <= 1e-6
    assert scaling == pytest.approx(expected_scaling, abs=1e-6)


def test_default_is_lesson_08s_rope_and_dynamic_changes_nothing_up_to_the_trained_length():
    assert torch.allclose(rope_inverse_frequencies("default", 16, 10000.0)[0], rope_frequencies(16), atol=1e-7)
    plain = rope_inverse_frequencies("default", 16, 10000.0)[0]
    assert torch.equal(rope_inverse_frequencies("dynamic", 16, 10000.0, 4.0, 128, seq_len=100)[0], plain)


def test_ntk_keeps_the_fastest_dimension_and_slows_the_slowest_by_the_factor():
    plain = rope_inverse_frequencies("default", 16, 10000.0)[0].double()
    ntk = rope_inverse_frequencies("ntk", 16, 10000.0, 8.0)[0].double()
    assert ntk[0].item() == pytest.approx(1.0) and ntk[-1].item() == pytest.approx(plain[-1].item() / 8, rel=1e-6)
    assert (ntk <= plain * (1 + 1e-6)).all()


def test_yarn_keeps_fast_dimensions_interpolates_slow_ones_and_tempers_attention():
    plain = rope_inverse_frequencies("default", 64, 10000.0)[0]
    yarn, scaling = rope_inverse_frequencies("yarn", 64, 10000.0, 4.0, 128)
    turns = 128 * plain.double() / (2 * math.pi)  # how often each dimension turns over the trained length
    assert torch.equal(yarn[turns > 32], plain[turns > 32])
    assert torch.allclose(yarn[turns < 1], plain[turns < 1] / 4)
    assert scaling == pytest.approx(0.1 * math.log(4.0) + 1)


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: rope_inverse_frequencies("linear", 16, 10000.0, 0.0), "factor must be a number > 0"),
        (lambda: rope_inverse_frequencies("linear", 15, 10000.0, 2.0), "head_dim must be even"),
        (lambda: rope_inverse_frequencies("xpos", 16, 10000.0, 2.0), "kind must be one of 'default'"),
        (lambda: rope_inverse_frequencies("yarn", 16, 10000.0, 2.0), "original_length"),
        (lambda: rope_inverse_frequencies("yarn", 16, 10000.0, 2.0, 128, beta=3), "'yarn' takes no option beta"),
        (
            lambda: rope_inverse_frequencies("dynamic", 16, 10000.0, 2.0, 128, seq_len=0),
            r"seq_len \(the length being read\) must be a positive int",
        ),
        (lambda: rope_inverse_frequencies("ntk", 16, 1.0, 2.0), "base must be > 1"),
    ],
)
def test_bad_input_gets_a_clear_error(call, words):
    with pytest.raises(ValueError, match=words):
        call()


def test_the_model_with_its_own_frequencies_is_the_model_and_reads_past_128_tokens():
    model, _ = load_trained_model(0)
    tokens = torch.randint(0, model.vocab_size, (2, 40), generator=torch.Generator().manual_seed(0))
    own = rope_inverse_frequencies("default", model.blocks[0].attention.head_dim, 10000.0)[0]
    with torch.no_grad():
        assert (logits_with_rope(model, tokens, own) - model(tokens)).abs().max() <= 1e-5
    long = torch.randint(0, model.vocab_size, (1, 300), generator=torch.Generator().manual_seed(1))
    yarn, scaling = rope_inverse_frequencies("yarn", 16, 10000.0, 4.0, 128)
    scaled = logits_with_rope(model, long, yarn, scaling)
    assert scaled.shape == (1, 300, model.vocab_size) and torch.isfinite(scaled).all()
    with torch.no_grad():  # the first position attends to itself alone: RoPE cannot change it
        assert (scaled[:, 0] - model(long[:, :1])[:, 0]).abs().max() <= 1e-5
    with pytest.raises(ValueError, match=r"inv_freq must be a tensor \[head_dim / 2\] = \[8\]"):
        logits_with_rope(model, tokens, own[:4])
