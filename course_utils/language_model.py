"""A language model of our own (lesson 10): a small GPT trained on the course's stories.

Public API (lesson 11 and the tests rely on these names):

    from course_utils.language_model import load_trained_model, attention_weights
    model, tokenizer = load_trained_model()            # seed 0; seed=1 or 2 for the other runs; eval mode
    tokens = tokenizer.encode("Once upon a time")[None]    # [1, T] int64
    logits = model(tokens)                               # [1, T, vocab_size]
    weights = attention_weights(model, tokens)           # [layers, B, heads, T, T], rows sum to 1
    # after any forward, model.attentions() gives the same tensor of that forward

- ``WordTokenizer``: one token per word, punctuation mark or line break (why: see its docstring).
- ``LanguageModel``: a decoder-only, pre-norm Transformer. Each ``DecoderBlock`` is
  lesson 05's layer in pre-norm order (LayerNorm, ``FeedForward``) around lesson 08's
  ``GroupedQueryAttention`` projections with RoPE, under a causal mask.
- ``next_token_loss``, ``decoder_block``, ``filter_logits``, ``sample_next_token``, ``decode_with_cache``:
  the lesson's exercises.
- ``LayerCache``, ``generate``: decoding with or without a KV cache (lesson 07's idea on a
  trained model); ``LayerCache(window=W, sinks=S)`` is a sliding-window cache that keeps the
  first S tokens (StreamingLLM: Xiao, Tian, Chen, Han and Lewis, 2023, "Efficient Streaming
  Language Models with Attention Sinks").
- ``streaming_loss``: the next-token loss of a long text read through such a cache.
- ``unigram_loss``, ``bigram_loss``: the baselines a model must beat.
- ``corpus_splits``, ``validation_stories``, ``batch_sampler``, ``evaluate_loss``, ``train_model``:
  data and training, shared by the lesson and ``scripts/train_language_model.py``, which
  trained the stored model. (Whether it reads its context: ``course_utils.context_use``.)

The cache keeps the keys *before* RoPE and rotates them by their slot in the cache at each
step. For a cache that only grows this is the same as rotating by position in the text. In a
sliding window, RoPE's scores depend on distances only, so the window's own keys score the
same either way; what slots change is where kept first tokens sit: just before the window, as
in StreamingLLM, instead of ever further back.
"""

import json
import re
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from course_utils import _validate
from course_utils.attention import combine_heads, scaled_dot_product_attention, split_heads
from course_utils.data import data_path
from course_utils.modern import GroupedQueryAttention, apply_rope, repeat_kv
from course_utils.stories import story_corpus
from course_utils.training import fit
from course_utils.transformer import FeedForward

__all__ = [
    "WordTokenizer",
    "corpus_splits",
    "validation_stories",
    "next_token_loss",
    "filter_logits",
    "sample_next_token",
    "DecoderBlock",
    "decoder_block",
    "LanguageModel",
    "LayerCache",
    "decode_with_cache",
    "generate",
    "attention_weights",
    "streaming_loss",
    "unigram_loss",
    "bigram_loss",
    "batch_sampler",
    "evaluate_loss",
    "train_model",
    "load_trained_model",
    "trained_results",
    "SETTINGS_FILE",
    "weights_file",
]

SETTINGS_FILE = "language_model_settings.json"
NUM_STORIES = 10_000  # the corpus of the stored model: about 920,000 tokens


def weights_file(seed):
    return f"language_model_seed{seed}.pt"


# ---------------------------------------------------------------- the text


