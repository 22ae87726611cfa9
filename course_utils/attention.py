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
import operator

import torch
import torch.nn as nn

__all__ = [
    "attention_scores",
    "scaled_dot_product_attention",
    "causal_mask",
    "padding_mask",
    "split_heads",
    "combine_heads",
    "MultiHeadAttention",
]


# ---------------------------------------------------------------- input checks
# Small helpers, so the reference functions below read like the lesson's steps.


def _positive_int(value, name):
    """``value`` as a Python int if it is a whole number >= 1 (numpy integers too), else a clear error."""
    # operator.index accepts int, np.int64, a 0-d integer tensor ...; it refuses 2.0 and "2".
    # bool is an int in Python (True == 1), but as a size it is always a slip.
    try:
        number = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        number = None
    if number is None or number < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r} ({type(value).__name__})")
    return number


def _not_a_tensor(name, x):
    """The fix for the usual non-tensors: numpy arrays (float64) and nested lists."""
    if type(x).__module__ == "numpy":
        fix = f"torch.from_numpy({name}).float() (numpy gives float64; the course works in float32)"
    else:
        fix = f"torch.tensor({name}, dtype=torch.float32)"
    return TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}: convert it with {fix}")


def _check_qkv(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise _not_a_tensor(name, t)
        if t.dim() < 2:
            raise ValueError(f"{name} must have shape [..., seq_len, features], got {tuple(t.shape)}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor (e.g. float32), got {t.dtype}: use {name}.float()")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(
            f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}: convert them with "
            f".float() (torch.from_numpy gives float64)"
        )
    if not q.device == k.device == v.device:
        raise ValueError(
            f"q, k and v must be on one device, got {q.device}, {k.device} and {v.device}: move them with .to(device)"
        )
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
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the leading (batch, head) dimensions of q {tuple(q.shape)}, k {tuple(k.shape)} "
            f"and v {tuple(v.shape)} do not broadcast: they must be equal (or 1)"
        ) from None


def _check_0_1(mask, name, meaning):
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of 0/1 or bool, got {type(mask).__name__}: {meaning}")
    if mask.dtype != torch.bool and not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError(f"{name} must hold only 0/1 (or False/True): {meaning}")


def _batch_first_advice(mask, scores_shape):
    """Why a mask whose first dim is the batch size did not fit, and what does."""
    batch, n = scores_shape[0], len(scores_shape)
    if n < 3 or batch == 1 or mask.dim() >= n or mask.shape[0] != batch:
        return ""
    advice = f". Its first dim looks like the batch size {batch}, but a mask lines up with the scores from the right"
    if n <= 4:
        axes = ["batch", "heads", "L_q", "L_k"] if n == 4 else ["batch", "L_q", "L_k"]
        advice += f": a {mask.dim()}-D mask is read as [{', '.join(axes[-mask.dim() :])}]"
    singletons = ", ".join(["None"] * (n - mask.dim()))
    advice += f". Keep the batch first with one singleton dim per missing axis: mask[:, {singletons}]"
    if mask.dim() == 2:
        advice += " (padding_mask() returns [batch, 1, 1, L_k]), or pass the [batch, L_k] mask as key_padding_mask=mask"
    return advice


def _check_mask(mask, scores_shape, device):
    _check_0_1(mask, "mask", "1 = may attend, 0 = may not")
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
            + _batch_first_advice(mask, scores_shape)
        )
    if mask.device != device:
        raise ValueError(f"mask is on {mask.device} but q, k, v are on {device}: use mask.to(q.device)")


def _check_key_padding_mask(key_padding_mask, scores_shape, device):
    _check_0_1(key_padding_mask, "key_padding_mask", "1 = a real token that may be attended, 0 = padding")
    if len(scores_shape) < 3:
        raise ValueError(
            "key_padding_mask needs batched inputs q [batch, ..., L_q, d_k]; "
            "for one unbatched sequence pass its [L_k] mask as mask="
        )
    expected = (scores_shape[0], scores_shape[-1])
    if tuple(key_padding_mask.shape) != expected:
        raise ValueError(
            f"key_padding_mask must have shape [batch, L_k] = [{expected[0]}, {expected[1]}], "
            f"got {tuple(key_padding_mask.shape)}"
        )
    if key_padding_mask.device != device:
        raise ValueError(f"key_padding_mask is on {key_padding_mask.device} but q, k, v are on {device}")


def _combine_masks(mask, key_padding_mask, scores_shape, device):
    """``mask`` AND ``key_padding_mask`` as one mask that broadcasts to the scores (None if neither)."""
    if mask is not None:
        _check_mask(mask, scores_shape, device)
    if key_padding_mask is None:
        return mask
    _check_key_padding_mask(key_padding_mask, scores_shape, device)
    # [B, L_k] -> [B, 1, ..., 1, L_k]: one row of allowed keys for every head and query of sentence b
    singletons = [1] * (len(scores_shape) - 2)
    keys = (key_padding_mask != 0).reshape(scores_shape[0], *singletons, scores_shape[-1])
    return keys if mask is None else keys & (mask != 0)


# ---------------------------------------------------------------- attention


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
    _check_qkv(q, k, v)
    d_k = q.shape[-1]
    # 1. scores: how well each query matches each key
    scores = q @ k.transpose(-2, -1)
    # 2. scale: keeps the variance of the scores near 1 whatever d_k is
    scores = scores / math.sqrt(d_k)
    mask = _combine_masks(mask, key_padding_mask, scores.shape, scores.device)
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
    seq_len = _positive_int(seq_len, "seq_len")
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
    num_heads = _positive_int(num_heads, "num_heads")
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


def _check_mha_inputs(mha, query, key, value):
    """query, key, value must fit the layer: [batch, length, d_model], the weights' dtype and device."""
    weight = mha.query_linear.weight
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise _not_a_tensor(name, t)
        if t.dim() != 3 or t.shape[-1] != mha.d_model:
            raise ValueError(f"{name} must have shape [batch, seq_len, d_model={mha.d_model}], got {tuple(t.shape)}")
        if t.dtype != weight.dtype:
            raise TypeError(
                f"{name} is {t.dtype} but the layer's weights are {weight.dtype}: use {name}.to({weight.dtype}) "
                f"(torch.from_numpy gives float64), or convert the layer to match"
            )
        if t.device != weight.device:
            raise ValueError(f"{name} is on {t.device} but the layer is on {weight.device}: use {name}.to(device)")
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


class MultiHeadAttention(nn.Module):
    """Multi-head attention as in the slides.

    ``qkv_bias=False`` is the slides' version (no bias on the Q/K/V projections,
    a bias on the output projection); ``qkv_bias=True`` is the article's version,
    which is also what BERT and ``nn.MultiheadAttention`` use.
    After each forward, ``self.attention_weights`` holds the per-head weights
    [B, H, L_q, L_k] (detached) for plotting.
    """

    def __init__(self, d_model, num_heads, qkv_bias=False, dropout=0.0):
        super().__init__()
        d_model, num_heads = _positive_int(d_model, "d_model"), _positive_int(num_heads, "num_heads")
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
        _check_mha_inputs(self, query, key, value)
        if isinstance(mask, torch.Tensor) and mask.dim() == 3:
            mask = mask.unsqueeze(1)  # same mask for every head
        query = self.split_heads(self.query_linear(query))
        key = self.split_heads(self.key_linear(key))
        value = self.split_heads(self.value_linear(value))
        context = self.compute_attention(query, key, value, mask, key_padding_mask)
        return self.output_linear(self.combine_heads(context))
