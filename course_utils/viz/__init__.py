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

The modules, one concept each:

- ``colour``:       the head colours and the colour maps
- ``inputs``:       ``normalize_attention``, the one checked input format
- ``figures``:      ``heatmap`` and the matplotlib pictures of the head and model views
- ``interactive``:  ``head_view``, ``model_view``: offline HTML with a static PNG inside
- ``neuron``:       ``neuron_steps`` and ``neuron_view``
"""

from course_utils.viz.colour import DIVERGING_CMAP, HEAD_COLORS, HEATMAP_CMAP, head_style
from course_utils.viz.figures import ANNOTATE_MAX_TOKENS, MAX_FIGURE_INCHES, TICK_FONT, heatmap
from course_utils.viz.inputs import normalize_attention
from course_utils.viz.interactive import JS_PATH, MAX_TOKENS, STATIC_CAPTION, AttentionView, head_view, model_view
from course_utils.viz.neuron import neuron_steps, neuron_view

__all__ = [
    "normalize_attention",
    "heatmap",
    "head_view",
    "model_view",
    "neuron_view",
    "neuron_steps",
    "AttentionView",
    "head_style",
    "HEAD_COLORS",
    "HEATMAP_CMAP",
    "DIVERGING_CMAP",
    "ANNOTATE_MAX_TOKENS",
    "MAX_FIGURE_INCHES",
    "MAX_TOKENS",
    "TICK_FONT",
    "JS_PATH",
    "STATIC_CAPTION",
]
