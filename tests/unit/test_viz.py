"""course_utils.viz: one checked input format, figure contents, neuron-view arithmetic, offline HTML."""

import base64
import io
import json
import math
import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from PIL import Image  # noqa: E402

from course_utils import viz  # noqa: E402
from course_utils.attention import MultiHeadAttention, causal_mask  # noqa: E402

TOKENS = ["Orange", "is", "my", "favorite", "fruit"]


def weights(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(2 * torch.randn(*shape, generator=g), dim=-1)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


# ---------------------------------------------------------------- input format


def test_accepted_shapes_become_layers_heads_q_k():
    w = weights(2, 3, 5, 5)
    assert viz.normalize_attention(w[0, 0]).shape == (1, 1, 5, 5)
    assert viz.normalize_attention(w[0]).shape == (1, 3, 5, 5)
    assert viz.normalize_attention(w).shape == (2, 3, 5, 5)
    np.testing.assert_allclose(viz.normalize_attention(w), w.numpy(), atol=1e-7)
    np.testing.assert_allclose(viz.normalize_attention(w[1, 2]), w[1, 2].numpy()[None, None], atol=1e-7)


def test_torch_and_numpy_give_the_same_array():
    w = weights(3, 4, 4)
    np.testing.assert_array_equal(viz.normalize_attention(w), viz.normalize_attention(w.numpy().astype(np.float64)))
    # a tensor that needs grad (straight out of a model) is fine too
    grad = w.clone().requires_grad_(True)
    assert viz.normalize_attention(grad).dtype == np.float64


def test_multi_head_attention_weights_with_batch_index():
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(3, 5, 8)
    mha(x, x, x)
    arr = viz.normalize_attention(mha.attention_weights, TOKENS, batch_index=1)
    assert arr.shape == (1, 2, 5, 5)
    np.testing.assert_allclose(arr[0], mha.attention_weights[1].numpy(), atol=1e-7)


def test_encoder_attentions_five_dims():
    w = weights(2, 3, 4, 5, 5)  # [layers, batch, heads, q, k]
    arr = viz.normalize_attention(w, batch_index=2)
    np.testing.assert_allclose(arr, w[:, 2].numpy(), atol=1e-7)
    with pytest.raises(ValueError, match="batch of 3 sequences.*batch_index=0..2"):
        viz.normalize_attention(w)


def test_bertviz_tuple_from_a_real_hugging_face_model():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=30, hidden_size=16, num_hidden_layers=3, num_attention_heads=4, intermediate_size=32
    )
    torch.manual_seed(0)
    model = transformers.BertModel(config, add_pooling_layer=False).eval()
    model.set_attn_implementation("eager")
    ids = torch.tensor([[1, 5, 7, 9, 2], [1, 4, 4, 8, 2]])
    with torch.no_grad():
        attentions = model(ids, output_attentions=True).attentions
    assert isinstance(attentions, tuple) and attentions[0].shape == (2, 4, 5, 5)  # the format we claim to read
    arr = viz.normalize_attention(attentions, TOKENS, batch_index=1)
    assert arr.shape == (3, 4, 5, 5)
    np.testing.assert_allclose(arr, torch.stack(attentions)[:, 1].numpy(), atol=1e-7)
    with pytest.raises(ValueError, match="batch of 2 sequences.*pass batch_index"):
        viz.normalize_attention(attentions, TOKENS)
    one = tuple(a[:1] for a in attentions)  # batch of one: no index needed
    assert viz.normalize_attention(one).shape == (3, 4, 5, 5)


def test_error_token_count():
    with pytest.raises(
        ValueError, match=r"3 tokens were given but the attention has 5 positions \(its shape ends in \[5, 5\]"
    ):
        viz.normalize_attention(weights(5, 5), TOKENS[:3])
    with pytest.raises(ValueError, match="2 key tokens were given but the attention has 5 key positions"):
        viz.normalize_attention(weights(3, 5), (["a", "b", "c"], ["d", "e"]))
    with pytest.raises(ValueError, match="one token per position"):
        viz.heatmap(weights(2, 5, 5), TOKENS + ["!"])


