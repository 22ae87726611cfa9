"""Lesson 14's exercise: YaRN's frequencies and attention temperature, ``yarn_frequencies``.

The solution is the course's reference code (``course_utils.long_context.yarn_frequencies``). The
expected answer comes from an oracle written here another way: a Python loop over the dimensions in
float64, each speed theta_i = base^(-2i / d) kept, divided by the factor or mixed by its own ramp
value, with the ramp's ends solved in closed form. Each known mistake is recomputed on the same inputs
(the oracle with one step done wrong) and named when the learner's output matches; the temperature is
checked apart from the frequencies, with mistakes of its own.
"""

import math
import numbers

import torch

from course_utils import long_context
from course_utils.exercises import exercise
from course_utils.exercises.checking import RETURNED_NONE, Mistake, call, diagnose, expect_tensor

# Distinctive phrases, one per mistake (the tests look for them).
YF_ONLY_TENSOR = "you returned only inv_freq"
YF_NOT_A_PAIR = "should return a pair (inv_freq, attention_scaling)"
YF_SWAPPED = "the pair is the wrong way round"
YF_DTYPE = "inv_freq should be a float32 (or float64) tensor"
YF_RAMP_REVERSED = "your ramp is reversed"
YF_RADIANS = "you counted radians, not turns"
YF_WAVELENGTH = "you compared wavelengths with the betas"
YF_MULTIPLIED = "you multiplied by the factor"
YF_NOT_ROUNDED = "the ramp's ends are not whole dimensions"
YF_NOT_CLAMPED = "your ramp is not clamped"
YF_ALL_INTERPOLATED = "you divided every dimension by the factor"
YF_NOTHING_CHANGED = "your frequencies are the unscaled theta_i"
YF_ENDS_MEET = "the ramp's ends meet"
YF_CAPPED_AT_PAIRS = "you capped high at the last pair"

SC_NOT_A_NUMBER = "attention_scaling should be one number"
SC_FORGOTTEN = "you left out the attention temperature"
SC_SQUARED = "you returned the logits' factor 1/t"
SC_INVERTED = "your attention_scaling is below 1"

YF_TUPLE_HINT = "a comma at the end of `inv_freq = ...,` makes a tuple of one: leave it out"

RTOL = 1e-6  # float32 holds about 7 digits; the smallest speeds are ~1e-7, so no absolute tolerance to speak of
ATOL = 1e-12

# (head_dim, base, factor, original_length, {betas other than YaRN's 32 and 1}); the first tells every mistake apart
CASES = [
    (16, 10000.0, 8.0, 128, {}),
    (64, 10000.0, 4.0, 2048, {}),
    (128, 500000.0, 16.0, 8192, {"beta_fast": 16, "beta_slow": 2}),
    (32, 10000.0, 2.5, 512, {}),
    (32, 10000.0, 1.0, 128, {}),  # factor 1: nothing changes, and no temperature
    (16, 10000.0, 8.0, 128, {"beta_fast": 32, "beta_slow": 24}),  # both ends at dimension 0: the ramp's width is 0
    (16, 10000.0, 4.0, 32768, {}),  # even the slowest pair turns more than once: high is capped at head_dim - 1
]


def _describe(head_dim, base, factor, original_length, betas):
    shown = [f"head_dim={head_dim}", f"base={base:g}", f"factor={factor:g}", f"original_length={original_length}"]
    return ", ".join(shown + [f"{name}={value}" for name, value in betas.items()])


# --------------------------------------------------------------------------- the oracle, and its wrong versions


def _dimension_where(measure, head_dim, base, original_length, beta):
    """The (fractional) dimension i whose speed theta_i = base^(-2i / d) has ``measure`` equal to beta.

    "turns": original_length * theta / (2 pi), the right one; "radians": original_length * theta (the 2 pi
    forgotten); "wavelength": 2 pi / theta, the tokens of one turn. Each is 1 / theta times a constant c,
    so theta_i = 1 / c, i = d / 2 * log_base(c)."""
    c = {
        "turns": original_length / (2 * math.pi * beta),
        "radians": original_length / beta,
        "wavelength": beta / (2 * math.pi),
    }[measure]
    return head_dim / 2 * math.log(c) / math.log(base)


