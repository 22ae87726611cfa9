"""Lesson 14's checker: the solution passes, and each planted mistake gets its own message.

The mistaken candidates are written the way a learner might write them (torch in float32, whole
tensors at once), independently of the checker's oracle, which loops over the dimensions in float64.
"""

import math

import numpy as np
import pytest
import torch

from course_utils import long_context
from course_utils.exercises import check, checking, solution
from course_utils.exercises import long_context as ex
from tests.exercises.asserts import assert_caught, assert_each_message_names_only_its_mistake, assert_passes


def test_solution_is_the_course_reference_and_passes():
    assert solution("yarn_frequencies") is long_context.yarn_frequencies
    assert_passes("yarn_frequencies", solution("yarn_frequencies"))


def test_stub_is_not_attempted():
    def yarn_frequencies(head_dim, base, factor, original_length, beta_fast=32, beta_slow=1):
        """The exercise cell's stub."""
        raise NotImplementedError

    assert check("yarn_frequencies", yarn_frequencies, quiet=True).status == "not attempted"


def yarn(
    turns="turns",
    rounded=True,
    clamp=True,
    reverse=False,
    multiply=False,
    width_guard=True,
    scaling="sqrt(1/t)",
    returns="pair",
    dtype=torch.float32,
    cap="dims",
):
    """A learner's yarn_frequencies; each keyword plants one mistake."""

    def yarn_frequencies(head_dim, base, factor, original_length, beta_fast=32, beta_slow=1):
        theta = base ** (-torch.arange(0, head_dim, 2, dtype=dtype) / head_dim)

        def dim_for(beta):  # the dimension that turns `beta` times (or whatever the learner counts)
            if turns == "turns":  # L * theta / (2 pi) = beta
                target = 2 * math.pi * beta / original_length
            elif turns == "radians":  # L * theta = beta
                target = beta / original_length
            else:  # the wavelength 2 pi / theta = beta
                target = 2 * math.pi / beta
            return -math.log(target, base) * head_dim / 2

        low, high = dim_for(beta_fast), dim_for(beta_slow)
        if rounded:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, head_dim - 1 if cap == "dims" else head_dim // 2 - 1)
        if low == high and width_guard:
            high += 0.001
        ramp = (torch.arange(head_dim // 2, dtype=dtype) - low) / (high - low)
        if clamp:
            ramp = ramp.clamp(0, 1)
        if reverse:
            ramp = 1 - ramp
        slow = theta * factor if multiply else theta / factor
        inv_freq = slow * ramp + theta * (1 - ramp)

        temperature = 0.1 * math.log(factor) + 1 if factor > 1 else 1.0
        attention_scaling = {
            "sqrt(1/t)": temperature,
            "none": 1.0,
            "1/t": temperature**2,
            "t": 1 / temperature**2,
            "inverse": 1 / temperature,
            "tensor": torch.tensor(temperature),
            "numpy": np.float64(temperature),
            "vector": torch.full((head_dim // 2,), temperature),
        }[scaling]
        if returns == "tensor":
            return inv_freq
        if returns == "swapped":
            return attention_scaling, inv_freq
        if returns == "triple":
            return inv_freq, attention_scaling, low
        if returns == "trailing comma":
            return (inv_freq,), attention_scaling
        return inv_freq, attention_scaling

    return yarn_frequencies


def test_written_another_way_passes():
    assert_passes("yarn_frequencies", yarn())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_float64_or_float32_inv_freq_and_any_kind_of_number_pass(dtype):
    for scaling in ("sqrt(1/t)", "tensor", "numpy"):
        assert_passes("yarn_frequencies", yarn(dtype=dtype, scaling=scaling))


def test_the_mistakes_are_told_apart_on_every_case_but_factor_one():
    # the first case tells every mistake apart but the cap on high, which only the last can show; the others
    # check the oracle on other inputs
    for head_dim, base, factor, original_length, betas in ex.CASES:
        expected = ex._oracle(head_dim, base, factor, original_length, **betas)
        reference, scaling = long_context.yarn_frequencies(head_dim, base, factor, original_length, **betas)
        assert torch.allclose(reference.double(), expected, rtol=ex.RTOL, atol=ex.ATOL)
        assert scaling == pytest.approx(ex._scaling(factor), rel=1e-12)
    head_dim, base, factor, original_length, betas = ex.CASES[0]
    mistakes = ex._inv_freq_mistakes(head_dim, base, factor, original_length, betas, "")
    wrongs = [w for message, w in mistakes if ex.YF_CAPPED_AT_PAIRS not in message]
    assert len(wrongs) == len(mistakes) - 1
    expected = ex._oracle(head_dim, base, factor, original_length, **betas)
    for i, wrong in enumerate(wrongs):
        assert not torch.allclose(wrong, expected, rtol=1e-4)
        assert not any(torch.allclose(wrong, other, rtol=1e-4) for other in wrongs[i + 1 :])


def test_only_a_long_trained_length_shows_the_cap_on_high():
    shows = []
    for head_dim, base, factor, original_length, betas in ex.CASES:
        expected = ex._oracle(head_dim, base, factor, original_length, **betas)
        capped = ex._oracle(head_dim, base, factor, original_length, **betas, cap=head_dim // 2 - 1)
        shows.append(not torch.allclose(capped, expected, rtol=1e-4))
    assert shows == [False] * (len(ex.CASES) - 1) + [True]


MISTAKES = {
    "ramp reversed": (yarn(reverse=True), ex.YF_RAMP_REVERSED),
    "radians": (yarn(turns="radians"), ex.YF_RADIANS),
    "wavelength": (yarn(turns="wavelength"), ex.YF_WAVELENGTH),
    "multiplied": (yarn(multiply=True), ex.YF_MULTIPLIED),
    "not rounded": (yarn(rounded=False), ex.YF_NOT_ROUNDED),
    "not clamped": (yarn(clamp=False), ex.YF_NOT_CLAMPED),
    "all interpolated": (
        lambda head_dim, base, factor, original_length, beta_fast=32, beta_slow=1: (
            long_context.rope_inverse_frequencies("linear", head_dim, base, factor)[0],
            0.1 * math.log(factor) + 1 if factor > 1 else 1.0,
        ),
        ex.YF_ALL_INTERPOLATED,
    ),
    "nothing changed": (
        lambda head_dim, base, factor, original_length, beta_fast=32, beta_slow=1: (
            1.0 / base ** (torch.arange(0, head_dim, 2).float() / head_dim),
            0.1 * math.log(factor) + 1 if factor > 1 else 1.0,
        ),
        ex.YF_NOTHING_CHANGED,
    ),
    "no width guard": (yarn(width_guard=False), ex.YF_ENDS_MEET),
    "high capped at the last pair": (yarn(cap="pairs"), ex.YF_CAPPED_AT_PAIRS),
    "temperature forgotten": (yarn(scaling="none"), ex.SC_FORGOTTEN),
    "temperature squared": (yarn(scaling="1/t"), ex.SC_SQUARED),
    "temperature inverted": (yarn(scaling="inverse"), ex.SC_INVERTED),
    "t itself": (yarn(scaling="t"), ex.SC_INVERTED),
    "only the tensor": (yarn(returns="tensor"), ex.YF_ONLY_TENSOR),
    "swapped": (yarn(returns="swapped"), ex.YF_SWAPPED),
    "three values": (yarn(returns="triple"), ex.YF_NOT_A_PAIR),
    "a vector of scalings": (yarn(scaling="vector"), ex.SC_NOT_A_NUMBER),
    "float16 inv_freq": (yarn(dtype=torch.float16), ex.YF_DTYPE),
    "integer inv_freq": (
        lambda head_dim, base, factor, original_length, beta_fast=32, beta_slow=1: (
            torch.zeros(head_dim // 2, dtype=torch.long) + yarn()(head_dim, base, factor, original_length)[0].long(),
            1.0,
        ),
        ex.YF_DTYPE,
    ),
}


@pytest.mark.parametrize("name", MISTAKES)
def test_mistake_is_named(name):
    candidate, phrase = MISTAKES[name]
    assert_caught("yarn_frequencies", candidate, phrase)


def test_messages_name_only_their_mistake():
    assert_each_message_names_only_its_mistake(MISTAKES, lambda c: check("yarn_frequencies", c, quiet=True))


def test_a_generic_wrong_answer_is_not_yet_without_a_false_name():
    def square_root_of_the_factor(head_dim, base, factor, original_length, beta_fast=32, beta_slow=1):
        inv_freq, scaling = yarn()(head_dim, base, factor, original_length, beta_fast, beta_slow)
        theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        return torch.where(inv_freq < theta, theta / factor**0.5, theta), scaling

    phrases = {phrase for _, phrase in MISTAKES.values()}
    result = assert_caught("yarn_frequencies", square_root_of_the_factor, "inv_freq is not right", "expected:")
    assert not [p for p in phrases if p in result.message], result.message


def test_a_generic_wrong_scaling_is_not_yet_without_a_false_name():
    def log10(head_dim, base, factor, original_length, beta_fast=32, beta_slow=1):
        inv_freq, _ = yarn()(head_dim, base, factor, original_length, beta_fast, beta_slow)
        return inv_freq, 0.1 * math.log10(factor) + 1 if factor > 1 else 1.0

    result = assert_caught("yarn_frequencies", log10, "attention_scaling is not right", "0.1 * ln(factor) + 1")
    assert not [p for p in (ex.SC_FORGOTTEN, ex.SC_SQUARED, ex.SC_INVERTED) if p in result.message]


def test_wrong_return_types_get_a_clear_message():
    def returns(value):
        return lambda head_dim, base, factor, original_length, beta_fast=32, beta_slow=1: value

    assert_caught("yarn_frequencies", returns(None), checking.RETURNED_NONE)
    assert_caught("yarn_frequencies", returns(1.0), ex.YF_NOT_A_PAIR, "float")
    assert_caught("yarn_frequencies", returns(([0.5, 0.25], 1.0)), "inv_freq should be a torch.Tensor", "list")
    right = long_context.yarn_frequencies(*ex.CASES[0][:4])[0]
    assert_caught("yarn_frequencies", returns((right, "1.2")), ex.SC_NOT_A_NUMBER, "'1.2'")
    assert_caught("yarn_frequencies", returns((torch.ones(3), 1.0)), "should have shape (8,)")
    assert_caught("yarn_frequencies", returns((right, 10**400)), ex.SC_NOT_A_NUMBER, "1000000")
    assert_caught("yarn_frequencies", returns((right, torch.tensor(1.2, device="meta"))), ex.SC_NOT_A_NUMBER)
    result = assert_caught("yarn_frequencies", yarn(returns="trailing comma"), checking.RETURNED_A_TUPLE)
    assert ex.YF_TUPLE_HINT in result.message and "scaled_dot_product_attention" not in result.message
