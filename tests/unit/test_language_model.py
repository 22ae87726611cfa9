"""course_utils.language_model: the tokenizer, the loss, sampling, the model, its KV cache and sliding
window, and the stored model that scripts/train_language_model.py trained."""

import importlib.util
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from course_utils import language_model as lm
from course_utils.data import data_path
from course_utils.stories import story_corpus

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- the tokenizer (the corpus: test_stories.py)


def test_tokenizer_round_trip_and_unknown_words():
    tokenizer, train, valid = lm.corpus_splits()
    text = 'Once upon a time, "Look!" said Tomiro.\n'
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert [tokenizer.words[i] for i in tokenizer.encode(text)][:6] == ["Once", " upon", " a", " time", ",", ' "']
    assert tokenizer.vocab_size == len(set(lm.WordTokenizer.split(story_corpus(lm.NUM_STORIES))))
    assert len(train) > 8 * len(valid) > 0
    with pytest.raises(ValueError, match="not in the stories' vocabulary"):
        tokenizer.encode("Once upon a spaceship")
    with pytest.raises(ValueError, match="cannot cut"):
        tokenizer.encode("Once  upon")  # two spaces: no token spells them


# --------------------------------------------------------------------------- the loss


def test_next_token_loss_is_the_shifted_cross_entropy():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 7, generator=g)
    tokens = torch.randint(0, 7, (2, 5), generator=g)
    by_hand = (
        -sum(math.log(F.softmax(logits[b, t], -1)[tokens[b, t + 1]].item()) for b in range(2) for t in range(4)) / 8
    )
    assert lm.next_token_loss(logits, tokens).item() == pytest.approx(by_hand, rel=1e-5)


@pytest.mark.parametrize(
    "logits, tokens, match",
    [
        (torch.zeros(2, 5), torch.zeros(2, 5, dtype=torch.long), r"\[batch, seq_len, vocab\]"),
        (torch.zeros(2, 5, 3, dtype=torch.long), torch.zeros(2, 5, dtype=torch.long), "floating point"),
        (torch.zeros(2, 5, 3), torch.zeros(2, 5), "integer tensor"),
        (torch.zeros(2, 5, 3), torch.zeros(2, 4, dtype=torch.long), "must share"),
        (torch.zeros(2, 1, 3), torch.zeros(2, 1, dtype=torch.long), "seq_len >= 2"),
    ],
)
def test_next_token_loss_refuses_bad_input(logits, tokens, match):
    with pytest.raises((ValueError, TypeError), match=match):
        lm.next_token_loss(logits, tokens)


# --------------------------------------------------------------------------- filtering and sampling

INF = float("-inf")


def test_temperature_divides():
    logits = torch.tensor([1.0, 2.0, -4.0])
    assert torch.equal(lm.filter_logits(logits, temperature=2.0), torch.tensor([0.5, 1.0, -2.0]))


def test_top_k_keeps_ties_and_all_when_k_exceeds_vocab():
    logits = torch.tensor([[1.0, 3.0, 0.5, 3.0, 3.0]])
    assert torch.equal(lm.filter_logits(logits, top_k=2), torch.tensor([[INF, 3.0, INF, 3.0, 3.0]]))
    assert torch.equal(lm.filter_logits(logits, top_k=9), logits)


def test_top_p_keeps_the_crossing_token_and_at_least_one():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log()
    # 0.5 < 0.6, 0.5 + 0.3 crosses 0.6: the first two are kept
    assert torch.isfinite(lm.filter_logits(logits, top_p=0.6)).tolist() == [True, True, False, False]
    assert torch.isfinite(lm.filter_logits(logits, top_p=0.5)).tolist() == [True, False, False, False]
    assert torch.isfinite(lm.filter_logits(logits, top_p=1e-6)).tolist() == [True, False, False, False]
    assert torch.isfinite(lm.filter_logits(logits, top_p=1.0)).all()
    # kept logits are left as they are (no renormalisation), in any order of the vocabulary
    shuffled = logits[[2, 0, 3, 1]]
    assert torch.equal(lm.filter_logits(shuffled, top_p=0.6), torch.tensor([INF, logits[0], INF, logits[1]]))


