"""Scaled dot-product attention, masks and multi-head attention.

These are the course's reference implementations and the worked solutions of
lessons 02 and 03. Names follow the seeds: ``split_heads``, ``compute_attention``,
``combine_heads``, ``query_linear`` ...

Mask convention (as in the seeds' ``masked_fill(mask == 0, ...)``):
1/True = "may attend", 0/False = "may not attend". PyTorch's own
``F.scaled_dot_product_attention`` uses the same meaning for *boolean* masks,
but adds a *float* mask to the scores, so pass it ``mask.bool()``.

A fully masked query row (nothing it may attend to) gets all-zero weights and a
zero output vector instead of NaN, so one empty row cannot poison later layers.
"""

import math

import torch
import torch.nn as nn

__all__ = [
    "scaled_dot_product_attention",
    "causal_mask",
    "padding_mask",
    "split_heads",
    "combine_heads",
    "MultiHeadAttention",
]


def _check_qkv(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() < 2:
            raise ValueError(f"{name} must have shape [..., seq_len, features], got {tuple(t.shape)}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor (e.g. float32), got {t.dtype}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same feature size d_k to take dot products: "
            f"q is {tuple(q.shape)}, k is {tuple(k.shape)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same number of positions (one value per key): "
            f"k is {tuple(k.shape)}, v is {tuple(v.shape)}"
        )


def _check_mask(mask, scores_shape):
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor of 0/1 or bool, got {type(mask).__name__}")
    try:
        # the mask may broadcast *to* the scores' shape, never enlarge it
        # (a [B, 1, 1, L] padding mask on 3-D scores would silently give [B, B, L, L])
        fits = torch.broadcast_shapes(mask.shape, scores_shape) == scores_shape
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"{tuple(scores_shape)} ([..., L_q, L_k]); 1/True marks allowed positions"
        )
    if mask.dtype != torch.bool and not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("mask must hold only 0/1 (or False/True): 1 = may attend, 0 = may not")


