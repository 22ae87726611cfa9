"""Images as sequences of patches: a tiny Vision Transformer (lesson 05d).

Dosovitskiy et al. (2021), "An Image is Worth 16x16 Words", cut an image into square
patches, flatten each patch into a vector and feed the vectors to a Transformer encoder
as if they were the tokens of a sentence. This module has the pieces, small enough to
train on a CPU in seconds:

    images, labels, masks = make_shape_images(1000, torch.Generator().manual_seed(1))
    patches = patchify(images, patch_size=4)        # [B, 16, 16]: 16 patches of 1*4*4 pixels
    model = TinyViT()                               # patch embedding, [CLS], positions, Encoder, head
    history = fit(model, shape_batches(), steps=300)
    model.cls_attention()                           # [B, heads, 4, 4]: where [CLS] looked, per patch

The task: a 16x16 grey image of noise with one small shape (plus, cross, L or T) drawn
at a random place; the class is the shape. The shape may sit anywhere and often straddles
two or four patches, so the model has to find the patches that hold it and combine them.
"""

import torch
import torch.nn as nn

from course_utils import _validate
from course_utils.transformer import Encoder

__all__ = [
    "SHAPES",
    "SHAPE_NAMES",
    "make_shape_images",
    "shape_batches",
    "pool_batches",
    "seen_in_training",
    "patchify",
    "patch_grid",
    "TinyViT",
    "TinyCNN",
    "accuracy",
    "attention_on_shape",
    "attention_rollout",
    "occlude_patches",
    "replace_patches",
    "show_patches",
    "show_cls_attention",
]

# Each shape is 5 pixels in a 3x3 box, so the brightness of an image says nothing about its class:
# only where the bright pixels stand relative to each other does.
SHAPES = {
    "plus": ((0, 1), (1, 0), (1, 1), (1, 2), (2, 1)),
    "cross": ((0, 0), (0, 2), (1, 1), (2, 0), (2, 2)),
    "L": ((0, 0), (1, 0), (2, 0), (2, 1), (2, 2)),
    "T": ((0, 0), (0, 1), (0, 2), (1, 1), (2, 1)),
}
SHAPE_NAMES = tuple(SHAPES)
_SHAPE_SIZE = 3


def _stencils():
    """[classes, 3, 3]: 1 where a shape has a pixel."""
    stencils = torch.zeros(len(SHAPES), _SHAPE_SIZE, _SHAPE_SIZE)
    for index, pixels in enumerate(SHAPES.values()):
        for row, col in pixels:
            stencils[index, row, col] = 1.0
    return stencils


def make_shape_images(n, generator, image_size=16, noise=0.1):
    """``n`` noisy grey images with one shape each, drawn with ``generator`` (a torch.Generator, on the CPU).

    Returns (images [n, 1, size, size] float32, labels [n] int64 = index into SHAPE_NAMES,
    masks [n, size, size] bool = the shape's pixels). Background pixels are N(0, noise^2),
    the shape's pixels 1 + N(0, noise^2).
    """
    n, image_size = _validate.positive_int(n, "n"), _validate.positive_int(image_size, "image_size")
    if image_size < _SHAPE_SIZE:
        raise ValueError(f"image_size must be at least {_SHAPE_SIZE} to hold a shape, got {image_size}")
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    labels = torch.randint(len(SHAPES), (n,), generator=generator)
    # top-left corner of the 3x3 box, anywhere the whole shape fits
    corners = torch.randint(image_size - _SHAPE_SIZE + 1, (n, 2), generator=generator)
    masks = torch.zeros(n, image_size, image_size, dtype=torch.bool)
    stencils = _stencils().bool()
    for i, ((row, col), label) in enumerate(zip(corners.tolist(), labels.tolist(), strict=True)):
        masks[i, row : row + _SHAPE_SIZE, col : col + _SHAPE_SIZE] = stencils[label]
    images = masks.float() + noise * torch.randn(n, image_size, image_size, generator=generator)
    return images.unsqueeze(1), labels, masks


def shape_batches(batch_size=64, image_size=16, noise=0.1):
    """A ``sample_batch(generator) -> (images, labels)`` for ``course_utils.training.fit``."""

    def sample_batch(generator):
        images, labels, _ = make_shape_images(batch_size, generator, image_size, noise)
        return images, labels

    return sample_batch


def pool_batches(images, labels, batch_size=64):
    """A ``sample_batch`` that draws from a fixed set of training images only (a small data set)."""

    def sample_batch(generator):
        index = torch.randint(len(images), (batch_size,), generator=generator)
        return images[index], labels[index]

    return sample_batch


