"""Lesson 05d's exercises: cut images into patches (``patchify``), and cover patches for the
occlusion test (``occlude_patches``).

The solution is the course's reference, ``course_utils.vision.patchify``. The expected
answer comes from an independent oracle, PyTorch's ``F.unfold`` (the sliding-window
operation behind convolutions), transposed to [B, num_patches, C*p*p].

Each known mistake (a reshape without the permute, patches numbered column by column,
pixels flattened channels last, ...) is recomputed on the same images and named when the
learner's output matches it. The images are random, so two different orders never agree
by chance; several channels and non-square images make every mistake show somewhere. The
cases run in float32, float64 and float16 (a cut moves numbers, so every dtype must come back as it went in).

``occlude_patches``'s expected answer is built pixel by pixel with slicing, independently of the
reference's repeat_interleave; the mistakes (flags read column by column, tiled instead of
repeated, the marked and unmarked patches swapped, zeros instead of the background) are named.
"""

import torch
import torch.nn.functional as F

from course_utils import vision
from course_utils.exercises import exercise
from course_utils.exercises.checking import (
    FLOAT32_PRECISION,
    Mistake,
    call,
    diagnose,
    expect_same_dtype,
    expect_tensor,
    generator,
)

# Distinctive phrases, one per mistake (the tests look for them).
P_STRIPS = "your patches are strips, not squares"
P_COLUMN_MAJOR = "your patches are numbered column by column"
P_CHANNELS_LAST = "you flattened each patch channels last"
P_PATCH_TRANSPOSED = "inside each patch you read the pixels column by column"
P_IMAGE_TRANSPOSED = "your result is the patches of the transposed image"
P_HW_SWAPPED = "you swapped height and width"
P_UNFOLD_NO_PERMUTE = "after Tensor.unfold you reshaped without moving the channel axis"
P_UNFOLD_LAYOUT = "the patches are on the last axis"
P_GRID_NOT_MERGED = "you kept the grid of patches as two axes"
P_WRONG_COUNT = "you have the wrong number of patches"
P_SILENT_CROP = "you silently cut off the pixels"
P_NO_VALUE_ERROR = "raise a ValueError"


def _oracle(images, p):
    """F.unfold gives [B, C*p*p, num_patches], patches row by row, each flattened (C, p, p)."""
    return F.unfold(images, kernel_size=p, stride=p).transpose(1, 2)


