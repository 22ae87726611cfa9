"""course_utils.language_model refuses what it cannot use, with an error that says what was expected,
where it used to return a wrong answer (a greedy text, nan, a wrong character) or fail far from the slip."""

import pytest
import torch

from course_utils import language_model as lm


@pytest.fixture(scope="module")
def small_model():
    torch.manual_seed(0)
    return lm.LanguageModel(vocab_size=13, d_model=16, num_heads=2, num_layers=2, context=8).eval()


PROMPT = torch.tensor([[1, 2, 3]])


@pytest.mark.parametrize(
    "sampling",
    [{"top_k": 3}, {"top_p": 0.9}, {"top_k": 3, "top_p": 0.9}, {"generator": torch.Generator().manual_seed(0)}],
)
def test_generate_refuses_sampling_settings_without_a_temperature(small_model, sampling):
    # temperature=None decodes greedily: the filters would be ignored and the text the argmax one
    with pytest.raises(ValueError, match=r"temperature=None decodes greedily.*temperature=1\.0"):
        lm.generate(small_model, PROMPT, 4, **sampling)


def test_generate_with_a_temperature_samples_from_the_filtered_distribution(small_model):
    # top_k=1 keeps only the most probable token, so sampling equals greedy decoding
    greedy = lm.generate(small_model, PROMPT, 6)
    sampled = lm.generate(small_model, PROMPT, 6, temperature=1.0, top_k=1, generator=torch.Generator())
    assert torch.equal(sampled, greedy)


def test_evaluate_loss_refuses_ids_shorter_than_one_window(small_model):
    ids = torch.arange(8) % 13  # a window is context + 1 = 9 tokens
    with pytest.raises(ValueError, match="ids must hold at least 9 tokens, got 8"):
        lm.evaluate_loss(small_model, ids, context=8)
    assert torch.isfinite(torch.tensor(lm.evaluate_loss(small_model, torch.arange(9) % 13, context=8)))


@pytest.mark.parametrize(
    "ids, context, match",
    [
        (torch.arange(20).float(), 8, "1-D integer tensor"),
        (torch.arange(20)[None], 8, "1-D integer tensor"),
        (torch.arange(20), 0, "context must be a positive int"),
        (torch.full((20,), 13), 8, r"ids in 0\.\.12"),
    ],
)
def test_evaluate_loss_refuses_bad_ids_and_context(small_model, ids, context, match):
    with pytest.raises(ValueError, match=match):
        lm.evaluate_loss(small_model, ids, context)


def test_batch_sampler_refuses_a_text_with_no_room_for_a_crop():
    # crops are context + 1 tokens; the old sampler failed only later, inside torch.randint
    with pytest.raises(ValueError, match="ids must hold at least 10 tokens, got 9"):
        lm.batch_sampler(torch.arange(9), batch_size=2, context=8)
    inputs, targets = lm.batch_sampler(torch.arange(10), batch_size=2, context=8)(torch.Generator().manual_seed(0))
    assert inputs.shape == targets.shape == (2, 8) and torch.equal(inputs[:, 1:], targets[:, :-1])


@pytest.mark.parametrize("seed", [0.0, 1.0, True, "0"])
def test_load_trained_model_wants_an_int_among_the_stored_seeds(seed):
    # 0.0 == 0 passed the old membership test, then named the file language_model_seed0.0.pt
    with pytest.raises(ValueError, match=r"seed must be an int among the stored seeds \[0, 1, 2\]"):
        lm.load_trained_model(seed)


def test_decode_refuses_ids_outside_the_vocabulary_and_a_batch():
    tokenizer = lm.WordTokenizer(["a", " b", "."])
    assert tokenizer.words == [" b", ".", "a"]
    assert tokenizer.decode(torch.tensor([2, 0, 1])) == "a b."
    with pytest.raises(ValueError, match=r"ints in 0\.\.2, got \[-1\]"):
        tokenizer.decode([-1])  # would give "a", the last word
    with pytest.raises(ValueError, match=r"ints in 0\.\.2, got \[3\]"):
        tokenizer.decode(torch.tensor([3]))
    with pytest.raises(ValueError, match=r"one text \[T\].*decode\(ids\[0\]\)"):
        tokenizer.decode(torch.tensor([[0, 1]]))


