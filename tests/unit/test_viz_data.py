"""What each view draws, read back from the figure or the HTML: nbval compares no pictures.

Every test uses an ASYMMETRIC input (query i -> key j differs from query j -> key i), so a
picture drawn transposed, or with its labels shifted, fails. Also: head colours under
simulated colour-vision deficiencies, long inputs (time and size), and the JavaScript file.
"""

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from course_utils import viz  # noqa: E402

TOKENS = ["Orange", "is", "my", "favorite", "fruit"]


def random_weights(*shape, seed=0, dtype=np.float64):
    x = 2 * np.random.default_rng(seed).standard_normal(shape, dtype=dtype)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def asymmetric(n=5):
    """Rows sum to 1; query 0 -> key 2 is 0.70, query 2 -> key 0 is 0."""
    w = np.full((n, n), 0.0)
    for i in range(n):
        w[i, (i + 2) % n] = 0.70
        w[i, (i + 1) % n] = 0.25
        w[i, i] = 0.05
    assert not np.allclose(w, w.T)
    return w


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def panels(fig):
    return [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]


def tick_tokens(ax, axis):
    """{tick position: label text} of an axis, as the reader sees it."""
    ticks = ax.get_xticks() if axis == "x" else ax.get_yticks()
    labels = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    return {round(float(p), 3): t.get_text() for p, t in zip(ticks, labels, strict=True)}


# ---------------------------------------------------------------- heatmap


def heatmap_cells(ax):
    """{(query label, key label): value} read from the QuadMesh: cell centres -> the tick labels there."""
    mesh = ax.collections[0]
    corners = mesh.get_coordinates()  # [rows + 1, cols + 1, (x, y)]
    centres = (corners[:-1, :-1] + corners[1:, 1:]) / 2
    values = np.asarray(mesh.get_array()).reshape(centres.shape[:2])
    xs, ys = tick_tokens(ax, "x"), tick_tokens(ax, "y")
    cells = {}
    for (r, c), v in np.ndenumerate(values):
        x, y = (round(float(u), 3) for u in centres[r, c])
        cells[(ys[y], xs[x])] = float(v)
    return cells


def test_heatmap_cells_are_the_weights_of_the_query_and_key_on_the_axes():
    w = asymmetric()
    fig = viz.heatmap(w, TOKENS)
    (ax,) = panels(fig)
    cells = heatmap_cells(ax)
    assert cells == {(TOKENS[i], TOKENS[j]): pytest.approx(w[i, j]) for i in range(5) for j in range(5)}
    assert cells[("Orange", "my")] == pytest.approx(0.70) and cells[("my", "Orange")] == 0
    lo, hi = ax.get_ylim()
    assert lo > hi, "query 0 is the top row, like the printed matrix"
    # the number written in each cell is that cell's weight
    xs, ys = tick_tokens(ax, "x"), tick_tokens(ax, "y")
    for text in ax.texts:
        x, y = (round(float(u), 3) for u in text.get_position())
        i, j = TOKENS.index(ys[y]), TOKENS.index(xs[x])
        assert text.get_text() == f"{w[i, j]:.2f}"
    assert len(ax.texts) == 25


def test_heatmap_cross_attention_rows_are_queries_columns_are_keys():
    w = np.array([[0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.1, 0.1], [0.0, 0.0, 1.0, 0.0]])
    queries, keys = ["q0", "q1", "q2"], ["k0", "k1", "k2", "k3"]
    cells = heatmap_cells(panels(viz.heatmap(w, (queries, keys)))[0])
    assert cells == {(queries[i], keys[j]): pytest.approx(w[i, j]) for i in range(3) for j in range(4)}


def test_heatmap_panels_show_the_chosen_layer_and_heads():
    w = random_weights(3, 4, 5, 5)
    fig = viz.heatmap(w, TOKENS, layer=2, heads=[3, 1])
    shown = panels(fig)
    assert [ax.get_title() for ax in shown] == ["layer 2, head 3", "layer 2, head 1"]
    for ax, head in zip(shown, [3, 1], strict=True):
        values = np.asarray(ax.collections[0].get_array()).reshape(5, 5)
        np.testing.assert_allclose(values, w[2, head])


# ---------------------------------------------------------------- head view


