"""Attention as 2026 language models use it (lesson 08).

- ``repeat_kv`` and ``GroupedQueryAttention``: fewer key/value heads than query
  heads (multi-query and grouped-query attention), to shrink the KV cache;
- ``apply_rope``: rotary position embeddings (RoPE), in the half-split layout of
  Hugging Face's LLaMA;
- ``sliding_window_mask`` and ``sliding_window_attention``: each query sees only
  the last ``window`` keys, so the cost grows with n x window instead of n^2;
- ``kv_cache_bytes`` and ``mla_cache_bytes``: what the cache costs in memory, and
  ``MultiHeadLatentAttention``, a small version of DeepSeek-V2's latent attention;
- mask and score functions for PyTorch's FlexAttention (``causal_mod`` ...).

Mask convention as everywhere in the course: True/1 = "may attend".
"""

import numbers

import torch
import torch.nn as nn

from course_utils import _validate
from course_utils.attention import combine_heads, scaled_dot_product_attention, split_heads

__all__ = [
    "repeat_kv",
    "rotate_half",
    "rope_frequencies",
    "apply_rope",
    "grouped_query_attention",
    "GroupedQueryAttention",
    "MultiHeadLatentAttention",
    "sliding_window_mask",
    "sliding_window_attention",
    "receptive_field",
    "kv_cache_bytes",
    "mla_cache_bytes",
    "causal_mod",
    "sliding_window_mod",
    "document_mod",
    "prefix_lm_mod",
    "alibi_slopes",
    "alibi_score_mod",
    "softcap_score_mod",
]


def _positive_number(value, name):
    """``value`` as a Python number if it is a real number > 0 (numpy and 0-d tensor numbers too)."""
    if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.dtype.is_complex:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r} ({type(value).__name__})")
    return float(value) if not isinstance(value, numbers.Integral) else int(value)


# --------------------------------------------------------------------------- grouped-query attention


def repeat_kv(x, n_rep):
    """[B, H_kv, S, d] -> [B, H_kv * n_rep, S, d]: each key/value head serves n_rep query heads.

    Query head j uses key/value head j // n_rep, so the copies of one head sit
    next to each other (repeat_interleave, not repeat, which would tile them).
    """
    n_rep = _validate.repeat_kv_inputs(x, n_rep)
    return x.repeat_interleave(n_rep, dim=1)


