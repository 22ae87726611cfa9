"""A tiny "English -> French" translator: an encoder-decoder with cross-attention (lesson 05c).

The task: noun phrases such as "the blue car" or "a red dog and the white house", translated
by two rules of French grammar. Colour adjectives come *after* the noun ("la voiture bleue"),
and the article and the adjective agree with the noun's gender ("le vélo bleu", "la voiture
bleue"). So to write "bleue" the decoder must look back at *blue* and at *car*: word order
crosses, and one output word depends on two input words.

Some adjective-noun pairs (``HELD_OUT_PAIRS``, "blue car" among them) never occur in training;
exact-match accuracy on sentences that contain them measures generalisation, not memory.

The model (``Translator``) is the course's ``Encoder`` over the English words, and a decoder of
``DecoderLayer``s: masked self-attention over the French words written so far, cross-attention
(queries from the decoder, keys and values from the encoder output; ``cross_attention``, the
lesson's first exercise) and a feed-forward network, each with add & norm. It is trained with
teacher forcing by the course's loop (``train`` calls ``course_utils.training.fit``) and
translates by greedy decoding (``decode_greedily``, the second exercise). ``swap_and_translate``
(the third) is the lesson's intervention: replace the encoder's vector at one position by the
vector of another sentence and translate.

    task = TranslationTask()
    model = Translator()
    train(model, task, steps=200)
    translate(model, ["the blue car"])        # -> ["la voiture bleue"]
    exact_match(model, task.held_out(300))    # share of held-out sentences translated exactly
"""

from dataclasses import dataclass

import torch
import torch.nn as nn

from course_utils import _validate
from course_utils.attention import MultiHeadAttention, causal_mask
from course_utils.training import fit
from course_utils.transformer import Encoder, FeedForward, SinusoidalPositionalEncoding

__all__ = [
    "DETERMINERS",
    "ADJECTIVES",
    "NOUNS",
    "HELD_OUT_PAIRS",
    "to_french",
    "Vocabulary",
    "SOURCE_VOCAB",
    "TARGET_VOCAB",
    "encode_batch",
    "TranslationTask",
    "cross_attention",
    "decoder_layer_forward",
    "DecoderLayer",
    "Translator",
    "train",
    "greedy_decode",
    "decode_greedily",
    "translate",
    "exact_match",
    "word_alignment",
    "alignment_accuracy",
    "attention_to_noun",
    "swap_and_translate",
    "swap_experiment",
]

# ---------------------------------------------------------------- the two languages

# English word -> (masculine, feminine) French form
DETERMINERS = {"the": ("le", "la"), "a": ("un", "une")}
ADJECTIVES = {
    "blue": ("bleu", "bleue"),
    "green": ("vert", "verte"),
    "black": ("noir", "noire"),
    "white": ("blanc", "blanche"),
    "grey": ("gris", "grise"),
    "red": ("rouge", "rouge"),  # some adjectives have one form for both genders
    "yellow": ("jaune", "jaune"),
}
# English noun -> (French noun, its grammatical gender)
NOUNS = {
    "car": ("voiture", "f"),
    "house": ("maison", "f"),
    "door": ("porte", "f"),
    "flower": ("fleur", "f"),
    "shirt": ("chemise", "f"),
    "table": ("table", "f"),
    "dog": ("chien", "m"),
    "bike": ("vélo", "m"),
    "hat": ("chapeau", "m"),
    "book": ("livre", "m"),
    "boat": ("bateau", "m"),
    "pen": ("stylo", "m"),
}
AND = ("and", "et")

# (adjective, noun) pairs that never occur in training: every noun loses one adjective, and
# every adjective keeps both genders in training, so each held-out pair is new only as a pair
HELD_OUT_PAIRS = frozenset(
    {
        ("blue", "car"),
        ("green", "house"),
        ("black", "door"),
        ("white", "flower"),
        ("grey", "shirt"),
        ("red", "table"),
        ("yellow", "dog"),
        ("blue", "bike"),
        ("green", "hat"),
        ("black", "book"),
        ("white", "boat"),
        ("grey", "pen"),
    }
)


def _noun_phrase_to_french(words):
    """[det, (adj,) noun] -> the French words: article by gender, noun, then the adjective."""
    det, *adjective, noun = words
    french_noun, gender = NOUNS[noun]
    g = 0 if gender == "m" else 1
    return [DETERMINERS[det][g], french_noun] + [ADJECTIVES[a][g] for a in adjective]


