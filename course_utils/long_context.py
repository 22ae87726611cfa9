"""Long context (lesson 14): RoPE's rotation speeds, rescaled to read past the trained length.

    from course_utils.long_context import rope_inverse_frequencies
    inv_freq, attention_scaling = rope_inverse_frequencies("yarn", head_dim=16, base=10000.0, factor=4.0,
                                                           original_length=128)

Each method is a function of the head dimension's rotation speeds theta_i = base^(-2i / d)
(lesson 08's ``modern.rope_frequencies``), written as in the papers and named as in
transformers' ``rope_parameters``:

- "default": theta_i unchanged.
- "linear", position interpolation (Chen, Wong, Chen and Tian 2023, "Extending Context Window of
  Large Language Models via Positional Interpolation"): every theta_i / factor, so position
  factor * L turns as far as position L did.
- "ntk", NTK-aware scaling (bloc97, 2023): a larger base, base * factor^(d / (d - 2)), which leaves
  the fastest dimension as it was and slows the slowest by exactly the factor.
- "dynamic", dynamic NTK: the same with the factor grown with the current length ``seq_len``,
  factor * seq_len / L - (factor - 1) (no change up to L).
- "yarn" (Peng, Quesnelle, Fan and Shippole 2023, "YaRN: Efficient Context Window Extension of
  Large Language Models"): per dimension, a ramp between interpolation (dimensions that turn fewer
  than ``beta_slow`` times over L) and extrapolation (more than ``beta_fast`` times), and an
  attention scaling 0.1 ln(factor) + 1 on cos and sin, so its square on the logits (returned as
  ``attention_scaling``). ``yarn_paper_frequencies``: the same with the ramp as the paper writes it.
- "llama3" (Meta's Llama 3.1): wavelengths longer than L / low_freq_factor interpolated, shorter
  than L / high_freq_factor kept, a smooth mix in between.

Returns (inv_freq [d / 2] float32, attention_scaling). The computation runs in float64.

``logits_with_rope(model, tokens, inv_freq, attention_scaling)`` runs lesson 10's model on
tokens [B, T] of any length with those frequencies in place of its own: the way to read it past
its trained 128 tokens with a scaling method (with the default frequencies it is the model itself).
"""

import json
import math
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from course_utils import _validate, context_use
from course_utils import language_model as lm
from course_utils.attention import combine_heads, scaled_dot_product_attention, split_heads
from course_utils.data import DATA_DIR
from course_utils.modern import repeat_kv, rotate_half
from course_utils.training import fit

__all__ = [
    "KINDS",
    "rope_inverse_frequencies",
    "yarn_frequencies",
    "yarn_paper_frequencies",
    "logits_with_rope",
    "loss_by_position",
    "attention_entropy",
    "loss_and_entropy",
    "long_texts",
    "copy_probe_tokens",
    "copy_losses",
    "load_runs",
    "angle_ratios",
    "RopeScaledModel",
    "method_frequencies",
    "measure",
    "fine_tune",
    "ORIGINAL_LENGTH",
    "BUCKETS",
    "DISTANCES",
]

KINDS = ("default", "linear", "ntk", "dynamic", "yarn", "llama3")
ORIGINAL_LENGTH = 128  # lesson 10's trained context
BUCKETS = ((0, 128), (128, 256), (256, 512), (512, 1024))  # positions whose next-token loss is averaged
DISTANCES = (32, 64, 96, 192, 384, 768)  # copy probe: tokens between a word and its repeat
RESULTS_FILE = "long_context_runs.json"  # written by scripts/long_context_runs.py
MAX_LENGTH = 4096  # tokens one call may read: 16 x 4096^2 attention weights per layer stay under 2 GB


def _speeds(head_dim, base):
    return base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)


