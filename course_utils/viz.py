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
"""

import base64
import hashlib
import html
import json
import math
import struct
import textwrap
import zlib
from numbers import Integral

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

# seaborn's "colorblind" palette, one colour per head (cycled after 10), with its two palest
# colours replaced so thin lines and head labels stay visible on white: yellow #ece133 darkened,
# pink #fbafe4 swapped for the wine of Paul Tol's colour-blind-safe "muted" palette.
HEAD_COLORS = [
    "#0173b2", "#de8f05", "#029e73", "#d55e00", "#cc78bc",
    "#ca9161", "#882255", "#949494", "#c4b200", "#56b4e9",
]  # fmt: skip
HEATMAP_CMAP = "viridis"  # sequential and colour-blind safe
DIVERGING_CMAP = "RdBu_r"  # for signed numbers (q, k, q*k): blue < 0 < red, colour-blind safe

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
    if not isinstance(batch_index, Integral) or not -batch <= batch_index < batch:
        raise ValueError(f"batch_index={batch_index!r} is out of range for a batch of {batch} sequences")
    return arr[batch_index]


def _token_lists(tokens, n_queries, n_keys):
    """tokens -> (query_tokens, key_tokens), checking there is one token per position.

    Self-attention takes one list; cross-attention (queries from one sequence,
    keys from another) takes a pair (query_tokens, key_tokens).
    """
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
        items = [choice] if isinstance(choice, Integral) else list(choice)
        if not items:
            raise ValueError(f"no {name}s chosen")
        out = []
        for i in items:
            if not isinstance(i, Integral) or not -n <= i < n:
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
    return 10 if n <= 10 else 8 if n <= 20 else 6


def _draw_heatmap(ax, weights, query_tokens, key_tokens, vmin, vmax, annotate, cbar, cmap, cbar_ax=None):
    import seaborn as sns

    n_q, n_k = weights.shape
    sns.heatmap(
        weights,
        ax=ax,
        vmin=vmin,
        vmax=vmax,
        cmap=cmap,
        annot=annotate,
        fmt=".2f",
        annot_kws={"fontsize": 9 if max(n_q, n_k) <= 8 else 7},
        square=True,
        cbar=cbar,
        cbar_ax=cbar_ax,
        cbar_kws={"label": "attention weight", "shrink": 0.8} if cbar else None,
        linewidths=0.5,
        linecolor="white",
        xticklabels=key_tokens,
        yticklabels=query_tokens,
    )
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    long = max(len(t) for t in key_tokens) > 3 or n_k > 8
    ax.tick_params(axis="x", labelrotation=45 if long else 0, labelsize=_tick_font(n_k))
    ax.tick_params(axis="y", labelrotation=0, labelsize=_tick_font(n_q))
    if long:
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
            label.set_rotation_mode("anchor")


def heatmap(
    attn,
    tokens,
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

    heads: None (all heads of the layer), one index or a list -> one panel per head.
    shared_scale=True: one colour scale (0 .. largest weight shown) and one colour bar, so
    colours compare across heads; False: each head gets its own scale (its smallest ..
    largest weight) and colour bar, which shows the structure inside a nearly flat head.
    Returns the matplotlib Figure (display it with ``plt.show()``).
    """
    arr = normalize_attention(attn, tokens, batch_index)
    query_tokens, key_tokens = _token_lists(tokens, arr.shape[2], arr.shape[3])
    (layer,), heads = _select(arr, [layer] if isinstance(layer, Integral) else layer, heads)
    n_q, n_k = arr.shape[2:]
    annotate = bool(annotate) and max(n_q, n_k) <= 16  # numbers would not fit in smaller cells
    cols = min(len(heads), max_cols)
    rows = math.ceil(len(heads) / cols)
    cell = 0.5 if max(n_q, n_k) <= 10 else 0.3
    panel_w, panel_h = max(2.8, cell * n_k + 1.3), max(2.5, cell * n_q + 1.0)
    extra = 0.9 if shared_scale else 0.9 * cols
    fig = _new_figure((min(cols * panel_w + extra, 18), rows * panel_h + (0.4 if title else 0)))
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    shown = arr[layer, heads]
    for ax, head, weights in zip(axes, heads, shown, strict=False):
        # shared: 0 .. the largest weight shown; per head: the head's own range, to show the structure inside it
        vmin, vmax = (0.0, float(shown.max())) if shared_scale else (float(weights.min()), float(weights.max()))
        _draw_heatmap(ax, weights, query_tokens, key_tokens, vmin, vmax, annotate, not shared_scale, cmap)
        if arr.shape[0] > 1 or arr.shape[1] > 1:
            ax.set_title(f"layer {layer}, head {head}" if arr.shape[0] > 1 else f"head {head}", fontsize=10)
    for ax in axes[len(heads) :]:
        ax.set_visible(False)
    for ax in axes[: len(heads)]:
        if ax not in axes[len(heads) - cols : len(heads)] and rows > 1:
            ax.set_xlabel("")
        if list(axes).index(ax) % cols:
            ax.set_ylabel("")
    if shared_scale:
        fig.colorbar(axes[0].collections[0], ax=list(axes[: len(heads)]), label="attention weight", shrink=0.8)
    if title:
        fig.suptitle(title)
    return fig


