"""Pictures of attention: heatmap, head view, model view and neuron view (lesson 04).

Every view reads attention weights in one format, checked by ``normalize_attention``:

- ``[q, k]``                  one head (e.g. ``orange_attention()``'s weights)
- ``[heads, q, k]``           one layer (e.g. ``mha.attention_weights[0]``)
- ``[layers, heads, q, k]``   a whole model
- ``[layers, batch, heads, q, k]``  ``Encoder.attentions()``; choose ``batch_index``
- a tuple of per-layer ``[batch, heads, q, k]`` tensors: what Hugging Face models return
  with ``output_attentions=True`` (BertViz's input format)

torch tensors (any device) and numpy arrays are both accepted. Row ``i`` of a
``[q, k]`` matrix is query token ``i``: how much it attends to each key token.

The static views are matplotlib figures (``plt.show()`` them, or ``fig.savefig``).
``head_view`` and ``model_view`` are also interactive: they return an
``AttentionView`` whose notebook output is self-contained HTML (inline SVG/canvas
and JavaScript, no network access, so it works offline), with a static PNG picture
in the same output for places that do not run JavaScript (GitHub, untrusted
notebooks). The HTML is deterministic: weights are rounded to 3 decimals and element
ids are a hash of the data, so re-running a cell gives byte-identical output.
The views' JavaScript lives in ``views/attention_views.js`` and is inlined into each output.

Long texts stay quick and small: heatmaps drop the per-cell numbers past
``ANNOTATE_MAX_TOKENS`` tokens and shrink their panels to fit a capped figure; the head and
model views show the first ``max_tokens`` tokens (64 unless you ask for more) and say so.
"""

import base64
import functools
import hashlib
import html
import json
import math
import operator
import struct
import textwrap
import zlib
from pathlib import Path

import numpy as np

__all__ = [
    "normalize_attention",
    "heatmap",
    "head_view",
    "model_view",
    "neuron_view",
    "neuron_steps",
    "most_attended_tokens",
    "AttentionView",
    "HEAD_COLORS",
]

# One colour per head, chosen so that any two of the 12 stay apart (CIE76 Delta-E >= 25 in
# Lab) for normal vision and under simulated protanopia, deuteranopia and tritanopia (Machado
# et al. 2009), each with contrast >= 2 against white so thin lines stay visible
# (tests/test_viz_data.py measures this). Heads 12-23 reuse the colours with dashed lines.
HEAD_COLORS = [
    "#0000ff", "#ff9600", "#00c3a5", "#d22d5a", "#a54bff", "#966900",
    "#004b1e", "#f087ff", "#87005a", "#7878a5", "#c3b469", "#5a00a5",
]  # fmt: skip
HEATMAP_CMAP = "viridis"  # sequential and colour-blind safe
DIVERGING_CMAP = "RdBu_r"  # for signed numbers (q, k, q*k): blue < 0 < red, colour-blind safe
ANNOTATE_MAX_TOKENS = 12  # heatmaps write a number in each cell up to this many tokens: more would not fit
MAX_TOKENS = 64  # the head and model views show this many tokens unless asked for more (keeps outputs < 2 MB)
MAX_FIGURE_INCHES = (16.0, 16.0)  # the largest heatmap figure, however many heads and tokens
TICK_FONT = 8  # the smallest text in a figure, in points
JS_PATH = Path(__file__).with_name("views") / "attention_views.js"


def head_style(head):
    """A head's colour and whether its lines are dashed (heads past the palette's 12)."""
    return HEAD_COLORS[head % len(HEAD_COLORS)], (head // len(HEAD_COLORS)) % 2 == 1


# ----------------------------------------------------------------------------
# One input format
# ----------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------
# Figures
# ----------------------------------------------------------------------------


def _new_figure(figsize, pyplot=True):
    """A figure with constrained layout; pyplot=False keeps it out of pyplot (no double display)."""
    if pyplot:
        import matplotlib.pyplot as plt

        return plt.figure(figsize=figsize, layout="constrained")
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, layout="constrained")


def _suptitle(fig, text, width_inches, fontsize=10):
    """A title that fits: in a narrow figure (one or two panels) it goes on several lines
    instead of being cut off at both edges. A 10-point character is at most 0.075 inch wide."""
    fits = max(20, int(width_inches / (0.0075 * fontsize)))  # characters per line
    lines = math.ceil(len(text) / fits)
    # lines of about equal length, rather than a full line and one stray word
    fig.suptitle(textwrap.fill(text, width=min(fits, math.ceil(len(text) / lines) + 6)), fontsize=fontsize)