def yarn_frequencies(head_dim, base, factor, original_length, beta_fast=32, beta_slow=1):
    """YaRN's frequencies and temperature (lesson 14's exercise): (inv_freq [head_dim / 2] float32, attention_scaling).

    Pair i turns original_length * theta_i / (2 pi) times over the trained length. Pairs that turn more than
    beta_fast times keep their speed, pairs that turn fewer than beta_slow times are interpolated (divided by
    factor), a linear ramp in between, its ends rounded outwards to whole pairs. The attention scaling
    0.1 ln(factor) + 1 goes on cos and sin, so the logits carry its square (the paper's 1/t)."""
    _validate.rope_scaling_inputs(
        "yarn", head_dim, base, factor, original_length, {"beta_fast": beta_fast, "beta_slow": beta_slow}, KINDS
    )
    theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)

    def pair_turning(turns):  # solve original_length * base^(-2i / d) / (2 pi) = turns for i
        return head_dim * math.log(original_length / (turns * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(pair_turning(beta_fast)), 0)
    high = min(math.ceil(pair_turning(beta_slow)), head_dim - 1)
    high = high + 0.001 if low == high else high  # a ramp of width zero would divide by zero
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)  # 1: interpolate
    inv_freq = (theta / factor) * ramp + theta * (1 - ramp)
    scaling = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    return inv_freq.float(), scaling


def yarn_paper_frequencies(head_dim, base, factor, original_length, beta_fast=32, beta_slow=1):
    """YaRN with the ramp as its paper writes it: (inv_freq [head_dim / 2] float32, attention_scaling).

    The paper (section 3.2, "NTK-by-parts") makes the ramp linear in the turns r_i = L theta_i / (2 pi) a pair
    makes over the trained length: kept above beta_fast turns, interpolated below beta_slow, and
    (r_i - beta_slow) / (beta_fast - beta_slow) of the way between. Its code and transformers make it linear
    in the pair index between rounded ends instead (``yarn_frequencies``); lesson 14 measures both."""
    _validate.rope_scaling_inputs(
        "yarn", head_dim, base, factor, original_length, {"beta_fast": beta_fast, "beta_slow": beta_slow}, KINDS
    )
    theta = _speeds(head_dim, base)
    turns = original_length * theta / (2 * math.pi)
    keep = ((turns - beta_slow) / (beta_fast - beta_slow)).clamp(0, 1)  # the paper's gamma: 1 keeps the speed
    scaling = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    return ((1 - keep) * theta / factor + keep * theta).float(), scaling


def rope_inverse_frequencies(kind, head_dim, base, factor=1.0, original_length=None, **options):
    """(inverse frequencies [head_dim / 2], attention scaling) of one RoPE scaling method; see the module's list."""
    options = _validate.rope_scaling_inputs(kind, head_dim, base, factor, original_length, options, KINDS)
    theta = _speeds(head_dim, base)
    scaling = 1.0
    if kind == "linear":
        theta = theta / factor
    elif kind in ("ntk", "dynamic"):
        if kind == "dynamic":  # the factor this length needs; never below 1
            seq_len = max(options.get("seq_len", original_length), original_length)
            factor = factor * seq_len / original_length - (factor - 1)
        theta = _speeds(head_dim, base * factor ** (head_dim / (head_dim - 2)))
    elif kind == "yarn":
        betas = {name: options[name] for name in ("beta_fast", "beta_slow") if name in options}
        theta, scaling = yarn_frequencies(head_dim, base, factor, original_length, **betas)
        scaling = options.get("attention_factor", scaling)
    elif kind == "llama3":
        low, high = options.get("low_freq_factor", 1.0), options.get("high_freq_factor", 4.0)
        wavelength = 2 * math.pi / theta
        mix = ((original_length / wavelength - low) / (high - low)).clamp(0, 1)  # 0: interpolate, 1: keep
        theta = (1 - mix) * theta / factor + mix * theta
    return theta.float(), scaling


def _rotate(x, inv_freq, attention_scaling):
    """RoPE with given frequencies (lesson 08's rotate_half layout) at positions 0..T-1 of x [B, H, T, d].

    attention_scaling multiplies cos and sin, as transformers does: queries and keys both carry it, so
    the attention logits are multiplied by its square (YaRN's temperature 1/t with sqrt(1/t) = scaling)."""
    angles = torch.arange(x.shape[-2], dtype=torch.float32)[:, None] * inv_freq.float()
    angles = torch.cat((angles, angles), dim=-1)
    cos, sin = angles.cos() * attention_scaling, angles.sin() * attention_scaling
    return x * cos.to(x.dtype) + rotate_half(x) * sin.to(x.dtype)


