"""The Transformer encoder layer and a stack of them (lesson 05).

Each layer is self-attention, then add & norm, then a feed-forward network,
then add & norm again (as in the notes on visualising attention).
``norm_first=False`` is the original and BERT's "post-norm" order;
``norm_first=True`` is the "pre-norm" order most modern models use: its
gradients stay well-behaved at initialisation, so it trains without the long
learning-rate warm-up post-norm needs when many layers are stacked (Xiong et
al., 2020, "On Layer Normalization in the Transformer Architecture").

``encoder_layer_forward`` is a layer's forward pass written out step by step
(lesson 05's exercise; ``EncoderLayer.forward`` calls it). ``TinyTransformer``
is a whole small model, embedding + positions + encoder + read-out, that
lesson 05 trains on a toy task (``course_utils.toy_task``).
"""

import math

import torch
import torch.nn as nn

from course_utils import _validate
from course_utils.attention import MultiHeadAttention

__all__ = [
    "FeedForward",
    "encoder_layer_forward",
    "EncoderLayer",
    "Encoder",
    "SinusoidalPositionalEncoding",
    "TinyTransformer",
]


class FeedForward(nn.Module):
    """Position-wise feed-forward network: the same two-layer MLP at every position."""

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        d_model, d_ff = _validate.positive_int(d_model, "d_model"), _validate.positive_int(d_ff, "d_ff")
        self.linear1 = nn.Linear(d_model, d_ff)
        self.activation = nn.GELU()  # exact (erf) GELU, as in BERT
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


def encoder_layer_forward(layer, x, mask=None):
    """One encoder layer, step by step, with the layer's own sublayers (lesson 05's exercise).

    post-norm (``layer.norm_first=False``, the original Transformer and BERT):
        x = LayerNorm1(x + SelfAttention(x));  out = LayerNorm2(x + FeedForward(x))
    pre-norm (``layer.norm_first=True``):
        x = x + SelfAttention(LayerNorm1(x));  out = x + FeedForward(LayerNorm2(x))
    """

    def self_attention(h):
        # queries, keys and values all come from the same sequence: self-attention.
        # layer.dropout is an nn.Dropout: active after .train(), a no-op after .eval()
        return layer.dropout(layer.self_attention(h, h, h, mask))

    def feed_forward(h):
        return layer.dropout(layer.feed_forward(h))

    if layer.norm_first:
        # pre-norm: each sublayer sees a normalised copy; the residual stream x itself
        # is never normalised, so the identity path runs untouched through the stack
        x = x + self_attention(layer.norm1(x))
        return x + feed_forward(layer.norm2(x))
    # post-norm: add the sublayer's output to its input (the residual), then normalise the sum
    x = layer.norm1(x + self_attention(x))
    return layer.norm2(x + feed_forward(x))


class EncoderLayer(nn.Module):
    """Self-attention -> add & norm -> feed-forward -> add & norm."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False, layer_norm_eps=1e-5, qkv_bias=True):
        super().__init__()
        d_model = _validate.positive_int(d_model, "d_model")
        self.norm_first = norm_first
        self.self_attention = MultiHeadAttention(d_model, num_heads, qkv_bias=qkv_bias, dropout=dropout)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        """x: [B, S, d_model]; mask broadcastable to [B, heads, S, S], 1/True = may attend."""
        return encoder_layer_forward(self, x, mask)

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

    def __init__(
        self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False, layer_norm_eps=1e-5, qkv_bias=True
    ):
        super().__init__()
        num_layers, d_model = (
            _validate.positive_int(num_layers, "num_layers"),
            _validate.positive_int(d_model, "d_model"),
        )
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first, layer_norm_eps, qkv_bias)
            for _ in range(num_layers)
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
            raise RuntimeError(
                "run the encoder on an input first: attention weights are kept from the last forward pass"
            )
        return torch.stack([layer.attention_weights for layer in self.layers])


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sine/cosine position signal of "Attention Is All You Need".

    Without it, self-attention is permutation-equivariant: shuffle the tokens
    and the outputs shuffle the same way, so word order is invisible.
    """

    def __init__(self, d_model, max_len=512):
        super().__init__()
        d_model, max_len = _validate.positive_int(d_model, "d_model"), _validate.positive_int(max_len, "max_len")
        self.d_model = d_model
        position = torch.arange(max_len).unsqueeze(1)
        # wavelengths grow geometrically from 2*pi to 10000*2*pi across the features
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term[: d_model // 2])
        self.register_buffer("pe", pe, persistent=False)

    def forward(self, x):
        """x: [B, S, d_model] embeddings -> the same plus the position signal of positions 0..S-1."""
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"expected embeddings of shape [batch, seq_len, d_model={self.d_model}], got {tuple(x.shape)}"
            )
        if x.shape[1] > self.pe.shape[0]:
            raise ValueError(f"sequence length {x.shape[1]} exceeds max_len={self.pe.shape[0]}")
        return x + self.pe[: x.shape[1]]


class TinyTransformer(nn.Module):
    """A whole (small) encoder-only model: tokens in, one prediction per position out.

    token embedding -> + sinusoidal positions -> encoder stack -> linear read-out.
    ``positions=False`` leaves out the position signal (lesson 05 shows what that costs).
    """

    def __init__(
        self,
        vocab_size,
        d_model=32,
        num_heads=2,
        num_layers=2,
        d_ff=None,
        max_len=64,
        positions=True,
        norm_first=False,
        dropout=0.0,
    ):
        super().__init__()
        vocab_size, d_model = (
            _validate.positive_int(vocab_size, "vocab_size"),
            _validate.positive_int(d_model, "d_model"),
        )
        if vocab_size < 2:
            raise ValueError(f"vocab_size must be an int >= 2, got {vocab_size}")
        self.vocab_size = vocab_size
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.positional_encoding = SinusoidalPositionalEncoding(d_model, max_len) if positions else None
        # the usual choice: the feed-forward layer is 4 times wider than the model
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff or 4 * d_model, dropout, norm_first)
        self.output_linear = nn.Linear(d_model, vocab_size)

    def embed(self, tokens):
        """[B, S] token ids -> [B, S, d_model]: what the first layer sees."""
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.is_floating_point():
            shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
            raise ValueError(f"tokens must be an integer tensor of shape [batch, seq_len], got {shape}")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.vocab_size):
            raise ValueError(
                f"token ids must lie in 0..{self.vocab_size - 1}, got {tokens.min().item()}..{tokens.max().item()}"
            )
        # nn.Embedding starts at N(0, 1), the same scale as the sine/cosine signal, so we add
        # them as they are (the original Transformer multiplies by sqrt(d_model) instead)
        x = self.token_embedding(tokens)
        return self.positional_encoding(x) if self.positional_encoding is not None else x

    def forward(self, tokens, mask=None):
        """[B, S] token ids -> [B, S, vocab_size] logits (one score per possible output token)."""
        return self.output_linear(self.encoder(self.embed(tokens), mask))

    def attentions(self):
        """[layers, B, heads, S, S] attention weights of the last forward pass."""
        return self.encoder.attentions()