def _tick_font(n):
    return 10 if n <= 10 else TICK_FONT


def _label_step(n, length_inches, fontsize=TICK_FONT):
    """Label every step-th token so that labels (1.3 font sizes apart) fit along length_inches."""
    return max(1, math.ceil(n * 1.3 * fontsize / 72 / max(length_inches, 1e-9)))


def _set_token_ticks(ax, axis, tokens, length_inches, fontsize):
    """Token labels at the cell centres of a heatmap, thinned out when they would overlap."""
    step = _label_step(len(tokens), length_inches, fontsize)
    shown = range(0, len(tokens), step)
    set_ticks = ax.set_xticks if axis == "x" else ax.set_yticks
    set_ticks([i + 0.5 for i in shown], [tokens[i] for i in shown], fontsize=fontsize)


def _matrix(ax, values, cmap, vmin, vmax, numbers=None, fontsize=TICK_FONT, lines=True):
    """values [rows, cols] as coloured cells, row 0 at the top (like a printed matrix).

    Cell (i, j) spans x in [j, j+1] and y in [i, i+1]; numbers (strings, same shape) are
    written in the cells, dark on light colours and white on dark ones.
    Drawn with matplotlib alone: seaborn's heatmap redraws the whole figure once per panel.
    """
    values = np.asarray(values, dtype=float)
    mesh = ax.pcolormesh(
        values, cmap=cmap, vmin=vmin, vmax=vmax, edgecolors="white" if lines else "face", linewidth=0.5 if lines else 0
    )
    ax.set_xlim(0, values.shape[1])
    ax.set_ylim(values.shape[0], 0)
    ax.set_aspect("equal")
    ax.grid(False)  # a style's grid lines (e.g. seaborn's theme) would cross the cells
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    if numbers is not None:
        for (i, j), text in np.ndenumerate(np.asarray(numbers, dtype=object)):
            r, g, b, _ = mesh.cmap(mesh.norm(values[i, j]))
            dark_cell = 0.2126 * r + 0.7152 * g + 0.0722 * b < 0.45
            ax.text(
                j + 0.5,
                i + 0.5,
                text,
                ha="center",
                va="center",
                fontsize=fontsize,
                color="white" if dark_cell else "#222",
            )
    return mesh


def _draw_heatmap(
    ax, weights, query_tokens, key_tokens, vmin, vmax, annotate, cbar, cmap, cell_inches, label_x=True, label_y=True
):
    n_q, n_k = weights.shape
    numbers = np.vectorize(lambda v: f"{v:.2f}")(weights) if annotate else None
    lines = cell_inches >= 0.15  # white borders would hide small cells
    mesh = _matrix(ax, weights, cmap, vmin, vmax, numbers, 9 if max(n_q, n_k) <= 8 else TICK_FONT, lines)
    if cbar:
        ax.figure.colorbar(mesh, ax=ax, label="attention weight", shrink=0.8)
    # in a grid of heads the tokens are the same in every panel: label the outer ones only
    if label_x:
        ax.set_xlabel("key (attended to)")
        _set_token_ticks(ax, "x", key_tokens, cell_inches * n_k, _tick_font(n_k))
    if label_y:
        ax.set_ylabel("query (attending)")
        _set_token_ticks(ax, "y", query_tokens, cell_inches * n_q, _tick_font(n_q))
    ax.tick_params(length=0)
    # long words slant at 45 degrees; many tokens stand upright, one line-height apart
    rotation = 90 if n_k > 8 else 45 if max(len(t) for t in key_tokens) > 3 else 0
    ax.tick_params(axis="x", labelrotation=rotation)
    ax.tick_params(axis="y", labelrotation=0)
    if rotation == 45:
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
            label.set_rotation_mode("anchor")


def _heatmap_layout(n_q, n_k, n_panels, max_cols, colour_bars, title):
    """(rows, cols, cell size, figure size) of a grid of heatmaps, within MAX_FIGURE_INCHES."""
    cols = min(n_panels, max_cols)
    rows = math.ceil(n_panels / cols)
    n = max(n_q, n_k)
    cell = 0.5 if n <= 10 else 0.3 if n <= 30 else 0.15
    labels_w, labels_h = 1.3, 1.0  # room for the token labels beside and below each panel
    extra_w = 0.9 * colour_bars
    extra_h = 0.4 if title else 0.0
    # shrink the cells until the figure fits
    width_cell = (MAX_FIGURE_INCHES[0] - extra_w - cols * labels_w) / (cols * n_k)
    height_cell = (MAX_FIGURE_INCHES[1] - extra_h - rows * labels_h) / (rows * n_q)
    cell = max(0.02, min(cell, width_cell, height_cell))
    panel_w, panel_h = max(2.8, cell * n_k + labels_w), max(2.5, cell * n_q + labels_h)
    size = (min(cols * panel_w + extra_w, MAX_FIGURE_INCHES[0]), min(rows * panel_h + extra_h, MAX_FIGURE_INCHES[1]))
    return rows, cols, cell, size