def _split_phrases(words):
    """A sentence's words -> its noun phrases (the words between the "and"s)."""
    phrases, current = [], []
    for word in words + [AND[0]]:
        if word == AND[0]:
            phrases.append(current)
            current = []
        else:
            current.append(word)
    return phrases


def _check_sentence(words, sentence):
    for phrase in _split_phrases(words):
        ok = (
            len(phrase) in (2, 3)
            and phrase[0] in DETERMINERS
            and phrase[-1] in NOUNS
            and (len(phrase) == 2 or phrase[1] in ADJECTIVES)
        )
        if not ok:
            raise ValueError(
                f"cannot translate {sentence!r}: the task's sentences are noun phrases 'determiner [adjective] noun' "
                f"joined by 'and', with determiners {sorted(DETERMINERS)}, adjectives {sorted(ADJECTIVES)} "
                f"and nouns {sorted(NOUNS)}"
            )


def to_french(sentence):
    """The correct translation, by the task's rules: "the blue car" -> "la voiture bleue"."""
    if not isinstance(sentence, str):
        raise TypeError(f"sentence must be a str such as 'the blue car', got {type(sentence).__name__}")
    words = sentence.split()
    _check_sentence(words, sentence)
    french = []
    for i, phrase in enumerate(_split_phrases(words)):
        french += ([AND[1]] if i else []) + _noun_phrase_to_french(phrase)
    return " ".join(french)


def word_alignment(sentence):
    """For each French word of ``to_french(sentence)``, the position of the English word it translates.

    "the blue car" -> "la voiture bleue": [0, 2, 1], the crossing of the adjective and the noun.
    """
    french = to_french(sentence)  # checks the sentence
    positions, start = [], 0
    for i, phrase in enumerate(_split_phrases(sentence.split())):
        if i:
            positions.append(start - 1)  # "et" translates the "and" just before this phrase
        noun = start + len(phrase) - 1
        positions += [start, noun] + list(range(start + 1, noun))  # article, noun, then the adjective
        start += len(phrase) + 1
    assert len(positions) == len(french.split())
    return positions


# ---------------------------------------------------------------- vocabularies


class Vocabulary:
    """Words <-> integer ids. Id 0 is padding; a target vocabulary also has <s> (start) and </s> (end)."""

    PAD, BOS, EOS = "<pad>", "<s>", "</s>"

    def __init__(self, words, specials):
        self.tokens = list(specials) + sorted(set(words))
        self.index = {token: i for i, token in enumerate(self.tokens)}

    def __len__(self):
        return len(self.tokens)

    @property
    def pad_id(self):
        return self.index[self.PAD]

    def encode(self, words):
        unknown = [w for w in words if w not in self.index]
        if unknown:
            raise ValueError(f"unknown words {unknown}; this vocabulary has {self.tokens}")
        return [self.index[w] for w in words]

    def decode(self, ids):
        """ids -> words, stopping at </s> and leaving out padding and <s>."""
        words = []
        for i in ids:
            token = self.tokens[int(i)]
            if token == self.EOS:
                break
            if token not in (self.PAD, self.BOS):
                words.append(token)
        return words


SOURCE_VOCAB = Vocabulary([*DETERMINERS, *ADJECTIVES, *NOUNS, AND[0]], [Vocabulary.PAD])
TARGET_VOCAB = Vocabulary(
    [w for pair in DETERMINERS.values() for w in pair]
    + [w for pair in ADJECTIVES.values() for w in pair]
    + [noun for noun, _ in NOUNS.values()]
    + [AND[1]],
    [Vocabulary.PAD, Vocabulary.BOS, Vocabulary.EOS],
)
IGNORE = -100  # the target of a padding position: cross_entropy skips it


def _pad(rows, value):
    width = max(len(r) for r in rows)
    return torch.tensor([r + [value] * (width - len(r)) for r in rows])


def encode_batch(sentences):
    """English sentences -> ((source, target_in), target_out) for teacher forcing.

    source [B, L_src]: the English ids, padded with 0. target_in [B, L_tgt]: <s> + the French ids
    (what the decoder reads); target_out [B, L_tgt]: the French ids + </s> (what it must write at
    each position), padded with -100 so the loss ignores padding.
    """
    if isinstance(sentences, str) or not isinstance(sentences, (list, tuple)) or not sentences:
        raise ValueError(f"sentences must be a non-empty list of strings, e.g. ['the blue car'], got {sentences!r:.80}")
    not_text = [s for s in sentences if not isinstance(s, str)]
    if not_text:
        raise TypeError(f"every sentence must be a str such as 'the blue car', got {not_text[0]!r:.80}")
    source = [SOURCE_VOCAB.encode(s.split()) for s in sentences]
    french = [TARGET_VOCAB.encode(to_french(s).split()) for s in sentences]
    bos, eos = TARGET_VOCAB.index[Vocabulary.BOS], TARGET_VOCAB.index[Vocabulary.EOS]
    target_in = _pad([[bos] + f for f in french], TARGET_VOCAB.pad_id)
    target_out = _pad([f + [eos] for f in french], IGNORE)
    return (_pad(source, SOURCE_VOCAB.pad_id), target_in), target_out


