"""course_utils.translation: the phrase task, the encoder-decoder, decoding and the lesson's claims (lesson 05c)."""

import math
import re

import pytest
import torch
import torch.nn.functional as F

from course_utils.attention import MultiHeadAttention
from course_utils.translation import (
    ADJECTIVES,
    HELD_OUT_PAIRS,
    NOUNS,
    SOURCE_VOCAB,
    TARGET_VOCAB,
    DecoderLayer,
    TranslationTask,
    Translator,
    Vocabulary,
    alignment_accuracy,
    attention_to_noun,
    cross_attention,
    encode_batch,
    exact_match,
    gender_source,
    greedy_decode,
    swap_and_translate,
    swap_experiment,
    to_french,
    train,
    translate,
    word_alignment,
)

# ---------------------------------------------------------------- the task


@pytest.mark.parametrize(
    "english, french",
    [
        ("the blue car", "la voiture bleue"),
        ("the blue bike", "le vélo bleu"),
        ("a white flower", "une fleur blanche"),
        ("a red table", "une table rouge"),
        ("the car", "la voiture"),
        ("the red dog and a grey hat", "le chien rouge et un chapeau gris"),
        ("a pen and the green door", "un stylo et la porte verte"),
    ],
)
def test_to_french_follows_the_two_rules(english, french):
    assert to_french(english) == french


@pytest.mark.parametrize("sentence", ["the car blue", "blue car", "the big car", "the car and", "", "the the car"])
def test_to_french_refuses_sentences_outside_the_task(sentence):
    with pytest.raises(ValueError, match="determiner \\[adjective\\] noun"):
        to_french(sentence)


def test_to_french_wants_a_string():
    with pytest.raises(TypeError, match="must be a str"):
        to_french(["the", "car"])


def test_word_alignment_crosses_adjective_and_noun():
    assert word_alignment("the blue car") == [0, 2, 1]
    # "un chien rouge et la maison blanche" <- "a red dog and the white house"
    assert word_alignment("a red dog and the white house") == [0, 2, 1, 3, 4, 6, 5]
    assert word_alignment("the car and a pen") == [0, 1, 2, 3, 4]


def test_vocabulary_round_trip_and_specials():
    ids = TARGET_VOCAB.encode("la voiture bleue".split())
    eos = TARGET_VOCAB.index[Vocabulary.EOS]
    assert TARGET_VOCAB.decode([TARGET_VOCAB.index[Vocabulary.BOS], *ids, eos, ids[0]]) == ["la", "voiture", "bleue"]
    assert SOURCE_VOCAB.pad_id == TARGET_VOCAB.pad_id == 0
    with pytest.raises(ValueError, match="unknown words \\['voiture'\\]"):
        SOURCE_VOCAB.encode(["the", "voiture"])


def test_encode_batch_pads_and_shifts_for_teacher_forcing():
    (source, target_in), target_out = encode_batch(["the blue car", "a dog and the red house"])
    assert source.shape == (2, 6) and target_in.shape == target_out.shape == (2, 7)
    assert source[0, 3:].tolist() == [0, 0, 0]
    bos, eos = TARGET_VOCAB.index[Vocabulary.BOS], TARGET_VOCAB.index[Vocabulary.EOS]
    assert (target_in[:, 0] == bos).all()
    # the decoder reads word i-1 and must write word i
    assert target_in[0, 1:4].tolist() == target_out[0, :3].tolist()
    assert target_out[0, 3].item() == eos and target_out[0, 4:].tolist() == [-100] * 3
    assert target_in[0, 4:].tolist() == [0] * 3
    assert TARGET_VOCAB.decode(target_out[1].tolist()) == "un chien et la maison rouge".split()


def test_encode_batch_wants_a_list():
    with pytest.raises(ValueError, match="non-empty list"):
        encode_batch("the blue car")


def _pairs(sentence):
    words = sentence.split()
    return {(a, n) for a, n in zip(words, words[1:], strict=False) if a in ADJECTIVES and n in NOUNS}