def test_error_rows_do_not_sum_to_one():
    scores = torch.randn(5, 5).abs()
    with pytest.raises(ValueError, match="must sum to 1.*query row 0 sums to"):
        viz.normalize_attention(scores)
    wrong_axis = torch.softmax(torch.randn(2, 5, 5), dim=-2)  # columns sum to 1
    with pytest.raises(ValueError, match=r"softmax taken over the queries \(dim=-2\)"):
        viz.normalize_attention(wrong_axis)
    with pytest.raises(ValueError, match="cannot be negative.*scores"):
        viz.normalize_attention(torch.randn(5, 5))
    nan = weights(5, 5)
    nan[1, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        viz.normalize_attention(nan)


def test_fully_masked_rows_are_allowed():
    w = weights(4, 4)
    w[2] = 0.0  # the course's convention for a query that may attend to nothing
    assert viz.normalize_attention(w).shape == (1, 1, 4, 4)


def test_error_batch_without_index_and_other_bad_input():
    with pytest.raises(ValueError, match="batch of 2 sequences"):
        viz.normalize_attention((weights(2, 2, 5, 5), weights(2, 2, 5, 5, seed=1)))
    with pytest.raises(ValueError, match="out of range"):
        viz.normalize_attention(weights(2, 2, 5, 5), batch_index=2)
    with pytest.raises(ValueError, match="batch_index is for inputs with a batch axis"):
        viz.normalize_attention(weights(2, 5, 5), batch_index=0)
    with pytest.raises(ValueError, match="got shape"):
        viz.normalize_attention(weights(1, 1, 1, 1, 5, 5))
    with pytest.raises(ValueError, match="same shape"):
        viz.normalize_attention((weights(2, 5, 5), weights(3, 5, 5)))
    with pytest.raises(TypeError, match="list of strings"):
        viz.normalize_attention(weights(5, 5), "Orange is my favorite fruit")
    with pytest.raises(TypeError, match="torch tensor or a numpy array"):
        viz.normalize_attention("not numbers")


def test_cross_attention_needs_a_token_pair():
    w = weights(2, 3, 5)  # 3 queries, 5 keys
    with pytest.raises(ValueError, match="3 queries but 5 keys.*tokens=\\(query_tokens, key_tokens\\)"):
        viz.heatmap(w, TOKENS)
    fig = viz.heatmap(w, (["a", "b", "c"], TOKENS))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert [t.get_text() for t in ax.get_xticklabels()] == TOKENS


def test_layer_and_head_out_of_range():
    w = weights(2, 3, 5, 5)
    with pytest.raises(ValueError, match="head 3 does not exist: the attention has 3 heads"):
        viz.heatmap(w, TOKENS, heads=[0, 3])
    with pytest.raises(ValueError, match="layer 2 does not exist"):
        viz.head_view(w, TOKENS, layer=2)
    with pytest.raises(ValueError, match="layer 5 does not exist"):
        viz.model_view(w, TOKENS, layers=[5])


# ---------------------------------------------------------------- figures


def test_heatmap_one_head_tokens_numbers_colour_bar():
    w = weights(5, 5)
    fig = viz.heatmap(w, TOKENS, title="Orange")
    ax, cbar = fig.axes  # the heatmap and its colour bar
    assert cbar.get_label() == "<colorbar>"
    assert [t.get_text() for t in ax.get_xticklabels()] == TOKENS
    assert [t.get_text() for t in ax.get_yticklabels()] == TOKENS
    texts = [t.get_text() for t in ax.texts]
    assert texts == [f"{v:.2f}" for v in w.flatten().tolist()]  # row by row, one number per cell
    assert fig._suptitle.get_text() == "Orange"
    assert "viridis" in ax.collections[0].get_cmap().name


def test_heatmap_several_heads_shared_and_per_head_scale():
    w = weights(4, 5, 5)
    shared = viz.heatmap(w, TOKENS)
    panels = [ax for ax in shared.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]
    assert len(panels) == 4 and len(shared.axes) == 5  # 4 heads + 1 shared colour bar
    assert [ax.get_title() for ax in panels] == [f"head {h}" for h in range(4)]
    for ax in panels:  # one scale for all: 0 .. the largest weight shown
        assert ax.collections[0].get_clim() == (0.0, pytest.approx(float(w.max())))
    per_head = viz.heatmap(w, TOKENS, heads=[1, 3], shared_scale=False)
    panels = [ax for ax in per_head.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]
    assert len(panels) == 2 and len(per_head.axes) == 4  # each head has its own colour bar
    assert [ax.collections[0].get_clim() for ax in panels] == [
        (pytest.approx(float(w[h].min())), pytest.approx(float(w[h].max()))) for h in (1, 3)
    ]
    np.testing.assert_allclose(panels[1].collections[0].get_array().reshape(5, 5), w[3].numpy(), atol=1e-7)


def test_heatmap_without_numbers():
    fig = viz.heatmap(weights(5, 5), TOKENS, annotate=False)
    assert len(fig.axes[0].texts) == 0


def test_static_head_view_lines_follow_the_weights():
    w = weights(2, 3, 5, 5)
    fig = viz.head_view(w, TOKENS, layer=1, interactive=False)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["head 0", "head 1", "head 2"]
    for head, ax in enumerate(panels):
        (lines,) = ax.collections
        alphas = sorted(c[3] for c in lines.get_colors())
        expected = sorted(v for v in w[1, head].flatten().tolist() if v >= 0.02)  # fainter lines are left out
        np.testing.assert_allclose(alphas, expected, atol=1e-6)
        assert [t.get_text() for t in ax.texts] == TOKENS + TOKENS  # queries left, keys right


@pytest.mark.parametrize("heads", [[3], [0, 1], None], ids=["one head", "two heads", "all heads"])
def test_head_view_title_fits_in_the_figure(heads):
    w = weights(2, 6, 5, 5)
    fig = viz.head_view(w, TOKENS, layer=1, heads=heads, interactive=False)
    fig.canvas.draw()
    title = fig.get_suptitle()
    assert " ".join(title.split()) == "layer 1: queries (left) attend to keys (right); line opacity = weight"
    box = fig._suptitle.get_window_extent()
    width, height = fig.bbox.width, fig.bbox.height
    assert 0 <= box.x0 and box.x1 <= width and box.y1 <= height, (box, width, height)


@pytest.mark.parametrize("heads", [[2], None], ids=["one head", "all heads"])
def test_model_view_title_fits_in_the_figure(heads):
    fig = viz.model_view(weights(1, 4, 5, 5), TOKENS, heads=heads, interactive=False)
    fig.canvas.draw()
    assert " ".join(fig.get_suptitle().split()) == "model view: one square per head (rows: queries, columns: keys)"
    box = fig._suptitle.get_window_extent()
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height, (box, fig.bbox)


def _relative_luminance(hex_colour):
    channels = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def test_head_colours_are_distinct_and_visible_on_white():
    assert len(set(viz.HEAD_COLORS)) == len(viz.HEAD_COLORS) == 12
    for colour in viz.HEAD_COLORS:
        contrast = 1.05 / (_relative_luminance(colour) + 0.05)  # WCAG contrast ratio against white
        assert contrast >= 2.0, f"{colour} is too pale for thin lines on white (contrast {contrast:.2f})"


def test_static_model_view_grid():
    w = weights(3, 4, 5, 5)
    fig = viz.model_view(w, TOKENS, interactive=False)
    images = [ax for ax in fig.axes if ax.images]
    assert len(images) == 12 and len(fig.axes) == 13  # 3 x 4 heads and a colour bar
    np.testing.assert_allclose(images[4 * 2 + 1].images[0].get_array(), w[2, 1].numpy(), atol=1e-7)
    assert images[0].get_title() == "head 0" and images[4].get_ylabel() == "layer 1"
    sub = viz.model_view(w, TOKENS, layers=[2], heads=[0, 3], interactive=False)
    assert len([ax for ax in sub.axes if ax.images]) == 2


# ---------------------------------------------------------------- neuron view


def test_neuron_steps_match_pytorch_attention():
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(2, 3, 6, 8, generator=g), torch.randn(2, 3, 6, 8, generator=g)  # [layers, heads, seq, d]
    v = torch.eye(6).expand(2, 3, 6, 6)
    for mask in (None, causal_mask(6)):
        reference = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # with v = I, output = weights
        for layer, head, i in ((0, 0, 0), (1, 2, 4), (1, 1, 5)):
            s = viz.neuron_steps(q, k, i, head=head, layer=layer, mask=mask)
            qi, kk = q[layer, head, i].double(), k[layer, head].double()
            np.testing.assert_allclose(s["product"].sum(axis=1), s["dot"])  # q*k summed = q.k
            np.testing.assert_allclose(s["dot"], (kk @ qi).numpy(), atol=1e-10)
            np.testing.assert_allclose(s["scaled"], (kk @ qi).numpy() / math.sqrt(8), atol=1e-10)
            np.testing.assert_allclose(s["weights"], reference[layer, head, i].numpy(), atol=1e-6)
            assert s["weights"].sum() == pytest.approx(1.0)


def test_neuron_view_shows_the_same_numbers():
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(5, 4, generator=g), torch.randn(5, 4, generator=g)
    fig = viz.neuron_view(q, k, TOKENS, query_index=3, mask=causal_mask(5))
    s = viz.neuron_steps(q, k, 3, mask=causal_mask(5))
    by_title = {ax.get_title(): ax for ax in fig.axes}
    assert set(by_title) >= {"key vectors k", "q * k (elementwise)", "q·k\n(row sum)", "÷ √4", "may\nattend?"}
    assert [t.get_text() for t in by_title["softmax\n(weights)"].texts] == [f"{x:.2f}" for x in s["weights"]]
    assert [t.get_text() for t in by_title["may\nattend?"].texts] == ["yes"] * 4 + ["no"]
    assert [t.get_text() for t in by_title["q * k (elementwise)"].texts] == [f"{x:.2f}" for x in s["product"].ravel()]
    assert [t.get_text() for t in by_title["key vectors k"].get_yticklabels()] == TOKENS
    assert s["weights"][4] == 0.0  # the future token is masked


def test_neuron_view_bad_input():
    q = torch.randn(5, 4)
    with pytest.raises(ValueError, match="same head_dim"):
        viz.neuron_steps(q, torch.randn(5, 3), 0)
    with pytest.raises(ValueError, match="query_index=5 is out of range"):
        viz.neuron_steps(q, q, 5)
    with pytest.raises(ValueError, match="head 2 does not exist"):
        viz.neuron_steps(torch.randn(2, 5, 4), torch.randn(2, 5, 4), 0, head=2)
    with pytest.raises(ValueError, match="mask must be"):
        viz.neuron_steps(q, q, 0, mask=torch.ones(3))
    with pytest.raises(ValueError, match="dim_labels has 2 names but the head has 4 dimensions"):
        viz.neuron_view(q, q, TOKENS, 0, dim_labels=["a", "b"])


# ---------------------------------------------------------------- interactive, offline HTML


def payload(view):
    match = re.search(r"var D=(\{.*?\});var VIEW", view.html)
    return json.loads(match.group(1).replace("<\\/", "</"))


@pytest.mark.parametrize("make", [viz.head_view, viz.model_view], ids=["head_view", "model_view"])
def test_interactive_output_is_deterministic_and_offline(make):
    w = weights(2, 3, 5, 5)
    first, second = make(w, TOKENS), make(w.clone(), TOKENS)
    assert first.html == second.html and first.png == second.png
    # tiny float noise (another device) rounds to the same thousandths: identical output
    nudged = make(w + 1e-9 * torch.randn(2, 3, 5, 5).abs(), TOKENS)
    assert nudged.html == first.html
    other = make(weights(2, 3, 5, 5, seed=1), TOKENS)
    assert other.element_id != first.element_id
    assert not re.search(r"""(src|href|url)\s*[=(]\s*["']?\s*(https?:)?//""", first.html, re.I)
    code = re.sub(r"base64,[A-Za-z0-9+/=]+", "base64,<png>", first.html)  # the PNG's text may spell anything
    for forbidden in ("<link", "fetch(", "XMLHttpRequest", "import(", "require(", "cdn"):
        assert forbidden not in code
    bundle = first._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html", "image/png"}
    assert bundle["text/plain"] == first.description and "interactive HTML" in first.description
    assert f'src="data:image/png;base64,{bundle["image/png"]}"' in first.html  # the fallback is in the HTML too
    image = Image.open(io.BytesIO(base64.b64decode(bundle["image/png"])))
    image.load()  # a valid PNG
    assert image.size[0] > 200


def test_interactive_payload_holds_rounded_weights():
    w = weights(2, 3, 5, 5)
    data = payload(viz.head_view(w, TOKENS, layer=1, heads=[0, 2]))
    assert data["qt"] == TOKENS and data["heads"] == [0, 2] and data["layers"] == [0, 1] and data["layer"] == 1
    expected = torch.round(w[:, [0, 2]] * 1000).int().reshape(2, 2, 25).tolist()
    assert data["w"] == expected
    data = payload(viz.model_view(w, TOKENS, layers=[1]))
    assert data["w"] == torch.round(w[1:] * 1000).int().reshape(1, 3, 25).tolist()


def test_tokens_cannot_break_out_of_the_script():
    w = weights(3, 3)
    view = viz.head_view(w, ["<b>", "</script><script>alert(1)</script>", "&"])
    script = view.html[view.html.index("<script>") + len("<script>") :]
    assert script.count("</script>") == 1  # only the real end of the script
    assert payload(view)["qt"][1] == "</script><script>alert(1)</script>"


def test_interactive_html_stays_small_for_a_real_model():
    w = weights(6, 12, 12, 12)  # MiniLM-sized: 72 heads, 12 tokens
    tokens = [f"t{i}" for i in range(12)]
    assert len(viz.model_view(w, tokens).html) < 150_000
    assert len(viz.head_view(w, tokens).html) < 300_000  # most of it is the static picture of 12 heads


def test_save_html_writes_a_standalone_page(tmp_path):
    path = tmp_path / "view.html"
    viz.head_view(weights(2, 5, 5), TOKENS).save_html(path)
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and "cu-attn" in text


def test_interactive_figures_do_not_leak_into_pyplot():
    plt.close("all")
    viz.head_view(weights(2, 5, 5), TOKENS)
    viz.model_view(weights(2, 2, 5, 5), TOKENS)
    assert plt.get_fignums() == []  # otherwise the notebook would show the fallback twice