def _draw_bipartite(ax, weights, query_tokens, key_tokens, color, threshold=0.02):
    """Head view of one head: queries on the left, keys on the right, a line per pair,
    as opaque as its weight."""
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
    ax.add_collection(LineCollection(segments, colors=colors, linewidths=2.2))
    size = _tick_font(n)
    for i, tok in enumerate(query_tokens):
        ax.text(-0.06, y_q[i], tok, ha="right", va="center", fontsize=size)
    for j, tok in enumerate(key_tokens):
        ax.text(1.06, y_k[j], tok, ha="left", va="center", fontsize=size)
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
    fig = _new_figure((width, rows * (0.28 * n + 0.7) + 0.3), pyplot)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, head in zip(axes, heads, strict=False):
        _draw_bipartite(ax, arr[layer, head], query_tokens, key_tokens, HEAD_COLORS[head % len(HEAD_COLORS)])
        ax.set_title(f"head {head}", fontsize=10, color=HEAD_COLORS[head % len(HEAD_COLORS)])
    for ax in axes[len(heads) :]:
        ax.set_visible(False)
    where = f"layer {layer}" if arr.shape[0] > 1 else "head view"
    _suptitle(fig, f"{where}: queries (left) attend to keys (right); line opacity = weight", width)
    return fig


def _model_view_figure(arr, query_tokens, key_tokens, layers, heads, pyplot=True):
    n_q, n_k = arr.shape[2:]
    thumb = min(1.1, 15 / len(heads), 20 / len(layers))
    label_tokens = max(n_q, n_k) <= 12 and thumb >= 0.9
    pad = 0.7 if label_tokens else 0.3
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
                    ax.set_yticks(range(n_q), query_tokens, fontsize=5)
            if r == len(layers) - 1 and label_tokens:
                ax.set_xticks(range(n_k), key_tokens, fontsize=5, rotation=90)
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


