"""The neuron view: how one query token's attention weights come out of q and k, step by step.

``neuron_steps`` computes the numbers (q * k, q·k, the scaling, the mask, the softmax);
``neuron_view`` draws them in one figure.
"""

import math

import numpy as np

from course_utils.viz.colour import DIVERGING_CMAP, HEATMAP_CMAP
from course_utils.viz.figures import TICK_FONT, _new_figure, _tick_font
from course_utils.viz.inputs import _as_array, _as_index, _token_lists


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
