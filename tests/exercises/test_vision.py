"""Lesson 05d's checker: the solution passes, and each planted mistake gets its own message.

The mistaken candidates are written the way a learner might write them (a reshape
without permute, torch's Tensor.unfold, einops-like index juggling), independently of
the checker's own mistake generator.
"""

import pytest
import torch
import torch.nn.functional as F

from course_utils.exercises import check, checking, solution
from course_utils.exercises import vision as ex
from tests.exercises.asserts import assert_caught, assert_each_message_names_only_its_mistake, assert_passes


def learner_patchify(images, patch_size, order=(0, 2, 4, 1, 3, 5), check_size=True):
    """A learner's patchify; ``order`` is the permute of [B, C, rows, p, cols, p] they chose."""
    b, c, h, w = images.shape
    p = patch_size
    if check_size and (h % p or w % p):
        raise ValueError("height and width must be multiples of patch_size")
    x = images.reshape(b, c, h // p, p, w // p, p).permute(*order)
    return x.reshape(b, -1, c * p * p)


def test_solution_and_learner_version_pass():
    assert_passes("patchify", solution("patchify"))
    assert_passes("patchify", learner_patchify)


def test_a_version_with_unfold_and_a_size_check_passes():
    def with_unfold(images, patch_size):
        if images.shape[-2] % patch_size or images.shape[-1] % patch_size:
            raise ValueError("not a whole number of patches")
        return F.unfold(images, patch_size, stride=patch_size).transpose(1, 2)

    assert_passes("patchify", with_unfold)


def test_stub_is_not_attempted():
    def stub(images, patch_size):
        raise NotImplementedError

    assert check("patchify", stub, quiet=True).status == "not attempted"


def test_reshape_without_permute_gives_strips():
    def strips(images, patch_size):
        b, c, h, w = images.shape
        return images.reshape(b, (h // patch_size) * (w // patch_size), c * patch_size**2)

    assert_caught("patchify", strips, ex.P_STRIPS)


def test_split_but_not_permuted_gives_strips_too():
    assert_caught("patchify", lambda x, p: learner_patchify(x, p, order=(0, 1, 2, 3, 4, 5)), ex.P_STRIPS)


@pytest.mark.parametrize(
    "order, phrase",
    [
        ((0, 4, 2, 1, 3, 5), ex.P_COLUMN_MAJOR),
        ((0, 2, 4, 3, 5, 1), ex.P_CHANNELS_LAST),
        ((0, 2, 4, 1, 5, 3), ex.P_PATCH_TRANSPOSED),
        ((0, 4, 2, 1, 5, 3), ex.P_IMAGE_TRANSPOSED),
    ],
)
def test_wrong_orders_are_named(order, phrase):
    assert_caught("patchify", lambda x, p: learner_patchify(x, p, order=order), phrase)


def test_two_mistakes_at_once_name_both():
    result = check("patchify", lambda x, p: learner_patchify(x, p, order=(0, 4, 2, 3, 5, 1)), quiet=True)
    assert not result.passed
    assert ex.P_COLUMN_MAJOR in result.message and ex.P_CHANNELS_LAST in result.message, result.message


def test_patches_of_the_transposed_image_are_named():
    def transposed(images, patch_size):
        return learner_patchify(images.transpose(-1, -2), patch_size)

    assert_caught("patchify", transposed, ex.P_IMAGE_TRANSPOSED)


def test_unfold_without_transpose_is_named():
    def unfold_only(images, patch_size):
        return F.unfold(images, patch_size, stride=patch_size)

    assert_caught("patchify", unfold_only, ex.P_UNFOLD_LAYOUT)


def test_grid_kept_as_two_axes_is_named():
    def grid(images, patch_size):
        b, c, h, w = images.shape
        p = patch_size
        x = images.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)
        return x.reshape(b, h // p, w // p, c * p * p)

    assert_caught("patchify", grid, ex.P_GRID_NOT_MERGED)


def test_height_used_for_both_axes_gives_the_wrong_count():
    def square_only(images, patch_size):
        b, c, h, w = images.shape
        n = (h // patch_size) ** 2  # as if every image were square
        return (
            images.unfold(2, patch_size, patch_size)
            .unfold(3, patch_size, patch_size)
            .reshape(b, -1, c, patch_size**2)[:, :n]
            .reshape(b, n, -1)
        )

    assert_caught("patchify", square_only, ex.P_WRONG_COUNT)


def test_tensor_unfold_that_crops_silently_is_named():
    def tensor_unfold(images, patch_size):
        b, c = images.shape[:2]
        p = patch_size
        x = images.unfold(2, p, p).unfold(3, p, p)  # [B, C, rows, cols, p, p]; drops what does not fit
        return x.permute(0, 2, 3, 1, 4, 5).reshape(b, -1, c * p * p)

    assert_caught("patchify", tensor_unfold, ex.P_SILENT_CROP)


def test_no_size_check_gets_asked_for_a_value_error():
    # the reshape fails with a RuntimeError: right to fail, but not a clear error for the caller
    assert_caught("patchify", lambda x, p: learner_patchify(x, p, check_size=False), ex.P_NO_VALUE_ERROR)


def test_view_after_permute_is_explained():
    def with_view(images, patch_size):
        b, c, h, w = images.shape
        p = patch_size
        x = images.view(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)
        return x.view(b, -1, c * p * p)

    result = check("patchify", with_view, quiet=True)
    assert not result.passed and "contiguous" in result.message, result.message


def test_in_place_change_of_the_images_is_named():
    def in_place(images, patch_size):
        images.mul_(1.0)
        images.add_(1.0)
        return learner_patchify(images, patch_size) - 1.0

    assert_caught("patchify", in_place, "in place")


def test_checker_cases_hold_several_channels_and_non_square_images():
    shapes = [tuple(images.shape) for _, images, _ in ex._cases()]
    assert any(s[1] > 1 for s in shapes) and any(s[2] != s[3] for s in shapes)
    # the oracle is F.unfold itself, not the course's patchify
    images = torch.arange(2 * 8 * 8, dtype=torch.float32).reshape(1, 2, 8, 8)
    assert ex._oracle(images, 4)[0, 1, :4].tolist() == [4.0, 5.0, 6.0, 7.0]  # patch 1 = top row, pixels 4..7


def test_height_and_width_swapped_in_the_split_is_named():
    def swapped_names(images, patch_size):
        b, c, w, h = images.shape  # the learner's slip: width and height unpacked the wrong way round
        p = patch_size
        if h % p or w % p:
            raise ValueError("height and width must be multiples of patch_size")
        x = images.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)
        return x.reshape(b, -1, c * p * p)

    assert_caught("patchify", swapped_names, ex.P_HW_SWAPPED)


def test_tensor_unfold_without_permute_is_named():
    def unfold_no_permute(images, patch_size):
        b, c, h, w = images.shape
        p = patch_size
        if h % p or w % p:
            raise ValueError("height and width must be multiples of patch_size")
        return images.unfold(2, p, p).unfold(3, p, p).reshape(b, -1, c * p * p)

    assert_caught("patchify", unfold_no_permute, ex.P_UNFOLD_NO_PERMUTE)


def test_patchify_cases_cover_float32_float64_float16_and_keep_the_dtype():
    assert {case[1].dtype for case in ex._cases()} == {torch.float32, torch.float64, torch.float16}

    def always_float(images, patch_size):
        return learner_patchify(images.float(), patch_size)

    assert_caught("patchify", always_float, checking.KEEP_DTYPE)


# ------------------------------------------------------------------ occlude_patches


def learner_occlude(images, which, patch_size, background, mistake=None):
    b, c, h, w = images.shape
    p = patch_size
    rows, cols = h // p, w // p
    flags = which.reshape(b, cols, rows).transpose(1, 2) if mistake == "columns" else which.reshape(b, rows, cols)
    if mistake == "tiled":
        pixels = flags[:, None].repeat(1, 1, p, p)
    else:
        pixels = flags[:, None].repeat_interleave(p, dim=2).repeat_interleave(p, dim=3)
    if mistake == "inverted":
        pixels = ~pixels
    cover = torch.zeros_like(background) if mistake == "zeros" else background
    return torch.where(pixels, cover, images)


def occlude_in_a_loop(images, which, patch_size, background):
    """A correct answer written another way: a loop over the marked patches, on a copy."""
    out = images.clone()
    cols = images.shape[-1] // patch_size
    for b, i in which.nonzero().tolist():
        r, q = i // cols, i % cols
        rs, cs = slice(r * patch_size, (r + 1) * patch_size), slice(q * patch_size, (q + 1) * patch_size)
        out[b, :, rs, cs] = background[b, :, rs, cs]
    return out


def test_occlude_solution_and_learner_versions_pass():
    assert_passes("occlude_patches", solution("occlude_patches"))
    assert_passes("occlude_patches", learner_occlude)
    assert_passes("occlude_patches", occlude_in_a_loop)


def test_occlude_stub_is_not_attempted():
    def occlude_patches(images, which, patch_size, background):
        raise NotImplementedError

    assert check("occlude_patches", occlude_patches, quiet=True).status == "not attempted"


OCCLUSION_MISTAKES = {
    "columns": ex.O_COLUMN_MAJOR,
    "tiled": ex.O_TILED,
    "inverted": ex.O_INVERTED,
    "zeros": ex.O_ZEROS,
}


def occlude_with(mistake):
    def candidate(images, which, patch_size, background):
        return learner_occlude(images, which, patch_size, background, mistake)

    return candidate


@pytest.mark.parametrize("mistake", OCCLUSION_MISTAKES)
def test_each_occlusion_mistake_is_named(mistake):
    assert_caught("occlude_patches", occlude_with(mistake), OCCLUSION_MISTAKES[mistake])


def test_each_occlusion_message_names_only_its_mistake():
    mistakes = {m: (occlude_with(m), phrase) for m, phrase in OCCLUSION_MISTAKES.items()}
    assert_each_message_names_only_its_mistake(mistakes, lambda c: check("occlude_patches", c, quiet=True))


def test_occlusion_in_place_and_dtype_mistakes_are_named():
    def in_place(images, which, patch_size, background):
        out = learner_occlude(images, which, patch_size, background)
        images.copy_(out)
        return images

    def as_float32(images, which, patch_size, background):
        return learner_occlude(images, which, patch_size, background).float()

    assert_caught("occlude_patches", in_place, "in place")
    assert_caught("occlude_patches", as_float32, checking.KEEP_DTYPE)
    assert {case[1].dtype for case in ex._occlusion_cases()} == {torch.float32, torch.float64, torch.float16}


def test_float64_images_sent_through_float32_are_named():
    def patchify_via_float32(images, patch_size):  # the numbers rounded to float32, then back
        return learner_patchify(images.float(), patch_size).to(images.dtype)

    def occlude_via_float32(images, which, patch_size, background):
        return learner_occlude(images.float(), which, patch_size, background.float()).to(images.dtype)

    assert_caught("patchify", patchify_via_float32, checking.FLOAT32_PRECISION)
    assert_caught("occlude_patches", occlude_via_float32, checking.FLOAT32_PRECISION)