class AttentionView:
    """An interactive view for notebooks: offline HTML plus a static PNG in the same output.

    Jupyter shows ``text/html`` (the interactive view; the PNG inside it is shown where
    scripts do not run), other front ends may use ``image/png`` or ``text/plain``.
    ``save_html(path)`` writes a page you can open in any browser, offline.
    """

    def __init__(self, kind, payload, png, description):
        self.kind = kind
        self.payload = payload
        self.png = png
        self.description = description
        data = _json_for_script(payload)
        # the element id is a hash of the content: the same view always gets the same id
        self.element_id = "cu-attn-" + hashlib.sha1(f"{kind}:{data}".encode()).hexdigest()[:12]
        png64 = base64.b64encode(png).decode("ascii")
        self.html = (
            f'<div class="cu-attn" data-cu-view="{self.element_id}" '
            f'style="background:#fff;color:#222;font:13px sans-serif;padding:4px">'
            f'<img class="cu-fallback" alt="{html.escape(description)}" style="max-width:100%" '
            f'src="data:image/png;base64,{png64}"/>'
            f'<div class="cu-live" style="display:none"></div></div>\n'
            f'<script>(function(){{"use strict";var D={data};var VIEW="{self.element_id}";\n{_JS}}})();</script>'
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


def _view_payload(kind, arr, query_tokens, key_tokens, layers, heads, selected_layer):
    return {
        "kind": kind,
        "layers": layers,
        "heads": heads,
        "layer": layers.index(selected_layer),
        "qt": query_tokens,
        "kt": key_tokens,
        "colors": [HEAD_COLORS[h % len(HEAD_COLORS)] for h in heads],
        "w": _weights_payload(arr, layers, heads),
    }


def head_view(attn, tokens, layer=0, heads=None, interactive=True, batch_index=None):
    """Head view: for one layer, each head as lines from query tokens (left) to key tokens (right).

    A line is as opaque as its weight; each head has its own colour.
    interactive=True returns an AttentionView: hover a token to see only its lines
    (click it to keep them), click a head's colour box to show or hide that head,
    and pick another layer from the menu (when there are several layers).
    interactive=False returns a matplotlib Figure with one panel per head.
    """
    arr = normalize_attention(attn, tokens, batch_index)
    query_tokens, key_tokens = _token_lists(tokens, arr.shape[2], arr.shape[3])
    (layer,), heads = _select(arr, [layer] if isinstance(layer, Integral) else layer, heads)
    if not interactive:
        return _head_view_figure(arr, query_tokens, key_tokens, layer, heads)
    # the static picture is drawn from the same rounded weights as the HTML: identical on every device
    figure = _head_view_figure(_rounded(arr), query_tokens, key_tokens, layer, heads, pyplot=False)
    layers = list(range(arr.shape[0]))
    payload = _view_payload("head", arr, query_tokens, key_tokens, layers, heads, layer)
    description = (
        f"<head view: layer {layer} of {arr.shape[0]}, heads {heads}, {len(query_tokens)} query x "
        f"{len(key_tokens)} key tokens; interactive HTML with a static PNG fallback>"
    )
    return AttentionView("head", payload, _png_bytes(figure), description)


def model_view(attn, tokens, layers=None, heads=None, interactive=True, batch_index=None):
    """Model view: every head of every layer at a glance, as a grid (rows: layers, columns: heads).

    Each square is one head's [q, k] weights (rows: queries, columns: keys).
    interactive=True returns an AttentionView: hover a square for its name, click it to
    see that head's lines between the tokens below the grid.
    interactive=False returns a matplotlib Figure.
    """
    arr = normalize_attention(attn, tokens, batch_index)
    query_tokens, key_tokens = _token_lists(tokens, arr.shape[2], arr.shape[3])
    layers, heads = _select(arr, layers, heads)
    if not interactive:
        return _model_view_figure(arr, query_tokens, key_tokens, layers, heads)
    figure = _model_view_figure(_rounded(arr), query_tokens, key_tokens, layers, heads, pyplot=False)
    payload = _view_payload("model", arr, query_tokens, key_tokens, layers, heads, layers[0])
    description = (
        f"<model view: {len(layers)} layers x {len(heads)} heads, {len(query_tokens)} query x "
        f"{len(key_tokens)} key tokens; interactive HTML with a static PNG fallback>"
    )
    return AttentionView("model", payload, _png_bytes(figure), description)


# ----------------------------------------------------------------------------
# Neuron view
# ----------------------------------------------------------------------------


def _vectors(x, name, head, layer):
    arr = _as_array(x, name)
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
    if not isinstance(query_index, Integral) or not -q.shape[0] <= query_index < q.shape[0]:
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

    def signed(ax, values, limit, yticklabels, numbers=annotate, fontsize=8 if d <= 6 else 7):
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


# ----------------------------------------------------------------------------
# The JavaScript of the interactive views (inlined in every output; no libraries)
# ----------------------------------------------------------------------------

_JS = r"""
var NS = "http://www.w3.org/2000/svg";
function el(tag, attrs, parent, svg) {
  var e = svg ? document.createElementNS(NS, tag) : document.createElement(tag);
  for (var a in attrs) { if (a === "text") e.textContent = attrs[a]; else e.setAttribute(a, attrs[a]); }
  if (parent) parent.appendChild(e);
  return e;
}
var VIRIDIS = [[68,1,84],[72,40,120],[62,74,137],[49,104,142],[38,130,142],[31,158,137],[53,183,121],[110,206,88],[181,222,43],[253,231,37]];
function viridis(t) {
  t = Math.max(0, Math.min(1, t)) * (VIRIDIS.length - 1);
  var i = Math.min(Math.floor(t), VIRIDIS.length - 2), f = t - i, a = VIRIDIS[i], b = VIRIDIS[i + 1];
  return "rgb(" + [0, 1, 2].map(function (c) { return Math.round(a[c] + f * (b[c] - a[c])); }).join(",") + ")";
}
function ink(hex) {  /* dark text on light head colours, white on dark ones: readable either way */
  var n = parseInt(hex.slice(1), 16);
  return 0.299 * (n >> 16 & 255) + 0.587 * (n >> 8 & 255) + 0.114 * (n & 255) > 140 ? "#222" : "#fff";
}
function textWidth(tokens) {
  var m = 0; tokens.forEach(function (t) { m = Math.max(m, t.length); }); return 12 + 7.5 * m;
}
/* Bipartite lines of the chosen heads of one layer: queries left, keys right. */
function drawHeads(box, qt, kt, heads, colors, weights, active) {
  box.innerHTML = "";
  var nq = qt.length, nk = kt.length, rowH = 22, top = 12, wq = textWidth(qt), wk = textWidth(kt), gap = 160;
  var svg = el("svg", {width: wq + gap + wk + 40, height: top + rowH * Math.max(nq, nk) + 4, "class": "cu-svg"}, box, true);
  var yq = function (i) { return top + rowH * i + rowH / 2; }, yk = function (j) { return top + rowH * j + rowH / 2; };
  var lines = el("g", {}, svg, true), labels = el("g", {}, svg, true);
  var nums = [];
  heads.forEach(function (h, hi) {
    if (!active[hi]) return;
    var w = weights[hi], off = (hi - (heads.length - 1) / 2) * Math.min(2, 12 / heads.length);
    for (var i = 0; i < nq; i++) for (var j = 0; j < nk; j++) {
      var v = w[i * nk + j] / 1000;
      if (v < 0.01) continue;
      el("line", {x1: wq, y1: yq(i) + off, x2: wq + gap, y2: yk(j) + off, stroke: colors[hi], "stroke-width": 2.5,
        "stroke-opacity": v, "class": "cu-line", "data-q": i, "data-k": j, "data-head": h}, lines, true);
    }
  });
  var locked = null;
  function focus(side, idx) {
    var all = lines.childNodes;
    for (var n = 0; n < all.length; n++) {
      var keep = idx === null || all[n].getAttribute(side === "q" ? "data-q" : "data-k") == idx;
      all[n].style.display = keep ? "" : "none";
    }
    svg.querySelectorAll(".cu-tok").forEach(function (t) {
      var on = idx !== null && t.getAttribute("data-side") === side && t.getAttribute("data-i") == idx;
      t.setAttribute("font-weight", on ? "bold" : "normal");
    });
    nums.forEach(function (t) { t.textContent = ""; });
    var shown = heads.filter(function (h, hi) { return active[hi]; });
    if (idx !== null && side === "q" && shown.length === 1) {  // one head: write its weights next to the keys
      var w = weights[heads.indexOf(shown[0])];
      for (var j = 0; j < nk; j++) nums[j].textContent = (w[idx * nk + j] / 1000).toFixed(2);
    }
  }
  function token(side, i, x, y, anchor, text) {
    var t = el("text", {x: x, y: y + 4, "text-anchor": anchor, "class": "cu-tok", "data-side": side, "data-i": i,
      style: "cursor:pointer", fill: "#222"}, labels, true);
    t.textContent = text;
    t.addEventListener("mouseenter", function () { if (locked === null) focus(side, i); });
    t.addEventListener("mouseleave", function () { if (locked === null) focus(side, null); });
    t.addEventListener("click", function () {
      var same = locked && locked[0] === side && locked[1] === i;
      locked = same ? null : [side, i];
      focus(side, same ? null : i);
    });
  }
  for (var i = 0; i < nq; i++) token("q", i, wq - 6, yq(i), "end", qt[i]);
  for (var j = 0; j < nk; j++) {
    token("k", j, wq + gap + 6, yk(j), "start", kt[j]);
    nums.push(el("text", {x: wq + gap + wk, y: yk(j) + 4, "text-anchor": "start", "font-size": 11, fill: "#555", "class": "cu-num"}, labels, true));
  }
  return svg;
}
function headView(live) {
  var layer = D.layer, active = D.heads.map(function () { return true; });
  var bar = el("div", {style: "margin:2px 0 6px 0"}, live);
  if (D.layers.length > 1) {
    el("span", {text: "Layer: "}, bar);
    var sel = el("select", {"class": "cu-layer"}, bar);
    D.layers.forEach(function (l, li) { var o = el("option", {value: li, text: String(l)}, sel); if (li === layer) o.selected = true; });
    sel.addEventListener("change", function () { layer = +sel.value; draw(); });
  }
  el("span", {text: " Heads: "}, bar);
  var boxes = D.heads.map(function (h, hi) {
    var b = el("span", {"class": "cu-head", "data-head": h, title: "head " + h + ": click to show/hide, double-click to show only it",
      style: "display:inline-block;min-width:18px;margin:0 2px;padding:0 3px;text-align:center;cursor:pointer;border-radius:3px;color:" + ink(D.colors[hi]) + ";background:" + D.colors[hi],
      text: String(h)}, bar);
    b.addEventListener("click", function () { active[hi] = !active[hi]; draw(); });
    b.addEventListener("dblclick", function () { active = active.map(function (x, k) { return k === hi; }); draw(); });
    return b;
  });
  el("div", {style: "color:#555;font-size:11px", text: "Hover a token to see only its lines; click it to keep them. Queries left, keys right; line opacity = weight."}, live);
  var box = el("div", {}, live);
  function draw() {
    boxes.forEach(function (b, hi) { b.style.opacity = active[hi] ? 1 : 0.3; });
    drawHeads(box, D.qt, D.kt, D.heads, D.colors, D.w[layer], active);
  }
  draw();
}
function modelView(live) {
  var nq = D.qt.length, nk = D.kt.length, size = Math.max(36, Math.min(72, Math.floor(760 / D.heads.length) - 8));
  var vmax = 1;  /* colours run from 0 to the largest weight shown (in thousandths), as in the static picture */
  D.w.forEach(function (l) { l.forEach(function (h) { h.forEach(function (v) { if (v > vmax) vmax = v; }); }); });
  el("div", {style: "color:#555;font-size:11px", text: "Rows: layers, columns: heads; each square is one head (rows: queries, columns: keys). Click a square to see its lines."}, live);
  var table = el("table", {"class": "cu-grid", style: "border-collapse:collapse"}, live);
  var head = el("tr", {}, table);
  el("td", {}, head);
  D.heads.forEach(function (h) { el("td", {text: "head " + h, style: "font-size:10px;text-align:center;padding:0"}, head); });
  var detail = el("div", {"class": "cu-detail", style: "margin-top:8px"}, live);
  var current = null;
  D.layers.forEach(function (l, li) {
    var row = el("tr", {}, table);
    el("td", {text: "layer " + l, style: "font-size:10px;padding:0 4px 0 0;white-space:nowrap"}, row);
    D.heads.forEach(function (h, hi) {
      var cell = el("td", {style: "padding:1px"}, row);
      var c = el("canvas", {width: size, height: size, title: "layer " + l + ", head " + h, "class": "cu-thumb",
        "data-layer": l, "data-head": h, style: "display:block;cursor:pointer;outline:2px solid transparent"}, cell);
      var ctx = c.getContext("2d"), w = D.w[li][hi];
      for (var i = 0; i < nq; i++) for (var j = 0; j < nk; j++) {
        ctx.fillStyle = viridis(w[i * nk + j] / vmax);
        ctx.fillRect(Math.floor(j * size / nk), Math.floor(i * size / nq), Math.ceil(size / nk), Math.ceil(size / nq));
      }
      c.addEventListener("mouseenter", function () { if (c !== current) c.style.outline = "2px solid #999"; });
      c.addEventListener("mouseleave", function () { if (c !== current) c.style.outline = "2px solid transparent"; });
      c.addEventListener("click", function () {
        if (current) current.style.outline = "2px solid transparent";
        current = c; c.style.outline = "2px solid #d55e00";
        detail.innerHTML = "";
        el("div", {text: "layer " + l + ", head " + h + ": hover a token to see only its lines", style: "font-weight:bold"}, detail);
        drawHeads(el("div", {}, detail), D.qt, D.kt, [h], [D.colors[hi]], [w], [true]);
      });
    });
  });
}
function init(root) {
  if (!root || root.getAttribute("data-cu-view") !== VIEW || root.getAttribute("data-cu-ready")) return;
  root.setAttribute("data-cu-ready", "1");
  var live = root.querySelector(".cu-live");
  (D.kind === "head" ? headView : modelView)(live);
  root.querySelector(".cu-fallback").style.display = "none";  // the script runs: show the live view
  live.style.display = "block";
}
var me = document.currentScript;
init(me && me.previousElementSibling);
var roots = document.querySelectorAll('[data-cu-view="' + VIEW + '"]');
for (var r = 0; r < roots.length; r++) init(roots[r]);
"""
