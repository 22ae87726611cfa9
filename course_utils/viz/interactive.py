"""Interactive, offline HTML views: ``head_view`` and ``model_view`` with a static PNG inside.

An ``AttentionView`` is self-contained HTML (the JavaScript of ``views/attention_views.js``
inlined, no network access) plus a PNG for places that run no JavaScript. Its bytes are
deterministic: weights rounded to 3 decimals, element ids a hash of the data, the PNG encoded here.
"""

import base64
import functools
import hashlib
import html
import json
import struct
import textwrap
import zlib
from pathlib import Path

import numpy as np

from course_utils.viz.colour import head_style
from course_utils.viz.figures import TICK_FONT, _head_view_figure, _model_view_figure
from course_utils.viz.inputs import _as_index, _select, _token_lists, normalize_attention

MAX_TOKENS = 64  # the head and model views show this many tokens unless asked for more (keeps outputs < 2 MB)
# the JavaScript stays in course_utils/views/, beside this package rather than inside it
JS_PATH = Path(__file__).parent.parent / "views" / "attention_views.js"


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