@pytest.mark.parametrize("baseline", [lm.unigram_loss, lm.bigram_loss])
def test_baselines_refuse_ids_outside_the_vocabulary(baseline):
    train = torch.tensor([0, 1, 0, 5])  # 5 is not an id of a vocabulary of 2
    with pytest.raises(ValueError, match=r"train_ids must hold ids in 0\.\.1"):
        baseline(train, torch.tensor([0, 1, 1]), 2)
    with pytest.raises(ValueError, match="eval_ids must hold at least 2 tokens"):
        baseline(torch.tensor([0, 1, 0]), torch.tensor([1]), 2)


def test_a_vocabulary_entry_must_be_one_token():
    with pytest.raises(ValueError, match="each one word, mark or line break"):
        lm.WordTokenizer(["a", "b c"])
    with pytest.raises(ValueError, match="text must be a str"):
        lm.WordTokenizer.split(["a"])


def test_repeats_fill_the_first_crops_with_a_string_said_again():
    ids, words = torch.arange(300) % 7, torch.arange(20, 30)
    inputs, targets = lm.batch_sampler(ids, 4, 80, repeats=2, words=words)(torch.Generator().manual_seed(0))
    crops = torch.cat([inputs, targets[:, -1:]], dim=1)  # 81 tokens: a string of up to 64 shows its repeat
    length = next(n for n in range(8, 65) if torch.equal(crops[0, n:], crops[0, : 81 - n]))
    assert crops[:2].min() >= 20 and torch.equal(crops[1, length:], crops[1, : 81 - length])
    assert crops[2:].max() < 7  # the other crops are from the text
    with pytest.raises(ValueError, match=r"repeats must be an int in 0\.\.batch_size \(4\)"):
        lm.batch_sampler(ids, 4, 80, repeats=5, words=words)


def test_corpus_splits_wants_a_share_that_leaves_both_splits_non_empty():
    for share in (0, 100, 0.5):
        with pytest.raises(ValueError, match="validation_share must be a percentage"):
            lm.corpus_splits(num_stories=20, validation_share=share)


def test_streaming_loss_needs_two_tokens(small_model):
    with pytest.raises(ValueError, match="at least 2 tokens"):
        lm.streaming_loss(small_model, torch.tensor([[3]]))


def test_the_model_wants_a_list_of_caches(small_model):
    with pytest.raises(TypeError, match="caches must be a list of LayerCache, one per block"):
        small_model(PROMPT, lm.LayerCache())
    with pytest.raises(ValueError, match=r"one LayerCache per block \(2\), got 3"):
        small_model(PROMPT, [lm.LayerCache() for _ in range(3)])


def test_a_cache_refuses_a_batch_of_another_size(small_model):
    caches = [lm.LayerCache() for _ in small_model.blocks]
    small_model(torch.tensor([[1, 2], [3, 4]]), caches)
    with pytest.raises(ValueError, match="a cache belongs to one batch of texts"):
        small_model(torch.tensor([[5]]), caches)


def test_the_model_refuses_one_cache_shared_by_every_layer(small_model):
    # the same object for every layer used to run and give logits far off (6.16 on the stored model)
    with pytest.raises(ValueError, match=r"every layer shares one cache.*\[LayerCache\(\) for _ in model.blocks\]"):
        small_model(PROMPT, [lm.LayerCache()] * 2)
    caches = [lm.LayerCache() for _ in small_model.blocks]
    with pytest.raises(ValueError, match="every layer shares one cache"):
        small_model(PROMPT, [caches[0], caches[0]])
