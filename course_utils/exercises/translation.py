"""Lesson 05c's exercise: the decoder's cross-attention call.

``cross_attention``: the candidate is ``fn(mha, decoder_states, encoder_output, source_padding_mask)
-> Tensor [B, L_tgt, d_model]``: the queries come from the decoder, the keys and values from the
encoder output, padding words of the source are hidden with ``key_padding_mask`` and no causal
mask is applied. The solution is ``course_utils.translation.cross_attention``, which the lesson's
translator uses.

The checker first runs a case where the French and English sides and the batch have the same
size, so every wrong wiring still runs and its output can be recomputed and named (a [B, L_src]
padding mask passed as ``mask=`` is then silently misread as [L_tgt, L_src]); then cases where
the lengths differ (L_tgt != L_src), where a swap changes the output's shape or makes
``MultiHeadAttention`` refuse the call, which is named too.
"""

import torch

from course_utils.attention import MultiHeadAttention
from course_utils.exercises import exercise
from course_utils.exercises.checking import Mistake, call, diagnose, expect_plain, expect_tensor, generator
from course_utils.translation import cross_attention

D_MODEL, NUM_HEADS = 8, 2

# Distinctive phrases, one per mistake (the tests look for them).
SWAPPED = "queries and keys are swapped"
KEYS_FROM_DECODER = "the keys come from the decoder"
VALUES_FROM_DECODER = "the values come from the decoder"
SELF_ATTENTION = "this is self-attention over the decoder states"
NO_PADDING_MASK = "the source padding mask was not used"
INVERTED_MASK = "the padding mask is inverted"
CAUSAL = "a causal mask does not belong in cross-attention"
MASK_AS_MASK = "you passed the [B, L_src] padding mask as mask="
KEY_VALUE_LENGTHS = "key and value have different lengths"
NOT_THE_LAYER = "you did not call the layer you were given"


def _make_mha(seed):
    with torch.random.fork_rng(devices=[]):  # leave the learner's random numbers alone
        torch.manual_seed(seed)
        return MultiHeadAttention(D_MODEL, NUM_HEADS, qkv_bias=True).eval()


def _case(batch, target_len, source_lengths, seed):
    """Random decoder states and encoder output; sentence b has source_lengths[b] real words, then padding."""
    g = generator(seed)
    source_len = max(source_lengths)
    decoder_states = torch.randn(batch, target_len, D_MODEL, generator=g)
    encoder_output = torch.randn(batch, source_len, D_MODEL, generator=g)
    source_padding_mask = torch.arange(source_len)[None, :] < torch.tensor(source_lengths)[:, None]
    return _make_mha(seed), decoder_states, encoder_output, source_padding_mask


def _wiring_variants(mha, dec, enc, real):
    """(message, output) for query, key and value taken from the wrong tensors; these run only where L_tgt == L_src."""
    swapped = (
        f"{SWAPPED}: the queries must come from the decoder (each French position asks a question) and "
        f"the keys and values from the encoder output (the English words answer). Call "
        f"mha(decoder_states, encoder_output, encoder_output, key_padding_mask=source_padding_mask)."
    )
    return [
        (swapped, mha(enc, dec, dec, key_padding_mask=real)),
        (swapped, mha(enc, dec, dec)),
        (
            f"{KEYS_FROM_DECODER}: mha(query, key, value): key and value both come from the encoder output, "
            f"mha(decoder_states, encoder_output, encoder_output, ...). Keys from the decoder match the queries "
            f"against French positions, not against the English words.",
            mha(dec, dec, enc, key_padding_mask=real),
        ),
        (
            f"{VALUES_FROM_DECODER}: what a query receives are the values of the English words it attends to, "
            f"so value = encoder_output, the same tensor as key.",
            mha(dec, enc, dec, key_padding_mask=real),
        ),
        (
            f"{SELF_ATTENTION} (query, key and value all from the decoder): cross-attention takes its keys and "
            f"values from the encoder output, mha(decoder_states, encoder_output, encoder_output, ...).",
            mha(dec, dec, dec, key_padding_mask=real),
        ),
    ]


def _mask_variants(mha, dec, enc, real):
    """(message, output) for the usual slips with the masks; these run whatever the lengths."""
    below_diagonal = torch.ones(dec.shape[1], enc.shape[1], dtype=torch.bool).tril()
    return [
        (
            f"{NO_PADDING_MASK}: some English sentences are shorter than others and end in padding. Pass "
            f"key_padding_mask=source_padding_mask so no query attends to a padding position.",
            mha(dec, enc, enc),
        ),
        (
            f"{INVERTED_MASK}: in the course True (1) marks a real word that may be attended, so pass "
            f"key_padding_mask=source_padding_mask as it is (nn.MultiheadAttention's key_padding_mask means "
            f"the opposite, True = ignore).",
            mha(dec, enc, enc, key_padding_mask=~real),
        ),
        (
            f"{CAUSAL}: the causal mask keeps a decoder position from reading later *French* words, which "
            f"are not written yet. The English sentence is known in full before decoding starts, so every "
            f"French position may look at every English word: pass only the padding mask.",
            mha(dec, enc, enc, mask=below_diagonal, key_padding_mask=real),
        ),
    ]


