"""The one input format every view reads: attention weights checked into [layers, heads, q, k].

``normalize_attention`` accepts the shapes listed in ``course_utils.viz`` and says what is
wrong with any other input; the small helpers here check tokens, batch, layer and head indices.
"""

import operator

import numpy as np


def _as_array(x, what="attention"):
    """torch tensor (any device, with or without grad) or array-like -> float64 numpy array."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch.Tensor, without importing torch here
        x = x.detach().cpu().double().numpy()
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{what} must be a torch tensor or a numpy array of numbers, got {type(x).__name__}") from None
    return arr


def _is_low_precision(x):
    dtype = str(getattr(x, "dtype", ""))
    return "float16" in dtype or "bfloat16" in dtype


def _as_index(value, name):
    """An int, numpy int or integer 0-d tensor -> int; anything else (1.0, "1", True) -> a clear error."""
    if isinstance(value, bool) or isinstance(value, float):
        raise TypeError(f"{name} must be a whole number such as 1, got {value!r} ({type(value).__name__})")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be a whole number such as 1, got {value!r} ({type(value).__name__})") from None


def _pick_batch(arr, batch_index, layout):
    """arr has a batch axis first; keep one sequence of it."""
    batch = arr.shape[0]
    if batch_index is None:
        if batch != 1:
            raise ValueError(
                f"the attention has a batch of {batch} sequences ({layout}); "
                f"pass batch_index=0..{batch - 1} to choose which one to show"
            )
        batch_index = 0
    batch_index = _as_index(batch_index, "batch_index")
    if not -batch <= batch_index < batch:
        raise ValueError(f"batch_index={batch_index!r} is out of range for a batch of {batch} sequences")
    return arr[batch_index]


def _token_lists(tokens, n_queries, n_keys):
    """tokens -> (query_tokens, key_tokens), checking there is one token per position.

    Self-attention takes one list; cross-attention (queries from one sequence,
    keys from another) takes a pair (query_tokens, key_tokens).
    None labels the positions 0, 1, 2, ...
    """
    if tokens is None:
        return [str(i) for i in range(n_queries)], [str(i) for i in range(n_keys)]
    if isinstance(tokens, str):
        raise TypeError("tokens must be a list of strings, one per position, not one string (use .split())")
    tokens = list(tokens)
    pair = len(tokens) == 2 and all(isinstance(t, (list, tuple)) for t in tokens)
    query_tokens, key_tokens = (list(tokens[0]), list(tokens[1])) if pair else (tokens, tokens)
    if not pair and n_queries != n_keys:
        raise ValueError(
            f"the attention has {n_queries} queries but {n_keys} keys (cross-attention): "
            f"pass tokens=(query_tokens, key_tokens)"
        )
    if not pair and len(tokens) != n_keys:
        raise ValueError(
            f"{len(tokens)} tokens were given but the attention has {n_keys} positions "
            f"(its shape ends in [{n_queries}, {n_keys}] = [queries, keys]): pass one token per position"
        )
    for name, toks, n in (("query", query_tokens, n_queries), ("key", key_tokens, n_keys)):
        if len(toks) != n:
            raise ValueError(
                f"{len(toks)} {name} tokens were given but the attention has {n} {name} positions "
                f"(its shape ends in [{n_queries}, {n_keys}] = [queries, keys]): pass one token per position"
            )
    return [str(t) for t in query_tokens], [str(t) for t in key_tokens]


def normalize_attention(attn, tokens=None, batch_index=None):
    """Any supported attention input -> float64 numpy array [layers, heads, q, k], checked.

    attn: [q, k], [heads, q, k], [layers, heads, q, k], [layers, batch, heads, q, k],
          or a tuple/list of per-layer [batch, heads, q, k] (or [heads, q, k]) tensors.
          A 4-D tensor is read as [layers, heads, q, k], except when you pass
          batch_index: then it is one layer's [batch, heads, q, k]
          (like ``MultiHeadAttention.attention_weights``).
    tokens: optional list of strings (one per position), or (query_tokens, key_tokens).
    batch_index: which sequence of a batch to show; required when the batch has > 1.

    Raises a ValueError that says what is wrong for: a token count that does not match,
    rows that do not sum to 1 (scores instead of weights? softmax over the wrong axis?),
    negative or non-finite values, and a batch of several sequences without batch_index.
    """
    low_precision = False
    if isinstance(attn, (tuple, list)) and len(attn) > 0 and all(hasattr(a, "shape") for a in attn):
        # BertViz / Hugging Face format: one tensor per layer
        low_precision = any(_is_low_precision(a) for a in attn)
        layers = [_as_array(a) for a in attn]
        shapes = {a.shape for a in layers}
        if len(shapes) != 1:
            raise ValueError(f"all layers must have the same shape, got {sorted(shapes)}")
        (shape,) = shapes
        if len(shape) == 4:
            arr = np.stack([_pick_batch(a, batch_index, "per-layer [batch, heads, q, k]") for a in layers])
        elif len(shape) == 3:
            arr = np.stack(layers)
        else:
            raise ValueError(
                f"each layer in the tuple must be [batch, heads, q, k] or [heads, q, k], got shape {shape}"
            )
    else:
        low_precision = _is_low_precision(attn)
        arr = _as_array(attn)
        if batch_index is not None and arr.ndim not in (4, 5):
            raise ValueError(
                f"batch_index is for inputs with a batch axis ([batch, heads, q, k] or "
                f"[layers, batch, heads, q, k]); this attention has shape {arr.shape}"
            )
        if arr.ndim == 2:
            arr = arr[None, None]
        elif arr.ndim == 3:
            arr = arr[None]
        elif arr.ndim == 4 and batch_index is not None:
            arr = _pick_batch(arr, batch_index, "[batch, heads, q, k]")[None]
        elif arr.ndim == 5:
            arr = np.stack([_pick_batch(layer, batch_index, "[layers, batch, heads, q, k]") for layer in arr])
        elif arr.ndim != 4:
            raise ValueError(
                f"attention must be [q, k], [heads, q, k], [layers, heads, q, k], [layers, batch, heads, q, k] "
                f"or a tuple of per-layer [batch, heads, q, k] tensors; got shape {arr.shape}"
            )
    if min(arr.shape) == 0:
        raise ValueError(f"the attention is empty: shape {arr.shape} as [layers, heads, q, k]")
    if not np.isfinite(arr).all():
        raise ValueError("the attention contains NaN or inf: plot the weights after softmax (and nan_to_num)")
    if arr.min() < -1e-6:
        raise ValueError(
            f"attention weights cannot be negative (smallest is {arr.min():.3g}): "
            f"did you pass the scores q·k/sqrt(d) instead of the weights after softmax?"
        )
    # Each query's weights over the keys sum to 1 (softmax over the last axis); a fully
    # masked query row is all zeros in this course, so 0 is allowed too.
    sums = arr.sum(axis=-1)
    tol = 2e-2 if low_precision else 1e-3
    bad = ~(np.isclose(sums, 1.0, atol=tol) | np.isclose(sums, 0.0, atol=tol))
    if bad.any():
        layer, head, row = (int(i) for i in np.argwhere(bad)[0])
        hint = ""
        if np.allclose(arr.sum(axis=-2), 1.0, atol=tol):
            hint = " The columns sum to 1 instead: was softmax taken over the queries (dim=-2) instead of the keys (dim=-1)?"
        raise ValueError(
            f"each row of attention weights must sum to 1 (softmax over the keys), but layer {layer}, "
            f"head {head}, query row {row} sums to {sums[layer, head, row]:.4f}.{hint} "
            f"Pass the weights after softmax, with queries as rows and keys as columns."
        )
    if tokens is not None:
        _token_lists(tokens, arr.shape[2], arr.shape[3])
    return arr


def _select(arr, layers=None, heads=None):
    """Validated layer and head indices of an [layers, heads, q, k] array."""

    def indices(choice, n, name):
        if choice is None:
            return list(range(n))
        if isinstance(choice, str):
            raise TypeError(f"{name}s must be an index or a list of indices, got {choice!r}")
        items = [choice] if np.ndim(choice) == 0 else list(choice)  # 2, np.int64(2) or [0, 2]
        if not items:
            raise ValueError(f"no {name}s chosen")
        out = []
        for i in items:
            i = _as_index(i, name)
            if not -n <= i < n:
                raise ValueError(f"{name} {i!r} does not exist: the attention has {n} {name}s (0..{n - 1})")
            out.append(int(i) % n)
        return out

    return indices(layers, arr.shape[0], "layer"), indices(heads, arr.shape[1], "head")
