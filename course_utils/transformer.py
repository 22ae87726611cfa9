"""The Transformer encoder layer and a stack of them (lesson 05).

Each layer is self-attention, then add & norm, then a feed-forward network,
then add & norm again (seed 003). ``norm_first=False`` is the original and
BERT's "post-norm" order; ``norm_first=True`` is the "pre-norm" order most
modern models use because it trains more stably when many layers are stacked.
"""

import math

import torch
import torch.nn as nn

from course_utils.attention import MultiHeadAttention

__all__ = ["FeedForward", "EncoderLayer", "Encoder", "SinusoidalPositionalEncoding"]


class FeedForward(nn.Module):
    """Position-wise feed-forward network: the same two-layer MLP at every position."""

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.activation = nn.GELU()  # exact (erf) GELU, as in BERT
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


class EncoderLayer(nn.Module):
    """Self-attention -> add & norm -> feed-forward -> add & norm."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False, layer_norm_eps=1e-5, qkv_bias=True):
        super().__init__()
        self.norm_first = norm_first
        self.self_attention = MultiHeadAttention(d_model, num_heads, qkv_bias=qkv_bias, dropout=dropout)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)

    def _attend(self, x, mask):
        return self.dropout(self.self_attention(x, x, x, mask))

    def forward(self, x, mask=None):
        """x: [B, S, d_model]; mask broadcastable to [B, heads, S, S], 1/True = may attend."""
        if self.norm_first:
            x = x + self._attend(self.norm1(x), mask)
            return x + self.dropout(self.feed_forward(self.norm2(x)))
        x = self.norm1(x + self._attend(x, mask))
        return self.norm2(x + self.dropout(self.feed_forward(x)))

    @property
    def attention_weights(self):
        """[B, heads, S, S] weights of the last forward pass."""
        return self.self_attention.attention_weights


class Encoder(nn.Module):
    """A stack of encoder layers. Input: embeddings [B, S, d_model] that already carry positions.

    After a forward pass, ``attentions()`` gives every layer's weights as one
    tensor [layers, B, heads, S, S] and ``hidden_states`` the input plus each
    layer's output (layers + 1 tensors of [B, S, d_model]).
    """

    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False, layer_norm_eps=1e-5, qkv_bias=True):
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first, layer_norm_eps, qkv_bias) for _ in range(num_layers)
        )
        # pre-norm leaves the residual stream un-normalised, so normalise once at the end
        self.final_norm = nn.LayerNorm(d_model, eps=layer_norm_eps) if norm_first else nn.Identity()
        self.hidden_states = []

    def forward(self, x, mask=None):
        self.hidden_states = [x]
        for layer in self.layers:
            x = layer(x, mask)
            self.hidden_states.append(x)
        return self.final_norm(x)

    def attentions(self):
        if not self.layers or self.layers[0].attention_weights is None:
            raise RuntimeError("run the encoder on an input first: attention weights are kept from the last forward pass")
        return torch.stack([layer.attention_weights for layer in self.layers])


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sine/cosine position signal of "Attention Is All You Need".

    Without it, self-attention is permutation-equivariant: shuffle the tokens
    and the outputs shuffle the same way, so word order is invisible.
    """

    def __init__(self, d_model, max_len=512):
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1)
        # wavelengths grow geometrically from 2*pi to 10000*2*pi across the features
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term[: d_model // 2])
        self.register_buffer("pe", pe, persistent=False)

    def forward(self, x):
        if x.shape[1] > self.pe.shape[0]:
            raise ValueError(f"sequence length {x.shape[1]} exceeds max_len={self.pe.shape[0]}")
        return x + self.pe[: x.shape[1]]