def _variant(images, p, order):
    """patchify with the axes of [B, C, rows, p, cols, p] put in another ``order`` before flattening."""
    b, c, h, w = images.shape
    grid = images.reshape(b, c, h // p, p, w // p, p).permute(order)
    return grid.reshape(b, (h // p) * (w // p), c * p * p)


def _mistakes(images, p):
    b, c, h, w = images.shape
    mistakes = [
        (
            f"{P_STRIPS}: a reshape never moves a number, so reshaping [B, C, H, W] to [B, num_patches, C*p*p] cuts "
            f"the image in memory order: each 'patch' is {c * p * p} consecutive numbers, a strip of whole image "
            f"rows. Split both axes first, "
            f"reshape(B, C, H//p, p, W//p, p), then permute the two 'which patch' axes to the front: "
            f"permute(0, 2, 4, 1, 3, 5), and only then reshape to [B, num_patches, C*p*p].",
            images.reshape(b, (h // p) * (w // p), c * p * p),
        ),
        (
            f"{P_COLUMN_MAJOR} (down the first column, then the next); the course, like F.unfold and ViT, numbers "
            f"them row by row: left to right, then top to bottom. Put the patch-row axis before the patch-column "
            f"axis: permute(0, 2, 4, ...), not permute(0, 4, 2, ...).",
            _variant(images, p, (0, 4, 2, 1, 3, 5)),
        ),
        (
            f"{P_CHANNELS_LAST} (row, column, channel). The course flattens channel first, then row, then column "
            f"(C, p, p), the layout of a Conv2d weight [d_model, C, p, p] and of F.unfold: permute(0, 2, 4, 1, 3, 5).",
            _variant(images, p, (0, 2, 4, 3, 5, 1)),
        ),
        (
            f"{P_PATCH_TRANSPOSED} (each patch is transposed). Keep the pixel-row axis before the pixel-column axis: "
            f"the last two axes of the permute are (3, 5), not (5, 3).",
            _variant(images, p, (0, 2, 4, 1, 5, 3)),
        ),
        (
            f"{P_IMAGE_TRANSPOSED} (patches column by column and each patch transposed). images are [B, C, H, W]: "
            f"height (rows) is axis 2, width (columns) axis 3.",
            _variant(images, p, (0, 4, 2, 1, 5, 3)),
        ),
    ]
    if h != w:  # b, c, w, h = images.shape: the split uses the width for the rows and the height for the columns
        swapped = images.reshape(b, c, w // p, p, h // p, p).permute(0, 2, 4, 1, 3, 5)
        mistakes.append(
            (
                f"{P_HW_SWAPPED}: your split is reshape(B, C, W // p, p, H // p, p), which cuts an image {h} high "
                f"and {w} wide as if it were {w} high. images are [B, C, H, W]: b, c, h, w = images.shape, and "
                f"the rows of patches come from h.",
                swapped.reshape(b, (h // p) * (w // p), c * p * p),
            )
        )
    if c > 1:  # images.unfold(2, p, p).unfold(3, p, p) is [B, C, rows, cols, p, p]: the channel must move too
        mistakes.append(
            (
                f"{P_UNFOLD_NO_PERMUTE}: images.unfold(2, p, p).unfold(3, p, p) is [B, C, rows, cols, p, p], and a "
                f"reshape to [B, num_patches, C*p*p] then mixes the channels into the patch count. Permute the channel "
                f"axis next to the pixels first: .permute(0, 2, 3, 1, 4, 5), then reshape.",
                _variant(images, p, (0, 1, 2, 4, 3, 5)),
            )
        )
    if c > 1:  # channels last and patches column by column, or channels last and each patch transposed
        mistakes += [
            (
                f"{P_COLUMN_MAJOR}, and {P_CHANNELS_LAST}: number the patches row by row and flatten (C, p, p), "
                f"permute(0, 2, 4, 1, 3, 5).",
                _variant(images, p, (0, 4, 2, 3, 5, 1)),
            ),
            (
                f"{P_CHANNELS_LAST}, and {P_PATCH_TRANSPOSED}: flatten each patch as (C, p, p), rows before columns.",
                _variant(images, p, (0, 2, 4, 5, 3, 1)),
            ),
        ]
    return mistakes


def _check_shape(got, images, p, description):
    b, c, h, w = images.shape
    rows, cols, size = h // p, w // p, c * p * p
    expected = (b, rows * cols, size)
    expect_tensor(got, what=f"result for {description}")
    shape = tuple(got.shape)
    if shape == expected:
        return
    if shape == (b, size, rows * cols) and shape != expected:
        raise Mistake(
            f"{P_UNFOLD_LAYOUT} ([B, C*p*p, num_patches] = {shape}, as F.unfold returns them), for {description}. "
            f"A sequence of tokens is [B, num_patches, C*p*p] = {expected}: transpose the last two axes."
        )
    if shape in ((b, rows, cols, size), (b, cols, rows, size)):
        raise Mistake(
            f"{P_GRID_NOT_MERGED} ({shape}) for {description}: a Transformer takes one sequence, so merge them into "
            f"rows * cols = {rows * cols} tokens: shape {expected}."
        )
    if len(shape) == 3 and shape[0] == b and shape[1] != rows * cols:
        raise Mistake(
            f"{P_WRONG_COUNT} for {description}: {shape[1]}, but an image of {h}x{w} pixels holds "
            f"{rows} x {cols} = {rows * cols} patches of {p}x{p} (H // p rows of patches, W // p columns). "
            f"Expected shape {expected}, got {shape}."
        )
    raise Mistake(f"the result for {description} should have shape {expected} = [B, num_patches, C*p*p], got {shape}.")


def _cases():
    g = generator(5)
    # several channels and a non-square image first, so the first message names every mistake it can
    return [
        ("3 RGB images of 8x12 pixels (height 8, width 12), patch_size=4", torch.randn(3, 3, 8, 12, generator=g), 4),
        ("2 grey 8x8 images, patch_size=4", torch.randn(2, 1, 8, 8, generator=g), 4),
        ("1 image with 2 channels, 12x6 pixels, patch_size=3", torch.randn(1, 2, 12, 6, generator=g), 3),
        ("2 RGB 6x6 images, patch_size=6 (one patch)", torch.randn(2, 3, 6, 6, generator=g), 6),
        ("2 RGB 4x6 images, patch_size=2", torch.randn(2, 3, 4, 6, generator=g), 2),
        ("2 RGB 8x4 images in float64, patch_size=2", torch.randn(2, 3, 8, 4, generator=g, dtype=torch.float64), 2),
        ("1 grey 4x8 image in float16, patch_size=4", torch.randn(1, 1, 4, 8, generator=g).half(), 4),
    ]


def _check_divisibility(candidate):
    """10x12 pixels do not cut into 4x4 patches: the candidate must refuse with a ValueError."""
    images = torch.randn(2, 1, 10, 12, generator=generator(6))
    try:
        got = candidate(images, 4)
    except ValueError:
        return
    except Exception as exc:
        raise Mistake(
            f"for 10x12 images and patch_size=4 your code raised {type(exc).__name__}: {str(exc)[:200]}. "
            f"10 is not a multiple of 4: {P_NO_VALUE_ERROR} yourself, before any reshape, whose message says that "
            f"height and width must be multiples of patch_size (e.g. `if h % patch_size or w % patch_size: "
            f"raise ValueError(...)`)."
        ) from None
    shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
    raise Mistake(
        f"for 10x12 images and patch_size=4 your code returned {shape}: {P_SILENT_CROP} that do not fill a whole "
        f"patch (F.unfold and Tensor.unfold do that without a word). An image that is not a whole number of "
        f"patches is a mistake of the caller: {P_NO_VALUE_ERROR} that says height and width must be multiples "
        f"of patch_size."
    )


_MOVES_ONLY = "Cutting patches only moves numbers: no .float() or new tensors of another dtype."


def _through_float32(oracle, images, *arguments):
    """The mistake of a float64 case whose numbers went through float32 and back (a .float() inside)."""
    if images.dtype != torch.float64:
        return []
    rounded = [a.float().double() if torch.is_tensor(a) and a.is_floating_point() else a for a in (images, *arguments)]
    message = f"your result is {FLOAT32_PRECISION}: the images are float64. {_MOVES_ONLY}"
    return [(message, oracle(*rounded))]


@exercise(
    "patchify",
    solution=vision.patchify,
    hints=[
        "Split each spatial axis in two: H = (H // p) * p, 'which row of patches' and 'which pixel row inside the "
        "patch'; the same for W. reshape(B, C, H // p, p, W // p, p) does that without moving any pixel.",
        "Now the axes are [B, C, rows, p, cols, p]. A token must hold one whole patch, so bring (rows, cols) to "
        "the front and (C, p, p) to the back with permute(0, 2, 4, 1, 3, 5), then reshape to "
        "[B, rows * cols, C * p * p].",
        "Check first that H and W are multiples of patch_size and raise a ValueError if not; the course's "
        "`patch_grid(h, w, patch_size)` does that and returns (rows, cols).",
    ],
)
def check_patchify(candidate):
    for description, images, p in _cases():
        got = call(candidate, images, p)
        _check_shape(got, images, p, description)
        expect_same_dtype(got, images.dtype, "result", description, _MOVES_ONLY)
        mistakes = _mistakes(images, p) + _through_float32(_oracle, images, p)
        # a cut only moves numbers: every value comes back exactly
        diagnose(got, _oracle(images, p), mistakes, what="result", context=description, atol=0, rtol=0)
    _check_divisibility(candidate)


# ----------------------------------------------------------------------------------------------
# occlude_patches

O_COLUMN_MAJOR = "you read the patch flags column by column"
O_TILED = "you tiled the flags instead of repeating each one"
O_INVERTED = "you replaced the patches that were not marked"
O_ZEROS = "the covered patches hold zeros"
O_NOTHING = "nothing was replaced"
O_EVERYTHING = "every pixel was replaced"


def _occlusion_oracle(images, which, p, background):
    """Patch by patch with slicing: patch i of row-major numbering covers rows r*p.. and columns q*p.."""
    out = images.clone()
    cols = images.shape[-1] // p
    for b, i in which.nonzero().tolist():
        r, q = divmod(i, cols)
        out[b, :, r * p : (r + 1) * p, q * p : (q + 1) * p] = background[b, :, r * p : (r + 1) * p, q * p : (q + 1) * p]
    return out


def _occlusion_cases():
    g = generator(9)

    def case(description, shape, p, dtype=torch.float32):
        b, _, h, w = shape
        images = torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)  # float64 needs its own digits
        which = torch.rand(b, (h // p) * (w // p), generator=g) < 0.4
        return description, images, which, p, (10 + torch.randn(*shape, generator=g, dtype=torch.float64)).to(dtype)

    # a non-square grid first, so reading the flags column by column changes which patches are covered
    return [
        case("2 grey 8x12 images, patch_size=4 (2 x 3 patches)", (2, 1, 8, 12), 4),
        case("3 RGB 6x6 images, patch_size=2, float64", (3, 3, 6, 6), 2, torch.float64),
        case("1 image with 2 channels, 4x8 pixels, patch_size=2, float16", (1, 2, 4, 8), 2, torch.float16),
    ]


def _occlusion_mistakes(images, which, p, background):
    b, c, h, w = images.shape
    rows, cols = h // p, w // p

    def with_pixels(pixels):
        return torch.where(pixels, background, images)

    column_major = which.reshape(b, cols, rows).transpose(1, 2).reshape(b, -1)
    tiled = which.reshape(b, 1, rows, cols).repeat(1, 1, p, p)
    return [
        (
            f"{O_COLUMN_MAJOR}: which[b, i] is patch i in patchify's order, row by row, so reshape it to "
            f"[B, rows, cols] = [{b}, {rows}, {cols}], rows first.",
            _occlusion_oracle(images, column_major, p, background),
        ),
        (
            f"{O_TILED}: .repeat(1, 1, p, p) copies the whole grid of flags p times side by side; each flag must "
            f"cover its own p x p pixels, which is .repeat_interleave(p, dim=2).repeat_interleave(p, dim=3).",
            with_pixels(tiled),
        ),
        (
            f"{O_INVERTED}: True in `which` marks a patch to cover; keep the others as they are "
            f"(torch.where(pixels, background, images), not the other way round).",
            _occlusion_oracle(images, ~which, p, background),
        ),
        (
            f"{O_ZEROS}: cover them with the given `background` pixels, not zeros (a black patch is itself a "
            f"pattern the model may react to; the lesson covers with background noise).",
            _occlusion_oracle(images, which, p, torch.zeros_like(background)),
        ),
        (f"{O_NOTHING}: the result is the images as they came in.", images),
        (f"{O_EVERYTHING}: the result is the background; only the marked patches should be covered.", background),
    ]


@exercise(
    "occlude_patches",
    solution=vision.occlude_patches,
    hints=[
        "which is [B, num_patches], numbered row by row. which.reshape(B, 1, rows, cols) puts each flag on the "
        "patch grid (rows = H // p, cols = W // p).",
        "Blow each flag up to its p x p pixels: .repeat_interleave(p, dim=2).repeat_interleave(p, dim=3) gives a "
        "[B, 1, H, W] mask, which broadcasts over the channels.",
        "torch.where(pixels, background, images) takes the background where a pixel is covered and the image "
        "elsewhere, and makes a new tensor.",
    ],
)
def check_occlude_patches(candidate):
    for description, images, which, p, background in _occlusion_cases():
        got = call(candidate, images, which, p, background)
        expect_tensor(got, what=f"result for {description}")
        expect_same_dtype(got, images.dtype, "result", description)
        mistakes = _occlusion_mistakes(images, which, p, background)
        mistakes += _through_float32(_occlusion_oracle, images, which, p, background)
        diagnose(
            got, _occlusion_oracle(images, which, p, background), mistakes,
            what="result", context=description, atol=0, rtol=0,
        )  # fmt: skip