def head_view_lines(ax):
    """{(query label, key label): opacity} of a static head-view panel, from the line end points."""
    left = {round(t.get_position()[1], 6): t.get_text() for t in ax.texts if t.get_position()[0] < 0}
    right = {round(t.get_position()[1], 6): t.get_text() for t in ax.texts if t.get_position()[0] > 1}
    (collection,) = ax.collections
    lines = {}
    for (start, end), colour in zip(collection.get_segments(), collection.get_colors(), strict=True):
        assert start[0] == 0 and end[0] == 1, "lines run from the query column (x=0) to the key column (x=1)"
        lines[(left[round(start[1], 6)], right[round(end[1], 6)])] = float(colour[3])
    return lines


def test_head_view_lines_go_from_query_row_i_to_key_row_j_with_opacity_w():
    w = asymmetric()
    fig = viz.head_view(np.stack([w, w.T / w.T.sum(-1, keepdims=True)]), TOKENS, heads=[0], interactive=False)
    lines = head_view_lines(panels(fig)[0])
    expected = {(TOKENS[i], TOKENS[j]): pytest.approx(w[i, j]) for i in range(5) for j in range(5) if w[i, j] >= 0.02}
    assert lines == expected
    assert lines[("Orange", "my")] == pytest.approx(0.70) and ("my", "Orange") not in lines  # not transposed


def test_head_view_cross_attention_lines():
    w = np.array([[0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.1, 0.1], [0.0, 0.0, 1.0, 0.0]])
    queries, keys = ["la", "voiture", "bleue"], ["the", "blue", "car", "."]
    lines = head_view_lines(panels(viz.head_view(w, (queries, keys), interactive=False))[0])
    assert lines == {(queries[i], keys[j]): pytest.approx(w[i, j]) for i in range(3) for j in range(4) if w[i, j] > 0}


def test_head_view_panels_follow_the_head_colours_and_styles():
    w = random_weights(1, 14, 4, 4)
    fig = viz.head_view(w, ["a", "b", "c", "d"], heads=[1, 13], interactive=False)
    one, thirteen = panels(fig)
    assert one.get_title() == "head 1" and thirteen.get_title() == "head 13"
    assert matplotlib.colors.to_hex(one.collections[0].get_colors()[0][:3]) == viz.HEAD_COLORS[1]
    assert matplotlib.colors.to_hex(thirteen.collections[0].get_colors()[0][:3]) == viz.HEAD_COLORS[1]
    assert one.collections[0].get_linestyle()[0][1] is None  # solid
    assert thirteen.collections[0].get_linestyle()[0][1] is not None  # dashed: the palette's second round
    assert viz.head_style(13) == (viz.HEAD_COLORS[1], True) and viz.head_style(25) == (viz.HEAD_COLORS[1], False)


# ---------------------------------------------------------------- model view


def test_model_view_each_square_shows_its_layer_and_head():
    w = random_weights(3, 4, 5, 5)
    w[2, 3] = asymmetric()
    fig = viz.model_view(w, TOKENS, layers=[2, 0], heads=[3, 1], interactive=False)
    grid = {}
    for ax in fig.axes:
        if ax.images:
            spec = ax.get_subplotspec()
            grid[(spec.rowspan.start, spec.colspan.start)] = ax
    assert sorted(grid) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    heads = {c: int(grid[(0, c)].get_title().removeprefix("head ")) for c in range(2)}
    layers = {r: int(grid[(r, 0)].get_ylabel().removeprefix("layer ")) for r in range(2)}
    assert heads == {0: 3, 1: 1} and layers == {0: 2, 1: 0}
    for (r, c), ax in grid.items():
        image = ax.images[0]
        np.testing.assert_allclose(image.get_array(), w[layers[r], heads[c]])
        left, right, bottom, top = image.get_extent()
        assert top < bottom and left < right, "row 0 (the first query) is drawn at the top"
    # the outer squares name the tokens of their rows (queries) and columns (keys)
    assert tick_tokens(grid[(1, 0)], "y") == {float(i): t for i, t in enumerate(TOKENS)}
    assert tick_tokens(grid[(1, 0)], "x") == {float(j): t for j, t in enumerate(TOKENS)}


# ---------------------------------------------------------------- neuron view


