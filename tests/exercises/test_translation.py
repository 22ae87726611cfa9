"""Lesson 05c's exercises `cross_attention`, `decode_greedily` and `swap_and_translate`: the solutions
pass and each planted mistake gets its own message.

The mistakes are written the way a learner would write them (one call of the layer wired wrongly;
a decoding loop with one slip), not taken from the checker's list.
"""

import copy

import torch
import torch.nn.functional as F

from course_utils.attention import MultiHeadAttention, causal_mask
from course_utils.exercises import check, checking, solution
from course_utils.exercises import translation as checker
from course_utils.translation import TARGET_VOCAB, Translator, decode_greedily, encode_batch, greedy_decode
from tests.exercises.asserts import assert_caught, assert_each_message_names_only_its_mistake, assert_passes

ID = "cross_attention"


def test_reference_solution_passes():
    assert_passes(ID, solution(ID))


def test_learner_style_solutions_pass():
    def positional(mha, decoder_states, encoder_output, source_padding_mask):
        return mha(decoder_states, encoder_output, encoder_output, None, source_padding_mask)

    def four_d_mask(mha, decoder_states, encoder_output, source_padding_mask):
        # the padding mask reshaped to [B, 1, 1, L_src] and passed as mask= is right too
        return mha(decoder_states, encoder_output, encoder_output, mask=source_padding_mask[:, None, None, :])

    assert_passes(ID, positional)
    assert_passes(ID, four_d_mask)


def test_stub_is_not_attempted():
    def stub(mha, decoder_states, encoder_output, source_padding_mask):
        raise NotImplementedError

    assert check(ID, stub, quiet=True).status == "not attempted"


def test_cross_attention_in_float32_arithmetic_is_named():
    def through_a_float32_copy(mha, decoder_states, encoder_output, source_padding_mask):
        layer, dtype = copy.deepcopy(mha).float(), decoder_states.dtype
        output = layer(
            decoder_states.float(), encoder_output.float(), encoder_output.float(), None, source_padding_mask
        )
        return output.to(dtype)

    assert_caught(ID, through_a_float32_copy, checking.FLOAT32_PRECISION)


def test_queries_and_keys_swapped():
    def swapped(mha, decoder_states, encoder_output, source_padding_mask):
        return mha(encoder_output, decoder_states, decoder_states, key_padding_mask=source_padding_mask)

    def swapped_without_mask(mha, decoder_states, encoder_output, source_padding_mask):
        return mha(encoder_output, decoder_states, decoder_states)

    assert_caught(ID, swapped, checker.SWAPPED)
    assert_caught(ID, swapped_without_mask, checker.SWAPPED)


def test_keys_or_values_from_the_decoder():
    def keys_from_decoder(mha, decoder_states, encoder_output, source_padding_mask):
        return mha(decoder_states, decoder_states, encoder_output, key_padding_mask=source_padding_mask)

    def values_from_decoder(mha, decoder_states, encoder_output, source_padding_mask):
        return mha(decoder_states, encoder_output, decoder_states, key_padding_mask=source_padding_mask)

    def self_attention(mha, decoder_states, encoder_output, source_padding_mask):
        return mha(decoder_states, decoder_states, decoder_states, key_padding_mask=source_padding_mask)

    assert_caught(ID, keys_from_decoder, checker.KEYS_FROM_DECODER)
    assert_caught(ID, values_from_decoder, checker.VALUES_FROM_DECODER)
    assert_caught(ID, self_attention, checker.SELF_ATTENTION)


def test_padding_mask_missing_inverted_or_misplaced():
    def no_mask(mha, decoder_states, encoder_output, source_padding_mask):
        return mha(decoder_states, encoder_output, encoder_output)

    def pytorch_meaning(mha, decoder_states, encoder_output, source_padding_mask):
        # nn.MultiheadAttention's convention: True = ignore
        return mha(decoder_states, encoder_output, encoder_output, key_padding_mask=source_padding_mask == 0)

    def as_mask(mha, decoder_states, encoder_output, source_padding_mask):
        return mha(decoder_states, encoder_output, encoder_output, mask=source_padding_mask)

    assert_caught(ID, no_mask, checker.NO_PADDING_MASK)
    assert_caught(ID, pytorch_meaning, checker.INVERTED_MASK)
    assert_caught(ID, as_mask, checker.MASK_AS_MASK)


def test_causal_mask_in_cross_attention():
    def with_causal_mask(mha, decoder_states, encoder_output, source_padding_mask):
        future = causal_mask(decoder_states.shape[1])  # [L_tgt, L_tgt]: fits only while L_tgt == L_src
        return mha(decoder_states, encoder_output, encoder_output, future, source_padding_mask)

    def rectangular_causal_mask(mha, decoder_states, encoder_output, source_padding_mask):
        future = torch.ones(decoder_states.shape[1], encoder_output.shape[1]).tril()
        return mha(decoder_states, encoder_output, encoder_output, future, source_padding_mask)

    assert_caught(ID, with_causal_mask, checker.CAUSAL)
    assert_caught(ID, rectangular_causal_mask, checker.CAUSAL)