def heatmap(
    attn,
    tokens=None,
    layer=0,
    heads=None,
    shared_scale=True,
    annotate=True,
    title=None,
    batch_index=None,
    cmap=HEATMAP_CMAP,
    max_cols=4,
):
    """Attention weights as a heatmap: queries as rows, keys as columns, a number in each cell.

    tokens: one string per position, (query_tokens, key_tokens), or None (positions 0, 1, ...).
    layer: which layer (an integer). heads: None (all heads of the layer), one index or a
    list -> one panel per head, at most max_cols panels a row.
    shared_scale=True: one colour scale (0 .. largest weight shown) and one colour bar, so
    colours compare across heads; False: each head gets its own scale (its smallest ..
    largest weight) and colour bar, which shows the structure inside a nearly flat head.
    Long texts: past ANNOTATE_MAX_TOKENS tokens the cells carry no numbers (they would not
    fit), token labels are thinned out, and the figure stays within MAX_FIGURE_INCHES.
    Returns the matplotlib Figure (display it with ``plt.show()``).
    """
    arr = normalize_attention(attn, tokens, batch_index)
    query_tokens, key_tokens = _token_lists(tokens, arr.shape[2], arr.shape[3])
    (layer,), heads = _select(arr, [_as_index(layer, "layer")], heads)
    n_q, n_k = arr.shape[2:]
    annotate = bool(annotate) and max(n_q, n_k) <= ANNOTATE_MAX_TOKENS
    colour_bars = 1 if shared_scale else min(len(heads), max_cols)
    rows, cols, cell, size = _heatmap_layout(n_q, n_k, len(heads), max_cols, colour_bars, title)
    fig = _new_figure(size)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    shown = arr[layer, heads]
    for n, (ax, head, weights) in enumerate(zip(axes, heads, shown, strict=False)):
        # shared: 0 .. the largest weight shown; per head: the head's own range, to show the structure inside it
        vmin, vmax = (0.0, float(shown.max())) if shared_scale else (float(weights.min()), float(weights.max()))
        outer = {"label_x": n >= len(heads) - cols, "label_y": n % cols == 0}  # bottom of its column, first of its row
        _draw_heatmap(
            ax, weights, query_tokens, key_tokens, vmin, vmax, annotate, not shared_scale, cmap, cell, **outer
        )
        if arr.shape[0] > 1 or arr.shape[1] > 1:
            ax.set_title(f"layer {layer}, head {head}" if arr.shape[0] > 1 else f"head {head}", fontsize=10)
    for ax in axes[len(heads) :]:
        ax.set_visible(False)
    if shared_scale:
        fig.colorbar(axes[0].collections[0], ax=list(axes[: len(heads)]), label="attention weight", shrink=0.8)
    if title:
        fig.suptitle(title)
    return fig


def _draw_bipartite(ax, weights, query_tokens, key_tokens, color, threshold=0.02, dashed=False, label_step=1):
    """Head view of one head: queries on the left, keys on the right, a line per pair,
    as opaque as its weight: query i's line to key j goes from (0, y_q[i]) to (1, y_k[j])."""
    from matplotlib.collections import LineCollection
    from matplotlib.colors import to_rgba

    n_q, n_k = weights.shape
    n = max(n_q, n_k)
    y_q = [n - 1 - i * (n - 1) / max(n_q - 1, 1) for i in range(n_q)] if n_q > 1 else [(n - 1) / 2]
    y_k = [n - 1 - j * (n - 1) / max(n_k - 1, 1) for j in range(n_k)] if n_k > 1 else [(n - 1) / 2]
    segments, colors = [], []
    rgb = to_rgba(color)[:3]
    for i in range(n_q):
        for j in range(n_k):
            if weights[i, j] >= threshold:
                segments.append([(0.0, y_q[i]), (1.0, y_k[j])])
                colors.append((*rgb, float(weights[i, j])))
    ax.add_collection(LineCollection(segments, colors=colors, linewidths=2.2, linestyles="--" if dashed else "-"))
    size = _tick_font(n)
    for i in range(0, n_q, label_step):  # every token, or every label_step-th in a long text
        ax.text(-0.06, y_q[i], query_tokens[i], ha="right", va="center", fontsize=size)
    for j in range(0, n_k, label_step):
        ax.text(1.06, y_k[j], key_tokens[j], ha="left", va="center", fontsize=size)
    longest = max(len(t) for t in query_tokens + key_tokens)
    margin = 0.1 + 0.09 * min(longest, 40)  # in units of the line length
    ax.set_xlim(-margin, 1 + margin)
    ax.set_ylim(-0.7, n - 0.3)
    ax.axis("off")


