"""Lesson 05c's exercises: the decoder's cross-attention call, and greedy decoding.

``cross_attention``: the candidate is ``fn(mha, decoder_states, encoder_output, source_padding_mask)
-> Tensor [B, L_tgt, d_model]``: the queries come from the decoder, the keys and values from the
encoder output, padding words of the source are hidden with ``key_padding_mask`` and no causal
mask is applied. The solution is ``course_utils.translation.cross_attention``, which the lesson's
translator uses.

The checker first runs a case where the French and English sides and the batch have the same
size, so every wrong wiring still runs and its output can be recomputed and named (a [B, L_src]
padding mask passed as ``mask=`` is then silently misread as [L_tgt, L_src]); then cases where
the lengths differ (L_tgt != L_src), where a swap changes the output's shape or makes
``MultiHeadAttention`` refuse the call, which is named too. A result computed by hand from the
layer's own projection weights is accepted when it equals the layer's output. The cases run in
float32 and float64.

``decode_greedily``: the candidate is ``fn(model, encoder_output, source_padding_mask, max_len)
-> [B, steps]`` French ids: the loop of greedy decoding over ``model.decode``. The checker runs it
on a scripted stand-in for a trained translator, whose next word is a fixed function of the
word fed in, its position and the sentence, and whose sentences end after different numbers of
words; so feeding back, reading the last position, padding finished rows, stopping and
``max_len`` each change the output in their own way. Then on a real (untrained) ``Translator``.

``swap_and_translate``: the candidate is ``fn(model, sentences, donors, position, max_len=8) ->
[French strings]``, the lesson's intervention. The checker hands it a real (untrained) translator
that records the encoder output each decoding step receives, so what was swapped is compared
directly, vector by vector (float32 and float64 models), and then the translations.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from course_utils.attention import MultiHeadAttention
from course_utils.exercises import exercise
from course_utils.exercises.checking import (
    Mistake,
    call,
    close,
    diagnose,
    expect_ids,
    expect_plain,
    expect_same_dtype,
    expect_tensor,
    generator,
)
from course_utils.translation import (
    TARGET_VOCAB,
    Translator,
    Vocabulary,
    cross_attention,
    decode_greedily,
    encode_batch,
    swap_and_translate,
)

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


def _make_mha(seed, dtype=torch.float32):
    with torch.random.fork_rng(devices=[]):  # leave the learner's random numbers alone
        torch.manual_seed(seed)
        return MultiHeadAttention(D_MODEL, NUM_HEADS, qkv_bias=True).to(dtype).eval()


def _case(batch, target_len, source_lengths, seed, dtype=torch.float32):
    """Random decoder states and encoder output; sentence b has source_lengths[b] real words, then padding."""
    g = generator(seed)
    source_len = max(source_lengths)
    decoder_states = torch.randn(batch, target_len, D_MODEL, generator=g).to(dtype)
    encoder_output = torch.randn(batch, source_len, D_MODEL, generator=g).to(dtype)
    source_padding_mask = torch.arange(source_len)[None, :] < torch.tensor(source_lengths)[:, None]
    return _make_mha(seed, dtype), decoder_states, encoder_output, source_padding_mask


def _self_attention_variants(mha, dec):
    """Self-attention over the decoder states, with or without a causal mask: these run whatever the lengths."""
    message = (
        f"{SELF_ATTENTION} (query, key and value all from the decoder, as in the decoder's first sublayer): "
        f"cross-attention takes its keys and values from the encoder output, "
        f"mha(decoder_states, encoder_output, encoder_output, key_padding_mask=source_padding_mask)."
    )
    causal = torch.ones(dec.shape[1], dec.shape[1], dtype=torch.bool).tril()
    return [(message, mha(dec, dec, dec)), (message, mha(dec, dec, dec, mask=causal))]


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
    """The candidate's output and the reference's, after the checks every case shares.

    A result computed without calling ``mha`` (by hand, from its own weights) is fine if it is right.
    """
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
    if not called_the_layer and not close(got, expected):
        raise Mistake(
            f"{NOT_THE_LAYER}, `mha`, and your result differs from cross-attention through it ({context}). Its "
            f"learned projections (query_linear, key_linear, value_linear, output_linear) belong to the "
            f"translator: call it, mha(query, key, value, ...), instead of a new MultiHeadAttention or a bare "
            f"attention function. (If you computed it by hand from mha's own weights, compare each step with "
            f"lesson 03's: Q = decoder_states @ mha.query_linear.weight.T + bias, keys and values from "
            f"encoder_output, the padding hidden, then mha.output_linear.)"
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
        mistakes = _wiring_variants(mha, dec, enc, real) + _self_attention_variants(mha, dec)
        mistakes += _mask_variants(mha, dec, enc, real) + [mask_as_mask]
        diagnose(got, expected, known_mistakes=mistakes, context=context)
    # 2. different lengths (L_tgt != L_src): the output has one row per French position; float32 and float64
    for batch, target_len, source_lengths, seed, dtype in [
        (2, 3, [7, 4], 42, torch.float32),
        (3, 6, [2, 4, 3], 43, torch.float64),
    ]:
        mha, dec, enc, real = _case(batch, target_len, source_lengths, seed, dtype)
        l_src = max(source_lengths)
        context = (
            f"{batch} sentences, {target_len} French positions, English lengths {source_lengths} padded to {l_src}, "
            f"{str(dtype).removeprefix('torch.')}"
        )
        got, expected = _run(candidate, mha, dec, enc, real, context)
        if tuple(got.shape) == (batch, l_src, D_MODEL):
            raise Mistake(
                f"{SWAPPED}: your output has one row per English position, shape {tuple(got.shape)}, but the "
                f"decoder needs one per French position, [B, L_tgt, d_model] = {tuple(expected.shape)} ({context}). "
                f"The queries (first argument) come from the decoder: the output has the queries' length."
            )
        expect_same_dtype(got, dtype, "output", context)
        with torch.no_grad():
            mistakes = _self_attention_variants(mha, dec) + _mask_variants(mha, dec, enc, real)
            diagnose(got, expected, known_mistakes=mistakes, context=context, dtype=dtype)


# ----------------------------------------------------------------------------------------------
# decode_greedily

START, END, PAD = TARGET_VOCAB.index[Vocabulary.BOS], TARGET_VOCAB.index[Vocabulary.EOS], TARGET_VOCAB.pad_id

G_NO_FEEDBACK = "you fed the decoder only the last word"
G_FIRST_POSITION = "you read the scores of the first position"
G_WITH_START = "your output starts with the <s> token"
G_NO_PADDING = "a finished row kept writing words"
G_STOP_AT_FIRST = "you stopped when the first row finished"
G_NO_EARLY_STOP = "you always ran max_len steps"
G_MAX_LEN = "you ignored max_len"
G_ONE_SHORT = "you wrote at most max_len - 1 words"
G_NO_END = "the </s> tokens are missing"
G_ENCODED_AGAIN = "your loop called model.encode"
G_CALLED_MODEL = "your loop called model(...) itself"
G_NOT_GREEDY = "your output is not the greedy translation"


class _ScriptedTranslator(nn.Module):
    """Stands in for a trained Translator in the checker.

    Its next word after reading word w at position i of sentence b is (7 w + 3 f_b + 5 i) mod 29 + 3, where
    f_b is encoder_output[b, 0, 0]; at position n_b (the number of real source words) it writes </s>.
    So the output changes with every slip in the loop, and the rows finish after different numbers of words.
    """

    def __init__(self):
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(1))  # so next(model.parameters()) gives a device

    def decode(self, target_in, encoder_output, source_padding_mask):
        if target_in.dtype != torch.long:
            raise TypeError(f"target_in must hold integer (long) word ids, got {target_in.dtype}")
        positions = torch.arange(target_in.shape[1], device=target_in.device)
        first = encoder_output[:, 0, 0].round().long()[:, None]
        words = (7 * target_in + 3 * first + 5 * positions) % (len(TARGET_VOCAB) - 3) + 3
        ends = source_padding_mask.sum(dim=-1, keepdim=True) == positions
        return 4.0 * F.one_hot(words.masked_fill(ends, END), len(TARGET_VOCAB)).float()

    def encode(self, source):
        raise Mistake(
            f"{G_ENCODED_AGAIN}: the encoder's output is given (encoder_output, source_padding_mask); "
            "the encoder runs once, before the loop"
        )

    def forward(self, batch):
        raise Mistake(
            f"{G_CALLED_MODEL}, which runs the encoder again at every step: call "
            "model.decode(written, encoder_output, source_padding_mask) instead"
        )


def _scripted_case(lengths, seed):
    g = generator(seed)
    encoder_output = torch.randn(len(lengths), max(lengths), 4, generator=g)
    encoder_output[:, 0, 0] = torch.randint(0, 29, (len(lengths),), generator=g).float()
    source_padding_mask = torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]
    return encoder_output, source_padding_mask


def _loop(model, encoder_output, mask, max_len, feedback=True, position=-1, pad_finished=True, stop="all"):
    """Greedy decoding with switches for the usual slips (the reference is all defaults)."""
    batch = encoder_output.shape[0]
    written = torch.full((batch, 1), START, dtype=torch.long)
    done = torch.zeros(batch, dtype=torch.bool)
    steps = 0
    while steps < max_len or stop == "never_at_max_len":
        fed = written if feedback else written[:, -1:]
        next_word = model.decode(fed, encoder_output, mask)[:, position].argmax(dim=-1)
        if pad_finished:
            next_word = next_word.masked_fill(done, PAD)
        written = torch.cat([written, next_word[:, None]], dim=1)
        done = done | (next_word == END)
        steps += 1
        if (stop in ("all", "never_at_max_len") and done.all()) or (stop == "first" and done.any()):
            break
        if steps > 4 * max_len + 20:
            break  # a variant that never stops: long enough to differ from the reference
    return written[:, 1:]


def _decode_mistakes(model, encoder_output, mask, max_len, expected):
    with_start = torch.cat([torch.full((expected.shape[0], 1), START), expected], dim=1)
    always_max = F.pad(expected, (0, max_len - expected.shape[1]), value=PAD)
    return [
        (
            f"{G_NO_FEEDBACK}: the decoder must read everything written so far, <s> and every word since, "
            f"`model.decode(written, ...)` with the whole [B, words so far] tensor (it is trained that way, with "
            f"teacher forcing); then append the new word: written = torch.cat([written, next_word[:, None]], dim=1).",
            _loop(model, encoder_output, mask, max_len, feedback=False),
        ),
        (
            f"{G_FIRST_POSITION} (scores[:, 0]): the decoder gives a prediction at every position, and the "
            f"prediction for the next word is at the last one, scores[:, -1].",
            _loop(model, encoder_output, mask, max_len, position=0),
        ),
        (
            f"{G_WITH_START}: return the words written after it, written[:, 1:].",
            with_start,
        ),
        (
            f"{G_NO_PADDING} after its </s>: once a row has written </s>, put padding (0) in it while the other "
            f"rows finish: next_word.masked_fill(done, 0), with done marking the rows that wrote </s>.",
            _loop(model, encoder_output, mask, max_len, pad_finished=False),
        ),
        (
            f"{G_ONE_SHORT}: the loop must allow max_len words, for _ in range(max_len) (the <s> you start with "
            f"is not one of them).",
            _loop(model, encoder_output, mask, max_len - 1),
        ),
        (
            f"{G_STOP_AT_FIRST}: stop only when every row has written </s> (done.all()), not when one has.",
            _loop(model, encoder_output, mask, max_len, stop="first"),
        ),
        (
            f"{G_NO_EARLY_STOP}: stop as soon as every row has written </s> (if done.all(): break); the "
            f"output then has as many columns as steps were needed.",
            always_max,
        ),
        (
            f"{G_MAX_LEN}: write at most max_len words (for _ in range(max_len)), even if some row never writes "
            f"</s>; a model that never writes it would otherwise loop forever.",
            _loop(model, encoder_output, mask, max_len, stop="never_at_max_len"),
        ),
        (
            f"{G_NO_END}: keep each row's </s> in the output; it is how the caller knows where the translation ends.",
            expected.masked_fill(expected == END, PAD),
        ),
    ]


def _same_ids(got, wrong):
    return got.shape == wrong.shape and torch.equal(got.cpu().long(), wrong.cpu())


@exercise(
    "decode_greedily",
    solution=decode_greedily,
    hints=[
        "Start every row with <s>: written = torch.full((B, 1), start_id, dtype=torch.long). Then loop at most "
        "max_len times: scores = model.decode(written, encoder_output, source_padding_mask), take the most likely "
        "next word, and append it to written.",
        "The next word is at the last position: scores[:, -1].argmax(dim=-1). Keep a boolean `done` per row; "
        "a finished row gets padding (next_word.masked_fill(done, pad_id)), and done = done | (next_word == end_id).",
        "Break as soon as done.all(); return written[:, 1:] (everything after <s>). The ids are "
        "TARGET_VOCAB.index['<s>'], TARGET_VOCAB.index['</s>'] and TARGET_VOCAB.pad_id.",
    ],
)
def check_decode_greedily(candidate):
    model = _ScriptedTranslator().eval()
    for lengths, max_len, seed, dtype in [([3, 5, 2, 4], 12, 51, torch.float32), ([6, 2, 4], 4, 52, torch.float64)]:
        encoder_output, mask = _scripted_case(lengths, seed)
        encoder_output = encoder_output.to(dtype)
        context = (
            f"a scripted translator whose {len(lengths)} sentences end after {[n + 1 for n in lengths]} words "
            f"(</s> included), max_len={max_len}, encoder output {str(dtype).removeprefix('torch.')}"
        )
        with torch.no_grad():
            got = call(candidate, model, encoder_output, mask, max_len)
            expected = decode_greedily(model, encoder_output, mask, max_len)
        expect_ids(got, encoder_output.device, "output", context, "argmax gives long ids, keep them.")
        if _same_ids(got, expected):
            continue
        for message, wrong in _decode_mistakes(model, encoder_output, mask, max_len, expected):
            if _same_ids(got, wrong):
                raise Mistake(f"{message} ({context})")
        raise Mistake(f"{G_NOT_GREEDY} ({context}).\nexpected: {expected.tolist()}\ngot:      {got.tolist()}")
    # a real (untrained) translator: the same loop must work on it
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(53)
        translator = Translator(d_model=16, num_heads=2).eval()
    source = torch.tensor([[5, 3, 9, 0, 0], [1, 8, 7, 20, 12]])
    with torch.no_grad():
        encoder_output, mask = translator.encode(source)
        got = call(candidate, translator, encoder_output, mask, 6)
        expected = decode_greedily(translator, encoder_output, mask, 6)
    expect_ids(got, encoder_output.device, "output on an untrained Translator")
    if not _same_ids(got, expected):
        raise Mistake(
            f"on an untrained Translator (2 sentences, max_len=6) your output differs from greedy decoding."
            f"\nexpected: {expected.tolist()}\ngot:      {got.tolist()}"
        )


# ----------------------------------------------------------------------------------------------
# swap_and_translate

S_EVERY_POSITION = "you replaced the vectors at every position"
S_NOTHING = "nothing was swapped"
S_WORD = "you swapped the word, not its vector"
S_WRONG_POSITION = "you replaced the vector at another position"
S_BATCH_AXIS = "you indexed the batch axis"
S_DONOR_PATCHED = "you patched the donor"
S_NO_DECODE = "your function never called model.decode"
S_TRANSLATIONS = "your translations are not the greedy ones"
S_NOT_STRINGS = "return one French string per sentence"


class _RecordingTranslator(Translator):
    """A real (untrained) translator that keeps the encoder output of every ``decode`` call."""

    def __init__(self, seed, dtype):
        with torch.random.fork_rng(devices=[]):  # leave the learner's random numbers alone
            torch.manual_seed(seed)
            super().__init__(d_model=16, num_heads=2)
        self.to(dtype).eval()
        self.seen = []

    def decode(self, target_in, encoder_output, source_padding_mask):
        self.seen.append(encoder_output.detach().clone())
        return super().decode(target_in, encoder_output, source_padding_mask)


def _swap_cases():
    sentences = ["the blue car", "a red dog", "the green hat", "a white door"]
    donors = ["a grey dog", "the black car", "a yellow house", "the blue hat"]  # every word differs
    return [
        (sentences, donors, 2, 61, torch.float32),  # first the noun: there the donor's word differs too
        (sentences, donors, 0, 62, torch.float64),
        (sentences[::-1], donors[::-1], 1, 63, torch.float32),
    ]


def _swap_variants(model, sentences, donors, position):
    """(message, the encoder output a mistake hands to decode)."""
    (source, _), _ = encode_batch(sentences)
    (donor_source, _), _ = encode_batch(donors)
    with torch.no_grad():
        own, donor = model.encode(source)[0], model.encode(donor_source)[0]
        word_swapped = source.clone()
        word_swapped[:, position] = donor_source[:, position]
        re_encoded = model.encode(word_swapped)[0]

    def patched(base, other, index):
        out = base.clone()
        out[index] = other[index]
        return out

    slot = (slice(None), position)
    length = own.shape[1]
    same_word = torch.equal(word_swapped, source)  # e.g. 'the' in both: swapping the word changes nothing
    return [
        (
            f"{S_EVERY_POSITION}: the donor's whole encoder output went to the decoder. Replace only the vector at "
            f"`position`: patched = encoder_output.clone(); patched[:, position] = donor_output[:, position].",
            donor,
        ),
        (
            f"{S_NOTHING}: the decoder received the sentence's own encoder output. Make a copy, put the donor's "
            f"vector at `position` into it, and pass that copy to decode_greedily.",
            own,
        ),
        (
            f"{S_WORD}: you changed the English word and ran the encoder again, so its self-attention spread the "
            f"donor word into every vector. The intervention replaces one vector *after* the encoder and keeps "
            f"all the others: encode both sentences, then patched[:, position] = donor_output[:, position].",
            re_encoded if not same_word else donor,  # (then never reached: the first entry matches donor)
        ),
        *[
            (
                f"{S_WRONG_POSITION} ({other % length}, not {position}): the vector to replace is "
                f"patched[:, position], the second axis is the word position.",
                patched(own, donor, (slice(None), other % length)),
            )
            for other in (position - 1, position + 1)
        ],
        (
            f"{S_BATCH_AXIS}: patched[position] replaced a whole sentence (sentence {position} of the batch). The "
            f"encoder output is [B, L_src, d]: the word position is the second axis, patched[:, position].",
            patched(own, donor, position),
        ),
        (
            f"{S_DONOR_PATCHED}: you put the sentence's vector into the donor's encoder output. Start from the "
            f"sentence's own output and take only position `position` from the donor.",
            patched(donor, own, slot),
        ),
    ]


def _decoded_input(seen):
    """The encoder outputs given to decode, one [B, L_src, d] tensor: every decoding step of a batch gets
    the same one, and a loop over the sentences gives one per sentence, so the distinct ones in order are
    put together along the batch. None if their lengths differ (the translations are then judged alone)."""
    distinct = [seen[0]]
    for encoder_output in seen[1:]:
        last = distinct[-1]
        if encoder_output.shape != last.shape or not torch.equal(encoder_output, last):
            distinct.append(encoder_output)
    if len({e.shape[1:] for e in distinct}) > 1:
        return None
    return torch.cat(distinct)


@exercise(
    "swap_and_translate",
    solution=swap_and_translate,
    hints=[
        "Encode both: (source, _), _ = encode_batch(sentences), the same for donors; then "
        "encoder_output, source_padding_mask = model.encode(source) and donor_output, _ = model.encode(donor_source).",
        "Make a copy, patched = encoder_output.clone(), and replace one vector: patched[:, position] = "
        "donor_output[:, position]. The encoder output is [B, L_src, d]; the second axis is the word.",
        "Then written = decode_greedily(model, patched, source_padding_mask, max_len) (course_utils.translation's, "
        "imported in the lesson as course_decode_greedily) and turn each row into a string: "
        "' '.join(TARGET_VOCAB.decode(row)) for row in written.tolist().",
    ],
)
def check_swap_and_translate(candidate):
    for sentences, donors, position, seed, dtype in _swap_cases():
        model = _RecordingTranslator(seed, dtype)
        context = f"position {position}, {len(sentences)} phrases, an untrained {str(dtype).removeprefix('torch.')} translator"
        with torch.no_grad():
            got = call(candidate, model, list(sentences), list(donors), position)
        seen, model.seen = model.seen, []
        expected = swap_and_translate(model, sentences, donors, position)
        right_input = model.seen[0]
        if not seen:
            raise Mistake(
                f"{S_NO_DECODE} ({context}): translate the patched encoder output with "
                f"decode_greedily(model, patched, source_padding_mask, max_len), which calls it."
            )
        if seen[0].dtype != dtype:
            raise Mistake(f"the encoder output you decoded is {seen[0].dtype}, the model is {dtype} ({context}).")
        decoded = _decoded_input(seen)
        if decoded is not None and decoded.shape == right_input.shape and not close(decoded, right_input):
            for message, wrong in _swap_variants(model, sentences, donors, position):
                if close(decoded, wrong):
                    raise Mistake(f"{message} ({context})")
            diff = (decoded.double() - right_input.double()).abs().amax(dim=-1)  # [B, L_src]
            where = [tuple(i) for i in (diff > 1e-5).nonzero().tolist()][:4]
            raise Mistake(
                f"the encoder output you decoded is not the sentence's own with the donor's vector at position "
                f"{position} ({context}); it differs at (sentence, position) {where}."
            )
        if not isinstance(got, (list, tuple)) or len(got) != len(sentences) or not all(isinstance(g, str) for g in got):
            raise Mistake(
                f"{S_NOT_STRINGS}, a list of {len(sentences)} strings such as 'la voiture bleue'; got "
                f"{type(got).__name__} {str(got)[:120]} ({context}). ' '.join(TARGET_VOCAB.decode(row)) turns a row of "
                f"ids into one."
            )
        if list(got) != expected:
            raise Mistake(
                f"{S_TRANSLATIONS} ({context}): decode with decode_greedily(model, patched, source_padding_mask, "
                f"max_len) and TARGET_VOCAB.decode.\nexpected: {expected}\ngot:      {list(got)}"
            )