class WordTokenizer:
    """One token per word (with the space before it), per punctuation mark, and per line break.

    Why words: a name is then one token, so repeating a name from earlier in the story is one
    lookup, the job attention does well (read letter by letter, a name has to be copied as a
    chain of lookups, one per letter).
    The stories use about 800 such tokens (" said" and "said" are two), few enough for a tiny
    model. The price: a word the stories never use cannot be encoded; large models use
    byte-pair tokens, which can spell any text out of pieces.
    """

    PATTERN = re.compile(r" ?[A-Za-z]+| ?[^A-Za-z\s]|\n")

    def __init__(self, words):
        """words: the vocabulary, e.g. ``WordTokenizer.split(text)`` of a training text (repeats are dropped)."""
        words = sorted(set(words))
        if len(words) < 2 or any(self.split(w) != [w] for w in words):
            raise ValueError(
                f"a tokenizer needs at least 2 distinct tokens, each one word, mark or line break, got {words[:8]!r}"
            )
        self.words = words
        self.index = {w: i for i, w in enumerate(words)}

    @property
    def vocab_size(self):
        return len(self.words)

    @classmethod
    def split(cls, text):
        """str -> its tokens as strings; refuses text they cannot spell (two spaces, a tab, ...)."""
        if not isinstance(text, str):
            raise ValueError(f"text must be a str, got {type(text).__name__}")
        pieces = cls.PATTERN.findall(text)
        if "".join(pieces) != text:
            spelled = "".join(pieces)
            at = next((i for i, (a, b) in enumerate(zip(text, spelled, strict=False)) if a != b), len(spelled))
            raise ValueError(
                f"cannot cut {text[max(0, at - 10) : at + 10]!r} into words: a token is a word or a punctuation "
                "mark with at most one space before it, or a line break"
            )
        return pieces

    def encode(self, text):
        """str -> int64 tensor [number of tokens]."""
        pieces = self.split(text)
        unknown = sorted({p for p in pieces if p not in self.index})
        if unknown:
            raise ValueError(f"not in the stories' vocabulary of {self.vocab_size} words: {unknown[:8]}")
        return torch.tensor([self.index[p] for p in pieces], dtype=torch.long)

    def decode(self, ids):
        """int tensor [T] (or a list of ints) -> str."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        if any(isinstance(i, list) for i in ids):
            raise ValueError("decode takes the ids of one text [T]; for a batch decode each row, e.g. decode(ids[0])")
        bad = [i for i in ids if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.vocab_size]
        if bad:  # a negative id would silently index from the end of the vocabulary
            raise ValueError(f"ids must be ints in 0..{self.vocab_size - 1}, got {bad[:5]}")
        return "".join(self.words[i] for i in ids)


def _split_stories(num_stories, validation_share, seed):
    if isinstance(validation_share, bool) or not isinstance(validation_share, int) or not 0 < validation_share < 100:
        raise ValueError(f"validation_share must be a percentage, an int in 1..99, got {validation_share!r}")
    lines = story_corpus(num_stories, seed).splitlines(keepends=True)
    cut = len(lines) - len(lines) * validation_share // 100
    return lines[:cut], lines[cut:]


def corpus_splits(num_stories=NUM_STORIES, validation_share=10, seed=0):
    """(tokenizer, train ids, validation ids): the last ``validation_share`` % of the stories are held out."""
    train, valid = _split_stories(num_stories, validation_share, seed)
    tokenizer = WordTokenizer(WordTokenizer.split("".join(train + valid)))
    return tokenizer, tokenizer.encode("".join(train)), tokenizer.encode("".join(valid))


def validation_stories(num_stories=NUM_STORIES, validation_share=10, seed=0):
    """The held-out stories of ``corpus_splits``, one string each (with its line break)."""
    return _split_stories(num_stories, validation_share, seed)[1]


# ---------------------------------------------------------------- the loss and sampling (the exercises)


def next_token_loss(logits, tokens):
    """Mean cross-entropy of position t's logits against token t + 1.

    logits: [B, T, V], the model's output on tokens [B, T]. The last position has no next
    token and the first token is never a target, so B * (T - 1) predictions are scored.
    """
    _validate.loss_inputs(logits, tokens)
    predictions = logits[:, :-1]  # position t predicts ...
    targets = tokens[:, 1:]  # ... token t + 1
    # cross_entropy takes raw scores (it applies log_softmax itself) as [N, V] against [N]
    return F.cross_entropy(predictions.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def filter_logits(logits, temperature=1.0, top_k=None, top_p=None):
    """Logits [..., V] -> the same shape, divided by ``temperature``, excluded tokens at -inf.

    top_k: keep the k largest (all of them if k >= V), and every token tied with the k-th.
    top_p (nucleus sampling, Holtzman et al., 2020, "The Curious Case of Neural Text
    Degeneration"): keep the smallest set of most probable tokens whose probability reaches p,
    the token that crosses p included, so at least one token is always kept; p = 1 keeps every
    token. Tokens of equal probability count in vocabulary order (the lower id first), so a tie
    at p keeps the lower ids. Both apply to the logits after the temperature. A kept token's
    value is its logit divided by the temperature, not renormalised: softmax renormalises over
    the kept tokens by itself.
    """
    top_k = _validate.filter_inputs(logits, temperature, top_k, top_p)
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth_largest = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth_largest, float("-inf"))  # ties with the k-th are kept
    if top_p is not None and top_p < 1:  # p = 1 keeps everything (cumulative sums may round past 1)
        probs = logits.softmax(dim=-1)
        sorted_probs, order = probs.sort(dim=-1, descending=True, stable=True)  # ties: the lower id first
        # mass of the tokens *before* each one: a token is kept if that mass is still below p,
        # so the token that crosses p is kept, and so is the most probable one (mass 0 before it)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
        drop_sorted = mass_before >= top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to the vocabulary's order
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    """One token id per row of logits [B, V], drawn from softmax(filter_logits(...)): ids [B]."""
    _validate.batch_logits(logits)
    probs = filter_logits(logits, temperature, top_k, top_p).softmax(dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)


# ---------------------------------------------------------------- the model


class LayerCache:
    """One layer's keys (before RoPE) and values [B, H_kv, n, d] of the tokens seen so far.

    ``window=None``: keep every token (a plain KV cache). ``window=W``: keep the last W tokens
    and, with ``sinks=S``, also the first S tokens of the text (StreamingLLM). Either way the
    keys are rotated by their slot in the cache, 0 .. n-1, when attention reads them.
    """

    def __init__(self, window=None, sinks=0):
        self.window = _validate.optional_positive_int(window, "window")
        if isinstance(sinks, bool) or not isinstance(sinks, int) or sinks < 0:
            raise ValueError(f"sinks must be an int >= 0, got {sinks!r}")
        if sinks and window is None:
            raise ValueError("sinks only matter for a sliding window: give window= too")
        self.sinks = sinks
        self.keys = self.values = None

    @property
    def length(self):
        return 0 if self.keys is None else self.keys.shape[2]

    def append(self, k, v):
        """Add the keys/values of t new tokens; return everything attention may read now."""
        if self.keys is not None and k.shape[:2] != self.keys.shape[:2]:
            raise ValueError(
                f"this cache holds keys of {self.keys.shape[0]} texts and {self.keys.shape[1]} heads, got new ones "
                f"of {k.shape[0]} and {k.shape[1]}: a cache belongs to one batch of texts; make fresh caches for another"
            )
        if self.keys is None:
            self.keys, self.values = k, v
        else:
            self.keys, self.values = torch.cat([self.keys, k], dim=2), torch.cat([self.values, v], dim=2)
        return self.keys, self.values

    def evict(self):
        """Drop the oldest tokens beyond the window (after the step that used them)."""
        if self.window is None or self.length <= self.sinks + self.window:
            return
        keep = torch.cat([torch.arange(self.sinks), torch.arange(self.length - self.window, self.length)])
        self.keys, self.values = self.keys[:, :, keep], self.values[:, :, keep]


def causal_self_attention(attention, x, cache=None):
    """Causal self-attention of x [B, t, d_model] with a ``GroupedQueryAttention``'s projections.

    With a cache, x holds only the new tokens: their keys and values join the cache and their
    queries read every cached token up to their own slot. Returns (output [B, t, d_model],
    weights [B, heads, t, n]).
    """
    t = x.shape[1]
    query = split_heads(attention.query_linear(x), attention.num_heads)
    key = split_heads(attention.key_linear(x), attention.num_kv_heads)
    value = split_heads(attention.value_linear(x), attention.num_kv_heads)
    if cache is not None:
        key, value = cache.append(key, value)
    n = key.shape[2]
    # RoPE by slot: the new tokens are the last t of the n slots
    slots = torch.arange(n, device=x.device)
    query = apply_rope(query, slots[n - t :], attention.rope_base)
    key = apply_rope(key, slots, attention.rope_base)
    n_rep = attention.num_heads // attention.num_kv_heads
    key, value = repeat_kv(key, n_rep), repeat_kv(value, n_rep)
    # the last t rows of the causal mask: new token i (slot n - t + i) may read slots 0 .. n - t + i
    mask = torch.ones(t, n, dtype=torch.bool, device=x.device).tril(diagonal=n - t)
    context, weights = scaled_dot_product_attention(query, key, value, mask)
    return attention.output_linear(combine_heads(context)), weights


def decoder_block(block, x):
    """One ``DecoderBlock``'s forward, written out (the exercise of section 3): x [B, T, d_model] -> the same shape.

    Pre-norm: each sublayer reads a normalised copy of x, and its output is added to x itself.
    """
    if not isinstance(block, DecoderBlock):
        raise ValueError(f"block must be a DecoderBlock (e.g. model.blocks[0]), got {type(block).__name__}")
    attended, _ = causal_self_attention(block.attention, block.norm1(x))
    x = x + attended
    return x + block.feed_forward(block.norm2(x))


class DecoderBlock(nn.Module):
    """Lesson 05's layer in pre-norm order, with causal, rotary self-attention:

    x = x + Attention(LayerNorm1(x));  out = x + FeedForward(LayerNorm2(x))
    """

    def __init__(self, d_model, num_heads, num_kv_heads, d_ff, rope_base=10000.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attention = GroupedQueryAttention(d_model, num_heads, num_kv_heads, rope_base=rope_base)
        self.norm2 = nn.LayerNorm(d_model)
        self.feed_forward = FeedForward(d_model, d_ff)
        self.attention_weights = None

    def forward(self, x, cache=None):
        attended, weights = causal_self_attention(self.attention, self.norm1(x), cache)
        self.attention_weights = weights.detach()
        x = x + attended
        return x + self.feed_forward(self.norm2(x))


class LanguageModel(nn.Module):
    """Token ids [B, T] -> logits [B, T, vocab] for the next token at every position.

    token embedding -> decoder blocks (causal; positions by RoPE inside attention) -> final
    LayerNorm (pre-norm leaves the residual stream un-normalised) -> linear read-out.
    """

    def __init__(self, vocab_size, d_model=64, num_heads=4, num_kv_heads=None, num_layers=3, d_ff=None, context=128):
        super().__init__()
        self.settings = {
            "vocab_size": vocab_size,
            "d_model": d_model,
            "num_heads": num_heads,
            "num_kv_heads": num_kv_heads or num_heads,
            "num_layers": num_layers,
            "d_ff": d_ff or 4 * d_model,
            "context": context,
        }
        for name, value in self.settings.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.vocab_size, self.context = vocab_size, context
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList(
            DecoderBlock(d_model, num_heads, self.settings["num_kv_heads"], self.settings["d_ff"])
            for _ in range(num_layers)
        )
        self.final_norm = nn.LayerNorm(d_model)
        self.output_linear = nn.Linear(d_model, vocab_size)

    def _check_tokens(self, tokens):
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.is_floating_point():
            got = f"{tokens.dtype} {tuple(tokens.shape)}" if isinstance(tokens, torch.Tensor) else type(tokens).__name__
            raise ValueError(f"tokens must be an integer tensor [batch, seq_len], got {got} (add [None] for one text)")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.vocab_size):
            raise ValueError(f"token ids must lie in 0..{self.vocab_size - 1}")

    def forward(self, tokens, caches=None):
        """tokens [B, t]; caches: one ``LayerCache`` per block (then tokens are the new ones only)."""
        self._check_tokens(tokens)
        if caches is not None:
            _validate.layer_caches(caches, len(self.blocks), LayerCache)
        x = self.token_embedding(tokens)
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        return self.output_linear(self.final_norm(x))

    def attentions(self):
        """[layers, B, heads, t, n] attention weights of the last forward pass."""
        if self.blocks[0].attention_weights is None:
            raise RuntimeError("run the model on some tokens first: the weights are kept from the last forward")
        return torch.stack([block.attention_weights for block in self.blocks])


@torch.no_grad()
def attention_weights(model, tokens):
    """Every layer's causal attention weights on tokens [B, T]: [layers, B, heads, T, T]."""
    model(tokens)
    return model.attentions()


# ---------------------------------------------------------------- generation


@torch.no_grad()
def decode_with_cache(model, prompt, steps):
    """Greedy decoding with a KV cache: prompt ids [B, P] -> [B, P + steps] (the exercise of section 5)."""
    _validate.prompt_inputs(model, prompt, steps)
    caches = [LayerCache() for _ in model.blocks]  # one per layer: each layer has keys and values of its own
    tokens, new_tokens = prompt, prompt  # the first step reads the whole prompt ("prefill")
    for _ in range(steps):
        logits = model(new_tokens, caches)  # [B, t, V]; the caches now hold every token so far
        next_token = logits[:, -1].argmax(dim=-1, keepdim=True)  # the last position predicts the next token
        tokens = torch.cat([tokens, next_token], dim=1)
        new_tokens = next_token  # later steps read only the token added last
    return tokens


@torch.no_grad()
def generate(
    model, prompt, steps, use_cache=True, temperature=None, top_k=None, top_p=None, generator=None, step_times=None
):
    """Prompt ids [B, P] -> [B, P + steps]: the prompt and ``steps`` new tokens.

    ``temperature=None``: greedy (the most probable token); otherwise sampled with
    ``sample_next_token``. top_k, top_p and generator shape the sampling, so they need a
    temperature (1.0 samples from the model's own probabilities). ``use_cache=False`` runs the model on the whole text at every step;
    ``use_cache=True`` runs it on the prompt once ("prefill"), then on one new token per step.
    ``step_times``: a list that receives the seconds each step took.
    """
    _validate.prompt_inputs(model, prompt, steps)
    _validate.greedy_settings(temperature, top_k, top_p, generator)
    model.eval()
    caches = [LayerCache() for _ in model.blocks] if use_cache else None
    sequence, new_tokens = prompt, prompt
    for _ in range(steps):
        start = time.perf_counter()
        logits = model(new_tokens, caches) if use_cache else model(sequence)
        last = logits[:, -1]
        if temperature is None:
            next_token = last.argmax(dim=-1)
        else:
            next_token = sample_next_token(last, temperature, top_k, top_p, generator)
        sequence = torch.cat([sequence, next_token[:, None]], dim=1)
        new_tokens = sequence[:, -1:] if use_cache else sequence
        if step_times is not None:
            step_times.append(time.perf_counter() - start)
    return sequence


@torch.no_grad()
def streaming_loss(model, tokens, window=None, sinks=0, recompute=False):
    """Next-token loss at every position of tokens [B, T], read one token at a time: [T - 1].

    window=None: a cache that keeps everything (positions grow to T - 1). window=W: a sliding
    cache of the last W tokens plus the first ``sinks``; the token being read joins them, so a
    prediction reads W + sinks + 1 tokens. recompute=True: instead of a cache, run the model
    afresh on the same W + 1 tokens for every prediction (the slow baseline).
    """
    model._check_tokens(tokens)
    if tokens.shape[1] < 2:
        raise ValueError(f"a next-token loss needs at least 2 tokens, got tokens of shape {tuple(tokens.shape)}")
    model.eval()
    losses = []
    caches = [LayerCache(window, sinks) for _ in model.blocks]
    for t in range(tokens.shape[1] - 1):
        if recompute:
            start = 0 if window is None else max(0, t - window)  # the W cached tokens, and token t
            logits = model(tokens[:, start : t + 1])[:, -1]
        else:
            logits = model(tokens[:, t : t + 1], caches)[:, -1]
            for cache in caches:
                cache.evict()
        losses.append(F.cross_entropy(logits, tokens[:, t + 1], reduction="none"))
    return torch.stack(losses, dim=1).mean(dim=0)


# ---------------------------------------------------------------- baselines and training


def unigram_loss(train_ids, eval_ids, vocab_size):
    """Cross-entropy of predicting every token from the training frequencies alone (add-one smoothed)."""
    vocab_size = _validate.positive_int(vocab_size, "vocab_size")
    _validate.token_ids(train_ids, "train_ids", vocab_size)
    _validate.token_ids(eval_ids, "eval_ids", vocab_size, min_len=2)
    counts = torch.bincount(train_ids, minlength=vocab_size).double() + 1
    log_probs = (counts / counts.sum()).log()
    return -log_probs[eval_ids[1:]].mean().item()


def bigram_loss(train_ids, eval_ids, vocab_size):
    """Cross-entropy of predicting each token from the one before it (counts, add-one smoothed)."""
    vocab_size = _validate.positive_int(vocab_size, "vocab_size")
    _validate.token_ids(train_ids, "train_ids", vocab_size, min_len=2)
    _validate.token_ids(eval_ids, "eval_ids", vocab_size, min_len=2)
    pairs = train_ids[:-1] * vocab_size + train_ids[1:]
    counts = torch.bincount(pairs, minlength=vocab_size**2).reshape(vocab_size, vocab_size).double() + 1
    log_probs = (counts / counts.sum(dim=1, keepdim=True)).log()
    return -log_probs[eval_ids[:-1], eval_ids[1:]].mean().item()


def batch_sampler(ids, batch_size, context, repeats=0, words=None):
    """sample_batch(generator) -> (inputs, targets) for ``fit``: random crops of context + 1 tokens.

    inputs are tokens 0..context-1 of a crop, targets tokens 1..context: the shift of
    ``next_token_loss`` done once, so ``fit``'s cross-entropy scores position t against t + 1.
    repeats: how many crops of each batch are instead a string of random ``words`` (ids) said
    again and again, each batch's string 8 to 64 words long: text in which only copying helps
    (the training mix of lesson 10's stored model; see its section 4).
    """
    batch_size, context = _validate.positive_int(batch_size, "batch_size"), _validate.positive_int(context, "context")
    # a crop starts at 0 .. len(ids) - context - 2, so there must be room for one start at least
    _validate.token_ids(ids, "ids", min_len=context + 2)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or not 0 <= repeats <= batch_size:
        raise ValueError(f"repeats must be an int in 0..batch_size ({batch_size}), got {repeats!r}")
    if repeats:
        _validate.token_ids(words, "words", min_len=2)

    def sample_batch(generator):
        starts = torch.randint(0, len(ids) - context - 1, (batch_size,), generator=generator)
        crops = torch.stack([ids[s : s + context + 1] for s in starts.tolist()])
        if repeats:
            length = torch.randint(8, 65, (1,), generator=generator).item()
            string = words[torch.randint(len(words), (repeats, length), generator=generator)]
            crops[:repeats] = string.repeat(1, context // length + 1)[:, : context + 1]
        return crops[:, :-1], crops[:, 1:]

    return sample_batch


@torch.no_grad()
def evaluate_loss(model, ids, context, max_windows=64):
    """Mean next-token loss over the first ``max_windows`` non-overlapping windows of ``ids``."""
    context = _validate.positive_int(context, "context")
    max_windows = _validate.positive_int(max_windows, "max_windows")
    # one window of context + 1 tokens at least; fewer would average no losses at all (nan)
    _validate.token_ids(ids, "ids", model.vocab_size, min_len=context + 1)
    model.eval()
    count = min(max_windows, len(ids) // (context + 1))
    crops = ids[: count * (context + 1)].reshape(count, context + 1)
    return next_token_loss(model(crops), crops).item()


def train_model(settings, train_ids, valid_ids, seed, progress=False, eval_every=None, measure=None, words=None):
    """Build a ``LanguageModel`` from ``settings`` (seeded) and train it with ``fit``; return (model, history).

    measure(model) -> {name: float}: measured with the validation loss every ``eval_every`` steps.
    words: the ids the repeated strings are drawn from when ``settings["repeats"]`` > 0.
    """
    model_settings = {k: settings[k] for k in ("vocab_size", "d_model", "num_heads", "num_layers", "context")}
    torch.manual_seed(seed)
    model = LanguageModel(**model_settings)
    sample_batch = batch_sampler(
        train_ids, settings["batch_size"], settings["context"], settings.get("repeats", 0), words
    )

    def evaluate():
        measures = {"validation loss": evaluate_loss(model, valid_ids, settings["context"])}
        return {**measures, **(measure(model) if measure else {})}

    history = fit(
        model,
        sample_batch,
        steps=settings["steps"],
        lr=settings["lr"],
        warmup=settings["warmup"],
        seed=seed,
        evaluate=evaluate,
        eval_every=eval_every or settings["steps"],
        progress=progress,
    )
    return model, history


# ---------------------------------------------------------------- the stored model


def trained_results():
    """What ``scripts/train_language_model.py`` stored: settings, losses per seed, baselines."""
    return json.loads(data_path(SETTINGS_FILE).read_text())


def load_trained_model(seed=0):
    """(model in eval mode, tokenizer) trained by ``scripts/train_language_model.py`` with ``seed``."""
    results = trained_results()
    seed = _validate.stored_seed(seed, results["seeds"])
    settings = results["settings"]
    tokenizer = WordTokenizer(results["words"])
    model = LanguageModel(**{k: settings[k] for k in ("vocab_size", "d_model", "num_heads", "num_layers", "context")})
    state = torch.load(data_path(weights_file(seed)), map_location="cpu", weights_only=True)
    model.load_state_dict({name: value.float() for name, value in state.items()})
    return model.eval(), tokenizer