def _entropy(weights):
    """Entropy in nats of each attention row [..., T]: 0 for one token read, ln(n) for n read evenly."""
    return -(weights * weights.clamp_min(1e-30).log()).sum(dim=-1)


def _forward(model, tokens, inv_freq, attention_scaling, entropies=None):
    """Lesson 10's forward with RoPE at inv_freq; appends each layer's attention entropies [B, H, T] to entropies."""
    x = model.token_embedding(tokens)
    mask = torch.ones(tokens.shape[1], tokens.shape[1], dtype=torch.bool).tril()
    for block in model.blocks:
        attention, h = block.attention, block.norm1(x)
        query = _rotate(split_heads(attention.query_linear(h), attention.num_heads), inv_freq, attention_scaling)
        key = _rotate(split_heads(attention.key_linear(h), attention.num_kv_heads), inv_freq, attention_scaling)
        value = split_heads(attention.value_linear(h), attention.num_kv_heads)
        n_rep = attention.num_heads // attention.num_kv_heads
        context, weights = scaled_dot_product_attention(query, repeat_kv(key, n_rep), repeat_kv(value, n_rep), mask)
        if entropies is not None:
            entropies.append(_entropy(weights))
        x = x + attention.output_linear(combine_heads(context))
        x = x + block.feed_forward(block.norm2(x))
    return model.output_linear(model.final_norm(x))


def _checked(model, tokens, inv_freq, attention_scaling):
    model._check_tokens(tokens)
    _validate.rope_frequencies_for(inv_freq, model.blocks[0].attention.head_dim)
    _validate.positive_number(attention_scaling, "attention_scaling (1.0, or the method's second return value)")
    if tokens.shape[1] > MAX_LENGTH:
        raise ValueError(
            f"at most {MAX_LENGTH} tokens at once (attention keeps a T x T matrix per head), got {tokens.shape[1]}"
        )


@torch.no_grad()
def logits_with_rope(model, tokens, inv_freq, attention_scaling=1.0):
    """Lesson 10's model on tokens [B, T] (any T) with RoPE frequencies inv_freq [head_dim / 2]: [B, T, vocab]."""
    _checked(model, tokens, inv_freq, attention_scaling)
    return _forward(model, tokens, inv_freq, attention_scaling)


@torch.no_grad()
def loss_by_position(model, tokens, inv_freq, attention_scaling=1.0):
    """Next-token loss at every position of tokens [B, T], averaged over the batch: [T - 1] (entry t predicts t + 1)."""
    _checked(model, tokens, inv_freq, attention_scaling)
    logits = _forward(model, tokens, inv_freq, attention_scaling)[:, :-1]
    losses = F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none")
    return losses.mean(dim=0)


@torch.no_grad()
def attention_entropy(model, tokens, inv_freq, attention_scaling=1.0):
    """Mean entropy (nats) of the attention rows at each query position, per layer: [layers, T]."""
    return loss_and_entropy(model, tokens, inv_freq, attention_scaling)[1]


@torch.no_grad()
def loss_and_entropy(model, tokens, inv_freq, attention_scaling=1.0):
    """``loss_by_position`` and ``attention_entropy`` from one forward pass: ([T - 1], [layers, T])."""
    _checked(model, tokens, inv_freq, attention_scaling)
    entropies = []
    logits = _forward(model, tokens, inv_freq, attention_scaling, entropies)[:, :-1]
    losses = F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none")
    return losses.mean(dim=0), torch.stack([e.mean(dim=(0, 1)) for e in entropies])