def _remap(mistake, l_tgt, l_src):
    """A refusal of MultiHeadAttention, explained as the wiring mistake that causes it (L_tgt != L_src)."""
    text = str(mistake)
    where = f"(French side: {l_tgt} positions, English side: {l_src})"
    if "key_padding_mask must have shape" in text:
        return Mistake(
            f"{SWAPPED}, or {KEYS_FROM_DECODER}: MultiHeadAttention refused the source padding mask because "
            f"your keys do not have the {l_src} English positions {where}. The keys and values come from the "
            f"encoder output, the queries from the decoder: mha(decoder_states, encoder_output, encoder_output, "
            f"key_padding_mask=source_padding_mask).\n{text}"
        )
    if "key and value must have the same length" in text:
        return Mistake(
            f"{KEY_VALUE_LENGTHS} {where}: one of them comes from the decoder. Both come from the encoder "
            f"output, one key and one value per English word.\n{text}"
        )
    if "does not broadcast to the scores' shape" in text:
        return Mistake(
            f"a mask that does not fit the [L_tgt, L_src] = [{l_tgt}, {l_src}] scores {where}. If it is a causal "
            f"mask: {CAUSAL}. If it is the padding mask: pass it as key_padding_mask=source_padding_mask.\n{text}"
        )
    return mistake


def _run(candidate, mha, dec, enc, real, context):
    """The candidate's output and the reference's, after the checks every case shares."""
    mha.attention_weights = None  # every forward of the layer sets it: shows whether the candidate called it
    with torch.no_grad():
        try:
            got = call(candidate, mha, dec, enc, real)
        except Mistake as mistake:
            raise _remap(mistake, dec.shape[1], enc.shape[1]) from None
        called_the_layer = mha.attention_weights is not None
        expected = cross_attention(mha, dec, enc, real)
    expect_tensor(got, what=f"output ({context})")
    expect_plain(got, dec.device, f"output ({context})")
    if not called_the_layer:
        raise Mistake(
            f"{NOT_THE_LAYER}, `mha`: its learned projections (query_linear, key_linear, value_linear, "
            f"output_linear) belong to the translator. Call it, mha(query, key, value, ...), instead of a new "
            f"MultiHeadAttention or a bare attention function ({context})."
        )
    return got, expected


@exercise(
    "cross_attention",
    solution=cross_attention,
    hints=[
        "One call of the layer: mha(query, key, value, mask=None, key_padding_mask=None). Which sequence asks "
        "the questions, and which one is looked up?",
        "The decoder asks (queries = decoder_states); the English sentence answers (keys = values = "
        "encoder_output). The output has one vector per French position: [B, L_tgt, d_model].",
        "Hide the English padding with key_padding_mask=source_padding_mask (True = a real word), and no "
        "causal mask: `return mha(decoder_states, encoder_output, encoder_output, "
        "key_padding_mask=source_padding_mask)`.",
    ],
)
def check_cross_attention(candidate):
    # 1. as many sentences as French and English positions: every wrong wiring runs, so its output can be named,
    #    and a [B, L_src] padding mask given as mask= is misread as [L_tgt, L_src] without an error
    mha, dec, enc, real = _case(batch=4, target_len=4, source_lengths=[4, 2, 3, 4], seed=41)
    context = "4 sentences, 4 French and 4 English positions, English sentences 2 and 3 padded after 2 and 3 words"
    got, expected = _run(candidate, mha, dec, enc, real, context)
    with torch.no_grad():
        mask_as_mask = (
            f"{MASK_AS_MASK}: a mask lines up with the scores [B, heads, L_tgt, L_src] from the right, so with as "
            f"many sentences as French positions row b of the mask was used for French position b of every "
            f"sentence ({context}). Pass it as key_padding_mask=source_padding_mask.",
            mha(dec, enc, enc, mask=real),
        )
        mistakes = _wiring_variants(mha, dec, enc, real) + _mask_variants(mha, dec, enc, real) + [mask_as_mask]
        diagnose(got, expected, known_mistakes=mistakes, context=context)
    # 2. different lengths (L_tgt != L_src): the output has one row per French position
    for batch, target_len, source_lengths, seed in [(2, 3, [7, 4], 42), (3, 6, [2, 4, 3], 43)]:
        mha, dec, enc, real = _case(batch, target_len, source_lengths, seed)
        l_src = max(source_lengths)
        context = (
            f"{batch} sentences, {target_len} French positions, English lengths {source_lengths} padded to {l_src}"
        )
        got, expected = _run(candidate, mha, dec, enc, real, context)
        if tuple(got.shape) == (batch, l_src, D_MODEL):
            raise Mistake(
                f"{SWAPPED}: your output has one row per English position, shape {tuple(got.shape)}, but the "
                f"decoder needs one per French position, [B, L_tgt, d_model] = {tuple(expected.shape)} ({context}). "
                f"The queries (first argument) come from the decoder: the output has the queries' length."
            )
        with torch.no_grad():
            diagnose(got, expected, known_mistakes=_mask_variants(mha, dec, enc, real), context=context)