def test_neuron_view_numbers_are_the_steps():
    q = torch.tensor([[1.0, -2.0, 0.5], [0.0, 1.0, 1.0], [2.0, 0.0, -1.0], [0.3, 0.3, 0.3]])
    k = torch.tensor([[0.5, 0.5, -1.0], [-1.0, 2.0, 0.0], [1.0, 0.0, 1.0], [0.0, -0.5, 2.0]])
    tokens = ["a", "b", "c", "d"]
    fig = viz.neuron_view(q, k, tokens, query_index=2)
    by_title = {ax.get_title(): ax for ax in fig.axes}
    expected_dot = (k @ q[2]).numpy()  # the dot products, computed here rather than by the module
    texts = {title: [t.get_text() for t in ax.texts] for title, ax in by_title.items()}
    assert texts["q·k\n(row sum)"] == [f"{x:.2f}" for x in expected_dot]
    assert texts["÷ √3"] == [f"{x:.2f}" for x in expected_dot / np.sqrt(3)]
    assert texts["softmax\n(weights)"] == [f"{x:.2f}" for x in torch.softmax(k @ q[2] / np.sqrt(3), 0).tolist()]
    assert texts["key vectors k"] == [f"{x:.2f}" for x in k.flatten().tolist()]
    assert texts["q * k (elementwise)"] == [f"{x:.2f}" for x in (k * q[2]).flatten().tolist()]
    assert texts["query vector q of 'c'"] == [f"{x:.2f}" for x in q[2].tolist()]


# ---------------------------------------------------------------- the HTML the JavaScript reads


def payload(view):
    match = re.search(r"var D=(\{.*?\});var VIEW", view.html)
    return json.loads(match.group(1).replace("<\\/", "</"))


def test_interactive_payload_is_row_major_queries_by_keys():
    w = np.array([[0.1, 0.2, 0.7], [0.6, 0.3, 0.1]])  # 2 queries, 3 keys
    data = payload(viz.head_view(w, (["x", "y"], ["a", "b", "c"])))
    assert data["qt"] == ["x", "y"] and data["kt"] == ["a", "b", "c"]
    assert data["w"] == [[[100, 200, 700, 600, 300, 100]]]  # w[layer][head][i * n_keys + j], thousandths
    assert data["colors"] == [viz.HEAD_COLORS[0]] and data["dashed"] == [False]
    js = viz.JS_PATH.read_text()
    assert "w[i * nk + j]" in js  # ... and the script reads it that way (the browser test checks the lines)


def test_interactive_model_view_payload_of_an_asymmetric_model():
    w = random_weights(2, 3, 5, 5)
    w[1, 2] = asymmetric()
    data = payload(viz.model_view(w, TOKENS, layers=[1], heads=[2, 0]))
    assert data["layers"] == [1] and data["heads"] == [2, 0]
    assert data["w"][0][0][0 * 5 + 2] == 700 and data["w"][0][0][2 * 5 + 0] == 0
    got = np.array(data["w"]).reshape(1, 2, 5, 5) / 1000
    np.testing.assert_allclose(got, np.round(w[[1]][:, [2, 0]], 3))


# ---------------------------------------------------------------- the JavaScript in its own file


def test_the_views_javascript_lives_in_its_own_file_and_is_inlined():
    js = viz.JS_PATH.read_text(encoding="utf-8")
    assert viz.JS_PATH.name == "attention_views.js" and "function drawHeads" in js
    modules = sorted(Path(viz.__file__).parent.glob("*.py"))  # every module of the viz package
    assert len(modules) > 1
    for module in modules:
        assert "function drawHeads" not in module.read_text(encoding="utf-8"), module.name
    view = viz.model_view(random_weights(1, 2, 3, 3), ["a", "b", "c"])
    assert js in view.html  # inlined: the output needs no file and no network


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed (optional syntax check)")
def test_the_views_javascript_parses():
    result = subprocess.run(["node", "--check", str(viz.JS_PATH)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr


# ---------------------------------------------------------------- head colours under colour-vision deficiencies

# Machado, Oliveira and Fernandes (2009), severity 1.0, applied to linear RGB
MACHADO = {
    "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]],
    "deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]],
    "tritanopia": [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.303900]],
}
SRGB_TO_XYZ = np.array([[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750], [0.0193339, 0.1191920, 0.9503041]])  # fmt: skip
MIN_DELTA_E = 20  # CIE76; about 2.3 is a just-noticeable difference, 20+ reads as "another colour" at a glance


def linear_rgb(hex_colours):
    srgb = np.array([[int(h[i : i + 2], 16) / 255 for i in (1, 3, 5)] for h in hex_colours])
    return np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)


def lab(linear):
    """Linear sRGB -> CIE L*a*b* (D65 white)."""
    xyz = linear @ SRGB_TO_XYZ.T / SRGB_TO_XYZ.sum(axis=1)
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.stack([116 * f[:, 1] - 16, 500 * (f[:, 0] - f[:, 1]), 200 * (f[:, 1] - f[:, 2])], axis=1)