def long_texts(tokenizer, length, count, skip=0):
    """count texts of ``length`` tokens: lesson 10's held-out stories, one after another: [count, length].

    skip: how many texts' worth of tokens to pass over first (so that two uses can draw different texts)."""
    length, count = _validate.positive_int(length, "length"), _validate.positive_int(count, "count")
    if _validate.whole_number(skip) != 0:  # 0 (also np.int64(0)) is the default; other counts are checked like count
        skip = _validate.positive_int(skip, "skip (texts to pass over: an int >= 0)")
    ids = tokenizer.encode("".join(lm.validation_stories()))
    needed = (skip + count) * length
    if needed > len(ids):
        raise ValueError(f"the held-out stories hold {len(ids)} tokens, {needed} were asked for")
    return ids[skip * length : needed].reshape(count, length)


def copy_probe_tokens(tokenizer, distance, length=16, count=32, seed=0):
    """The copy probe's texts [count, distance + length]: ``length`` random story words, held-out story text,
    the same words again, the second copy starting ``distance`` tokens after the first."""
    length, count = _validate.positive_int(length, "length"), _validate.positive_int(count, "count")
    distance = _validate.positive_int(distance, "distance")
    if distance < length:
        raise ValueError(f"distance must be at least length ({length}): the copies would overlap, got {distance}")
    words = context_use.story_words(tokenizer)
    generator = torch.Generator().manual_seed(seed)
    string = words[torch.randint(len(words), (count, length), generator=generator)]
    filler = long_texts(tokenizer, distance - length, count) if distance > length else string[:, :0]
    return torch.cat([string, filler, string], dim=1)


@torch.no_grad()
def copy_losses(model, tokenizer, distance, inv_freq, attention_scaling=1.0, length=16, count=32, seed=0):
    """Loss on the second copy of ``length`` random story words said again ``distance`` tokens later.

    The texts are ``copy_probe_tokens``'. The first word of the copy is not scored (nothing says which
    string comes back until it has started). Returns the mean loss."""
    if _validate.positive_int(length, "length") < 2:
        raise ValueError("length must be at least 2: the copy's first word is not scored, so 1 would score nothing")
    tokens = copy_probe_tokens(tokenizer, distance, length, count, seed)
    return loss_by_position(model, tokens, inv_freq, attention_scaling)[-(length - 1) :].mean().item()


def load_runs(path=None):
    """The measurements stored by scripts/long_context_runs.py (settings, and runs[seed][method])."""
    return json.loads(Path(path or DATA_DIR / RESULTS_FILE).read_text())


def angle_ratios(inv_freq, length, trained_inv_freq, original_length):
    """How far each rotation pair turns at ``length`` tokens, as a multiple of what training showed: [head_dim / 2].

    Over the trained length a pair turned at most (original_length - 1) * theta radians. A pair that made a full
    turn (2 pi) has seen every angle: NaN. For the others, above 1 means angles training never showed."""
    for name, value in (("inv_freq", inv_freq), ("trained_inv_freq", trained_inv_freq)):
        if not isinstance(value, torch.Tensor) or value.dim() != 1:
            raise ValueError(f"{name} must be a 1-D tensor [head_dim / 2] (rope_inverse_frequencies(...)[0])")
    if inv_freq.shape != trained_inv_freq.shape:
        raise ValueError(f"inv_freq {tuple(inv_freq.shape)} and trained_inv_freq "
                         f"{tuple(trained_inv_freq.shape)} must be of one model's heads")  # fmt: skip
    if _validate.positive_int(original_length, "original_length") < 2 or _validate.positive_int(length, "length") < 2:
        raise ValueError("length and original_length must be at least 2 tokens: one position turns no angle")
    trained = (original_length - 1) * trained_inv_freq.double()
    ratios = (length - 1) * inv_freq.double() / trained
    return torch.where(trained < 2 * math.pi, ratios, torch.nan)