# ---------------------------------------------------------------- the task


def _noun_phrases(held_out):
    """All noun phrases as word lists: those with a held-out pair (held_out=True) or all others."""
    phrases = []
    for det in DETERMINERS:
        for noun in NOUNS:
            for adjective in [None, *ADJECTIVES]:
                if ((adjective, noun) in HELD_OUT_PAIRS) == held_out:
                    phrases.append([det, noun] if adjective is None else [det, adjective, noun])
    return phrases


@dataclass(frozen=True)
class TranslationTask:
    """Random sentences of one or two noun phrases; ``two_phrases`` is the share with two."""

    two_phrases: float = 0.5

    def __post_init__(self):
        if not 0 <= self.two_phrases <= 1:
            raise ValueError(f"two_phrases must be a share between 0 and 1, got {self.two_phrases!r}")

    def _sentences(self, n, generator, first, second):
        pick = torch.randint(0, len(first), (n,), generator=generator).tolist()
        other = torch.randint(0, len(second), (n,), generator=generator).tolist()
        two = (torch.rand(n, generator=generator) < self.two_phrases).tolist()
        return [
            " ".join(first[i] + ([AND[0]] + second[j] if both else []))
            for i, j, both in zip(pick, other, two, strict=True)
        ]

    def training_sentences(self, n, generator=None):
        """``n`` random sentences without any held-out adjective-noun pair."""
        seen = _noun_phrases(held_out=False)
        return self._sentences(_validate.positive_int(n, "n"), generator, seen, seen)

    def sample(self, batch_size, generator=None):
        """A training batch for ``fit``: ((source, target_in), target_out)."""
        return encode_batch(self.training_sentences(batch_size, generator))

    def held_out(self, n=300, seed=1):
        """``n`` distinct sentences, each with at least one held-out pair (in either phrase)."""
        n = _validate.positive_int(n, "n")
        generator = torch.Generator().manual_seed(seed)
        new, seen = _noun_phrases(held_out=True), _noun_phrases(held_out=False)
        candidates = [" ".join(p) for p in new]  # every one-phrase sentence first: "the blue car", ...
        while len(dict.fromkeys(candidates)) < n:
            # then two phrases: a held-out one, and any other one before or after it
            other = torch.randint(0, len(new) + len(seen), (n,), generator=generator).tolist()
            pick = torch.randint(0, len(new), (n,), generator=generator).tolist()
            first = (torch.rand(n, generator=generator) < 0.5).tolist()
            for i, j, held_out_first in zip(other, pick, first, strict=True):
                pair = [new[j], (new + seen)[i]]
                candidates.append(f" {AND[0]} ".join(" ".join(p) for p in (pair if held_out_first else pair[::-1])))
            if len(candidates) > 100 * n:
                raise ValueError(f"cannot draw {n} distinct held-out sentences")
        return list(dict.fromkeys(candidates))[:n]


# ---------------------------------------------------------------- the model


def cross_attention(mha, decoder_states, encoder_output, source_padding_mask):
    """Cross-attention: every decoder position asks the whole English sentence (lesson 05c's exercise).

    decoder_states [B, L_tgt, d] give the queries: what each French position is looking for.
    encoder_output [B, L_src, d] gives the keys (what each English word offers) and the values
    (what it hands over). source_padding_mask [B, L_src], True = a real word: no query may attend
    to padding. No causal mask: the English sentence is known in full from the start.
    Returns [B, L_tgt, d], one vector per French position.
    """
    return mha(decoder_states, encoder_output, encoder_output, key_padding_mask=source_padding_mask)