def seen_as(colours, vision):
    linear = linear_rgb(colours)
    if vision != "normal":
        linear = np.clip(linear @ np.array(MACHADO[vision]).T, 0, 1)
    return lab(linear)


def min_delta_e(colours, vision):
    points = seen_as(colours, vision)
    distances = np.linalg.norm(points[:, None] - points[None], axis=-1)
    return distances[~np.eye(len(colours), dtype=bool)].min()


def test_the_colour_simulation_itself():
    assert seen_as(["#ffffff"], "normal")[0] == pytest.approx([100, 0, 0], abs=0.01)
    # red and green, far apart for normal vision, look alike without the red or green cones ...
    assert min_delta_e(["#ff0000", "#00b000"], "normal") > 100
    assert min_delta_e(["#ff0000", "#00b000"], "deuteranopia") < min_delta_e(["#ff0000", "#00b000"], "normal") / 2
    # ... and the old palette's orange and olive became the same colour under deuteranopia
    assert min_delta_e(["#de8f05", "#c4b200"], "deuteranopia") < 5


@pytest.mark.parametrize("vision", ["normal", "protanopia", "deuteranopia", "tritanopia"])
@pytest.mark.parametrize("n_heads", [2, 4, 6, 12])
def test_head_colours_stay_apart_under_colour_vision_deficiencies(vision, n_heads):
    colours = [viz.head_style(h)[0] for h in range(n_heads)]
    assert min_delta_e(colours, vision) >= MIN_DELTA_E


# ---------------------------------------------------------------- long inputs: quick and small


def test_heatmap_of_twelve_heads_and_a_hundred_tokens_is_quick_and_bounded():
    w = random_weights(12, 100, 100)
    tokens = [f"tok{i}" for i in range(100)]
    start = time.perf_counter()
    fig = viz.heatmap(w, tokens)
    fig.canvas.draw()
    seconds = time.perf_counter() - start
    assert seconds < 15, f"{seconds:.1f} s (about 3 s on an idle 2-core machine; it took ~60-100 s before)"
    width, height = fig.get_size_inches()
    assert width <= viz.MAX_FIGURE_INCHES[0] and height <= viz.MAX_FIGURE_INCHES[1]
    shown = panels(fig)
    assert len(shown) == 12 and all(len(ax.texts) == 0 for ax in shown)  # no numbers in 10^4 cells
    labels = [t for t in shown[0].get_yticklabels() if t.get_text()]
    assert 5 <= len(labels) < 100 and labels[0].get_text() == "tok0"  # thinned out


def test_small_heatmaps_keep_their_numbers():
    for n in (5, viz.ANNOTATE_MAX_TOKENS):
        assert len(panels(viz.heatmap(random_weights(n, n), None))[0].texts) == n * n
    assert len(panels(viz.heatmap(random_weights(13, 13), None))[0].texts) == 0


def test_model_view_of_a_long_text_is_cut_to_max_tokens_and_says_so():
    w = random_weights(6, 12, 512, 512, dtype=np.float32)  # float32 from the start: half the time
    tokens = [f"t{i}" for i in range(512)]
    start = time.perf_counter()
    view = viz.model_view(w, tokens)
    seconds = time.perf_counter() - start
    assert len(view.html) < 2_000_000, f"{len(view.html) / 1e6:.1f} MB (38.6 MB before)"
    assert seconds < 20, f"{seconds:.1f} s"
    data = payload(view)
    assert data["qt"] == tokens[: viz.MAX_TOKENS] and len(data["w"][0][0]) == viz.MAX_TOKENS**2
    assert "first 64 of 512 tokens" in view.note and "max_tokens=512" in view.note
    assert view.note in view.description and "first 64 of 512 tokens" in view.html
    head = viz.head_view(w, tokens)
    assert len(head.html) < 2_000_000 and "max_tokens=512" in head.note
    fig = viz.head_view(w, tokens, interactive=False)  # 12 panels of 64 tokens
    assert fig.get_size_inches()[1] <= viz.MAX_FIGURE_INCHES[1]
    left_labels = [t.get_text() for t in panels(fig)[0].texts if t.get_position()[0] < 0]
    step = int(left_labels[1].removeprefix("t"))  # every step-th token is named, evenly
    assert 8 <= len(left_labels) < 64 and left_labels == [f"t{i}" for i in range(0, 64, step)]