class RopeScaledModel(nn.Module):
    """Lesson 10's model (its own weights, trained in place) with fixed RoPE frequencies: for fine-tuning with ``fit``."""

    def __init__(self, model, inv_freq, attention_scaling=1.0):
        super().__init__()
        _validate.rope_frequencies_for(inv_freq, model.blocks[0].attention.head_dim)
        _validate.positive_number(attention_scaling, "attention_scaling (1.0, or the method's second return value)")
        self.model, self.attention_scaling = model, attention_scaling
        self.register_buffer("inv_freq", inv_freq.float().clone())

    def forward(self, tokens):
        _checked(self.model, tokens, self.inv_freq, self.attention_scaling)
        return _forward(self.model, tokens, self.inv_freq, self.attention_scaling)


def method_frequencies(model, kind, factor, length):
    """(inv_freq, attention_scaling) of one method for lesson 10's model reading ``length`` tokens.

    kind: one of KINDS, or "yarn_paper" (``yarn_paper_frequencies``). Only dynamic NTK depends on the length:
    it scales by the factor the text read so far needs, s = max(1, length / L) (the YaRN paper's parametrisation, section 3.3), so ``factor`` is not used: in
    transformers' formula, f * length / L - (f - 1), that is f = 1 (f = 8 would scale by 57 at 1,024 tokens)."""
    if kind not in (*KINDS, "yarn_paper"):
        raise ValueError(f"kind must be one of {', '.join(repr(k) for k in (*KINDS, 'yarn_paper'))}, got {kind!r}")
    attention = model.blocks[0].attention
    if kind == "yarn_paper":
        return yarn_paper_frequencies(attention.head_dim, attention.rope_base, factor, model.context)
    if kind == "dynamic":
        factor, options = 1.0, {"seq_len": length}
    else:
        options = {}
    return rope_inverse_frequencies(kind, attention.head_dim, attention.rope_base, factor, model.context, **options)


def measure(model, tokenizer, kind, factor, texts, distances=DISTANCES):
    """Loss per bucket of positions (``BUCKETS``) of texts [B, T] and copy losses at ``distances``: {name: float}.

    Each bucket is read at its own end (dynamic NTK's factor is that of the text read so far)."""
    model._check_tokens(texts)
    if texts.shape[-1] < BUCKETS[-1][1]:
        raise ValueError(f"texts must hold at least {BUCKETS[-1][1]} tokens, the last bucket's end "
                         f"(long_texts(tokenizer, {BUCKETS[-1][1]}, count)), got {texts.shape[-1]}")  # fmt: skip
    results = {}
    if kind == "dynamic":  # positions a..b-1 are read as the first b tokens, with the factor for b
        for a, b in BUCKETS:
            logits = logits_with_rope(model, texts[:, :b], *method_frequencies(model, kind, factor, b))
            targets = texts[:, 1 : b + 1]
            losses = F.cross_entropy(logits[:, : targets.shape[1]].transpose(1, 2), targets, reduction="none")
            results[f"loss {a}-{b - 1}"] = losses[:, a:b].mean().item()
    else:
        losses = loss_by_position(model, texts, *method_frequencies(model, kind, factor, texts.shape[1]))
        results.update({f"loss {a}-{b - 1}": losses[a:b].mean().item() for a, b in BUCKETS})
    for d in distances:
        frequencies = method_frequencies(model, kind, factor, d + 16)
        results[f"copy {d}"] = copy_losses(model, tokenizer, d, *frequencies)
    return results


def fine_tune(model, kind, factor, train_ids, words, steps, seed, length=256, batch_size=8, repeats=2, **fit_options):
    """Train lesson 10's model in place at ``length`` tokens with one method's frequencies; fit's history.

    The batches are lesson 10's mix (``batch_sampler``: crops of the stories, ``repeats`` of them strings of
    random ``words`` said again and again), only longer. fit_options go to ``fit`` (lr, warmup, evaluate, ...)."""
    if kind == "dynamic":
        raise ValueError("dynamic NTK changes with the length read; fine-tune with 'ntk' at the target factor instead")
    wrapped = RopeScaledModel(model, *method_frequencies(model, kind, factor, length))
    sample_batch = lm.batch_sampler(train_ids, batch_size, length, repeats, words)
    return fit(wrapped, sample_batch, steps=steps, seed=seed, progress=False, **fit_options)