def decoder_layer_forward(layer, x, encoder_output, source_padding_mask):
    """One decoder layer, post-norm as the course's EncoderLayer:

    x = LayerNorm1(x + MaskedSelfAttention(x))          the French words written so far
    x = LayerNorm2(x + CrossAttention(x, encoder_output))  look up the English sentence
    out = LayerNorm3(x + FeedForward(x))
    """
    # causal: position i may read French positions 0..i only (at test time the later ones do not exist yet);
    # padding at the end of a target needs no mask of its own: a real position never sees a later one
    future = causal_mask(x.shape[1], device=x.device)
    x = layer.norm1(x + layer.dropout(layer.self_attention(x, x, x, future)))
    x = layer.norm2(x + layer.dropout(cross_attention(layer.cross_attention, x, encoder_output, source_padding_mask)))
    return layer.norm3(x + layer.dropout(layer.feed_forward(x)))


class DecoderLayer(nn.Module):
    """Masked self-attention -> add & norm -> cross-attention -> add & norm -> feed-forward -> add & norm."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, qkv_bias=True):
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model, num_heads, qkv_bias=qkv_bias, dropout=dropout)
        self.cross_attention = MultiHeadAttention(d_model, num_heads, qkv_bias=qkv_bias, dropout=dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, encoder_output, source_padding_mask):
        return decoder_layer_forward(self, x, encoder_output, source_padding_mask)


def _check_ids(ids, vocab, name):
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.is_floating_point():
        shape = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise ValueError(f"{name} must be an integer tensor of shape [batch, length], got {shape}")
    if ids.numel() and (ids.min() < 0 or ids.max() >= len(vocab)):
        raise ValueError(f"{name} ids must lie in 0..{len(vocab) - 1}, got {ids.min().item()}..{ids.max().item()}")


class Translator(nn.Module):
    """Encoder-decoder: English ids in, a score for every French word at every target position out.

    ``forward((source, target_in))`` takes one argument, a pair, so the course's ``fit`` can train it
    with teacher forcing: the decoder reads the correct French words so far (target_in) and is
    scored on the next word at every position at once.
    """

    def __init__(self, d_model=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=None, max_len=32):
        super().__init__()
        d_model = _validate.positive_int(d_model, "d_model")
        d_ff = d_ff or 4 * d_model
        self.source_embedding = nn.Embedding(len(SOURCE_VOCAB), d_model)
        self.target_embedding = nn.Embedding(len(TARGET_VOCAB), d_model)
        self.positional_encoding = SinusoidalPositionalEncoding(d_model, max_len)
        self.encoder = Encoder(num_encoder_layers, d_model, num_heads, d_ff)
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(d_model, num_heads, d_ff)
            for _ in range(_validate.positive_int(num_decoder_layers, "num_decoder_layers"))
        )
        self.output_linear = nn.Linear(d_model, len(TARGET_VOCAB))

    def encode(self, source):
        """[B, L_src] ids -> (encoder output [B, L_src, d], source padding mask [B, L_src], True = real word)."""
        _check_ids(source, SOURCE_VOCAB, "source")
        source_padding_mask = source != SOURCE_VOCAB.pad_id
        x = self.positional_encoding(self.source_embedding(source))
        # the encoder's layers take a mask for [B, heads, L, L] scores: hide padding keys from every query
        return self.encoder(x, source_padding_mask[:, None, None, :]), source_padding_mask

    def decode(self, target_in, encoder_output, source_padding_mask):
        """[B, L_tgt] French ids so far -> [B, L_tgt, French vocabulary] scores for the next word."""
        _check_ids(target_in, TARGET_VOCAB, "target_in")
        x = self.positional_encoding(self.target_embedding(target_in))
        for layer in self.decoder_layers:
            x = layer(x, encoder_output, source_padding_mask)
        return self.output_linear(x)

    def forward(self, batch):
        if not isinstance(batch, (tuple, list)) or len(batch) != 2:
            raise TypeError("Translator takes one argument, the pair (source, target_in) of [batch, length] id tensors")
        source, target_in = batch
        return self.decode(target_in, *self.encode(source))

    def cross_attentions(self):
        """[decoder layers, B, heads, L_tgt, L_src]: the cross-attention weights of the last forward pass."""
        weights = [layer.cross_attention.attention_weights for layer in self.decoder_layers]
        if any(w is None for w in weights):
            raise RuntimeError("run the model on an input first: the weights are kept from the last forward pass")
        return torch.stack(weights)


# ---------------------------------------------------------------- training and using it


def train(model, task, steps=300, batch_size=64, lr=1e-2, warmup=30, seed=0, evaluate=None, progress=True):
    """Teacher forcing with the course's loop, ``course_utils.training.fit``; returns its history."""
    return fit(
        model, lambda generator: task.sample(batch_size, generator), steps=steps, lr=lr, warmup=warmup, seed=seed,
        evaluate=evaluate, progress=progress, desc="training the translator",
    )  # fmt: skip