def _head_view_figure(arr, query_tokens, key_tokens, layer, heads, pyplot=True, max_cols=6):
    n = max(arr.shape[2:])
    cols = min(len(heads), max_cols)
    rows = math.ceil(len(heads) / cols)
    longest = max(len(t) for t in query_tokens + key_tokens)
    panel_w = 1.4 + 0.18 * min(longest, 40)  # room for the tokens on both sides of the lines
    width = cols * panel_w
    # a row per token, 0.28 inch apart, closer together when the figure would pass MAX_FIGURE_INCHES
    row = min(0.28, (MAX_FIGURE_INCHES[1] - 0.3 - 0.7 * rows) / (rows * n))
    fig = _new_figure((width, rows * (row * n + 0.7) + 0.3), pyplot)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    step = _label_step(n, row * n, _tick_font(n))
    for ax, head in zip(axes, heads, strict=False):
        color, dashed = head_style(head)
        _draw_bipartite(ax, arr[layer, head], query_tokens, key_tokens, color, dashed=dashed, label_step=step)
        ax.set_title(f"head {head}", fontsize=10, color=color)
    for ax in axes[len(heads) :]:
        ax.set_visible(False)
    where = f"layer {layer}" if arr.shape[0] > 1 else "head view"
    _suptitle(fig, f"{where}: queries (left) attend to keys (right); line opacity = weight", width)
    return fig


def _model_view_figure(arr, query_tokens, key_tokens, layers, heads, pyplot=True):
    n_q, n_k = arr.shape[2:]
    thumb = min(1.1, 15 / len(heads), 20 / len(layers))
    # token labels on the outer squares when at least every third one fits
    label_tokens = max(_label_step(n_q, thumb), _label_step(n_k, thumb)) <= 3
    longest = max(len(t) for t in query_tokens + key_tokens)
    pad = 0.3 + 0.065 * min(longest, 15) if label_tokens else 0.3  # an 8-point character is < 0.065 inch
    width = len(heads) * thumb + 1.6 + pad
    fig = _new_figure((width, len(layers) * thumb + 0.8 + pad), pyplot)
    axes = fig.subplots(len(layers), len(heads), squeeze=False)
    vmax = float(arr[np.ix_(layers, heads)].max())
    for r, layer in enumerate(layers):
        for c, head in enumerate(heads):
            ax = axes[r, c]
            image = ax.imshow(arr[layer, head], cmap=HEATMAP_CMAP, vmin=0, vmax=vmax, aspect="auto")
            ax.grid(False)
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(f"head {head}", fontsize=8)
            if c == 0:
                ax.set_ylabel(f"layer {layer}", fontsize=8)
                if label_tokens:
                    rows = range(0, n_q, _label_step(n_q, thumb))
                    ax.set_yticks(rows, [query_tokens[i] for i in rows], fontsize=TICK_FONT)
            if r == len(layers) - 1 and label_tokens:
                columns = range(0, n_k, _label_step(n_k, thumb))
                ax.set_xticks(columns, [key_tokens[j] for j in columns], fontsize=TICK_FONT, rotation=90)
    fig.colorbar(image, ax=axes, label="attention weight", shrink=0.6)
    _suptitle(fig, "model view: one square per head (rows: queries, columns: keys)", width)
    return fig


# ----------------------------------------------------------------------------
# Interactive, offline HTML views
# ----------------------------------------------------------------------------