def test_held_out_pairs_are_new_only_as_pairs():
    assert ("blue", "car") in HELD_OUT_PAIRS
    for adjective in ADJECTIVES:  # each adjective keeps a masculine and a feminine noun in training
        genders = {g for noun, (_, g) in NOUNS.items() if (adjective, noun) not in HELD_OUT_PAIRS}
        assert genders == {"m", "f"}, adjective
    for noun in NOUNS:  # each noun keeps adjectives in training
        assert sum((a, noun) not in HELD_OUT_PAIRS for a in ADJECTIVES) >= len(ADJECTIVES) - 1


def test_training_sentences_never_contain_a_held_out_pair():
    task = TranslationTask()
    sentences = task.training_sentences(3000, torch.Generator().manual_seed(0))
    assert not set().union(*map(_pairs, sentences)) & HELD_OUT_PAIRS
    assert 0.4 < sum(" and " in s for s in sentences) / len(sentences) < 0.6


def test_held_out_sentences_are_distinct_new_and_reproducible():
    task = TranslationTask()
    held_out = task.held_out(300, seed=1)
    assert len(held_out) == len(set(held_out)) == 300
    assert all(_pairs(s) & HELD_OUT_PAIRS for s in held_out)
    assert {"the blue car", "a blue car"} <= set(held_out)
    assert task.held_out(300, seed=1) == held_out
    # held-out phrases stand first and second in the two-phrase sentences
    two = [s.split(" and ") for s in held_out if " and " in s]
    assert any(_pairs(a) & HELD_OUT_PAIRS and not _pairs(b) & HELD_OUT_PAIRS for a, b in two)
    assert any(_pairs(b) & HELD_OUT_PAIRS and not _pairs(a) & HELD_OUT_PAIRS for a, b in two)


def test_task_refuses_a_share_outside_0_1():
    with pytest.raises(ValueError, match="between 0 and 1"):
        TranslationTask(two_phrases=1.5)


# ---------------------------------------------------------------- cross-attention and the decoder layer


def _by_hand(mha, dec, enc, real):
    """Cross-attention from the layer's weights with PyTorch's own attention (an independent oracle)."""
    b, h = dec.shape[0], mha.num_heads

    def heads(x, linear):
        return linear(x).reshape(b, x.shape[1], h, -1).transpose(1, 2)

    q, k, v = heads(dec, mha.query_linear), heads(enc, mha.key_linear), heads(enc, mha.value_linear)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=real[:, None, None, :])
    return mha.output_linear(out.transpose(1, 2).reshape(b, dec.shape[1], -1))


def test_cross_attention_matches_pytorch_and_has_the_queries_length():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, qkv_bias=True).eval()
    dec, enc = torch.randn(2, 3, 8), torch.randn(2, 6, 8)
    real = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    with torch.no_grad():
        out = cross_attention(mha, dec, enc, real)
        assert out.shape == (2, 3, 8)  # one vector per decoder (French) position
        assert torch.allclose(out, _by_hand(mha, dec, enc, real), atol=1e-5)
        assert mha.attention_weights.shape == (2, 2, 3, 6)
        assert mha.attention_weights[1, :, :, 4:].abs().max() == 0  # no weight on padding
        # what stands at the padding positions of the encoder output does not matter
        changed = enc.clone()
        changed[1, 4:] = 100.0
        assert torch.allclose(cross_attention(mha, dec, changed, real), out, atol=1e-6)


def test_decoder_layer_cannot_see_later_french_words():
    torch.manual_seed(0)
    layer = DecoderLayer(8, 2, 16).eval()
    x, enc = torch.randn(1, 5, 8), torch.randn(1, 4, 8)
    real = torch.ones(1, 4, dtype=torch.bool)
    later_changed = x.clone()
    later_changed[:, 3:] += 5.0
    with torch.no_grad():
        a, b = layer(x, enc, real), layer(later_changed, enc, real)
    assert torch.allclose(a[:, :3], b[:, :3], atol=1e-6)
    assert not torch.allclose(a[:, 3:], b[:, 3:], atol=1e-3)


# ---------------------------------------------------------------- the model