def test_a_new_layer_or_bare_attention_is_caught():
    def new_layer(mha, decoder_states, encoder_output, source_padding_mask):
        fresh = MultiHeadAttention(decoder_states.shape[-1], 2, qkv_bias=True)
        return fresh(decoder_states, encoder_output, encoder_output, key_padding_mask=source_padding_mask)

    def bare_attention(mha, decoder_states, encoder_output, source_padding_mask):
        mask = source_padding_mask[:, None, :]
        return F.scaled_dot_product_attention(decoder_states, encoder_output, encoder_output, attn_mask=mask)

    assert_caught(ID, new_layer, checker.NOT_THE_LAYER)
    assert_caught(ID, bare_attention, checker.NOT_THE_LAYER)


def test_mistakes_that_show_only_when_the_lengths_differ():
    # right while L_tgt == L_src (the first case), wired wrongly when they differ: the other cases name it
    def swap_when_lengths_differ(mha, decoder_states, encoder_output, source_padding_mask):
        if decoder_states.shape[1] == encoder_output.shape[1]:
            return solution(ID)(mha, decoder_states, encoder_output, source_padding_mask)
        return mha(encoder_output, decoder_states, decoder_states)

    def refused_swap(mha, decoder_states, encoder_output, source_padding_mask):
        if decoder_states.shape[1] == encoder_output.shape[1]:
            return solution(ID)(mha, decoder_states, encoder_output, source_padding_mask)
        return mha(encoder_output, decoder_states, decoder_states, key_padding_mask=source_padding_mask)

    def values_from_decoder(mha, decoder_states, encoder_output, source_padding_mask):
        if decoder_states.shape[1] == encoder_output.shape[1]:
            return solution(ID)(mha, decoder_states, encoder_output, source_padding_mask)
        return mha(decoder_states, encoder_output, decoder_states, key_padding_mask=source_padding_mask)

    def square_causal(mha, decoder_states, encoder_output, source_padding_mask):
        if decoder_states.shape[1] == encoder_output.shape[1]:
            return solution(ID)(mha, decoder_states, encoder_output, source_padding_mask)
        future = causal_mask(decoder_states.shape[1])
        return mha(decoder_states, encoder_output, encoder_output, future, source_padding_mask)

    assert_caught(ID, swap_when_lengths_differ, checker.SWAPPED)
    assert_caught(ID, refused_swap, checker.SWAPPED)
    assert_caught(ID, values_from_decoder, checker.KEY_VALUE_LENGTHS)
    assert_caught(ID, square_causal, checker.CAUSAL)


def test_hard_coded_sizes_are_explained():
    def first_positions_only(mha, decoder_states, encoder_output, source_padding_mask):
        out = solution(ID)(mha, decoder_states, encoder_output, source_padding_mask)
        return out[:, :4]

    assert_caught(ID, first_positions_only, "shape")


def test_check_leaves_global_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check(ID, solution(ID), quiet=True)
    assert torch.equal(torch.rand(3), expected)


# ---------------------------------------------------------------------------------------------- decode_greedily

GREEDY = "decode_greedily"
START, END, PAD = TARGET_VOCAB.index["<s>"], TARGET_VOCAB.index["</s>"], TARGET_VOCAB.pad_id


def learner_loop(
    model,
    encoder_output,
    source_padding_mask,
    max_len,
    *,
    feed_back=True,
    position=-1,
    pad_finished=True,
    stop="all",
    keep_start=False,
    keep_end=True,
    honour_max_len=True,
    one_short=False,
    encode_again=False,
    call_model=False,
    as_float=False,
):
    """A learner's greedy decoding loop with switches for the typical mistakes."""
    if encode_again:
        model.encode(torch.zeros(encoder_output.shape[:2], dtype=torch.long))
    batch = encoder_output.shape[0]
    written = torch.full((batch, 1), START, dtype=torch.long)
    finished = torch.zeros(batch, dtype=torch.bool)
    for _ in range((max_len - 1 if one_short else max_len) if honour_max_len else 1000):
        so_far = written if feed_back else written[:, -1:]
        if call_model:
            scores = model((torch.zeros(encoder_output.shape[:2], dtype=torch.long), so_far))
        else:
            scores = model.decode(so_far, encoder_output, source_padding_mask)
        word = scores[:, position].argmax(dim=-1)
        if pad_finished:
            word = torch.where(finished, torch.full_like(word, PAD), word)
        written = torch.cat([written, word.unsqueeze(1)], dim=1)
        finished = finished | (word == END)
        if (stop == "all" and finished.all()) or (stop == "any" and finished.any()):
            break
    out = written if keep_start else written[:, 1:]
    if not keep_end:
        out = torch.where(out == END, torch.full_like(out, PAD), out)
    return out.float() if as_float else out