def _oracle(head_dim, base, factor, original_length, beta_fast=32, beta_slow=1, measure="turns", rounded=True,
            clamped=True, reverse=False, multiply=False, cap=None):  # fmt: skip
    """YaRN's inv_freq [head_dim / 2] in float64, dimension by dimension; the keywords plant one mistake each."""
    fast = _dimension_where(measure, head_dim, base, original_length, beta_fast)
    slow = _dimension_where(measure, head_dim, base, original_length, beta_slow)
    low = max(math.floor(fast) if rounded else fast, 0)
    high = min(math.ceil(slow) if rounded else slow, head_dim - 1 if cap is None else cap)
    if low == high:
        high += 0.001
    values = []
    for i in range(head_dim // 2):
        theta = base ** (-2 * i / head_dim)
        ramp = (i - low) / (high - low)  # 0: the dimension keeps its speed, 1: it is interpolated
        if clamped:
            ramp = min(max(ramp, 0.0), 1.0)
        if reverse:
            ramp = 1 - ramp
        interpolated = theta * factor if multiply else theta / factor
        values.append(interpolated * ramp + theta * (1 - ramp))
    return torch.tensor(values, dtype=torch.float64)


def _ends(head_dim, base, original_length, beta_fast=32, beta_slow=1):
    low = max(math.floor(_dimension_where("turns", head_dim, base, original_length, beta_fast)), 0)
    high = min(math.ceil(_dimension_where("turns", head_dim, base, original_length, beta_slow)), head_dim - 1)
    return low, high


def _scaling(factor):
    return 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0


def _inv_freq_mistakes(head_dim, base, factor, original_length, betas, description):
    args = (head_dim, base, factor, original_length)
    low, high = _ends(*args[:2], original_length, **betas)
    theta = torch.tensor([base ** (-2 * i / head_dim) for i in range(head_dim // 2)], dtype=torch.float64)
    mistakes = [
        (f"{YF_RAMP_REVERSED}: you interpolated the fast dimensions and kept the slow ones. The ramp is 0 for "
         f"dimensions below low (they turn more than beta_fast times over original_length, so they keep theta_i) "
         f"and 1 above high (fewer than beta_slow turns: theta_i / factor); mix with theta / factor * ramp + "
         f"theta * (1 - ramp) ({description}).", _oracle(*args, **betas, reverse=True)),
        (f"{YF_RADIANS}: over original_length tokens dimension i turns through original_length * theta_i radians, "
         f"which is original_length * theta_i / (2 pi) turns. The betas count turns: solve "
         f"original_length * theta_i / (2 pi) = beta for i ({description}).", _oracle(*args, **betas, measure="radians")),
        (f"{YF_WAVELENGTH} (2 pi / theta_i = beta): the betas count turns over the trained length, "
         f"original_length * theta_i / (2 pi) (= original_length / wavelength), not the tokens of one turn "
         f"({description}).",
         _oracle(*args, **betas, measure="wavelength")),
        (f"{YF_MULTIPLIED}: interpolated dimensions turn slower, theta_i / factor, so that position "
         f"factor * original_length turns as far as original_length did ({description}).",
         _oracle(*args, **betas, multiply=True)),
        (f"{YF_NOT_ROUNDED}: round low down (math.floor) and high up (math.ceil), then keep them within "
         f"0 .. head_dim - 1; here low = {low}, high = {high} ({description}).",
         _oracle(*args, **betas, rounded=False)),
        (f"{YF_NOT_CLAMPED}: (i - low) / (high - low) is below 0 before low and above 1 after high; clamp it to "
         f"[0, 1] (.clamp(0, 1)): the dimensions past the ends are kept or interpolated, not pushed further "
         f"({description}).",
         _oracle(*args, **betas, clamped=False)),
        (f"{YF_CAPPED_AT_PAIRS}, head_dim / 2 - 1. YaRN's reference code and transformers cap high at "
         f"head_dim - 1, not at the last pair, and this exercise follows them: here high = {high}. The two differ "
         f"only when even the slowest pair turns more than beta_slow times over original_length ({description}).",
         _oracle(*args, **betas, cap=head_dim // 2 - 1)),
        (f"{YF_ALL_INTERPOLATED} (that is position interpolation, 'linear'): YaRN keeps the fast dimensions, "
         f"which turn more than beta_fast times over original_length, as they are ({description}).", theta / factor),
        (f"{YF_NOTHING_CHANGED} = base^(-2i / head_dim): the slow dimensions (fewer than beta_slow turns over "
         f"original_length) should be divided by factor, and those between the ends mixed by the ramp "
         f"({description}).", theta),
    ]  # fmt: skip
    return mistakes


def _nonfinite_advice(head_dim, base, original_length, betas):
    low, high = _ends(head_dim, base, original_length, **betas)
    if low == high:
        return (
            f"{YF_ENDS_MEET} here (low = high = {low}), so (i - low) / (high - low) divides by 0. Add 0.001 to "
            f"high when the two are equal, as YaRN does."
        )
    return "a division by 0 (high - low?), or a log of a number <= 0?"


# --------------------------------------------------------------------------- the returned pair


def _pair(got, description):
    """(inv_freq, attention_scaling) from what the learner returned, or a Mistake saying what it is instead."""
    if got is None:
        raise Mistake(f"{RETURNED_NONE} ({description})")
    if isinstance(got, torch.Tensor):
        raise Mistake(f"{YF_ONLY_TENSOR}: return both, `return inv_freq, attention_scaling` (a tensor and a "
                      f"number) ({description}).")  # fmt: skip
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        shown = f"{type(got).__name__} of {len(got)}" if isinstance(got, (tuple, list)) else type(got).__name__
        raise Mistake(f"yarn_frequencies {YF_NOT_A_PAIR}: `return inv_freq, attention_scaling`; it returned a "
                      f"{shown} ({description}).")  # fmt: skip
    first, second = got
    if isinstance(second, torch.Tensor) and second.dim() == 1 and not isinstance(first, torch.Tensor):
        raise Mistake(f"{YF_SWAPPED}: inv_freq (the tensor) comes first, then attention_scaling (the number) "
                      f"({description}).")  # fmt: skip
    return first, second


def _expect_float(inv_freq, description):
    if inv_freq.dtype in (torch.float32, torch.float64):
        return
    if inv_freq.is_floating_point():
        why = (
            f"{inv_freq.dtype} keeps too few digits for speeds as small as base^(-1) / factor: compute in "
            f"float64 (torch.arange(..., dtype=torch.float64)) and end with .float()"
        )
    else:
        why = (
            "the speeds are fractions: compute in floating point (torch.arange(..., dtype=torch.float64)) "
            "and end with .float()"
        )
    raise Mistake(f"{YF_DTYPE}, but its dtype is {inv_freq.dtype} ({description}): {why}.")  # fmt: skip


def _as_number(scaling, description):
    real = isinstance(scaling, numbers.Real) and not isinstance(scaling, bool)
    if isinstance(scaling, torch.Tensor) and scaling.numel() == 1 and not scaling.dtype.is_complex:
        real = scaling.device.type != "meta"  # a meta tensor holds no value to read
    try:
        if real:
            return float(scaling)
    except OverflowError:  # an int past float's range, 10**400
        pass
    shown = f"a tensor of shape {tuple(scaling.shape)}" if isinstance(scaling, torch.Tensor) else repr(scaling)
    raise Mistake(f"{SC_NOT_A_NUMBER} (a Python float), the factor on cos and sin; yours is {shown:.80} "
                  f"({description}).")  # fmt: skip


def _check_scaling(scaling, factor, description):
    got = _as_number(scaling, description)
    expected = _scaling(factor)
    if math.isclose(got, expected, rel_tol=RTOL):
        return
    where = f"({description}: expected {expected:.6g}, got {got:.6g})"
    temperature = 0.1 * math.log(factor) + 1.0
    mistakes = [
        (1.0, f"{SC_FORGOTTEN}: for factor > 1, YaRN's sqrt(1/t) = 0.1 * ln(factor) + 1 (math.log is ln) "
              f"goes on cos and sin {where}."),
        (temperature**2, f"{SC_SQUARED} = (0.1 ln(factor) + 1)^2. It goes on cos and sin, which queries and keys "
                         f"both carry, so the logits get its square: return sqrt(1/t) = 0.1 * ln(factor) + 1 {where}."),
        (1 / temperature, f"{SC_INVERTED}: the temperature sharpens attention over long texts, so the factor on "
                          f"cos and sin is 0.1 * ln(factor) + 1 >= 1, not its inverse {where}."),
        (1 / temperature**2, f"{SC_INVERTED}: you returned t itself; the factor on cos and sin is "
                             f"sqrt(1/t) = 0.1 * ln(factor) + 1 >= 1 {where}."),
    ]  # fmt: skip
    if factor > 1:
        for value, message in mistakes:
            if math.isclose(got, value, rel_tol=RTOL):
                raise Mistake(message)
    rule = "0.1 * ln(factor) + 1 for factor > 1, else 1.0"
    raise Mistake(f"attention_scaling is not right: it is {rule} {where}.")


@exercise(
    "yarn_frequencies",
    solution=long_context.yarn_frequencies,
    hints=[
        "Go dimension by dimension, i = 0 .. head_dim / 2 - 1, with theta_i = base^(-2i / head_dim). Over the trained "
        "length, dimension i turns original_length * theta_i / (2 pi) times: more than beta_fast turns, it keeps "
        "theta_i; fewer than beta_slow, it becomes theta_i / factor; a linear ramp mixes the two in between.",
        "The ramp's ends are the dimensions that turn exactly beta_fast (low) and beta_slow (high) times: solve "
        "original_length * base^(-2i / head_dim) / (2 pi) = beta for i (take logarithms). Round low down (at least 0) "
        "and high up (at most head_dim - 1), and add 0.001 to high if they are equal.",
        "ramp = ((i - low) / (high - low)).clamp(0, 1); inv_freq = theta / factor * ramp + theta * (1 - ramp), "
        "returned as float32. attention_scaling = 0.1 * math.log(factor) + 1 if factor > 1 else 1.0. Return both: "
        "(inv_freq, attention_scaling).",
    ],
)
def check_yarn_frequencies(candidate):
    for head_dim, base, factor, original_length, betas in CASES:
        description = _describe(head_dim, base, factor, original_length, betas)
        got = call(candidate, head_dim, base, factor, original_length, **betas)
        inv_freq, scaling = _pair(got, description)
        expect_tensor(inv_freq, what="inv_freq", tuple_hint=YF_TUPLE_HINT)
        _expect_float(inv_freq, description)
        expected = _oracle(head_dim, base, factor, original_length, **betas)
        diagnose(inv_freq, expected, _inv_freq_mistakes(head_dim, base, factor, original_length, betas, description),
                 what="inv_freq", atol=ATOL, rtol=RTOL, context=description,
                 nonfinite_advice=_nonfinite_advice(head_dim, base, original_length, betas))  # fmt: skip
        _check_scaling(scaling, factor, description)
