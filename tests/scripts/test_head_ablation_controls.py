"""Lesson 06b's stored controls (course_utils/data/head_ablation_controls.json) and the helpers that read them.

The file is made by scripts/head_ablation_controls.py; here its first draws and one layer of
its per-pair cosines are recomputed and must match, and the bootstrap helpers are checked
against explicit resampling.
"""

import importlib.util
from pathlib import Path

import pytest
import torch

from course_utils import ablation, pretrained

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "head_ablation_controls.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("head_ablation_controls", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def stored():
    return ablation.load_controls()


@pytest.fixture(scope="module")
def setting(script):
    return script.setting()


def test_stored_settings_are_the_scripts(script, stored):
    assert stored["settings"]["seed"] == script.SEED and stored["settings"]["draws"] == script.DRAWS
    assert stored["bias_controls"].shape == (script.DRAWS, 2) and stored["verb_controls"].shape == (script.DRAWS, 2)
    assert stored["zero_cosines"].shape == stored["mean_cosines"].shape == (6, 12, 48)


def test_stored_cosines_give_the_stored_one_head_effects(stored):
    _, is_paraphrase = ablation.load_pairs()
    intact = ablation.gap_from_cosines(stored["intact_cosines"], is_paraphrase)
    for kind in ("zero", "mean"):
        effects = intact - ablation.gap_from_cosines(stored[f"{kind}_cosines"], is_paraphrase)
        assert torch.allclose(effects, ablation.load_sweep(kind).double(), atol=3e-6), kind


def test_the_script_reproduces_the_heads_and_the_last_layer(setting, stored):
    model, pairs, is_paraphrase, bias_heads, sv_best = setting
    assert [tuple(h) for h in stored["settings"]["bias_heads"]] == bias_heads
    assert [tuple(h) for h in stored["settings"]["subject_verb_heads"]] == sv_best
    embed_pairs = ablation.pair_embedder(pairs, model)
    intact = ablation.pair_cosines(embed_pairs, torch.ones(6, 12)).double()
    assert torch.allclose(intact, stored["intact_cosines"], atol=2e-6)
    for head in (0, 9):
        cos = ablation.pair_cosines(embed_pairs, ablation.heads_mask([(5, head)])).double()
        assert torch.allclose(cos, stored["zero_cosines"][5, head], atol=2e-6), head


def test_the_script_reproduces_the_first_random_draws(script, setting, stored):
    model, pairs, is_paraphrase, bias_heads, sv_best = setting
    bias = torch.tensor(script.bias_controls(model, pairs, is_paraphrase, bias_heads, 2), dtype=torch.float64)
    verb = torch.tensor(script.verb_controls(model, sv_best, 2), dtype=torch.float64)
    assert torch.allclose(bias, stored["bias_controls"][:2], atol=2e-6)
    assert torch.allclose(verb, stored["verb_controls"][:2], atol=2e-6)


def test_bootstrap_weights_keep_both_groups_sizes():
    is_paraphrase = torch.tensor([True] * 5 + [False] * 3)
    w = ablation.bootstrap_weights(is_paraphrase, 50, torch.Generator().manual_seed(0))
    assert w.shape == (50, 8)
    assert torch.equal(w[:, :5].sum(1), torch.full((50,), 5.0)) and torch.equal(w[:, 5:].sum(1), torch.full((50,), 3.0))
    assert (w[:, :5].std(0) > 0).all()  # the samples differ


def test_weighted_gap_and_ranking_equal_explicit_resampling():
    g = torch.Generator().manual_seed(1)
    is_paraphrase = torch.tensor([True, False] * 4)
    cos = torch.rand(3, 8, generator=g, dtype=torch.float64)
    w = ablation.bootstrap_weights(is_paraphrase, 4, g)
    gaps, ranked = ablation.gap_from_cosines(cos, is_paraphrase, w), ablation.ranked_right(cos, is_paraphrase, w)
    assert gaps.shape == ranked.shape == (4, 3)
    for d in range(4):
        picks = torch.repeat_interleave(torch.arange(8), w[d].long())  # the sample, written out
        c, lab = cos[:, picks], is_paraphrase[picks]
        assert torch.allclose(gaps[d], c[:, lab].mean(1) - c[:, ~lab].mean(1))
        pairs = (c[:, lab][:, :, None] > c[:, ~lab][:, None, :]).double().mean((1, 2))
        assert torch.allclose(ranked[d], pairs)
    ones = torch.ones(1, 8)
    assert torch.allclose(
        ablation.gap_from_cosines(cos, is_paraphrase, ones)[0], ablation.gap_from_cosines(cos, is_paraphrase)
    )


def test_ranked_right_counts_combinations():
    is_paraphrase = torch.tensor([True, True, False, False])
    assert ablation.ranked_right(torch.tensor([0.9, 0.8, 0.1, 0.2]), is_paraphrase).item() == 1.0
    assert ablation.ranked_right(torch.tensor([0.1, 0.8, 0.5, 0.2]), is_paraphrase).item() == 0.5


def test_layer_cosines_agree_with_layer_separation():
    model = pretrained.load_model(device="cpu")
    pairs, is_paraphrase = ablation.load_pairs()
    cos = ablation.layer_cosines(pairs, model)
    gaps, ranked = ablation.layer_separation(pairs, is_paraphrase, model)
    assert cos.shape == (7, 48)
    assert torch.allclose(
        ablation.gap_from_cosines(cos, is_paraphrase), torch.tensor(gaps, dtype=torch.float64), atol=1e-6
    )
    assert torch.allclose(ablation.ranked_right(cos, is_paraphrase), torch.tensor(ranked, dtype=torch.float64))


@pytest.mark.parametrize(
    ("cos", "labels", "error"),
    [
        (torch.zeros(5), torch.tensor([True, False, True, False]), ValueError),
        (torch.zeros(4), torch.tensor([1, 0, 1, 0]), TypeError),
        (torch.zeros(2), torch.tensor([True, True]), ValueError),
    ],
)
def test_bad_pair_inputs_are_refused(cos, labels, error):
    with pytest.raises(error):
        ablation.gap_from_cosines(cos, labels)