def test_top_p_comes_after_temperature():
    logits = torch.tensor([2.0, 1.4, 0.9, 0.4, -0.2])
    assert torch.isfinite(lm.filter_logits(logits, top_p=0.7)).sum() == 2
    assert torch.isfinite(lm.filter_logits(logits, temperature=2.0, top_p=0.7)).sum() == 3


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"temperature": 0}, "temperature"),
        ({"temperature": -1.0}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_p": -0.1}, "top_p"),
    ],
)
def test_filter_logits_refuses_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        lm.filter_logits(torch.zeros(2, 4), **kwargs)


def test_filter_logits_refuses_integer_and_scalar_logits():
    with pytest.raises(TypeError, match="floating point"):
        lm.filter_logits(torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="vocab"):
        lm.filter_logits(torch.tensor(1.0))


def test_sample_next_token_follows_the_filtered_distribution():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]]).repeat(4000, 1)
    ids = lm.sample_next_token(logits, temperature=0.5, top_k=3, generator=torch.Generator().manual_seed(0))
    assert ids.shape == (4000,) and ids.dtype == torch.long
    expected = torch.tensor([2.0, 1.0, 0.0]).div(0.5).softmax(-1)
    counts = torch.bincount(ids, minlength=4).double() / 4000
    assert counts[3] == 0
    assert torch.allclose(counts[:3], expected.double(), atol=0.03)
    again = lm.sample_next_token(logits, temperature=0.5, top_k=3, generator=torch.Generator().manual_seed(0))
    assert torch.equal(ids, again)


def test_sample_next_token_wants_one_row_per_text():
    with pytest.raises(ValueError, match=r"\[batch, vocab\]"):
        lm.sample_next_token(torch.zeros(2, 3, 4))


# --------------------------------------------------------------------------- the model and its cache


@pytest.fixture(scope="module")
def small_model():
    torch.manual_seed(0)
    return lm.LanguageModel(vocab_size=13, d_model=16, num_heads=2, num_layers=2, context=32).eval()


def test_the_model_is_causal(small_model):
    tokens = torch.randint(0, 13, (2, 10), generator=torch.Generator().manual_seed(1))
    changed = tokens.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % 13
    with torch.no_grad():
        assert torch.allclose(small_model(tokens)[:, :6], small_model(changed)[:, :6], atol=1e-6)
        assert not torch.allclose(small_model(tokens)[:, 6:], small_model(changed)[:, 6:], atol=1e-3)


def test_cached_forward_equals_full_forward(small_model):
    tokens = torch.randint(0, 13, (2, 9), generator=torch.Generator().manual_seed(2))
    caches = [lm.LayerCache() for _ in small_model.blocks]
    with torch.no_grad():
        full = small_model(tokens)
        parts = [small_model(tokens[:, :4], caches)] + [small_model(tokens[:, t : t + 1], caches) for t in range(4, 9)]
    assert torch.allclose(torch.cat(parts, dim=1), full, atol=1e-5)


def test_generation_with_and_without_cache_agrees(small_model):
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    cached = lm.generate(small_model, prompt, 12, use_cache=True)
    assert torch.equal(cached, lm.generate(small_model, prompt, 12, use_cache=False))
    assert torch.equal(cached, lm.decode_with_cache(small_model, prompt, 12))
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    sampled = lm.generate(small_model, prompt, 12, temperature=1.0, top_k=5, generator=g1)
    assert torch.equal(
        sampled, lm.generate(small_model, prompt, 12, use_cache=False, temperature=1.0, top_k=5, generator=g2)
    )


def test_attention_weights_are_causal_rows_of_one(small_model):
    tokens = torch.randint(0, 13, (3, 7), generator=torch.Generator().manual_seed(3))
    weights = lm.attention_weights(small_model, tokens)
    assert weights.shape == (2, 3, 2, 7, 7)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 3, 2, 7))
    assert (weights.triu(1) == 0).all()
    assert torch.equal(small_model.attentions(), weights)