def _png_bytes(fig, dpi=72, colors=128):
    """Render a figure to a small PNG, deterministically.

    The picture is reduced to a palette of ``colors`` colours (3x smaller files) and
    encoded here with the standard library's zlib, so the bytes depend on no image
    library's encoder or metadata: the PNG is also embedded in the HTML that nbval
    compares byte for byte.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image

    fig.set_dpi(dpi)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    rgb = Image.fromarray(np.asarray(canvas.buffer_rgba())[..., :3].copy())
    indexed = rgb.quantize(colors=colors, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    pixels = np.asarray(indexed, dtype=np.uint8)
    palette = bytes(indexed.getpalette()[: 3 * (int(pixels.max()) + 1)])
    height, width = pixels.shape
    raw = np.hstack([np.zeros((height, 1), np.uint8), pixels]).tobytes()  # filter byte 0 before each row

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 3, 0, 0, 0)  # 8-bit indexed colour
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"PLTE", palette)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def _rounded(arr):
    """Weights rounded to 3 decimals: tiny CPU/GPU differences vanish from the outputs."""
    return np.rint(arr * 1000) / 1000


def _weights_payload(arr, layers, heads):
    """Weights as integers in thousandths: compact and identical on every machine."""
    return [[np.rint(arr[layer, head] * 1000).astype(int).ravel().tolist() for head in heads] for layer in layers]


def _json_for_script(obj):
    # "</" would end the <script> element early if a token contained "</script>"
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=True).replace("</", "<\\/")


@functools.cache
def _views_js():
    """The views' JavaScript (views/attention_views.js), inlined into every output: no network needed."""
    return JS_PATH.read_text(encoding="utf-8")


# Under the picture until the view's script runs (JupyterLab runs no script of a notebook opened from
# disk until its cell runs again): it says what the learner sees and how to get the live view
STATIC_CAPTION = "A static picture of this view. For the interactive one (hover, click), run this cell: Shift+Enter."


class AttentionView:
    """An interactive view for notebooks: offline HTML plus a static PNG in the same output.

    Jupyter shows ``text/html`` (the interactive view; the PNG inside it is shown where
    scripts do not run), other front ends may use ``image/png`` or ``text/plain``.
    ``note`` (e.g. which tokens were left out) is shown above both. The view draws its own white
    background and dark text, so it reads the same in JupyterLab's light and dark themes.
    ``save_html(path)`` writes a page you can open in any browser, offline.
    """

    def __init__(self, kind, payload, png, description, note=""):
        self.kind = kind
        self.payload = payload
        self.png = png
        self.description = description
        self.note = note
        data = _json_for_script(payload)
        # the element id is a hash of the content: the same view always gets the same id
        self.element_id = "cu-attn-" + hashlib.sha1(f"{kind}:{data}".encode()).hexdigest()[:12]
        png64 = base64.b64encode(png).decode("ascii")
        note_html = (
            f'<div class="cu-note" style="color:#8a3b00;font-size:12px">{html.escape(note)}</div>' if note else ""
        )
        self.html = (
            f'<div class="cu-attn" data-cu-view="{self.element_id}" '
            f'style="background:#fff;color:#222;font:13px sans-serif;padding:4px">{note_html}'
            f'<img class="cu-fallback" alt="{html.escape(description)}" style="max-width:100%" '
            f'src="data:image/png;base64,{png64}"/>'
            f'<div class="cu-static" style="color:#555;font-size:11px">{STATIC_CAPTION}</div>'
            f'<div class="cu-live" style="display:none"></div></div>\n'
            f'<script>(function(){{"use strict";var D={data};var VIEW="{self.element_id}";\n{_views_js()}}})();</script>'
        )

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {
            "text/plain": self.description,
            "text/html": self.html,
            "image/png": base64.b64encode(self.png).decode("ascii"),
        }

    def __repr__(self):
        return self.description

    def save_html(self, path):
        """Write a standalone, offline HTML page with this view."""
        page = f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(self.description)}</title></head>\n<body>\n{self.html}\n</body></html>\n'
        with open(path, "w", encoding="utf-8") as f:
            f.write(page)


def _first_tokens(arr, query_tokens, key_tokens, max_tokens):
    """Keep the first max_tokens queries and keys: a view's size grows with tokens squared.

    Returns (arr, query_tokens, key_tokens, note); note says what was left out ("" if nothing).
    """
    if max_tokens is None:
        return arr, query_tokens, key_tokens, ""
    max_tokens = _as_index(max_tokens, "max_tokens")
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    n_q, n_k = arr.shape[2:]
    if max(n_q, n_k) <= max_tokens:
        return arr, query_tokens, key_tokens, ""
    q, k = min(n_q, max_tokens), min(n_k, max_tokens)
    shown = (
        f"the first {q} of {n_q} tokens" if n_q == n_k else f"the first {q} of {n_q} query and {k} of {n_k} key tokens"
    )
    note = (
        f"Showing {shown} (weights to the others are not drawn). "
        f"Pass max_tokens={max(n_q, n_k)} to see them all: the output grows with the square of the tokens."
    )
    return arr[:, :, :q, :k], query_tokens[:q], key_tokens[:k], note


