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
  attention temperature 0.1 ln(factor) + 1 on the logits (returned as ``attention_scaling``).
- "llama3" (Meta's Llama 3.1): wavelengths longer than L / low_freq_factor interpolated, shorter
  than L / high_freq_factor kept, a smooth mix in between.

Returns (inv_freq [d / 2] float32, attention_scaling). The computation runs in float64.

``logits_with_rope(model, tokens, inv_freq, attention_scaling)`` runs lesson 10's model on
tokens [B, T] of any length with those frequencies in place of its own: the way to read it past
its trained 128 tokens with a scaling method (with the default frequencies it is the model itself).
"""

import math

import torch

from course_utils import _validate
from course_utils.attention import combine_heads, scaled_dot_product_attention, split_heads
from course_utils.modern import repeat_kv, rotate_half

__all__ = ["rope_inverse_frequencies", "logits_with_rope", "KINDS"]

KINDS = ("default", "linear", "ntk", "dynamic", "yarn", "llama3")


def _speeds(head_dim, base):
    return base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)


def _yarn_ramp(head_dim, base, original_length, beta_fast, beta_slow):
    """0 for dimensions kept as they are (extrapolated), 1 for those interpolated, linear in between.

    Dimension i turns original_length * theta_i / (2 pi) times over the trained length; the ramp's ends
    are the dimensions that turn beta_fast and beta_slow times, rounded outwards to whole dimensions."""

    def dimension_turning(turns):  # solve L * base^(-2i/d) / (2 pi) = turns for i
        return head_dim * math.log(original_length / (turns * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(dimension_turning(beta_fast)), 0)
    high = min(math.ceil(dimension_turning(beta_slow)), head_dim - 1)
    high = high + 0.001 if low == high else high  # a ramp of width zero would divide by zero
    return ((torch.arange(head_dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)


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
        ramp = _yarn_ramp(head_dim, base, original_length, options.get("beta_fast", 32), options.get("beta_slow", 1))
        theta = (theta / factor) * ramp + theta * (1 - ramp)
        scaling = options.get("attention_factor", 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)
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


@torch.no_grad()
def logits_with_rope(model, tokens, inv_freq, attention_scaling=1.0):
    """Lesson 10's model on tokens [B, T] (any T) with RoPE frequencies inv_freq [head_dim / 2]: [B, T, vocab]."""
    model._check_tokens(tokens)
    head_dim = model.blocks[0].attention.head_dim
    _validate.rope_frequencies_for(inv_freq, head_dim)
    x = model.token_embedding(tokens)
    mask = torch.ones(tokens.shape[1], tokens.shape[1], dtype=torch.bool).tril()
    for block in model.blocks:
        attention, h = block.attention, block.norm1(x)
        query = _rotate(split_heads(attention.query_linear(h), attention.num_heads), inv_freq, attention_scaling)
        key = _rotate(split_heads(attention.key_linear(h), attention.num_kv_heads), inv_freq, attention_scaling)
        value = split_heads(attention.value_linear(h), attention.num_kv_heads)
        n_rep = attention.num_heads // attention.num_kv_heads
        context, _ = scaled_dot_product_attention(query, repeat_kv(key, n_rep), repeat_kv(value, n_rep), mask)
        x = x + attention.output_linear(combine_heads(context))
        x = x + block.feed_forward(block.norm2(x))
    return model.output_linear(model.final_norm(x))