def seen_in_training(masks, training_masks):
    """[n] bool: the same shape at the same place occurs among the training images (masks [n, H, W])."""
    # two masks of 5 pixels each are the same shape at the same place exactly when they share all 5 pixels
    overlap = masks.flatten(1).float() @ training_masks.flatten(1).float().T
    sizes = masks.flatten(1).sum(-1, keepdim=True)
    return (overlap == sizes).any(-1)


# ---------------------------------------------------------------- patches


def patch_grid(image_height, image_width, patch_size):
    """(rows, cols) of patches; a clear error if the image is not a whole number of patches."""
    p = _validate.whole_patches(image_height, image_width, patch_size)
    return image_height // p, image_width // p


def patchify(images, patch_size):
    """[B, C, H, W] images -> [B, num_patches, C * p * p] patch vectors (lesson 05d's first exercise).

    Patches are numbered row by row (left to right, then top to bottom), and each patch is
    flattened channel first, then row, then column ("C, p, p"): the same order as
    ``F.unfold`` and as the weights [d_model, C, p, p] of ViT's Conv2d patch embedding.
    """
    _validate.image_batch(images)
    b, c, h, w = images.shape
    rows, cols = patch_grid(h, w, patch_size)
    p = patch_size
    # split each spatial axis into (which patch, where inside the patch)
    grid = images.reshape(b, c, rows, p, cols, p)  # [B, C, rows, p, cols, p]
    # bring the two "which patch" axes to the front, the patch's own pixels (C, p, p) to the back
    grid = grid.permute(0, 2, 4, 1, 3, 5)  # [B, rows, cols, C, p, p]
    return grid.reshape(b, rows * cols, c * p * p)


# ---------------------------------------------------------------- the model


class TinyViT(nn.Module):
    """A Vision Transformer, small: patches -> Linear -> [CLS] + patches + positions -> Encoder -> head on [CLS].

    ``forward(images [B, C, H, W]) -> logits [B, num_classes]``. The encoder is the course's
    ``Encoder`` (lesson 05) in the pre-norm order, as in ViT.
    """

    def __init__(
        self, image_size=16, patch_size=4, channels=1, num_classes=4, d_model=32, num_heads=2, num_layers=2, d_ff=None
    ):
        super().__init__()
        self.patch_size = _validate.positive_int(patch_size, "patch_size")
        self.channels = _validate.positive_int(channels, "channels")
        self.image_size = _validate.positive_int(image_size, "image_size")
        self.grid = patch_grid(self.image_size, self.image_size, self.patch_size)
        num_patches = self.grid[0] * self.grid[1]
        d_model = _validate.positive_int(d_model, "d_model")
        # a Linear on each flattened patch: the same weights for every patch, like the word embedding of a sentence
        self.patch_embedding = nn.Linear(self.channels * self.patch_size**2, d_model)
        # [CLS]: one learned vector put in front of the patches; its final state is what the head reads
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        # learned positions (ViT's choice), one per token, [CLS] included; small at the start, as in ViT
        self.position_embedding = nn.Parameter(0.02 * torch.randn(1, num_patches + 1, d_model))
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff or 4 * d_model, norm_first=True)
        self.head = nn.Linear(d_model, _validate.positive_int(num_classes, "num_classes"))

    def embed(self, images):
        """[B, C, H, W] -> [B, 1 + num_patches, d_model]: what the first encoder layer sees."""
        expected = (self.channels, self.image_size, self.image_size)
        if not isinstance(images, torch.Tensor) or images.dim() != 4 or tuple(images.shape[1:]) != expected:
            shape = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
            raise ValueError(f"images must have shape [batch, {', '.join(map(str, expected))}], got {shape}")
        tokens = self.patch_embedding(patchify(images, self.patch_size))  # [B, N, d_model]
        cls = self.cls_token.expand(images.shape[0], -1, -1)  # the same [CLS] for every image
        return torch.cat([cls, tokens], dim=1) + self.position_embedding

    def forward(self, images):
        """[B, C, H, W] -> [B, num_classes] class scores, read from the [CLS] token's final state."""
        return self.head(self.encoder(self.embed(images))[:, 0])

    def attentions(self):
        """[layers, B, heads, 1 + N, 1 + N] attention weights of the last forward pass (token 0 is [CLS])."""
        return self.encoder.attentions()

    def cls_attention(self, layer=-1):
        """[B, heads, rows, cols]: how much [CLS] attended to each patch in ``layer``, on the patch grid.

        The weight [CLS] gives itself is left out, so a map sums to 1 minus that weight.
        """
        weights = self.attentions()[layer][:, :, 0, 1:]  # [B, heads, N]: the [CLS] query row, patch keys
        return weights.reshape(*weights.shape[:2], *self.grid)