def _view_payload(kind, arr, query_tokens, key_tokens, layers, heads, selected_layer):
    styles = [head_style(h) for h in heads]
    return {
        "kind": kind,
        "layers": layers,
        "heads": heads,
        "layer": layers.index(selected_layer),
        "qt": query_tokens,
        "kt": key_tokens,
        "colors": [color for color, _ in styles],
        "dashed": [dashed for _, dashed in styles],
        "w": _weights_payload(arr, layers, heads),
    }


def _with_note(fig, note):
    if note:
        fig.supxlabel(textwrap.fill(note, 100), fontsize=TICK_FONT, color="#8a3b00")
    return fig


def head_view(attn, tokens=None, layer=0, heads=None, interactive=True, batch_index=None, max_tokens=MAX_TOKENS):
    """Head view: for one layer, each head as lines from query tokens (left) to key tokens (right).

    A line is as opaque as its weight; each head has its own colour.
    interactive=True returns an AttentionView: hover a token to see only its lines
    (click it to keep them; with one head shown, its weights are written on the other side),
    click a head's colour box to show or hide that head (double-click: only that head),
    and pick another layer from the menu (when there are several layers).
    interactive=False returns a matplotlib Figure with one panel per head.
    max_tokens: show the first max_tokens tokens only (None: all); the view says what it left out.
    """
    arr = normalize_attention(attn, tokens, batch_index)
    query_tokens, key_tokens = _token_lists(tokens, arr.shape[2], arr.shape[3])
    (layer,), heads = _select(arr, [_as_index(layer, "layer")], heads)
    arr, query_tokens, key_tokens, note = _first_tokens(arr, query_tokens, key_tokens, max_tokens)
    if not interactive:
        return _with_note(_head_view_figure(arr, query_tokens, key_tokens, layer, heads), note)
    # the static picture is drawn from the same rounded weights as the HTML: identical on every device
    figure = _head_view_figure(_rounded(arr), query_tokens, key_tokens, layer, heads, pyplot=False)
    layers = list(range(arr.shape[0]))
    payload = _view_payload("head", arr, query_tokens, key_tokens, layers, heads, layer)
    description = (
        f"<head view: layer {layer} of {arr.shape[0]}, heads {heads}, {len(query_tokens)} query x "
        f"{len(key_tokens)} key tokens; interactive HTML with a static PNG fallback>"
    )
    return AttentionView("head", payload, _png_bytes(figure), f"{description} {note}".strip(), note)


def model_view(attn, tokens=None, layers=None, heads=None, interactive=True, batch_index=None, max_tokens=MAX_TOKENS):
    """Model view: every head of every layer at a glance, as a grid (rows: layers, columns: heads).

    Each square is one head's [q, k] weights (rows: queries, columns: keys).
    interactive=True returns an AttentionView with a colour bar: hover a square to read which
    query and key a cell is and its weight, click it to see that head's lines below the grid.
    interactive=False returns a matplotlib Figure.
    max_tokens: show the first max_tokens tokens only (None: all); the view says what it left out.
    """
    arr = normalize_attention(attn, tokens, batch_index)
    query_tokens, key_tokens = _token_lists(tokens, arr.shape[2], arr.shape[3])
    layers, heads = _select(arr, layers, heads)
    arr, query_tokens, key_tokens, note = _first_tokens(arr, query_tokens, key_tokens, max_tokens)
    if not interactive:
        return _with_note(_model_view_figure(arr, query_tokens, key_tokens, layers, heads), note)
    figure = _model_view_figure(_rounded(arr), query_tokens, key_tokens, layers, heads, pyplot=False)
    payload = _view_payload("model", arr, query_tokens, key_tokens, layers, heads, layers[0])
    description = (
        f"<model view: {len(layers)} layers x {len(heads)} heads, {len(query_tokens)} query x "
        f"{len(key_tokens)} key tokens; interactive HTML with a static PNG fallback>"
    )
    return AttentionView("model", payload, _png_bytes(figure), f"{description} {note}".strip(), note)


# ----------------------------------------------------------------------------
# Neuron view
# ----------------------------------------------------------------------------