def test_translator_shapes_and_weights():
    torch.manual_seed(0)
    model = Translator(d_model=16, num_heads=2, num_decoder_layers=2).eval()
    batch, target_out = encode_batch(["the blue car", "a dog and the red house"])
    with torch.no_grad():
        logits = model(batch)
    assert logits.shape == (*target_out.shape, len(TARGET_VOCAB))
    weights = model.cross_attentions()
    assert weights.shape == (2, 2, 2, 7, 6)  # [decoder layers, B, heads, L_tgt, L_src]
    assert torch.allclose(weights.sum(-1), torch.ones(2, 2, 2, 7), atol=1e-5)
    assert weights[:, 0, :, :, 3:].abs().max() == 0  # "the blue car" is padded after 3 words


def test_padding_does_not_change_a_sentences_scores():
    torch.manual_seed(0)
    model = Translator().eval()
    alone, _ = encode_batch(["the blue car"])
    (source, target_in), _ = encode_batch(["the blue car", "a dog and the red house"])
    with torch.no_grad():
        by_itself = model(alone)
        in_a_batch = model((source, target_in))[:1, : by_itself.shape[1]]
    assert torch.allclose(by_itself, in_a_batch, atol=1e-5)


def test_translator_refuses_bad_input():
    model = Translator()
    with pytest.raises(TypeError, match="pair \\(source, target_in\\)"):
        model(torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="source ids must lie in"):
        model((torch.full((1, 3), 99), torch.ones(1, 2, dtype=torch.long)))
    with pytest.raises(ValueError, match="integer tensor"):
        model((torch.zeros(1, 3), torch.ones(1, 2, dtype=torch.long)))
    with pytest.raises(RuntimeError, match="run the model on an input first"):
        Translator().cross_attentions()


def test_greedy_decoding_feeds_back_its_own_most_likely_word():
    torch.manual_seed(1)
    model = Translator().eval()  # untrained: any sequence of words will do
    (source, _), _ = encode_batch(["the blue car", "a pen and the green door"])
    written = greedy_decode(model, source, max_len=5)
    assert written.shape[0] == 2 and written.shape[1] <= 5
    bos, eos = TARGET_VOCAB.index[Vocabulary.BOS], TARGET_VOCAB.index[Vocabulary.EOS]
    for row in range(2):
        so_far = [bos]
        for word in written[row].tolist():
            if eos in so_far:  # after </s> a row only pads
                assert word == TARGET_VOCAB.pad_id
            else:
                with torch.no_grad():
                    logits = model((source[row : row + 1], torch.tensor([so_far])))
                assert word == logits[0, -1].argmax().item()
            so_far.append(word)


def test_attention_to_noun_averages_article_and_adjective_rows():
    torch.manual_seed(0)
    model = Translator(num_encoder_layers=2).eval()
    sentences = ["the blue car", "a dog and the red house"]
    shares = attention_to_noun(model, sentences)
    assert shares.shape == (2, 2)  # [encoder layers, heads]
    by_hand = []
    for sentence, pairs in zip(sentences, [[(0, 2), (1, 2)], [(0, 1), (3, 5), (4, 5)]], strict=True):
        (source, _), _ = encode_batch([sentence])
        with torch.no_grad():
            model.encode(source)
        weights = model.encoder.attentions()[:, 0]  # [layers, heads, L, L]
        by_hand += [weights[:, :, q, k] for q, k in pairs]
    assert torch.allclose(shares, torch.stack(by_hand).mean(0), atol=1e-6)


@pytest.fixture(scope="module")
def trained():
    torch.manual_seed(0)
    model = Translator()
    history = train(model, TranslationTask(), steps=200, progress=False)
    return model, history


def test_the_lessons_translator_learns_held_out_pairs(trained):
    model, history = trained
    held_out = TranslationTask().held_out(300, seed=1)
    assert history["loss"][0] > 0.5 * math.log(len(TARGET_VOCAB)) and history["loss"][-1] < 0.05
    assert exact_match(model, held_out) >= 0.95
    assert translate(model, ["the blue car"]) == ["la voiture bleue"]
    assert not model.training