class TinyCNN(nn.Module):
    """A small convolutional network, for comparison: two 3x3 convolutions, a max over all places, a linear head.

    Its biases are the ones ViT leaves out: each output looks at a 3x3 neighbourhood (locality), and the
    same weights slide over every place (translation equivariance), so a shape is recognised wherever it is.
    """

    def __init__(self, channels=1, num_classes=4, width=8):
        super().__init__()
        width = _validate.positive_int(width, "width")
        self.features = nn.Sequential(
            nn.Conv2d(_validate.positive_int(channels, "channels"), width, kernel_size=3, padding=1),
            nn.GELU(),
            nn.Conv2d(width, 2 * width, kernel_size=3, padding=1),
            nn.GELU(),
        )
        self.head = nn.Linear(2 * width, _validate.positive_int(num_classes, "num_classes"))

    def forward(self, images):
        """[B, C, H, W] -> [B, num_classes]: the strongest response of each feature anywhere in the image."""
        return self.head(self.features(images).amax(dim=(-2, -1)))


@torch.no_grad()
def accuracy(model, images, labels, batch_size=1000):
    """Share of ``images`` whose highest-scoring class is the label."""
    device = next(model.parameters()).device
    model.eval()
    right = 0
    for start in range(0, len(images), batch_size):
        logits = model(images[start : start + batch_size].to(device))
        right += (logits.argmax(-1).cpu() == labels[start : start + batch_size]).sum().item()
    return right / len(images)


def attention_on_shape(cls_attention, masks, patch_size):
    """Per image and head, the share of [CLS]'s patch attention that lands on patches holding the shape.

    cls_attention: [B, heads, rows, cols] (``TinyViT.cls_attention``); masks: [B, H, W] bool.
    Returns (share [B, heads], fraction of patches that hold the shape [B]: the share an even spread gets).
    """
    on_shape = patchify(masks[:, None].float(), patch_size).amax(-1) > 0  # [B, N]: patch holds a shape pixel
    weights = cls_attention.flatten(2).cpu()  # [B, heads, N]
    share = (weights * on_shape[:, None]).sum(-1) / weights.sum(-1)
    return share, on_shape.float().mean(-1)


def attention_rollout(attentions):
    """[layers, B, heads, S, S] -> [B, S, S]: how much each token's final state draws on each input token.

    Attention rollout (Abnar & Zuidema 2020): average the heads of each layer, add the residual
    connection as an identity (0.5 A + 0.5 I, rows still sum to 1), and multiply the layers, first
    layer on the right. A heuristic: it ignores the values, the feed-forward networks and the norms.
    """
    if (
        not isinstance(attentions, torch.Tensor)
        or attentions.dim() != 5
        or attentions.shape[-1] != attentions.shape[-2]
    ):
        shape = tuple(attentions.shape) if isinstance(attentions, torch.Tensor) else type(attentions).__name__
        raise ValueError(f"attentions must be [layers, batch, heads, S, S] (TinyViT.attentions()), got {shape}")
    identity = torch.eye(attentions.shape[-1], device=attentions.device)
    rollout = identity.expand(attentions.shape[1], -1, -1)
    for layer in attentions.mean(dim=2):  # [B, S, S], heads averaged
        rollout = (0.5 * layer + 0.5 * identity) @ rollout
    return rollout


def occlude_patches(images, which, patch_size, background):
    """A copy of ``images`` [B, C, H, W] in which every patch marked in ``which`` [B, num_patches] (bool)
    holds the pixels of ``background`` (same shape) instead (lesson 05d's second exercise).

    Patches are numbered as ``patchify`` numbers them, row by row. The occlusion test: does the
    answer change when a patch's content is gone?
    """
    _validate.occlusion_inputs(images, which, patch_size, background)
    b, _, h, w = images.shape
    rows, cols = h // patch_size, w // patch_size
    # one flag per patch [B, rows, cols] -> one per pixel [B, 1, H, W]: each flag repeated over its p x p pixels
    pixels = which.reshape(b, 1, rows, cols).repeat_interleave(patch_size, 2).repeat_interleave(patch_size, 3)
    return torch.where(pixels.to(images.device), background.to(images.device), images)


def replace_patches(images, which, patch_size, generator, noise=0.1):
    """``occlude_patches`` with fresh background noise N(0, noise^2) drawn from ``generator`` (on the CPU)."""
    background = noise * torch.randn(images.shape, generator=generator)
    return occlude_patches(images, which, patch_size, background.to(images.dtype))


# ---------------------------------------------------------------- figures


def _grid_lines(ax, size, patch_size, colour="white"):
    for edge in range(patch_size, size, patch_size):
        ax.axhline(edge - 0.5, color=colour, lw=1)
        ax.axvline(edge - 0.5, color=colour, lw=1)