def test_max_tokens_asks_for_more_or_all():
    w = random_weights(1, 2, 20, 20)
    tokens = [f"t{i}" for i in range(20)]
    assert len(payload(viz.model_view(w, tokens, max_tokens=8))["qt"]) == 8
    everything = viz.model_view(w, tokens, max_tokens=None)
    assert len(payload(everything)["qt"]) == 20 and everything.note == ""
    assert viz.head_view(w, tokens).note == ""  # 20 tokens: under the default, nothing cut
    fig = viz.head_view(w, tokens, max_tokens=10, interactive=False)
    assert "first 10 of 20 tokens" in " ".join(fig.get_supxlabel().split())
    cross = viz.model_view(random_weights(1, 1, 3, 30), (["a", "b", "c"], [f"k{i}" for i in range(30)]), max_tokens=10)
    assert "the first 3 of 3 query and 10 of 30 key tokens" in cross.note
    with pytest.raises(ValueError, match="max_tokens must be at least 1"):
        viz.model_view(w, tokens, max_tokens=0)
    with pytest.raises(TypeError, match="max_tokens must be a whole number"):
        viz.model_view(w, tokens, max_tokens=8.5)


# ---------------------------------------------------------------- readable text in the static pictures


def visible_texts(fig):
    fig.canvas.draw()
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


@pytest.mark.parametrize(
    "draw",
    [
        lambda w, t: viz.heatmap(w[0], t),
        lambda w, t: viz.model_view(w, t, interactive=False),
        lambda w, t: viz.head_view(w, t, interactive=False),
    ],
    ids=["heatmap", "model_view", "head_view"],
)
@pytest.mark.parametrize("n", [5, 12, 30])
def test_static_text_is_at_least_8_points_and_tick_labels_do_not_overlap(draw, n):
    w = random_weights(2, 3, n, n)
    fig = draw(w, [f"word{i}" for i in range(n)])
    texts = visible_texts(fig)
    small = sorted({t.get_fontsize() for t in texts if t.get_fontsize() < 8})
    assert small == [], f"text smaller than 8 points: {small}"
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        for labels in (ax.get_xticklabels(), ax.get_yticklabels()):
            boxes = [t.get_window_extent(renderer) for t in labels if t.get_visible() and t.get_text()]
            for a, b in zip(boxes, boxes[1:], strict=False):
                assert not a.overlaps(b), f"overlapping tick labels in {ax.get_title()!r}"


# ---------------------------------------------------------------- inputs


def test_tokens_none_labels_the_positions():
    w = asymmetric()
    cells = heatmap_cells(panels(viz.heatmap(w))[0])
    assert cells[("0", "2")] == pytest.approx(0.70)
    assert payload(viz.head_view(w))["qt"] == ["0", "1", "2", "3", "4"]
    assert payload(viz.model_view(w, None))["kt"] == ["0", "1", "2", "3", "4"]


def test_layer_must_be_a_whole_number_numpy_and_torch_integers_welcome():
    w = random_weights(3, 2, 5, 5)
    with pytest.raises(TypeError, match=r"layer must be a whole number such as 1, got 1\.0"):
        viz.heatmap(w, TOKENS, layer=1.0)
    with pytest.raises(TypeError, match="layer must be a whole number"):
        viz.head_view(w, TOKENS, layer=[0, 1])
    with pytest.raises(TypeError, match="head must be a whole number"):
        viz.heatmap(w, TOKENS, heads=[0.5])
    for layer in (np.int64(1), torch.tensor(1), 1):
        assert panels(viz.heatmap(w, TOKENS, layer=layer))[0].get_title() == "layer 1, head 0"
    assert payload(viz.head_view(w, TOKENS, layer=np.int32(2)))["layer"] == 2
    assert payload(viz.model_view(w, TOKENS, layers=np.array([2, 0]), heads=np.int64(1)))["layers"] == [2, 0]
    batch = random_weights(3, 2, 5, 5)  # [batch, heads, q, k]
    np.testing.assert_allclose(viz.normalize_attention(batch, batch_index=np.int64(2))[0], batch[2])
    steps = viz.neuron_steps(torch.randn(2, 5, 4), torch.randn(2, 5, 4), np.int64(3), head=np.int64(1))
    assert steps["weights"].shape == (5,)
    with pytest.raises(TypeError, match="query_index must be a whole number"):
        viz.neuron_steps(torch.randn(5, 4), torch.randn(5, 4), 3.0)
