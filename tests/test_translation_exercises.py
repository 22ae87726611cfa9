"""Lesson 05c's exercise `cross_attention`: the solution passes and each planted mistake gets its own message.

The mistakes are written the way a learner would write them (one call of the layer, wired
wrongly), not taken from the checker's list.
"""

import torch
import torch.nn.functional as F

from course_utils.attention import MultiHeadAttention, causal_mask
from course_utils.exercises import check, solution
from course_utils.exercises import translation as checker
from tests.exercise_asserts import assert_caught, assert_passes

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
