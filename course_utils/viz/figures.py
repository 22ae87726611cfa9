"""Matplotlib figures: the heatmap, and the static pictures of the head view and the model view.

Heatmaps drop the per-cell numbers past ``ANNOTATE_MAX_TOKENS`` tokens and shrink their panels
so that every figure stays within ``MAX_FIGURE_INCHES``.
"""

import math
import textwrap

import numpy as np

from course_utils.viz.colour import HEATMAP_CMAP, head_style
from course_utils.viz.inputs import _as_index, _select, _token_lists, normalize_attention

ANNOTATE_MAX_TOKENS = 12  # heatmaps write a number in each cell up to this many tokens: more would not fit
MAX_FIGURE_INCHES = (16.0, 16.0)  # the largest heatmap figure, however many heads and tokens
TICK_FONT = 8  # the smallest text in a figure, in points


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