def rotate_half(x):
    """[..., d] -> [..., d]: (x1, x2) -> (-x2, x1) with x1, x2 the two halves of the features."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rope_frequencies(head_dim, base=10000.0, dtype=torch.float32):
    """The head_dim / 2 rotation speeds theta_i = base^(-2i / head_dim), i = 0 .. head_dim/2 - 1."""
    head_dim, base = _rope_sizes(head_dim, base)
    return base ** (-torch.arange(0, head_dim, 2, dtype=dtype) / head_dim)


def _rope_sizes(head_dim, base):
    head_dim = _validate.positive_int(head_dim, "head_dim")
    if head_dim % 2:
        raise ValueError(f"RoPE rotates pairs of features, so head_dim must be even, got {head_dim}")
    if isinstance(base, torch.Tensor) and base.dim() == 0 and not base.dtype.is_complex:
        base = base.item()
    if not isinstance(base, numbers.Real) or isinstance(base, bool) or not base > 1:
        raise ValueError(f"base must be a number > 1, got {base!r}")
    return head_dim, float(base)


def apply_rope(x, positions, base=10000.0):
    """Rotary position embedding of x [..., S, d] at integer positions [S].

    Feature i and feature i + d/2 form a pair (the "rotate_half" layout of
    Hugging Face's LLaMA), rotated by the angle position * theta_i. The RoFormer
    paper pairs neighbours (2i, 2i + 1) instead: the same rotation of a permuted
    feature order, so a model trained in one layout needs its q/k weights permuted
    to run in the other.
    """
    _validate.rope_inputs(x, positions)
    # angles in float32 at least (float16 holds whole numbers exactly only up to 2048), and in
    # float64 for float64 inputs (float32 angles are off by about 1e-3 near position 131072)
    precision = torch.float64 if x.dtype == torch.float64 else torch.float32
    theta = rope_frequencies(x.shape[-1], base, precision).to(x.device)
    angles = positions.to(x.device, precision)[:, None] * theta  # [S, d/2]
    angles = torch.cat((angles, angles), dim=-1)  # pair i and i + d/2 share an angle
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    return x * cos + rotate_half(x) * sin


def grouped_query_attention(q, k, v, positions=None, mask=None, rope_base=10000.0):
    """Attention of q [B, H, S, d] over k, v [B, H_kv, S, d], H a multiple of H_kv.

    RoPE on q and k (not on v: values carry content, not position) when
    rope_base is not None, at positions (default 0..S-1); then every group of
    H / H_kv query heads shares one key/value head. Returns [B, H, S, d].
    """
    _validate.gqa_inputs(q, k, v, positions, rope_base)
    num_heads, num_kv_heads = q.shape[1], k.shape[1]
    if rope_base is not None:
        if positions is None:
            positions = torch.arange(q.shape[-2], device=q.device)
        q, k = apply_rope(q, positions, rope_base), apply_rope(k, positions, rope_base)
    n_rep = num_heads // num_kv_heads
    k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
    return scaled_dot_product_attention(q, k, v, mask)[0]


class GroupedQueryAttention(nn.Module):
    """Self-attention with num_kv_heads key/value heads shared by num_heads query heads.

    num_kv_heads == num_heads is multi-head attention, 1 is multi-query attention.
    The K and V projections are num_heads / num_kv_heads times smaller, and so
    is the KV cache. ``bias`` applies to all four projections (LLaMA: no bias).
    ``rope_base``: None for no positions, else RoPE with that base (LLaMA 2: 10000).
    """

    def __init__(self, d_model, num_heads, num_kv_heads, bias=False, rope_base=None):
        super().__init__()
        d_model, num_heads, num_kv_heads = (
            _validate.positive_int(value, name)
            for name, value in (("d_model", d_model), ("num_heads", num_heads), ("num_kv_heads", num_kv_heads))
        )
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} must be divisible by num_heads={num_heads}")
        if num_heads % num_kv_heads:
            raise ValueError(
                f"num_heads={num_heads} must be divisible by num_kv_heads={num_kv_heads}: "
                f"each key/value head serves the same number of query heads"
            )
        self.d_model, self.num_heads, self.num_kv_heads = d_model, num_heads, num_kv_heads
        self.head_dim = d_model // num_heads
        if rope_base is not None:
            rope_frequencies(self.head_dim, rope_base)  # fails now, not at the first forward
        self.rope_base = rope_base
        kv_dim = num_kv_heads * self.head_dim
        self.query_linear = nn.Linear(d_model, d_model, bias=bias)
        self.key_linear = nn.Linear(d_model, kv_dim, bias=bias)
        self.value_linear = nn.Linear(d_model, kv_dim, bias=bias)
        self.output_linear = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, mask=None, positions=None):
        """x: [B, S, d_model] -> [B, S, d_model]; mask broadcasts to [B, heads, S, S]."""
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != self.d_model:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"x must have shape [batch, seq_len, d_model={self.d_model}], got {got}")
        if isinstance(mask, torch.Tensor) and mask.dim() == 3:
            mask = mask.unsqueeze(1)  # [B, S, S]: the same mask for every head
        query = split_heads(self.query_linear(x), self.num_heads)
        key = split_heads(self.key_linear(x), self.num_kv_heads)
        value = split_heads(self.value_linear(x), self.num_kv_heads)
        context = grouped_query_attention(query, key, value, positions, mask, self.rope_base)
        return self.output_linear(combine_heads(context))


# --------------------------------------------------------------------------- sliding-window attention


def sliding_window_mask(seq_len, window, causal=True, device=None):
    """[seq_len, seq_len] bool, True where query i may attend key j.

    causal=True (Mistral's form): j <= i and i - j < window, i.e. the query and
    the window - 1 keys before it. causal=False: |i - j| < window, the window - 1
    keys on each side (2 * window - 1 keys in all), a two-sided local attention for
    encoders (Longformer's idea).
    """
    seq_len = _validate.positive_int(seq_len, "seq_len")
    window = _validate.positive_int(window, "window")
    positions = torch.arange(seq_len, device=device)
    return window_rule(positions[:, None], positions[None, :], window, causal)


def window_rule(i, j, window, causal=True):
    """May query position i attend key position j? (broadcasting index tensors)"""
    if causal:
        return (j <= i) & (i - j < window)
    return (i - j).abs() < window


def sliding_window_attention(q, k, v, window, block_size=128):
    """Causal sliding-window attention that never builds the n x n matrix.

    Queries go in blocks; a block [s, e) needs only the keys [s - window + 1, e),
    so every score matrix is [block_size, block_size + window - 1] and the work
    grows like n x (window + block_size) instead of n^2. Equals
    scaled_dot_product_attention(q, k, v, sliding_window_mask(n, window)).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        _validate.tensor(name, t, 2, "[..., seq_len, head_dim]")
    window = _validate.positive_int(window, "window")
    block_size = _validate.positive_int(block_size, "block_size")
    n = q.shape[-2]
    if k.shape[-2] != n or v.shape[-2] != n:
        raise ValueError(
            f"self-attention: q, k and v need the same length, got {q.shape[-2]}, {k.shape[-2]}, {v.shape[-2]}"
        )
    outputs = []
    for start in range(0, n, block_size):
        end = min(start + block_size, n)
        first_key = max(0, start - window + 1)
        # the rows start..end-1 and columns first_key..end-1 of the full mask, built on their own
        rows = torch.arange(start, end, device=q.device)[:, None]
        mask = window_rule(rows, torch.arange(first_key, end, device=q.device)[None, :], window)
        block = scaled_dot_product_attention(
            q[..., start:end, :], k[..., first_key:end, :], v[..., first_key:end, :], mask
        )
        outputs.append(block[0])
    return torch.cat(outputs, dim=-2)


def receptive_field(num_layers, window, seq_len):
    """How many positions the last token can draw on after num_layers sliding-window layers.

    Computed by composing the masks, not by formula: ``reach`` marks the positions the last
    token draws on so far; one more layer adds every key that a reached position's window
    sees (the row of sliding_window_mask for that position). Each layer is a running count
    over the positions, so the cost grows like num_layers x seq_len.
    """
    num_layers, window, seq_len = _receptive_field_sizes(num_layers, window, seq_len)
    reach = torch.zeros(seq_len, dtype=torch.bool)
    reach[-1] = True  # after 0 layers the last token has only itself
    for _ in range(num_layers):
        # key j is reached if some reached position i sees it: j <= i < j + window
        hits = torch.cat((torch.zeros(1, dtype=torch.long), reach.long().cumsum(0)))  # hits[i] = reached < i
        upper = torch.arange(seq_len) + window
        reach = (hits[upper.clamp(max=seq_len)] - hits[:seq_len]) > 0
    return int(reach.sum())


def _receptive_field_sizes(num_layers, window, seq_len):
    return (
        _validate.positive_int(num_layers, "num_layers"),
        _validate.positive_int(window, "window"),
        _validate.positive_int(seq_len, "seq_len"),
    )


# --------------------------------------------------------------------------- memory of the KV cache


def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_value=2):
    """Bytes of the KV cache: keys AND values, for every layer, KV head, position and sequence.

    bytes_per_value: 2 for bfloat16/float16 (the usual), 4 for float32, 1 for 8-bit.
    """
    num_layers, num_kv_heads, head_dim, seq_len, batch_size = (
        _validate.positive_int(value, name)
        for name, value in (
            ("num_layers", num_layers),
            ("num_kv_heads", num_kv_heads),
            ("head_dim", head_dim),
            ("seq_len", seq_len),
            ("batch_size", batch_size),
        )
    )
    bytes_per_value = _positive_number(bytes_per_value, "bytes_per_value")
    return 2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_value


def mla_cache_bytes(num_layers, kv_lora_rank, rope_head_dim, seq_len, batch_size=1, bytes_per_value=2):
    """Bytes of multi-head latent attention's cache (DeepSeek-V2).

    Per token and layer MLA caches one compressed latent of kv_lora_rank numbers
    (keys and values of every head are reconstructed from it) and one shared
    RoPE key of rope_head_dim numbers.
    """
    num_layers, kv_lora_rank, rope_head_dim, seq_len, batch_size = (
        _validate.positive_int(value, name)
        for name, value in (
            ("num_layers", num_layers),
            ("kv_lora_rank", kv_lora_rank),
            ("rope_head_dim", rope_head_dim),
            ("seq_len", seq_len),
            ("batch_size", batch_size),
        )
    )
    bytes_per_value = _positive_number(bytes_per_value, "bytes_per_value")
    return num_layers * (kv_lora_rank + rope_head_dim) * seq_len * batch_size * bytes_per_value


class MultiHeadLatentAttention(nn.Module):
    """A small multi-head latent attention (DeepSeek-V2), for self-attention.

    Each token's hidden state is compressed to a latent c_t (kv_lora_rank numbers);
    every head's keys and values are projected up from it. RoPE cannot pass through
    that up-projection, so each head also has a small rotary part of its query, matched
    by one rotary key (rope_head_dim numbers) shared by all heads. Only c_t and the
    rotary key are cached: kv_lora_rank + rope_head_dim numbers per token.
    (DeepSeek-V2 also compresses the queries and normalises c_t; left out here.)
    """

    def __init__(self, d_model, num_heads, head_dim, kv_lora_rank, rope_head_dim, rope_base=10000.0):
        super().__init__()
        d_model, num_heads, head_dim, kv_lora_rank, rope_head_dim = (
            _validate.positive_int(value, name)
            for name, value in (
                ("d_model", d_model),
                ("num_heads", num_heads),
                ("head_dim", head_dim),
                ("kv_lora_rank", kv_lora_rank),
                ("rope_head_dim", rope_head_dim),
            )
        )
        rope_frequencies(rope_head_dim, rope_base)  # fails now on an odd rope_head_dim
        self.num_heads, self.head_dim, self.rope_head_dim, self.rope_base = (
            num_heads,
            head_dim,
            rope_head_dim,
            rope_base,
        )
        self.query_linear = nn.Linear(d_model, num_heads * (head_dim + rope_head_dim), bias=False)
        self.kv_down = nn.Linear(d_model, kv_lora_rank, bias=False)  # h_t -> c_t, the cached latent
        self.key_up = nn.Linear(kv_lora_rank, num_heads * head_dim, bias=False)  # c_t -> every head's key
        self.value_up = nn.Linear(kv_lora_rank, num_heads * head_dim, bias=False)  # c_t -> every head's value
        self.rope_key_linear = nn.Linear(d_model, rope_head_dim, bias=False)  # one rotary key for all heads
        self.output_linear = nn.Linear(num_heads * head_dim, d_model, bias=False)

    def compress(self, x, positions=None):
        """What the cache holds for x [B, S, d_model]: (latent [B, S, r], rotated rope key [B, S, d_R])."""
        self._check_x(x)
        if positions is None:
            positions = torch.arange(x.shape[1], device=x.device)
        return self.kv_down(x), apply_rope(self.rope_key_linear(x), positions, self.rope_base)

    def _check_x(self, x):
        d_model = self.kv_down.in_features
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != d_model:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"x must have shape [batch, seq_len, d_model={d_model}], got {got}")

    def _queries(self, x, positions):
        q = split_heads(self.query_linear(x), self.num_heads)  # [B, H, S, d_h + d_R]
        q_content, q_rope = q.split([self.head_dim, self.rope_head_dim], dim=-1)
        return q_content, apply_rope(q_rope, positions, self.rope_base)

    def forward(self, x, mask=None, positions=None):
        """Keys and values of every head rebuilt from the latent: x [B, S, d_model] -> [B, S, d_model]."""
        self._check_x(x)
        if positions is None:
            positions = torch.arange(x.shape[1], device=x.device)
        latent, rope_key = self.compress(x, positions)
        q_content, q_rope = self._queries(x, positions)
        k_content = split_heads(self.key_up(latent), self.num_heads)
        value = split_heads(self.value_up(latent), self.num_heads)
        rope_key = rope_key[:, None].expand(-1, self.num_heads, -1, -1)  # shared by the heads
        query, key = torch.cat((q_content, q_rope), dim=-1), torch.cat((k_content, rope_key), dim=-1)
        context = scaled_dot_product_attention(query, key, value, mask)[0]
        return self.output_linear(combine_heads(context))

    def forward_absorbed(self, x, mask=None, positions=None):
        """The same output computed on the latent: key_up is folded into the queries and value_up
        into the output, so the per-head keys and values are never built (how MLA runs at inference)."""
        if positions is None:
            positions = torch.arange(x.shape[1], device=x.device)
        latent, rope_key = self.compress(x, positions)
        q_content, q_rope = self._queries(x, positions)
        w_key = self.key_up.weight.reshape(self.num_heads, self.head_dim, -1)  # [H, d_h, r]
        w_value = self.value_up.weight.reshape(self.num_heads, self.head_dim, -1)
        # q . (W_UK c) = (W_UK^T q) . c: each head's query moves into the latent space
        query = torch.cat((q_content @ w_key, q_rope), dim=-1)  # [B, H, S, r + d_R]
        key = torch.cat((latent, rope_key), dim=-1)[:, None]  # [B, 1, S, r + d_R], one for all heads
        # lesson 02's attention divides by sqrt(r + d_R); the model's scale is sqrt(d_h + d_R)
        query = query * ((query.shape[-1] / (self.head_dim + self.rope_head_dim)) ** 0.5)
        context_latent = scaled_dot_product_attention(query, key, latent[:, None], mask)[0]  # [B, H, S, r]
        context = context_latent @ w_value.transpose(-2, -1)  # [B, H, S, d_h]
        return self.output_linear(combine_heads(context))


# --------------------------------------------------------------------------- masks as functions (FlexAttention)
# A mask_mod(b, h, q_idx, kv_idx) says whether query q_idx may attend key kv_idx;
# a score_mod(score, b, h, q_idx, kv_idx) returns a changed score. FlexAttention calls
# them on tensors (through vmap), so they use & | ~ and torch.where, never `and` or `if`.


def causal_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def sliding_window_mod(window):
    window = _validate.positive_int(window, "window")

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < window)

    return mask_mod


