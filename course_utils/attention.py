"""Scaled dot-product attention, masks and multi-head attention.

These are the course's reference implementations and the worked solutions of
lessons 01 (``attention_scores``), 02 and 03. Names follow the seeds: ``split_heads``, ``compute_attention``,
``combine_heads``, ``query_linear`` ...

Mask convention (as in the seeds' ``masked_fill(mask == 0, ...)``):
1/True = "may attend", 0/False = "may not attend". PyTorch's own
``F.scaled_dot_product_attention`` uses the same meaning for *boolean* masks,
but adds a *float* mask to the scores, so pass it ``mask.bool()``.

Padding: a ``mask`` lines up with the scores [..., L_q, L_k] from the right, so a
[batch, L_k] padding mask given as ``mask`` would be read as [L_q, L_k]. Pass it
as ``key_padding_mask`` (1/True = real token; ``nn.MultiheadAttention``'s
argument of that name means the opposite), or use ``padding_mask()``'s
[batch, 1, 1, L_k]. Where the batch size differs from L_q the misread shape is
refused with both fixes; where they are equal it cannot be told from a
[L_q, L_k] mask such as ``causal_mask``, so it is the caller's to get right.

A fully masked query row (nothing it may attend to) gets all-zero weights and a
zero output vector instead of NaN, so one empty row cannot poison later layers.
"""

import math

import torch
import torch.nn as nn

from course_utils import _validate

__all__ = [
    "attention_scores",
    "scaled_dot_product_attention",
    "combine_masks",
    "causal_mask",
    "padding_mask",
    "split_heads",
    "combine_heads",
    "MultiHeadAttention",
]


# ---------------------------------------------------------------- attention
# The input checks are in course_utils._validate, so the functions below read like the lesson's steps.


def combine_masks(mask, key_padding_mask, scores_shape):
    """``mask`` AND ``key_padding_mask`` as one mask that broadcasts to the scores (None if neither)."""
    if key_padding_mask is None:
        return mask
    # [B, L_k] -> [B, 1, ..., 1, L_k]: one row of allowed keys for every head and query of sentence b
    singletons = [1] * (len(scores_shape) - 2)
    keys = (key_padding_mask != 0).reshape(scores_shape[0], *singletons, scores_shape[-1])
    return keys if mask is None else keys & (mask != 0)


def attention_scores(queries, keys):
    """scores[..., i, j] = queries[..., i, :] . keys[..., j, :]  ->  [..., L_q, L_k].

    transpose(-2, -1) swaps the last two axes only, so the same line works for
    one sentence [L, d], a batch [B, L, d] and heads [B, H, L, d].
    """
    return queries @ keys.transpose(-2, -1)


def scaled_dot_product_attention(q, k, v, mask=None, key_padding_mask=None):
    """softmax(q k^T / sqrt(d_k)) v, in the four steps of lesson 02.

    q: [..., L_q, d_k], k: [..., L_k, d_k], v: [..., L_k, d_v], all one dtype and device.
    mask: broadcastable to [..., L_q, L_k], lined up from the right (a 2-D mask is
        [L_q, L_k] for every sentence); 1/True = may attend, 0/False = may not.
    key_padding_mask: [batch, L_k], 1/True = a real token that may be attended,
        0/False = padding. (nn.MultiheadAttention's key_padding_mask means the
        opposite: True = ignore.) Both masks may be given: a key must pass both.
    Returns (output [..., L_q, d_v], weights [..., L_q, L_k]).
    """
    _validate.qkv(q, k, v)
    _validate.attention_masks(mask, key_padding_mask, q, k)
    d_k = q.shape[-1]
    # 1. scores: how well each query matches each key
    scores = q @ k.transpose(-2, -1)
    # 2. scale: keeps the variance of the scores near 1 whatever d_k is
    scores = scores / math.sqrt(d_k)
    mask = combine_masks(mask, key_padding_mask, scores.shape)
    if mask is not None:
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
    seq_len = _validate.positive_int(seq_len, "seq_len")
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()