def test_the_lessons_translator_aligns_crossing_words(trained):
    model, _ = trained
    assert alignment_accuracy(model, ["the blue car"]) == 1.0
    assert alignment_accuracy(model, TranslationTask().held_out(300, seed=1)) >= 0.9
    # an untrained model does not line up the words
    torch.manual_seed(0)
    assert alignment_accuracy(Translator(), TranslationTask().held_out(300, seed=1)) < 0.5
    # in this run the article and the adjective read their noun in the encoder (the route of the gender below)
    assert attention_to_noun(model, TranslationTask().held_out(300, seed=1)).max() > 0.4


def test_swap_experiment_counts_every_phrase(trained):
    model, _ = trained
    counts, translations = swap_experiment(model, position=1)
    assert counts["phrases"] == len(translations) == 2 * 7 * 12
    assert counts["adjectives with two forms"] == 2 * 5 * 12  # rouge and jaune have one form
    assert translations["the blue car"] == "la voiture bleue"  # the adjective's own vector does not carry the gender
    assert counts["unchanged"] >= 160


def test_in_the_lessons_run_the_article_vector_carries_the_gender(trained):
    """Seed 0 only: lesson 05c shows that translators trained from other seeds read it from the noun."""
    model, _ = trained
    counts, translations = swap_experiment(model, position=0)  # "the" of "the blue car" taken from "the blue dog"
    assert counts["article follows donor"] >= 160
    assert counts["adjective follows donor"] >= 0.8 * counts["adjectives with two forms"]
    assert translations["the blue car"].startswith("le ")


def test_translate_takes_one_string_as_one_sentence(trained):
    model, _ = trained
    assert translate(model, "the blue car") == "la voiture bleue"
    assert exact_match(model, "the blue car") == 1.0


@pytest.mark.parametrize(
    "call, error, phrase",
    [
        (lambda: encode_batch(["the blue car", 3]), TypeError, "every sentence must be a str"),
        (lambda: encode_batch(("the car" for _ in range(2))), ValueError, "non-empty list of strings"),
        (lambda: exact_match(Translator(), []), ValueError, "at least one sentence"),
        (lambda: swap_experiment(Translator(), 3), ValueError, "0 (article), 1 (adjective) or 2 (noun)"),
        (lambda: swap_and_translate(Translator(), ["the blue car"], ["the dog"], 2), ValueError, "as many words"),
        (lambda: swap_and_translate(Translator(), ["the car"], ["the dog", "a car"], 1), ValueError, "one donor per"),
        (lambda: swap_and_translate(Translator(), ["the car"], ["the dog"], 2), ValueError, "word position 0..1"),
        (lambda: swap_and_translate(Translator(), "the car", "the dog", 1), TypeError, "lists of strings"),
    ],
)
def test_bad_input_gets_an_error_that_says_what_was_expected(call, error, phrase):
    with pytest.raises(error, match=re.escape(phrase)):
        call()


def test_swap_and_translate_replaces_one_vector_after_the_encoder(trained):
    model, _ = trained
    # the noun's vector swapped: what the article and the noun become is read from the patched vector only
    swapped = swap_and_translate(model, ["the blue car", "a red dog"], ["the blue dog", "a red car"], 2)
    assert swapped == [swap_experiment(model, 2)[1][s] for s in ["the blue car", "a red dog"]]
    # swapping in the sentence's own vector changes nothing
    assert swap_and_translate(model, ["the blue car"], ["the blue car"], 1) == ["la voiture bleue"]


@pytest.mark.parametrize(
    ("article_follows", "noun_follows", "source"),
    [
        (168, 0, "the"),
        (152, 16, "the"),
        (8, 160, "noun"),
        (16, 152, "noun"),
        (151, 0, "mixed"),
        (37, 131, "mixed"),
        (90, 80, "mixed"),
    ],
)
def test_gender_source_needs_nine_tenths_one_way_and_a_tenth_the_other(article_follows, noun_follows, source):
    assert gender_source(article_follows, noun_follows) == source


@pytest.mark.parametrize("bad", [-1, 169, 0.5, "8", True])
def test_gender_source_wants_counts_of_phrases(bad):
    with pytest.raises(ValueError, match="noun_follows must be a count of phrases from 0 to 168"):
        gender_source(0, bad)