def _vectors(x, name, head, layer):
    arr = _as_array(x, name)
    head, layer = _as_index(head, "head"), _as_index(layer, "layer")
    if arr.ndim == 4:  # [layers, heads, seq, d] (a [1, heads, seq, d] batch of one works too)
        if not -arr.shape[0] <= layer < arr.shape[0]:
            raise ValueError(f"layer {layer} does not exist: {name} has {arr.shape[0]} layers")
        arr = arr[layer]
    if arr.ndim == 3:  # [heads, seq, d]
        if not -arr.shape[0] <= head < arr.shape[0]:
            raise ValueError(f"head {head} does not exist: {name} has {arr.shape[0]} heads")
        arr = arr[head]
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be [seq, head_dim], [heads, seq, head_dim] or [layers, heads, seq, head_dim]; got {arr.shape}"
        )
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or inf")
    return arr


def neuron_steps(q, k, query_index, head=0, layer=0, mask=None):
    """The numbers the neuron view shows, step by step, for one query token.

    q, k: [seq, head_dim], [heads, seq, head_dim] or [layers, heads, seq, head_dim].
    mask: None, [k] or [q, k] (leading size-1 axes are dropped); 1/True = may attend.
    Returns a dict of numpy arrays: query [d], keys [k, d], product [k, d] (q * k
    elementwise), dot [k] (its row sums = q·k), scaled [k] (q·k / sqrt(d)), allowed [k]
    (bool), weights [k] (softmax of the allowed scaled scores).
    """
    q = _vectors(q, "q", head, layer)
    k = _vectors(k, "k", head, layer)
    if q.shape[1] != k.shape[1]:
        raise ValueError(f"q and k must have the same head_dim to take dot products: q {q.shape}, k {k.shape}")
    query_index = _as_index(query_index, "query_index")
    if not -q.shape[0] <= query_index < q.shape[0]:
        raise ValueError(f"query_index={query_index!r} is out of range for {q.shape[0]} query tokens")
    query = q[query_index]
    allowed = np.ones(k.shape[0], dtype=bool)
    if mask is not None:
        m = _as_array(mask, "mask")
        while m.ndim > 2 and m.shape[0] == 1:
            m = m[0]
        if m.ndim == 2 and m.shape[0] == 1:
            m = m[0]
        if m.ndim == 2 and m.shape == (q.shape[0], k.shape[0]):
            m = m[query_index]
        if m.shape != (k.shape[0],):
            raise ValueError(
                f"mask must be [keys]={k.shape[0]} or [queries, keys]={(q.shape[0], k.shape[0])}; got {m.shape}"
            )
        allowed = m != 0
    product = query[None, :] * k  # step 1: elementwise q * k, one row per key
    dot = product.sum(axis=1)  # step 2: the sum of each row is the dot product q·k
    scaled = dot / math.sqrt(k.shape[1])  # step 3: scale by sqrt(d)
    masked = np.where(allowed, scaled, -np.inf)  # step 4: masked keys get -inf
    weights = np.zeros_like(scaled)
    if allowed.any():  # step 5: softmax over the allowed keys (a fully masked row stays 0)
        e = np.exp(masked - masked[allowed].max())
        weights = e / e.sum()
    return {
        "query": query,
        "keys": k,
        "product": product,
        "dot": dot,
        "scaled": scaled,
        "allowed": allowed,
        "weights": weights,
    }