def padding_mask(token_ids, pad_id=0):
    """Mask that hides padding keys: [batch, seq] ids -> [batch, 1, 1, seq] bool.

    The two singleton dims broadcast over heads and query positions, so every
    query may attend to every real token and to no padding token. Pass it as
    ``mask=`` (it is 4-D, for per-head scores [batch, heads, L_q, L_k]; use
    ``padding_mask(ids)[:, 0]`` for 3-D scores), or pass the plain [batch, seq]
    ``token_ids != pad_id`` as ``key_padding_mask=``, which fits any number of dims.
    Never pass a [batch, seq] mask as ``mask=``: it would be read as [L_q, L_k].
    """
    if not isinstance(token_ids, torch.Tensor) or token_ids.dim() != 2:
        shape = tuple(token_ids.shape) if isinstance(token_ids, torch.Tensor) else type(token_ids).__name__
        raise ValueError(f"token_ids must be a [batch, seq_len] tensor, got {shape}")
    return (token_ids != pad_id)[:, None, None, :]


def split_heads(x, num_heads):
    """[B, S, D] -> [B, H, S, D/H]: each head gets its own slice of the features."""
    num_heads = _validate.split_heads_inputs(x, num_heads)
    batch_size, seq_len, d_model = x.shape
    x = x.reshape(batch_size, seq_len, num_heads, d_model // num_heads)
    return x.permute(0, 2, 1, 3)  # heads first, so each head is one batch of matmuls


def combine_heads(x):
    """[B, H, S, d] -> [B, S, H*d]: concatenate the heads' outputs per position."""
    _validate.combine_heads_input(x)
    batch_size, num_heads, seq_len, head_dim = x.shape
    x = x.permute(0, 2, 1, 3)  # back to [B, S, H, d]; not contiguous any more
    return x.reshape(batch_size, seq_len, num_heads * head_dim)


class MultiHeadAttention(nn.Module):
    """Multi-head attention as in the slides.

    ``qkv_bias=False`` is the slides' version (no bias on the Q/K/V projections,
    a bias on the output projection); ``qkv_bias=True`` is the article's version,
    which is also what BERT and ``nn.MultiheadAttention`` use.
    After each forward, ``self.attention_weights`` holds the per-head weights
    [B, H, L_q, L_k] (detached) for plotting.
    """

    def __init__(self, d_model, num_heads, qkv_bias=False, dropout=0.0):
        d_model, num_heads = _validate.mha_sizes(d_model, num_heads)
        super().__init__()
        self.d_model = d_model
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.query_linear = nn.Linear(d_model, d_model, bias=qkv_bias)
        self.key_linear = nn.Linear(d_model, d_model, bias=qkv_bias)
        self.value_linear = nn.Linear(d_model, d_model, bias=qkv_bias)
        self.output_linear = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights = None

    # split_heads and combine_heads are written out here, as on the slides, rather than calling
    # the module's functions: pasted from show_solution, the class then leaves a learner's own
    # split_heads and combine_heads (the exercises before it) as they are
    def split_heads(self, x):
        batch_size, seq_len, _ = x.shape  # [B, L, d_model] -> [B, H, L, head_dim]
        return x.reshape(batch_size, seq_len, self.num_heads, self.head_dim).permute(0, 2, 1, 3)

    def compute_attention(self, query, key, value, mask=None, key_padding_mask=None):
        output, weights = scaled_dot_product_attention(query, key, value, mask, key_padding_mask)
        if self.dropout.p > 0 and self.training:
            # dropout on the weights (as in BERT), so recompute the weighted sum
            output = self.dropout(weights) @ value
        self.attention_weights = weights.detach()
        return output

    def combine_heads(self, x):
        batch_size, _, seq_len, _ = x.shape  # [B, H, L, head_dim] -> [B, L, d_model]
        return x.permute(0, 2, 1, 3).reshape(batch_size, seq_len, self.d_model)

    def forward(self, query, key, value, mask=None, key_padding_mask=None):
        """query: [B, L_q, d_model]; key, value: [B, L_k, d_model].

        Self-attention passes the same tensor three times; cross-attention
        takes key and value from another sequence (e.g. the encoder's output).
        mask broadcasts to [B, heads, L_q, L_k]; a [B, L_q, L_k] mask is
        applied to every head. key_padding_mask: [B, L_k], 1/True = a real
        token, 0/False = padding (the opposite of nn.MultiheadAttention's).
        """
        _validate.mha_inputs(self, query, key, value)
        if isinstance(mask, torch.Tensor) and mask.dim() == 3:
            mask = mask.unsqueeze(1)  # same mask for every head
        query = self.split_heads(self.query_linear(query))
        key = self.split_heads(self.key_linear(key))
        value = self.split_heads(self.value_linear(value))
        context = self.compute_attention(query, key, value, mask, key_padding_mask)
        return self.output_linear(self.combine_heads(context))