def greedy(**switches):
    def candidate(model, encoder_output, source_padding_mask, max_len):
        return learner_loop(model, encoder_output, source_padding_mask, max_len, **switches)

    return candidate


def test_greedy_reference_and_learner_style_pass():
    assert_passes(GREEDY, solution(GREEDY))
    assert_passes(GREEDY, greedy())


def test_greedy_stub_is_not_attempted():
    def stub(model, encoder_output, source_padding_mask, max_len):
        raise NotImplementedError

    assert check(GREEDY, stub, quiet=True).status == "not attempted"


def test_greedy_loop_mistakes_are_named():
    assert_caught(GREEDY, greedy(feed_back=False), checker.G_NO_FEEDBACK)
    assert_caught(GREEDY, greedy(position=0), checker.G_FIRST_POSITION)
    assert_caught(GREEDY, greedy(keep_start=True), checker.G_WITH_START)
    assert_caught(GREEDY, greedy(keep_end=False), checker.G_NO_END)
    assert_caught(GREEDY, greedy(as_float=True), checking.NOT_IDS)


def test_greedy_stopping_mistakes_are_named():
    assert_caught(GREEDY, greedy(pad_finished=False), checker.G_NO_PADDING)
    assert_caught(GREEDY, greedy(stop="any"), checker.G_STOP_AT_FIRST)
    assert_caught(GREEDY, greedy(stop="never"), checker.G_NO_EARLY_STOP)
    assert_caught(GREEDY, greedy(honour_max_len=False), checker.G_MAX_LEN)


def test_running_the_encoder_in_the_loop_is_named():
    assert_caught(GREEDY, greedy(encode_again=True), checker.G_ENCODED_AGAIN)
    assert_caught(GREEDY, greedy(call_model=True), checker.G_CALLED_MODEL)


def test_greedy_result_is_what_translate_uses():
    # the reference loop, run on a real translator, gives what greedy_decode returns
    torch.manual_seed(0)
    model = Translator(d_model=16).eval()
    (source, _), _ = encode_batch(["the blue car", "a dog and the red house"])
    with torch.no_grad():
        encoder_output, mask = model.encode(source)
        looped = learner_loop(model, encoder_output, mask, 7)
    assert torch.equal(looped, greedy_decode(model, source, max_len=7))


def test_greedy_loop_one_word_short_is_named_as_such():
    result = check(GREEDY, greedy(one_short=True), quiet=True)
    assert not result.passed and checker.G_ONE_SHORT in result.message, result.message
    assert checker.G_STOP_AT_FIRST not in result.message


def test_greedy_cases_run_in_float32_and_float64():
    # the checker's scripted encoder outputs come in both dtypes; a loop that casts them to float32 still passes
    def casting(model, encoder_output, source_padding_mask, max_len):
        return learner_loop(model, encoder_output.float(), source_padding_mask, max_len)

    assert_passes(GREEDY, casting)
    dtypes = []

    def spy(model, encoder_output, source_padding_mask, max_len):
        dtypes.append(encoder_output.dtype)
        return learner_loop(model, encoder_output, source_padding_mask, max_len)

    assert_passes(GREEDY, spy)
    assert set(dtypes) == {torch.float32, torch.float64}


# ------------------------------------------------------------------ cross_attention, issue cases


