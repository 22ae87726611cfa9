"""course_utils.long_context: RoPE scaling's frequencies against transformers' reference, and bad input."""

import importlib.util
import json
import logging
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from course_utils import context_use
from course_utils import language_model as lm
from course_utils import long_context as lc
from course_utils.data import data_path
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
        (lambda: rope_inverse_frequencies("linear", 16, 10000.0, 0.0), "factor must be a finite number > 0"),
        (lambda: rope_inverse_frequencies("linear", 15, 10000.0, 2.0), "head_dim must be even"),
        (lambda: rope_inverse_frequencies("xpos", 16, 10000.0, 2.0), "kind must be one of 'default'"),
        (lambda: rope_inverse_frequencies("yarn", 16, 10000.0, 2.0), "original_length"),
        (lambda: rope_inverse_frequencies("yarn", 16, 10000.0, 2.0, 128, beta=3), "'yarn' takes no option beta"),
        (
            lambda: rope_inverse_frequencies("dynamic", 16, 10000.0, 2.0, 128, seq_len=0),
            r"seq_len \(the length being read\) must be a positive int",
        ),
        (lambda: rope_inverse_frequencies("ntk", 16, 1.0, 2.0), "base must be > 1"),
        (lambda: lc.yarn_frequencies(16, 10000.0, 4.0, 128, beta_fast=1, beta_slow=32), "beta_fast must be larger"),
        (lambda: lc.yarn_frequencies(16, 10000.0, -4.0, 128), "factor must be a finite number > 0"),
        (lambda: rope_inverse_frequencies("linear", 16, 10000.0, math.inf), "factor must be a finite number > 0"),
        (
            lambda: rope_inverse_frequencies("yarn", 16, 10000.0, 4.0, 128, beta_fast=math.inf),
            "beta_fast must be a finite",
        ),
        (lambda: rope_inverse_frequencies("ntk", 16, math.inf, 2.0), "base must be a finite number > 0"),
        (lambda: rope_inverse_frequencies("ntk", 16, 10000.0, torch.tensor(4.0)), r"use \.item\(\)"),
        (lambda: rope_inverse_frequencies("yarn", 16, 10000.0, 0.5, 128), "factor must be >= 1"),
        (lambda: rope_inverse_frequencies("dynamic", 16, 10000.0, 2.0, 128), "pass seq_len="),
    ],
)
def test_bad_input_gets_a_clear_error(call, words):
    with pytest.raises(ValueError, match=words):
        call()


def test_numpy_numbers_are_numbers():
    expected = rope_inverse_frequencies("dynamic", 16, 10000.0, 2.0, 128, seq_len=512)
    got = rope_inverse_frequencies("dynamic", 16, np.float32(10000.0), np.float64(2.0), 128, seq_len=np.int64(512))
    assert torch.allclose(got[0], expected[0]) and got[1] == expected[1]


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
    for scaling in (math.nan, 0.0, "1.2"):
        with pytest.raises(ValueError, match="attention_scaling .* must be a finite number > 0"):
            logits_with_rope(model, tokens, own, scaling)
    with pytest.raises(ValueError, match="kind must be one of .*'yarn_paper'"):
        lc.method_frequencies(model, "yarn-paper", 8.0, 256)


@pytest.fixture(scope="module")
def model_and_tokenizer():
    return load_trained_model(0)


def _own(model):
    return lc.method_frequencies(model, "default", 1.0, model.context)


def test_yarn_frequencies_are_rope_inverse_frequencies_yarn():
    for factor, betas in [(8.0, {}), (4.0, {"beta_fast": 16, "beta_slow": 2}), (1.0, {})]:
        inv_freq, scaling = lc.yarn_frequencies(16, 10000.0, factor, 128, **betas)
        expected, expected_scaling = rope_inverse_frequencies("yarn", 16, 10000.0, factor, 128, **betas)
        assert torch.equal(inv_freq, expected) and scaling == expected_scaling
    assert lc.yarn_frequencies(16, 10000.0, 8.0, 128)[1] == pytest.approx(0.1 * math.log(8) + 1)


def test_loss_by_position_and_entropy_are_the_models_own(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    texts = lc.long_texts(tokenizer, 100, 3)
    losses = lc.loss_by_position(model, texts, *_own(model))
    with torch.no_grad():
        logits = model(texts)
    expected = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), texts[:, 1:], reduction="none")
    assert losses.shape == (99,) and (losses - expected.mean(0)).abs().max() <= 1e-5
    weights = lm.attention_weights(model, texts)  # [layers, B, H, T, T]
    entropy = -(weights * weights.clamp_min(1e-30).log()).sum(-1).mean(dim=(1, 2))
    measured = lc.attention_entropy(model, texts, *_own(model))
    assert measured.shape == (2, 100) and (measured - entropy).abs().max() <= 1e-5
    assert measured[:, 0].abs().max() <= 1e-6  # the first token reads itself alone
    both = lc.loss_and_entropy(model, texts, *_own(model))
    assert (both[0] - expected.mean(0)).abs().max() <= 1e-5 and (both[1] - entropy).abs().max() <= 1e-5