def test_sliding_cache_keeps_the_sinks_and_the_last_window():
    cache = lm.LayerCache(window=3, sinks=2)
    for t in range(8):
        value = torch.full((1, 1, 1, 1), float(t))
        cache.append(value, value)
        cache.evict()
    assert cache.keys.flatten().tolist() == [0.0, 1.0, 5.0, 6.0, 7.0]
    plain = lm.LayerCache(window=3)
    for t in range(8):
        plain.append(torch.full((1, 1, 1, 1), float(t)), torch.zeros(1, 1, 1, 1))
        plain.evict()
    assert plain.keys.flatten().tolist() == [5.0, 6.0, 7.0]
    with pytest.raises(ValueError, match="window"):
        lm.LayerCache(sinks=2)


def test_streaming_loss_without_eviction_equals_the_full_forward(small_model):
    tokens = torch.randint(0, 13, (2, 12), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        logits = small_model(tokens)
    per_position = F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none").mean(0)
    assert torch.allclose(lm.streaming_loss(small_model, tokens), per_position, atol=1e-5)
    assert torch.allclose(lm.streaming_loss(small_model, tokens, window=20, recompute=True), per_position, atol=1e-5)
    # a window of 4 recomputed: the prediction at t reads tokens t-4..t, as many as the cached window reads
    windowed = lm.streaming_loss(small_model, tokens, window=4, recompute=True)
    with torch.no_grad():
        at_8 = F.cross_entropy(small_model(tokens[:, 4:9])[:, -1], tokens[:, 9], reduction="none").mean()
    assert windowed[8].item() == pytest.approx(at_8.item(), abs=1e-5)
    # up to the first eviction the cached window reads the same tokens at the same positions
    cached = lm.streaming_loss(small_model, tokens, window=4)
    assert torch.allclose(cached[:5], windowed[:5], atol=1e-5) and not torch.allclose(cached, windowed, atol=1e-3)


def test_baselines_on_a_known_text():
    ids = torch.tensor([0, 1, 0, 1, 0, 1, 0, 1])
    # add-one smoothing: after 0 comes 1 four times out of 4 -> (4 + 1) / (4 + 2); after 1 comes 0 three
    # times out of 3 -> (3 + 1) / (3 + 2); the 7 pairs are scored
    expected = -(4 * math.log(5 / 6) + 3 * math.log(4 / 5)) / 7
    assert lm.bigram_loss(ids, ids, 2) == pytest.approx(expected, rel=1e-6)
    assert lm.unigram_loss(ids, ids, 2) == pytest.approx(math.log(2), rel=1e-6)


# --------------------------------------------------------------------------- the stored model


def _script():
    spec = importlib.util.spec_from_file_location("train_language_model", ROOT / "scripts" / "train_language_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_reproduces_the_stored_first_steps():
    script, stored = _script(), lm.trained_results()
    assert stored["settings"] == {**script.SETTINGS, "vocab_size": stored["settings"]["vocab_size"]}
    settings = {**stored["settings"], "steps": script.FIRST_STEPS}
    run, _ = script.train_one(settings, seed=0)
    assert run["first_losses"] == pytest.approx(stored["runs"]["0"]["first_losses"], rel=1e-4)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stored_weights_give_the_stored_validation_loss(seed):
    stored = lm.trained_results()
    model, tokenizer = lm.load_trained_model(seed)
    assert not model.training
    _, _, valid = lm.corpus_splits(stored["settings"]["num_stories"], stored["settings"]["validation_share"])
    loss = lm.evaluate_loss(model, valid, stored["settings"]["context"])
    assert loss == pytest.approx(stored["runs"][str(seed)]["validation_loss"], abs=1e-4)
    assert loss < stored["bigram_validation_loss"] < stored["unigram_validation_loss"]
    assert data_path(lm.weights_file(seed)).stat().st_size < 700_000


def test_load_trained_model_refuses_an_unknown_seed():
    with pytest.raises(ValueError, match="seeds"):
        lm.load_trained_model(7)