def document_mod(document_ids):
    """Packed sequences: causal inside each document, nothing across documents.

    document_ids: [S] integer tensor, the document each position belongs to.
    """
    _validate.document_ids(document_ids)

    def mask_mod(b, h, q_idx, kv_idx):
        return (document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)

    return mask_mod


def prefix_lm_mod(prefix_len):
    """Prefix-LM: the first prefix_len tokens (the prompt) see each other; the rest is causal."""
    if isinstance(prefix_len, bool) or not isinstance(prefix_len, int) or prefix_len < 0:
        raise ValueError(f"prefix_len must be a non-negative int, got {prefix_len!r}")

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx < prefix_len) | (q_idx >= kv_idx)

    return mask_mod


def alibi_slopes(num_heads):
    """ALiBi's per-head slopes 2^(-8/H), 2^(-16/H), ..., 2^(-8) (Press et al., 2022; H a power of 2)."""
    num_heads = _validate.positive_int(num_heads, "num_heads")
    if num_heads & (num_heads - 1):
        raise ValueError(f"this form of the slopes needs a power-of-two number of heads, got {num_heads}")
    return 2.0 ** (-8.0 * torch.arange(1, num_heads + 1) / num_heads)


def alibi_score_mod(slopes):
    """ALiBi: subtract slope_h * |q_idx - kv_idx| from each score; no position embeddings at all.

    With a causal mask |q_idx - kv_idx| = q_idx - kv_idx, the paper's form.
    """

    def score_mod(score, b, h, q_idx, kv_idx):
        return score - slopes[h] * (q_idx - kv_idx).abs()

    return score_mod


def softcap_score_mod(cap, device="cpu"):
    """Soft-capping (Gemma 2): cap * tanh(score / cap) keeps every score inside (-cap, cap).

    The cap is held as a tensor on the scores' device: a Python number captured by a score_mod is
    compiled into flex_attention's graph, and from PyTorch 2.15 a second call with another number
    recompiles it as a symbolic float, which flex_attention refuses.
    """
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or cap <= 0:
        raise ValueError(f"cap must be a positive number, got {cap!r}")
    cap = torch.tensor(float(cap), device=device)

    def score_mod(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    return score_mod
