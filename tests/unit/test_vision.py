"""course_utils.vision: patches in ViT's order, the shape images, the tiny ViT and its [CLS] attention."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from course_utils import vision  # noqa: E402
from course_utils.training import fit  # noqa: E402
from course_utils.vision import (  # noqa: E402
    SHAPE_NAMES,
    TinyCNN,
    TinyViT,
    accuracy,
    attention_on_shape,
    make_shape_images,
    patch_grid,
    patchify,
    pool_batches,
    seen_in_training,
    shape_batches,
)


def g(seed=0):
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------- patchify


@pytest.mark.parametrize("shape, p", [((2, 3, 8, 12), 4), ((1, 1, 16, 16), 4), ((3, 2, 6, 9), 3), ((2, 3, 5, 5), 5)])
def test_patchify_equals_unfold(shape, p):
    images = torch.randn(*shape, generator=g())
    expected = F.unfold(images, kernel_size=p, stride=p).transpose(1, 2)
    assert torch.equal(patchify(images, p), expected)


def test_patchify_then_linear_equals_vits_conv_patch_embedding():
    # ViT implementations embed patches with Conv2d(kernel = stride = p): the same numbers, given the same weights
    torch.manual_seed(0)
    c, p, d = 3, 4, 10
    conv = nn.Conv2d(c, d, kernel_size=p, stride=p)
    linear = nn.Linear(c * p * p, d)
    with torch.no_grad():
        linear.weight.copy_(conv.weight.reshape(d, -1))  # [d, C, p, p] flattened (C, p, p): the course's order
        linear.bias.copy_(conv.bias)
    images = torch.randn(2, c, 8, 12, generator=g(1))
    by_conv = conv(images).flatten(2).transpose(1, 2)  # [B, d, rows, cols] -> [B, rows*cols, d], row by row
    assert torch.allclose(linear(patchify(images, p)), by_conv, atol=1e-5)


def test_patchify_by_hand_on_a_numbered_image():
    image = torch.arange(16.0).reshape(1, 1, 4, 4)  # pixel values = their reading-order index
    patches = patchify(image, 2)
    assert patches[0].tolist() == [[0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 12, 13], [10, 11, 14, 15]]


def test_patchify_flattens_channel_first():
    image = torch.stack([torch.zeros(2, 2), torch.ones(2, 2)])[None]  # channel 0 all 0, channel 1 all 1
    assert patchify(image, 2)[0, 0].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]


def test_patchify_does_not_change_its_input_and_keeps_dtype():
    images = torch.randn(2, 1, 8, 8, generator=g(), dtype=torch.float64)
    before = images.clone()
    assert patchify(images, 4).dtype == torch.float64
    assert torch.equal(images, before)


@pytest.mark.parametrize(
    "images, p, phrase",
    [
        (torch.zeros(1, 1, 10, 12), 4, "multiples of patch_size=4"),
        (torch.zeros(1, 1, 8, 8), 0, "patch_size must be a positive int"),
        (torch.zeros(1, 1, 8, 8), 2.0, "patch_size must be a positive int"),
        (torch.zeros(2, 16, 16, 4), 4, "look channels-last"),
        (torch.zeros(2, 32, 32, 3), 4, "images.permute(0, 3, 1, 2)"),
        (torch.zeros(1, 8, 8), 4, "[batch, channels, height, width]"),
        ([[1.0]], 4, "[batch, channels, height, width]"),
    ],
)
def test_patchify_refuses_bad_input_clearly(images, p, phrase):
    with pytest.raises(ValueError) as info:
        patchify(images, p)
    assert phrase in str(info.value)


def test_patch_grid():
    assert patch_grid(16, 24, 4) == (4, 6)
    with pytest.raises(ValueError, match="multiples"):
        patch_grid(16, 18, 4)


# ---------------------------------------------------------------- the shape images


def test_shapes_have_five_pixels_each_in_a_three_by_three_box():
    for name, pixels in vision.SHAPES.items():
        assert len(set(pixels)) == 5, name
        assert all(0 <= r < 3 and 0 <= c < 3 for r, c in pixels), name
    stencils = {tuple(sorted(p)) for p in vision.SHAPES.values()}
    assert len(stencils) == len(SHAPE_NAMES) == 4


def test_shape_images_are_seeded_and_shaped():
    a = make_shape_images(50, g(3))
    b = make_shape_images(50, g(3))
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y)
    images, labels, masks = a
    assert images.shape == (50, 1, 16, 16) and images.dtype == torch.float32
    assert labels.shape == (50,) and labels.dtype == torch.int64 and set(labels.tolist()) <= {0, 1, 2, 3}
    assert masks.shape == (50, 16, 16) and masks.dtype == torch.bool


def test_each_mask_is_its_labels_shape_somewhere():
    images, labels, masks = make_shape_images(200, g(4), noise=0.0)
    assert torch.equal(images[:, 0], masks.float())  # without noise the image is the mask
    for mask, label in zip(masks, labels.tolist(), strict=True):
        rows, cols = torch.nonzero(mask, as_tuple=True)
        found = {
            (r - rows.min().item(), c - cols.min().item()) for r, c in zip(rows.tolist(), cols.tolist(), strict=True)
        }
        assert found == set(vision.SHAPES[SHAPE_NAMES[label]])


def test_shapes_appear_everywhere_and_classes_are_balanced():
    _, labels, masks = make_shape_images(4000, g(5))
    assert masks[:, 0].any() and masks[:, -1].any() and masks[:, :, 0].any() and masks[:, :, -1].any()
    counts = torch.bincount(labels, minlength=4).float() / 4000
    assert (counts - 0.25).abs().max() < 0.03


def test_noise_is_as_asked():
    images, _, masks = make_shape_images(500, g(6), noise=0.5)
    background = images[:, 0][~masks]
    assert abs(background.std().item() - 0.5) < 0.02 and abs(background.mean().item()) < 0.02


@pytest.mark.parametrize(
    "kwargs, error",
    [(dict(n=0), ValueError), (dict(image_size=2), ValueError), (dict(generator=0), TypeError)],
)
def test_shape_images_refuse_bad_arguments(kwargs, error):
    arguments = {"n": 4, "generator": g(), **kwargs}
    with pytest.raises(error):
        make_shape_images(**arguments)


def test_shape_batches_draw_from_the_generator():
    sample = shape_batches(batch_size=8)
    first, second = sample(g(7)), sample(g(7))
    assert torch.equal(first[0], second[0]) and first[0].shape == (8, 1, 16, 16) and first[1].shape == (8,)


def test_pool_batches_draw_only_from_the_pool():
    images, labels, _ = make_shape_images(5, g(8))
    batch, batch_labels = pool_batches(images, labels, batch_size=32)(g(9))
    assert batch.shape == (32, 1, 16, 16)
    for image, label in zip(batch, batch_labels, strict=True):
        index = [i for i in range(5) if torch.equal(images[i], image)]
        assert len(index) == 1 and labels[index[0]] == label


def test_seen_in_training_means_same_shape_same_place():
    _, _, masks = make_shape_images(300, g(10))
    seen = seen_in_training(masks, masks[:100])
    assert seen[:100].all()
    by_hand = torch.tensor([any(torch.equal(m, t) for t in masks[:100]) for m in masks])
    assert torch.equal(seen, by_hand) and not seen.all()


# ---------------------------------------------------------------- the models


def test_vit_shapes_and_cls_attention():
    torch.manual_seed(0)
    model = TinyViT(image_size=16, patch_size=4, d_model=16, num_heads=2, num_layers=2).eval()
    images = torch.randn(3, 1, 16, 16, generator=g())
    assert model.embed(images).shape == (3, 17, 16)
    assert model(images).shape == (3, 4)
    assert model.attentions().shape == (2, 3, 2, 17, 17)
    cls = model.cls_attention()
    assert cls.shape == (3, 2, 4, 4)
    self_weight = model.attentions()[-1][:, :, 0, 0]
    assert torch.allclose(cls.sum((-1, -2)) + self_weight, torch.ones(3, 2), atol=1e-5)
    # the grid is row-major: patch 5 (row 1, column 1) sits at [1, 1]
    assert torch.equal(cls[:, :, 1, 1], model.attentions()[-1][:, :, 0, 1 + 5])
    assert torch.equal(model.cls_attention(layer=0), model.attentions()[0][:, :, 0, 1:].reshape(3, 2, 4, 4))


def test_vit_uses_the_courses_encoder_pre_norm():
    model = TinyViT()
    assert isinstance(model.encoder, vision.Encoder) and all(layer.norm_first for layer in model.encoder.layers)


def test_vit_without_positions_cannot_tell_where_patches_are():
    # self-attention is permutation-equivariant: with the position embeddings zeroed, shuffling the patches
    # changes nothing that [CLS] sees. The learned positions are what breaks that symmetry.
    torch.manual_seed(0)
    model = TinyViT(d_model=16).eval()
    images = torch.randn(2, 1, 16, 16, generator=g(2))
    perm = torch.randperm(16, generator=g(3))
    shuffled = patchify(images, 4)[:, perm].reshape(2, 4, 4, 4, 4).permute(0, 1, 3, 2, 4).reshape(2, 1, 16, 16)
    assert torch.equal(patchify(shuffled, 4), patchify(images, 4)[:, perm])
    assert not torch.allclose(model(images), model(shuffled), atol=1e-4)
    with torch.no_grad():
        model.position_embedding.zero_()
    assert torch.allclose(model(images), model(shuffled), atol=1e-5)


def test_cnn_shapes_and_translation():
    torch.manual_seed(0)
    cnn = TinyCNN(width=4).eval()
    assert cnn(torch.zeros(3, 1, 16, 16)).shape == (3, 4)
    assert sum(p.numel() for p in cnn.parameters()) == (9 * 4 + 4) + (4 * 9 * 8 + 8) + (8 * 4 + 4)
    # the same shape moved (away from the border, which zero padding treats differently) scores the same
    image = torch.zeros(1, 1, 16, 16)
    image[0, 0, 4:7, 5] = 1.0
    moved = torch.roll(image, shifts=(5, 3), dims=(2, 3))
    assert torch.allclose(cnn(image), cnn(moved), atol=1e-6)


def test_vit_patch_embedding_is_shared_but_not_shift_invariant_within_a_patch():
    torch.manual_seed(0)
    model = TinyViT(d_model=16).eval()
    image = torch.zeros(1, 1, 16, 16)
    image[0, 0, 1:4, 1] = 1.0  # a bar in patch 0
    by_a_patch = torch.roll(image, shifts=4, dims=3)  # the same bar in patch 1
    by_a_pixel = torch.roll(image, shifts=1, dims=3)  # still in patch 0, one pixel to the right
    embed = model.patch_embedding
    assert torch.equal(embed(patchify(image, 4))[0, 0], embed(patchify(by_a_patch, 4))[0, 1])
    assert not torch.allclose(embed(patchify(image, 4))[0, 0], embed(patchify(by_a_pixel, 4))[0, 0])


def test_vit_refuses_images_of_the_wrong_shape():
    model = TinyViT()
    with pytest.raises(ValueError, match=r"\[batch, 1, 16, 16\]"):
        model(torch.zeros(2, 3, 16, 16))
    with pytest.raises(ValueError, match="multiples"):
        TinyViT(image_size=15, patch_size=4)


def test_a_small_vit_learns_the_shapes():
    torch.manual_seed(0)
    model = TinyViT(image_size=8, patch_size=4, d_model=32, num_layers=1)  # 8x8 images: 4 patches, fast
    held_out = make_shape_images(500, g(1), image_size=8)
    before = accuracy(model, *held_out[:2])
    history = fit(model, shape_batches(image_size=8), steps=150, lr=1e-2, progress=False)
    after = accuracy(model, *held_out[:2])
    assert history["loss"][-1] < 0.5 * history["loss"][0]
    assert before < 0.4 and after > 0.7, (before, after)


# ---------------------------------------------------------------- measures and figures


class _Constant(nn.Module):
    """Predicts class 2 for every image."""

    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.tensor([0.0, 0.0, 1.0, 0.0]))

    def forward(self, images):
        return self.bias.expand(len(images), 4)


def test_accuracy_counts_right_answers_in_batches():
    labels = torch.tensor([2, 2, 0, 1, 2])
    assert accuracy(_Constant(), torch.zeros(5, 1, 4, 4), labels, batch_size=2) == pytest.approx(3 / 5)


def test_attention_on_shape_by_hand():
    masks = torch.zeros(1, 8, 8, dtype=torch.bool)
    masks[0, 3, 3:5] = True  # a shape across patches 0 and 1 (row 0 of the 2x2 grid)
    attention = torch.tensor([[[[0.3, 0.1], [0.2, 0.2]], [[0.0, 0.0], [0.5, 0.5]]]])  # [1, 2 heads, 2, 2]
    share, even = attention_on_shape(attention, masks, patch_size=4)
    assert torch.allclose(share, torch.tensor([[0.4 / 0.8, 0.0]]))
    assert even.tolist() == [0.5]


def test_attention_rollout_by_hand():
    # one layer: rollout = 0.5 A + 0.5 I, heads averaged
    a = torch.softmax(torch.randn(1, 2, 3, 4, 4, generator=g()), dim=-1)
    assert torch.allclose(vision.attention_rollout(a), 0.5 * a[0].mean(1) + 0.5 * torch.eye(4))
    # two layers: the second layer's mixing applied after the first's, rows still summing to 1
    b = torch.softmax(torch.randn(2, 3, 2, 5, 5, generator=g(1)), dim=-1)
    first, second = (0.5 * b[i].mean(1) + 0.5 * torch.eye(5) for i in range(2))
    rollout = vision.attention_rollout(b)
    assert torch.allclose(rollout, second @ first, atol=1e-6)
    assert torch.allclose(rollout.sum(-1), torch.ones(3, 5), atol=1e-6)
    with pytest.raises(ValueError, match="layers, batch, heads"):
        vision.attention_rollout(b[0])


def test_replace_patches_replaces_only_the_marked_patches():
    images = torch.full((2, 1, 8, 8), 5.0)
    which = torch.tensor([[False, True, False, False], [True, False, False, True]])  # patch 1 = top right
    out = vision.replace_patches(images, which, 4, g(), noise=0.1)
    assert torch.equal(images, torch.full((2, 1, 8, 8), 5.0))  # the input is left as it was
    assert torch.equal(out[0, 0, :4, 4:] != 5.0, torch.ones(4, 4, dtype=torch.bool))
    changed = out != 5.0
    assert changed[0].sum() == 16 and changed[1].sum() == 32
    assert changed[1, 0, :4, :4].all() and changed[1, 0, 4:, 4:].all()
    assert out[changed].abs().max() < 1.0  # background noise, not the old value
    with pytest.raises(ValueError, match=r"bool tensor \[batch, num_patches\] = \[2, 4\]"):
        vision.replace_patches(images, which[:, :3], 4, g())
    with pytest.raises(ValueError, match=r"\[batch, channels, height, width\], got \(1, 8, 8\)"):
        vision.replace_patches(images[0], which, 4, g())


def test_figures_draw():
    images, labels, _ = make_shape_images(3, g())
    fig = vision.show_patches(images[0], 4)
    assert len(fig.axes) >= 3
    plt.close(fig)
    fig = vision.show_cls_attention(images, torch.rand(3, 4, 4, generator=g()), ["a", "b", "c"], 4)
    assert len(fig.axes) == 7  # 2 rows x 3 images + the colour bar
    plt.close(fig)
    fig = vision.show_cls_attention(images, torch.rand(3, 2, 4, 4, generator=g()), ["a", "b", "c"], 4)
    assert len(fig.axes) == 10  # the image and 2 heads for each of 3 images + the colour bar
    plt.close(fig)
    with pytest.raises(ValueError, match="one title per image"):
        vision.show_cls_attention(images, torch.rand(2, 4, 4), ["a", "b", "c"], 4)


def test_occlude_patches_by_hand():
    images = torch.arange(2 * 2 * 4 * 6, dtype=torch.float64).reshape(2, 2, 4, 6)  # 2 x 3 patches of 2x2
    background = -torch.ones_like(images)
    which = torch.tensor([[False, True, False, False, False, True], [True, False, False, False, False, False]])
    out = vision.occlude_patches(images, which, 2, background)
    assert out.dtype == torch.float64 and torch.equal(images, torch.arange(96.0).double().reshape(2, 2, 4, 6))
    expected = images.clone()
    expected[0, :, 0:2, 2:4] = -1  # patch 1: first row of patches, second column
    expected[0, :, 2:4, 4:6] = -1  # patch 5: second row, third column
    expected[1, :, 0:2, 0:2] = -1
    assert torch.equal(out, expected)


@pytest.mark.parametrize(
    "which, background, phrase",
    [
        (torch.zeros(2, 6), None, "bool tensor [batch, num_patches] = [2, 6]"),
        (torch.zeros(2, 5, dtype=torch.bool), None, "bool tensor [batch, num_patches] = [2, 6]"),
        (
            torch.zeros(2, 6, dtype=torch.bool),
            torch.zeros(2, 2, 4, 4),
            "background must be a tensor of the images' shape",
        ),
    ],
)
def test_occlude_patches_refuses_bad_input_clearly(which, background, phrase):
    images = torch.zeros(2, 2, 4, 6)
    with pytest.raises(ValueError) as info:
        vision.occlude_patches(images, which, 2, torch.zeros_like(images) if background is None else background)
    assert phrase in str(info.value)