def neuron_view(q, k, tokens, query_index, head=0, layer=0, mask=None, annotate=None, dim_labels=None):
    """Neuron view: how one query token's attention weights come out of q and k.

    Shows, in one figure, for the chosen layer, head and query token: the query vector q,
    each key vector k, their elementwise product q * k, its sum q·k, the scaled score
    q·k / sqrt(d), the mask and the softmax weights. Blue is negative, red positive.
    tokens: list of strings, or (query_tokens, key_tokens) for cross-attention.
    dim_labels: optional names of the head's dimensions (shown under k and q * k).
    Returns a matplotlib Figure.
    """
    import seaborn as sns

    s = neuron_steps(q, k, query_index, head, layer, mask)
    n_k, d = s["keys"].shape
    query_tokens, key_tokens = _token_lists(tokens, _vectors(q, "q", head, layer).shape[0], n_k)
    annotate = d <= 8 if annotate is None else bool(annotate)
    vec_w = max(1.6, min(0.45 * d, 5.0))
    col_w = 0.75
    row_h = 0.42 if n_k <= 12 else 0.25
    fig = _new_figure((2 * vec_w + 4 * col_w + 2.6, row_h * (n_k + 1) + 1.9))
    grid = fig.add_gridspec(
        2, 6, width_ratios=[vec_w, vec_w, col_w, col_w, col_w, col_w], height_ratios=[1, n_k], wspace=0.05, hspace=0.05
    )

    def signed(ax, values, limit, yticklabels, numbers=annotate, fontsize=TICK_FONT):
        # one diverging scale centred on 0: blue negative, white 0, red positive
        sns.heatmap(values, ax=ax, cmap=DIVERGING_CMAP, vmin=-limit, vmax=limit, cbar=False,
                    annot=numbers, fmt=".2f", annot_kws={"fontsize": fontsize},
                    linewidths=0.3 if d <= 16 else 0, linecolor="white",
                    xticklabels=False, yticklabels=yticklabels)  # fmt: skip

    def limit(values):
        return float(max(np.abs(values).max(), 1e-9))

    # each panel gets its own colour scale: queries, keys and products live on different scales
    ax_q = fig.add_subplot(grid[0, 1])
    signed(ax_q, s["query"][None, :], limit(s["query"]), ["q"])
    ax_q.set_title(f"query vector q of '{query_tokens[query_index]}'", fontsize=9)
    ax_q.tick_params(axis="y", labelrotation=0)
    ax_k = fig.add_subplot(grid[1, 0])
    signed(ax_k, s["keys"], limit(s["keys"]), key_tokens)
    ax_k.set_title("key vectors k", fontsize=9)
    ax_k.set_ylabel("key token")
    ax_k.tick_params(axis="y", labelrotation=0, labelsize=_tick_font(n_k))
    ax_p = fig.add_subplot(grid[1, 1])
    signed(ax_p, s["product"], limit(s["product"]), False)
    if dim_labels is not None:
        if len(dim_labels) != d:
            raise ValueError(f"dim_labels has {len(dim_labels)} names but the head has {d} dimensions")
        for ax in (ax_k, ax_p):
            ax.set_xticks(np.arange(d) + 0.5, [str(x) for x in dim_labels], fontsize=8, rotation=0)
    ax_p.set_title("q * k (elementwise)", fontsize=9)
    ax_p.set_xlabel(f"the {d} dimensions of the head")
    for c, (label, values) in enumerate([("q·k\n(row sum)", s["dot"]), (f"÷ √{d}", s["scaled"])], start=2):
        ax = fig.add_subplot(grid[1, c])
        signed(ax, values[:, None], limit(values), False, True, 8)
        ax.set_title(label, fontsize=9)
    ax_m = fig.add_subplot(grid[1, 4])
    blocked = (~s["allowed"]).astype(float)[:, None]
    words = np.array([["yes" if a else "no"] for a in s["allowed"]])
    sns.heatmap(blocked, ax=ax_m, cmap="Greys", vmin=0, vmax=1.6, cbar=False, annot=words, fmt="",
                annot_kws={"fontsize": 8}, linewidths=0.3, linecolor="white", xticklabels=False, yticklabels=False)  # fmt: skip
    ax_m.set_title("may\nattend?", fontsize=9)
    ax_w = fig.add_subplot(grid[1, 5])
    sns.heatmap(s["weights"][:, None], ax=ax_w, cmap=HEATMAP_CMAP, vmin=0, vmax=1, cbar=False, annot=True, fmt=".2f",
                annot_kws={"fontsize": 8}, linewidths=0.3, linecolor="white", xticklabels=False, yticklabels=False)  # fmt: skip
    ax_w.set_title("softmax\n(weights)", fontsize=9)
    where = f"layer {layer}, head {head}, " if (np.ndim(q) >= 3) else ""
    fig.suptitle(
        f"neuron view: {where}query '{query_tokens[query_index]}' (blue < 0 < red; one colour scale per panel)",
        fontsize=10,
    )
    return fig


# ----------------------------------------------------------------------------
# Reading attention: the question a learner asks of a head first
# ----------------------------------------------------------------------------


def most_attended_tokens(weights, tokens):
    """For each head, the key token it attends to most, on average over all queries.

    weights: [heads, q, k] attention weights (torch tensor); tokens: the k key tokens.
    Returns a list with one token per head (lesson 04's exercise).
    """
    received = weights.mean(dim=-2)  # [heads, k]: the average weight each key receives
    best = received.argmax(dim=-1)  # [heads]: the key with the most attention
    return [tokens[i] for i in best.tolist()]