def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d_k)) v, in the four steps of lesson 02.

    q: [..., L_q, d_k], k: [..., L_k, d_k], v: [..., L_k, d_v]
    mask: broadcastable to [..., L_q, L_k]; 1/True = may attend, 0/False = may not.
    Returns (output [..., L_q, d_v], weights [..., L_q, L_k]).
    """
    _check_qkv(q, k, v)
    d_k = q.shape[-1]
    # 1. scores: how well each query matches each key
    scores = q @ k.transpose(-2, -1)
    # 2. scale: keeps the variance of the scores near 1 whatever d_k is
    scores = scores / math.sqrt(d_k)
    if mask is not None:
        _check_mask(mask, scores.shape)
        scores = scores.masked_fill(mask == 0, float("-inf"))
    # 3. softmax per row: each query's weights over the keys sum to 1
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        # a row with no allowed key is all -inf, and softmax gives 0/0 = NaN there: make it 0.
        # Only those rows (as PyTorch does): a NaN that comes from NaN inputs still shows.
        no_allowed_key = (mask == 0).all(dim=-1, keepdim=True)
        weights = weights.masked_fill(no_allowed_key, 0.0)
    # 4. weighted sum of the values
    return weights @ v, weights


def causal_mask(seq_len, device=None):
    """[seq_len, seq_len] bool mask, True on and below the diagonal:
    position i may attend to positions 0..i, never to the future."""
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"seq_len must be a positive int, got {seq_len!r}")
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()


def padding_mask(token_ids, pad_id=0):
    """Mask that hides padding keys: [batch, seq] ids -> [batch, 1, 1, seq] bool.

    The two singleton dims broadcast over heads and query positions, so every
    query may attend to every real token and to no padding token.
    """
    if not isinstance(token_ids, torch.Tensor) or token_ids.dim() != 2:
        shape = tuple(token_ids.shape) if isinstance(token_ids, torch.Tensor) else type(token_ids).__name__
        raise ValueError(f"token_ids must be a [batch, seq_len] tensor, got {shape}")
    return (token_ids != pad_id)[:, None, None, :]


def _check_num_heads(num_heads):
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"num_heads must be a positive int, got {num_heads!r}")


def _describe(x):
    """What a shape check got instead of a tensor, in words a learner can act on."""
    if isinstance(x, torch.Tensor):
        return f"shape {tuple(x.shape)}"
    if isinstance(x, tuple):
        # the usual slip: scaled_dot_product_attention returns the pair (output, weights)
        return "a tuple: scaled_dot_product_attention returns (output, weights); pass on the output only"
    return type(x).__name__


def split_heads(x, num_heads):
    """[B, S, D] -> [B, H, S, D/H]: each head gets its own slice of the features."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        raise ValueError(f"split_heads expects a [batch, seq_len, d_model] tensor, got {_describe(x)}")
    _check_num_heads(num_heads)
    batch_size, seq_len, d_model = x.shape
    if d_model % num_heads != 0:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    x = x.reshape(batch_size, seq_len, num_heads, d_model // num_heads)
    return x.permute(0, 2, 1, 3)  # heads first, so each head is one batch of matmuls


def combine_heads(x):
    """[B, H, S, d] -> [B, S, H*d]: concatenate the heads' outputs per position."""
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise ValueError(f"combine_heads expects a [batch, heads, seq_len, head_dim] tensor, got {_describe(x)}")
    batch_size, num_heads, seq_len, head_dim = x.shape
    x = x.permute(0, 2, 1, 3)  # back to [B, S, H, d]; not contiguous any more
    return x.reshape(batch_size, seq_len, num_heads * head_dim)


class MultiHeadAttention(nn.Module):
    """Multi-head attention as in the slides (seed 000).

    ``qkv_bias=False`` is the slides' version (no bias on the Q/K/V projections,
    a bias on the output projection); ``qkv_bias=True`` is the article's version
    (seed 001), which is also what BERT and ``nn.MultiheadAttention`` use.
    After each forward, ``self.attention_weights`` holds the per-head weights
    [B, H, L_q, L_k] (detached) for plotting.
    """

    def __init__(self, d_model, num_heads, qkv_bias=False, dropout=0.0):
        super().__init__()
        _check_num_heads(num_heads)
        if d_model % num_heads != 0:
            raise ValueError(
                f"d_model={d_model} must be divisible by num_heads={num_heads} "
                f"so every head gets d_model // num_heads features"
            )
        self.d_model = d_model
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.query_linear = nn.Linear(d_model, d_model, bias=qkv_bias)
        self.key_linear = nn.Linear(d_model, d_model, bias=qkv_bias)
        self.value_linear = nn.Linear(d_model, d_model, bias=qkv_bias)
        self.output_linear = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights = None

    def split_heads(self, x):
        return split_heads(x, self.num_heads)

    def compute_attention(self, query, key, value, mask=None):
        output, weights = scaled_dot_product_attention(query, key, value, mask)
        if self.dropout.p > 0 and self.training:
            # dropout on the weights (as in BERT), so recompute the weighted sum
            output = self.dropout(weights) @ value
        self.attention_weights = weights.detach()
        return output

    def combine_heads(self, x):
        return combine_heads(x)

    def forward(self, query, key, value, mask=None):
        """query: [B, L_q, d_model]; key, value: [B, L_k, d_model].

        Self-attention passes the same tensor three times; cross-attention
        takes key and value from another sequence (e.g. the encoder's output).
        mask broadcasts to [B, heads, L_q, L_k]; a [B, L_q, L_k] mask is
        applied to every head.
        """
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t.dim() != 3 or t.shape[-1] != self.d_model:
                raise ValueError(
                    f"{name} must have shape [batch, seq_len, d_model={self.d_model}], got {tuple(t.shape)}"
                )
        if not query.shape[0] == key.shape[0] == value.shape[0]:
            raise ValueError(
                f"query, key and value must have the same batch size, got "
                f"{query.shape[0]}, {key.shape[0]} and {value.shape[0]}"
            )
        if key.shape[1] != value.shape[1]:
            raise ValueError(
                f"key and value must have the same length L_k (one value per key), got "
                f"key {tuple(key.shape)} and value {tuple(value.shape)}"
            )
        if isinstance(mask, torch.Tensor) and mask.dim() == 3:
            mask = mask.unsqueeze(1)  # same mask for every head
        query = self.split_heads(self.query_linear(query))
        key = self.split_heads(self.key_linear(key))
        value = self.split_heads(self.value_linear(value))
        context = self.compute_attention(query, key, value, mask)
        return self.output_linear(self.combine_heads(context))


# Lesson 07's tiled (FlashAttention-style) attention lives in course_utils/efficient.py,
# which builds on this module; it is re-exported here so every attention function is one
# import away. The name is resolved on first use (PEP 562 module __getattr__), so either
# module may be imported first; an error in efficient.py surfaces there, it is not hidden.
def __getattr__(name):
    if name == "tiled_attention":
        from course_utils.efficient import tiled_attention

        return tiled_attention
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__.append("tiled_attention")