def test_long_texts_are_the_held_out_stories_in_order(model_and_tokenizer):
    _, tokenizer = model_and_tokenizer
    ids = tokenizer.encode("".join(lm.validation_stories()))
    texts = lc.long_texts(tokenizer, 50, 4, skip=2)
    assert torch.equal(texts.reshape(-1), ids[100:300])
    with pytest.raises(ValueError, match="the held-out stories hold"):
        lc.long_texts(tokenizer, 10**6, 2)
    assert torch.equal(lc.long_texts(tokenizer, 50, 2, skip=np.int64(2)), lc.long_texts(tokenizer, 50, 2, skip=2))
    for skip in (-1, 1.5, True, 0.0, False):
        with pytest.raises(ValueError, match=r"skip \(texts to pass over: an int >= 0\) must be a positive int"):
            lc.long_texts(tokenizer, 50, 2, skip=skip)
    model, _ = model_and_tokenizer
    with pytest.raises(ValueError, match="texts must hold at least 1024 tokens"):
        lc.measure(model, tokenizer, "linear", 8.0, lc.long_texts(tokenizer, 300, 2))


def test_copy_losses_at_the_shortest_distance_are_lesson_10s_repeat_losses(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    _, second = context_use.repeat_losses(model, tokenizer, length=32, count=64, seed=0)
    assert lc.copy_losses(model, tokenizer, 32, *_own(model), length=32, count=64) == pytest.approx(second, abs=1e-5)
    tokens = lc.copy_probe_tokens(tokenizer, 96, length=32, count=8)
    assert tokens.shape == (8, 128) and torch.equal(tokens[:, :32], tokens[:, 96:])
    far = lc.copy_losses(model, tokenizer, 96, *_own(model), length=32, count=8)
    assert far > second  # copying 64 story tokens later is harder than straight after
    with pytest.raises(ValueError, match="distance must be at least length"):
        lc.copy_losses(model, tokenizer, 8, *_own(model))
    with pytest.raises(ValueError, match="length must be at least 2"):
        lc.copy_losses(model, tokenizer, 32, *_own(model), length=1)


def test_yarn_paper_ramp_is_linear_in_the_turns():
    theta = rope_frequencies(128, base=10000.0, dtype=torch.float64)
    turns = 4096 * theta / (2 * math.pi)
    got, scaling = lc.yarn_paper_frequencies(128, 10000.0, 16.0, 4096)
    kept, interpolated = turns >= 32, turns <= 1
    assert torch.allclose(got[kept].double(), theta[kept], rtol=1e-6)
    assert torch.allclose(got[interpolated].double(), theta[interpolated] / 16, rtol=1e-6)
    i = int(((turns > 1) & (turns < 32)).nonzero()[0])  # a pair on the ramp: mixed by (r - 1) / 31
    keep = (turns[i] - 1) / 31
    assert got[i].item() == pytest.approx(((1 - keep) * theta[i] / 16 + keep * theta[i]).item(), rel=1e-6)
    assert scaling == pytest.approx(0.1 * math.log(16) + 1)
    index_ramp, _ = lc.yarn_frequencies(128, 10000.0, 16.0, 4096)
    assert not torch.allclose(got, index_ramp, rtol=1e-3)  # the two ramps differ on the pairs between
    with pytest.raises(ValueError, match="factor"):
        lc.yarn_paper_frequencies(16, 10000.0, 0.0, 128)


def test_angle_ratios():
    theta = rope_frequencies(16)
    full_turn = 127 * theta.double() >= 2 * math.pi  # the pairs that made a full turn in 128 tokens
    assert 0 < full_turn.sum() < 8
    same = lc.angle_ratios(theta, 128, theta, 128)
    assert torch.equal(same.isnan(), full_turn) and torch.allclose(same[~full_turn], torch.ones(1, dtype=torch.float64))
    assert torch.allclose(
        lc.angle_ratios(theta, 1024, theta, 128)[~full_turn], torch.tensor(1023 / 127, dtype=torch.float64)
    )
    linear, _ = rope_inverse_frequencies("linear", 16, 10000.0, 8.0)
    ratios = lc.angle_ratios(linear, 8 * 127 + 1, theta, 128)  # interpolation: position 1016 turns as far as 127
    assert torch.allclose(ratios[~full_turn], torch.ones(1, dtype=torch.float64), atol=1e-6)
    for call, words in [
        (lambda: lc.angle_ratios(theta.tolist(), 1024, theta, 128), "inv_freq must be a 1-D tensor"),
        (lambda: lc.angle_ratios(theta[:4], 1024, theta, 128), "must be of one model's heads"),
        (lambda: lc.angle_ratios(theta, 0, theta, 128), "length must be a positive int"),
        (lambda: lc.angle_ratios(theta, 1024, theta, 1), "at least 2 tokens"),
    ]:
        with pytest.raises(ValueError, match=words):
            call()


def test_dynamic_ntk_is_the_model_up_to_the_trained_length(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    texts = lc.long_texts(tokenizer, 1024, 2)
    dynamic = lc.measure(model, tokenizer, "dynamic", 8.0, texts, distances=(32,))
    default = lc.measure(model, tokenizer, "default", 8.0, texts, distances=(32,))
    assert dynamic["loss 0-127"] == pytest.approx(default["loss 0-127"], abs=1e-6)
    assert dynamic["copy 32"] == pytest.approx(default["copy 32"], abs=1e-6)
    assert dynamic["loss 128-255"] != pytest.approx(default["loss 128-255"], abs=1e-3)
    own = lc.loss_by_position(model, texts, *_own(model))  # the buckets are the same positions for both
    assert default["loss 512-1023"] == pytest.approx(own[512:].mean().item(), abs=1e-6)


def test_rope_scaled_model_trains_the_models_own_weights(model_and_tokenizer):
    _, tokenizer = model_and_tokenizer
    model, _ = load_trained_model(1)  # its own copy: the backward below leaves gradients on it
    inv_freq, scaling = lc.method_frequencies(model, "yarn", 4.0, 512)
    wrapped = lc.RopeScaledModel(model, inv_freq, scaling)
    tokens = lc.long_texts(tokenizer, 200, 2)
    assert torch.equal(wrapped(tokens), logits_with_rope(model, tokens, inv_freq, scaling))
    wrapped(tokens).sum().backward()
    assert model.token_embedding.weight.grad is not None and "inv_freq" not in dict(wrapped.named_parameters())
    with pytest.raises(ValueError, match=f"at most {lc.MAX_LENGTH} tokens"):
        logits_with_rope(model, torch.zeros(1, lc.MAX_LENGTH + 1, dtype=torch.long), inv_freq, scaling)
    with pytest.raises(ValueError, match="dynamic NTK changes with the length read"):
        lc.fine_tune(model, "dynamic", 8.0, tokens[0], tokens[0], 1, 0)


def _script():
    path = Path(__file__).resolve().parents[2] / "scripts" / "long_context_runs.py"
    spec = importlib.util.spec_from_file_location("long_context_runs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stored():
    return json.loads(data_path("long_context_runs.json").read_text())


def test_the_stored_runs_cover_every_seed_and_method():
    script, stored = _script(), _stored()
    assert stored["settings"] == script.SETTINGS and stored["seeds"] == [0, 1, 2]
    assert stored["methods"] == script.METHODS and stored["distances"] == list(lc.DISTANCES)
    for seed in ("0", "1", "2"):
        for kind in script.METHODS:
            run = stored["runs"][seed][kind]
            assert set(run["untrained"]) == {f"loss {a}-{b - 1}" for a, b in lc.BUCKETS} | {
                f"copy {d}" for d in lc.DISTANCES
            }
            if kind in script.FINE_TUNED:
                assert run["eval_steps"] == list(range(script.EVAL_EVERY, 301, script.EVAL_EVERY))
                assert all(len(curve) == len(run["eval_steps"]) for curve in run["curves"].values())


def test_the_script_reproduces_the_stored_first_steps_and_untrained_measures(kind="yarn"):
    """YaRN: its run goes through every part (ramp, temperature, RopeScaledModel, fine_tune, measure)."""
    script, stored = _script(), _stored()
    settings = {**stored["settings"], "steps": script.FIRST_STEPS}
    run = script.run_one(settings, seed=0, kind=kind, distances=(32, 192), evaluate_during=False)
    expected = stored["runs"]["0"][kind]
    assert run["first_losses"] == pytest.approx(expected["first_losses"], rel=1e-4)
    assert run["untrained"] == pytest.approx({k: expected["untrained"][k] for k in run["untrained"]}, abs=2e-4)
    assert len(run["untrained"]) == len(lc.BUCKETS) + 2