@torch.no_grad()
def greedy_decode(model, source, max_len=None):
    """Translate ``source`` [B, L_src] ids greedily -> [B, steps] French ids (on the CPU, without <s>).

    The encoder runs once; ``decode_greedily`` then runs the decoder once per new word.
    """
    was_training = model.training
    model.eval()
    encoder_output, source_padding_mask = model.encode(source.to(next(model.parameters()).device))
    max_len = 2 * source.shape[1] + 2 if max_len is None else _validate.positive_int(max_len, "max_len")
    written = decode_greedily(model, encoder_output, source_padding_mask, max_len)
    model.train(was_training)
    return written.cpu()


@torch.no_grad()
def decode_greedily(model, encoder_output, source_padding_mask, max_len):
    """Greedy decoding (lesson 05c's second exercise): write the most likely word, feed it back, repeat.

    encoder_output [B, L_src, d] and source_padding_mask [B, L_src] come from ``model.encode``, once.
    Returns [B, steps] French ids without the <s>: each row's words and its </s>, then padding (0)
    once it has finished. Stops when every row has written </s>, or after ``max_len`` words.
    """
    batch, device = encoder_output.shape[0], encoder_output.device
    start, end, pad = TARGET_VOCAB.index[Vocabulary.BOS], TARGET_VOCAB.index[Vocabulary.EOS], TARGET_VOCAB.pad_id
    written = torch.full((batch, 1), start, dtype=torch.long, device=device)  # every row starts with <s>
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    for _ in range(max_len):
        scores = model.decode(written, encoder_output, source_padding_mask)  # [B, words so far, vocabulary]
        next_word = scores[:, -1].argmax(dim=-1)  # the last position predicts the next word
        next_word = next_word.masked_fill(done, pad)  # a row that has finished only pads
        written = torch.cat([written, next_word[:, None]], dim=1)  # feed it back
        done = done | (next_word == end)
        if done.all():
            break
    return written[:, 1:]  # without the <s>


# swap_and_translate calls the loop under this second name, so that pasting its solution into the lesson
# does not replace the learner's own decode_greedily (the second exercise)
reference_decode_greedily = decode_greedily


def translate(model, sentences):
    """English sentences -> the model's French sentences (greedy decoding).

    ``sentences``: a list of strings; one string gives one French string.
    """
    if isinstance(sentences, str):
        return translate(model, [sentences])[0]
    (source, _), _ = encode_batch(list(sentences))
    return [" ".join(TARGET_VOCAB.decode(row)) for row in greedy_decode(model, source).tolist()]


def exact_match(model, sentences):
    """Share of sentences whose whole translation is right, word for word (one wrong word = wrong)."""
    sentences = [sentences] if isinstance(sentences, str) else list(sentences)
    if not sentences:
        raise ValueError("exact_match needs at least one sentence, e.g. task.held_out(300)")
    predicted = translate(model, sentences)
    return sum(p == to_french(s) for p, s in zip(predicted, sentences, strict=True)) / len(sentences)


@torch.no_grad()
def alignment_accuracy(model, sentences, layer=-1):
    """Share of French words whose most attended English word is the one they translate.

    Teacher forcing on the correct translations; the cross-attention of decoder layer ``layer``,
    averaged over its heads; row i is the query that writes French word i (the final </s> is left out).
    """
    sentences = list(sentences)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    (source, target_in), _ = encode_batch(sentences)
    model((source.to(device), target_in.to(device)))
    looked_at = model.cross_attentions()[layer].mean(dim=1).argmax(dim=-1).cpu()  # [B, L_tgt]
    model.train(was_training)
    right = total = 0
    for row, sentence in zip(looked_at.tolist(), sentences, strict=True):
        expected = word_alignment(sentence)
        right += sum(a == b for a, b in zip(row, expected, strict=False))
        total += len(expected)
    return right / total


@torch.no_grad()
def attention_to_noun(model, sentences):
    """[encoder layers, heads]: the average weight that an article or an adjective puts on its own noun
    in the encoder's self-attention ("the" and "blue" -> "car" in "the blue car")."""
    sentences = list(sentences)
    was_training = model.training
    model.eval()
    (source, _), _ = encode_batch(sentences)
    model.encode(source.to(next(model.parameters()).device))
    weights = model.encoder.attentions().cpu()  # [layers, B, heads, L_src, L_src]
    model.train(was_training)
    picked = []
    for b, sentence in enumerate(sentences):
        start = 0
        for phrase in _split_phrases(sentence.split()):
            noun = start + len(phrase) - 1
            picked += [weights[:, b, :, query, noun] for query in range(start, noun)]  # article, adjective
            start += len(phrase) + 1
    return torch.stack(picked).mean(dim=0)