def by_hand_from_the_layers_weights(mha, decoder_states, encoder_output, source_padding_mask):
    """Lesson 03's steps written out with the given layer's own projections: right, without calling mha."""
    B, L_tgt, d = decoder_states.shape
    h = mha.num_heads
    q = mha.query_linear(decoder_states).reshape(B, L_tgt, h, d // h).transpose(1, 2)
    k = mha.key_linear(encoder_output).reshape(B, -1, h, d // h).transpose(1, 2)
    v = mha.value_linear(encoder_output).reshape(B, -1, h, d // h).transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / (d // h) ** 0.5
    scores = scores.masked_fill(~source_padding_mask[:, None, None, :], float("-inf"))
    out = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, L_tgt, d)
    return mha.output_linear(out)


def test_cross_attention_by_hand_from_the_layers_own_weights_passes():
    assert_passes(ID, by_hand_from_the_layers_weights)


def test_cross_attention_by_hand_but_wrong_is_still_told_to_call_the_layer():
    def by_hand_unscaled(mha, decoder_states, encoder_output, source_padding_mask):
        return by_hand_from_the_layers_weights(mha, decoder_states * 2, encoder_output, source_padding_mask)

    assert_caught(ID, by_hand_unscaled, checker.NOT_THE_LAYER)


def test_cross_attention_done_as_self_attention_is_named():
    def self_attention(mha, decoder_states, encoder_output, source_padding_mask):
        return mha(decoder_states, decoder_states, decoder_states)

    def causal_self_attention(mha, decoder_states, encoder_output, source_padding_mask):
        return mha(decoder_states, decoder_states, decoder_states, causal_mask(decoder_states.shape[1]))

    assert_caught(ID, self_attention, checker.SELF_ATTENTION)
    assert_caught(ID, causal_self_attention, checker.SELF_ATTENTION)


def test_cross_attention_cases_run_in_float32_and_float64():
    dtypes = []

    def spy(mha, decoder_states, encoder_output, source_padding_mask):
        dtypes.append(decoder_states.dtype)
        return solution(ID)(mha, decoder_states, encoder_output, source_padding_mask)

    assert_passes(ID, spy)
    assert set(dtypes) == {torch.float32, torch.float64}

    def always_float32(mha, decoder_states, encoder_output, source_padding_mask):
        return solution(ID)(mha.float(), decoder_states.float(), encoder_output.float(), source_padding_mask)

    assert_caught(ID, always_float32, "float64")


# ------------------------------------------------------------------ swap_and_translate

SWAP = "swap_and_translate"


def learner_swap(model, sentences, donors, position, max_len=8, mistake=None):
    """The intervention as a learner might write it, with one optional slip."""
    (source, _), _ = encode_batch(sentences)
    (donor_source, _), _ = encode_batch(donors)
    if mistake == "word":
        source = source.clone()
        source[:, position] = donor_source[:, position]
    encoder_output, mask = model.encode(source)
    donor_output, _ = model.encode(donor_source)
    patched = encoder_output.clone()
    if mistake == "every position":
        patched = donor_output
    elif mistake == "batch axis":
        patched[position] = donor_output[position]
    elif mistake == "off by one":
        patched[:, position - 1] = donor_output[:, position - 1]
    elif mistake == "donor patched":
        patched = donor_output.clone()
        patched[:, position] = encoder_output[:, position]
    elif mistake in (None, "ids"):
        patched[:, position] = donor_output[:, position]
    written = decode_greedily(model, patched, mask, max_len)
    if mistake == "ids":
        return written
    return [" ".join(TARGET_VOCAB.decode(row)) for row in written.tolist()]


def test_swap_solution_and_learner_version_pass():
    assert_passes(SWAP, solution(SWAP))
    assert_passes(SWAP, learner_swap)


def one_sentence_at_a_time(mistake=None):
    """The intervention done for each sentence on its own (a right answer without a mistake)."""

    def candidate(model, sentences, donors, position, max_len=8):
        pairs = zip(sentences, donors, strict=True)
        return [learner_swap(model, [s], [d], position, max_len, mistake)[0] for s, d in pairs]

    return candidate


def test_swap_one_sentence_at_a_time_passes():
    assert_passes(SWAP, one_sentence_at_a_time())


def test_swap_one_sentence_at_a_time_still_names_a_mistake():
    assert_caught(SWAP, one_sentence_at_a_time("nothing"), checker.S_NOTHING)


def test_swap_stub_is_not_attempted():
    def stub(model, sentences, donors, position, max_len=8):
        raise NotImplementedError

    assert check(SWAP, stub, quiet=True).status == "not attempted"


SWAP_MISTAKES = {
    "word": checker.S_WORD,
    "every position": checker.S_EVERY_POSITION,
    "batch axis": checker.S_BATCH_AXIS,
    "off by one": checker.S_WRONG_POSITION,
    "donor patched": checker.S_DONOR_PATCHED,
    "nothing": checker.S_NOTHING,
    "ids": checker.S_NOT_STRINGS,
}


def swap_with(mistake):
    def candidate(model, sentences, donors, position, max_len=8):
        return learner_swap(model, sentences, donors, position, max_len, mistake=mistake)

    return candidate


def test_each_swap_mistake_is_named():
    for mistake, phrase in SWAP_MISTAKES.items():
        assert_caught(SWAP, swap_with(mistake), phrase)


def test_each_swap_message_names_only_its_mistake():
    mistakes = {m: (swap_with(m), phrase) for m, phrase in SWAP_MISTAKES.items()}
    assert_each_message_names_only_its_mistake(mistakes, lambda c: check(SWAP, c, quiet=True))


def test_swap_without_decoding_is_named():
    def translate_instead(model, sentences, donors, position, max_len=8):
        return ["la voiture bleue"] * len(sentences)

    assert_caught(SWAP, translate_instead, checker.S_NO_DECODE)


def test_swap_cases_run_in_float32_and_float64():
    assert {case[-1] for case in checker._swap_cases()} == {torch.float32, torch.float64}