def show_patches(image, patch_size, max_patches=32):
    """The patch operation in three pictures: the image, the image cut into a grid, the patches as a sequence.

    image: [C, H, W] (one image; grey if C == 1, shown as its first channel otherwise). The sequence
    shows the first ``max_patches`` patches in the order ``patchify`` gives them, 16 to a row.
    """
    import matplotlib.pyplot as plt

    image = image.detach().cpu()  # numpy arrays for matplotlib (it warns on tensors)
    if image.dim() != 3:
        raise ValueError(f"image must be one image [channels, height, width], got {tuple(image.shape)}")
    c, h, w = image.shape
    rows, cols = patch_grid(h, w, patch_size)
    patches = patchify(image[None], patch_size)[0].reshape(-1, c, patch_size, patch_size)[:max_patches, 0]
    per_row = min(len(patches), 16)
    strip_rows = -(-len(patches) // per_row)
    lo, hi = image.min().item(), image.max().item()
    fig = plt.figure(figsize=(10, 4.2 + 0.8 * strip_rows))
    layout = fig.add_gridspec(1 + strip_rows, per_row, height_ratios=[6] + [1] * strip_rows)
    left, middle = fig.add_subplot(layout[0, : per_row // 2]), fig.add_subplot(layout[0, per_row // 2 :])
    for ax in (left, middle):
        ax.imshow(image[0].numpy(), cmap="gray", vmin=lo, vmax=hi)
        ax.set_xticks([])
        ax.set_yticks([])
    left.set_title(f"the image, {h}x{w} pixels")
    _grid_lines(middle, h, patch_size, colour="#e69f00")
    for index in range(rows * cols):  # number the patches in the order patchify puts them
        r, q = divmod(index, cols)
        middle.text(q * patch_size, r * patch_size, str(index), color="#e69f00", fontsize=8, va="top")
    middle.set_title(f"cut into {rows}x{cols} patches of {patch_size}x{patch_size}")
    for index, patch in enumerate(patches):
        ax = fig.add_subplot(layout[1 + index // per_row, index % per_row])
        ax.imshow(patch.numpy(), cmap="gray", vmin=lo, vmax=hi)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_xlabel(str(index), fontsize=8, labelpad=2)
    fig.text(
        0.5, 0.02, f"the patches as a sequence of {rows * cols} tokens, in patchify's order", ha="center", fontsize=11
    )
    return fig


def show_cls_attention(images, cls_attention, titles, patch_size, row_labels=None):
    """Each image, and under it [CLS]'s attention over its patches drawn over the image, one row per map.

    images: [B, 1, H, W]; cls_attention: [B, rows, cols] or [B, maps, rows, cols] (e.g. one map per head);
    titles: one string per image; row_labels: one name per map (default "head 0", "head 1", ...).
    """
    import matplotlib.pyplot as plt

    images, maps = images.detach().cpu().numpy(), cls_attention.detach().cpu()
    maps = maps[:, None] if maps.dim() == 3 else maps
    if maps.dim() != 4 or len(maps) != len(images) or len(titles) != len(images):
        raise ValueError(
            f"expected one [rows, cols] map (or [maps, rows, cols]) and one title per image: {len(images)} images, "
            f"maps {tuple(cls_attention.shape)}, {len(titles)} titles"
        )
    n, m = len(images), maps.shape[1]
    row_labels = row_labels or [f"head {i}" for i in range(m)]
    fig, axes = plt.subplots(1 + m, n, figsize=(2.1 * n, 2.2 * (1 + m)), squeeze=False)
    vmax = maps.max().item()
    for i in range(n):
        h, w = images[i, 0].shape
        axes[0, i].imshow(images[i, 0], cmap="gray")
        axes[0, i].set_title(titles[i], fontsize=9)
        for k in range(m):
            axes[1 + k, i].imshow(images[i, 0], cmap="gray")
            # one square of colour per patch, laid over the pixels it covers
            shown = axes[1 + k, i].imshow(
                maps[i, k].numpy(), cmap="viridis", alpha=0.65, vmin=0, vmax=vmax, extent=(-0.5, w - 0.5, h - 0.5, -0.5)
            )
            _grid_lines(axes[1 + k, i], h, patch_size)
        for ax in axes[:, i]:
            ax.set_xticks([])
            ax.set_yticks([])
    axes[0, 0].set_ylabel("image")
    for k in range(m):
        axes[1 + k, 0].set_ylabel(f"[CLS] → patches\n{row_labels[k]}", fontsize=9)
    fig.colorbar(shown, ax=axes[1:, :].ravel().tolist(), shrink=0.8, label="attention weight")
    return fig