def _other_gender(noun):
    """The noun of the other gender at the same place in NOUNS' list of that gender (car <-> dog)."""
    gender = NOUNS[noun][1]
    same = [n for n, (_, g) in NOUNS.items() if g == gender]
    other = [n for n, (_, g) in NOUNS.items() if g != gender]
    return other[same.index(noun)]


@torch.no_grad()
def swap_and_translate(model, sentences, donors, position, max_len=8):
    """The swap intervention (lesson 05c's third exercise): translate each sentence with the encoder's
    output vector at ``position`` replaced by the vector at the same position of its donor sentence.

    Everything else (the other positions, the padding mask) is the sentence's own. Returns the
    French sentences (strings), decoded greedily.
    """
    _validate.swap_inputs(sentences, donors, position)
    device = next(model.parameters()).device
    (source, _), _ = encode_batch(list(sentences))
    (donor_source, _), _ = encode_batch(list(donors))
    encoder_output, source_padding_mask = model.encode(source.to(device))
    donor_output, _ = model.encode(donor_source.to(device))
    patched = encoder_output.clone()  # a copy: the sentence's own vectors stay as they were
    patched[:, position] = donor_output[:, position]  # one vector, after the encoder, from the donor
    written = reference_decode_greedily(model, patched, source_padding_mask, max_len)
    return [" ".join(TARGET_VOCAB.decode(row)) for row in written.tolist()]


@torch.no_grad()
def swap_experiment(model, position):
    """An intervention: does the gender of the output come from the encoder's vector at ``position``?

    For every phrase "determiner adjective noun" (all 168), the encoder's output vector at ``position``
    (0 = article, 1 = adjective, 2 = noun) is replaced by the vector at the same position of the same
    phrase with a noun of the other gender ("the blue car" gets it from "the blue dog"); then the model
    translates greedily (``swap_and_translate``). Returns the counts of what followed the donor phrase,
    and every translation.
    """
    if position not in (0, 1, 2):
        raise ValueError(f"position must be 0 (article), 1 (adjective) or 2 (noun), got {position!r}")
    was_training = model.training
    model.eval()
    sentences = [f"{d} {a} {n}" for d in DETERMINERS for a in ADJECTIVES for n in NOUNS]
    donors = [f"{d} {a} {_other_gender(n)}" for d in DETERMINERS for a in ADJECTIVES for n in NOUNS]
    swapped = swap_and_translate(model, sentences, donors, position)
    model.train(was_training)
    counts = dict.fromkeys(["phrases", "unchanged", "article follows donor", "noun kept", "adjective follows donor"], 0)
    counts["adjectives with two forms"] = 0
    translations = {}
    for sentence, donor, french in zip(sentences, donors, swapped, strict=True):
        out, own, theirs = french.split(), to_french(sentence).split(), to_french(donor).split()
        out += [""] * (3 - len(out))  # a translation that stopped early counts as wrong in every slot
        translations[sentence] = french
        two_forms = own[2] != theirs[2]
        counts["phrases"] += 1
        counts["unchanged"] += out == own
        counts["article follows donor"] += out[0] == theirs[0]
        counts["noun kept"] += out[1] == own[1]
        counts["adjectives with two forms"] += two_forms
        counts["adjective follows donor"] += two_forms and out[2] == theirs[2]
    return counts, translations


def gender_source(article_follows, noun_follows, phrases=168):
    """Where a run takes the article's gender from, by the two swaps: 'the', 'noun' or 'mixed'.

    ``article_follows`` and ``noun_follows``: in how many of the ``phrases`` the article followed the
    donor when the vector of *the*, or of the noun, was swapped (``swap_experiment`` positions 0 and 2).
    """
    for name, count in (("article_follows", article_follows), ("noun_follows", noun_follows)):
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= phrases:
            raise ValueError(f"{name} must be a count of phrases from 0 to {phrases}, got {count!r}")
    if article_follows >= 0.9 * phrases and noun_follows <= 0.1 * phrases:
        return "the"
    if noun_follows >= 0.9 * phrases and article_follows <= 0.1 * phrases:
        return "noun"
    return "mixed"
