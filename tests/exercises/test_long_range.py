"""Lesson 05b's checker: the solution passes, and each planted mistake gets its own message.

The mistaken candidates are written the way a learner might write them, independently
of the checker's own mistake generator.
"""

import pytest
import torch

from course_utils.exercises import check, checking, solution
from course_utils.exercises import long_range as ex
from tests.exercises.asserts import assert_caught, assert_each_message_names_only_its_mistake, assert_passes


def learner_rnn(
    x,
    W_xh,
    W_hh,
    b,
    h0,
    carry=True,
    activation=torch.tanh,
    zeros=False,
    swap=False,
    transpose=False,
    batch_loop=False,
    stack_dim=1,
    with_h0=False,
    append_first=False,
    last_only=False,
    order="outputs first",
    last="h",
):
    if swap:
        W_xh, W_hh = W_hh, W_xh
    if transpose:
        W_xh, W_hh = W_xh.t(), W_hh.t()
    h = torch.zeros_like(h0) if zeros else h0
    start = h
    states = [h0] if with_h0 else []
    steps = x.shape[0] if batch_loop else x.shape[1]
    for t in range(steps):
        x_t = x[t] if batch_loop else x[:, t, :]
        if append_first:
            states.append(h)  # the state before this step's update
        new_h = activation(x_t @ W_xh + h @ W_hh + b)
        h = new_h if carry else start
        if not append_first:
            states.append(new_h)
    outputs = torch.stack(states, dim=stack_dim)
    if last_only:
        return new_h
    h_last = {"h": new_h, "h0": h0, "first": states[0]}[last]
    return (outputs, h_last) if order == "outputs first" else (h_last, outputs)


def with_nn_rnn(x, W_xh, W_hh, b, h0):
    """A correct answer written another way: PyTorch's RNN with the weights copied in."""
    rnn = torch.nn.RNN(W_xh.shape[0], W_xh.shape[1], batch_first=True).to(x.dtype)
    with torch.no_grad():
        rnn.weight_ih_l0.copy_(W_xh.T)
        rnn.weight_hh_l0.copy_(W_hh.T)
        rnn.bias_ih_l0.copy_(b)
        rnn.bias_hh_l0.zero_()
        outputs, h_last = rnn(x, h0[None])
    return outputs, h_last[0]


def test_solution_and_other_correct_versions_pass():
    assert_passes("recurrent_forward", solution("recurrent_forward"))
    assert_passes("recurrent_forward", learner_rnn)
    assert_passes("recurrent_forward", with_nn_rnn)


def test_stub_is_not_attempted():
    def recurrent_forward(x, W_xh, W_hh, b, h0):
        raise NotImplementedError

    assert check("recurrent_forward", recurrent_forward, quiet=True).status == "not attempted"


@pytest.mark.parametrize(
    "kwargs, phrase",
    [
        (dict(carry=False), ex.NOT_CARRIED),
        (dict(carry=False, zeros=True), ex.NOT_CARRIED),
        (dict(activation=lambda z: z), ex.NO_TANH),
        (dict(activation=torch.sigmoid), ex.OTHER_ACTIVATION),
        (dict(activation=torch.relu), ex.OTHER_ACTIVATION),
        (dict(zeros=True), ex.H0_IGNORED),
        (dict(swap=True), ex.WEIGHTS_SWAPPED),
        (dict(transpose=True), ex.WEIGHTS_TRANSPOSED),
        (dict(batch_loop=True), ex.LOOP_OVER_BATCH),
        (dict(stack_dim=0), ex.STACKED_DIM0),
        (dict(with_h0=True), ex.H0_IN_OUTPUTS),
        (dict(append_first=True), ex.APPEND_BEFORE_UPDATE),
        (dict(last_only=True), ex.ONLY_LAST),
        (dict(order="h_T first"), ex.PAIR_ORDER),
        (dict(last="h0"), ex.LAST_STATE_WRONG),
        (dict(last="first"), ex.LAST_STATE_WRONG),
    ],
    ids=lambda p: str(p)[:40],
)
def test_each_mistake_is_named(kwargs, phrase):
    def candidate(x, W_xh, W_hh, b, h0):
        return learner_rnn(x, W_xh, W_hh, b, h0, **kwargs)

    assert_caught("recurrent_forward", candidate, phrase)


def test_other_wrong_results_and_types_are_reported():
    def returns_a_list(x, W_xh, W_hh, b, h0):
        return [1, 2, 3]

    def off_by_a_bit(x, W_xh, W_hh, b, h0):
        outputs, h = learner_rnn(x, W_xh, W_hh, b, h0)
        return outputs + 0.01, h

    def forgot_return(x, W_xh, W_hh, b, h0):
        learner_rnn(x, W_xh, W_hh, b, h0)

    assert_caught("recurrent_forward", returns_a_list, ex.NOT_A_PAIR)
    assert_caught("recurrent_forward", forgot_return, checking.RETURNED_NONE)
    assert_caught("recurrent_forward", off_by_a_bit, "the outputs is not right")


def test_inputs_are_not_changed_in_place():
    def in_place(x, W_xh, W_hh, b, h0):
        h0 *= 1.0
        x.mul_(1.0)
        return learner_rnn(x, W_xh, W_hh, b, h0)

    # multiplying by 1 changes nothing: such a candidate must pass, so values, not the act, are compared
    assert_passes("recurrent_forward", in_place)

    def zero_x(x, W_xh, W_hh, b, h0):
        result = learner_rnn(x, W_xh, W_hh, b, h0)
        x.zero_()
        return result

    assert_caught("recurrent_forward", zero_x, "changed `x` in place")


def test_a_nan_output_is_named_as_such():
    # the other unusual outputs are tests/exercises/test_exercise_unusual_outputs.py's; this checker also says "NaN"
    def candidate(*args):
        return tuple(t * float("nan") for t in solution("recurrent_forward")(*args))

    assert_caught("recurrent_forward", candidate, "NaN")


def test_cases_run_in_float32_and_float64():
    dtypes = {case[1].dtype for case in ex._cases()}
    assert dtypes == {torch.float32, torch.float64}

    def always_float32(x, W_xh, W_hh, b, h0):
        outputs, h = learner_rnn(x.float(), W_xh.float(), W_hh.float(), b.float(), h0.float())
        return outputs, h

    assert_caught("recurrent_forward", always_float32, "dtype torch.float64")


# ------------------------------------------------------------------ gradient_by_distance


def learner_gradients(layer, inputs, distances, probe, mistake=None):
    """gradient_by_distance as a learner might write it, with one optional slip."""
    norms = []
    shared = inputs.clone().requires_grad_(True)
    for t in distances:
        x = shared if mistake == "reuse x" else inputs.clone().requires_grad_(True)
        out = layer(x)
        position = -1 if mistake == "last position" else t
        value = out[0, position].sum() if mistake == "no probe" else out[0, position] @ probe
        value.backward()
        grad = {"own position": x.grad[0, t], "whole": x.grad}.get(mistake, x.grad[0, 0])
        norm = grad.norm() ** 2 if mistake == "squared" else grad.norm()
        norms.append(norm.detach())
    return torch.stack(norms)


def gradients_with_autograd_grad(layer, inputs, distances, probe):
    """A correct answer written another way: torch.autograd.grad, and floats made into a tensor."""
    result = []
    for t in distances:
        x = inputs.detach().requires_grad_()
        (grad,) = torch.autograd.grad(layer(x)[0, t] @ probe, x)
        result.append(grad[0, 0].norm().item())
    return torch.tensor(result, dtype=inputs.dtype)


@pytest.mark.parametrize("convert", [lambda norms: norms.tolist(), lambda norms: list(norms)], ids=["floats", "0-d"])
def test_gradient_norms_in_a_list_are_refused(convert):
    def as_a_list(layer, inputs, distances, probe):
        return convert(learner_gradients(layer, inputs, distances, probe))

    assert_caught("gradient_by_distance", as_a_list, ex.G_NOT_A_TENSOR)


def test_gradient_norm_taken_in_float32_is_named():
    def norm_in_float32(layer, inputs, distances, probe):
        norms = []
        for t in distances:
            x = inputs.clone().requires_grad_(True)
            (layer(x)[0, t] @ probe).backward()
            norms.append(x.grad[0, 0].float().norm().to(inputs.dtype))
        return torch.stack(norms)

    assert_caught("gradient_by_distance", norm_in_float32, checking.FLOAT32_PRECISION)


def test_recurrent_forward_in_float32_arithmetic_is_named():
    def in_float32(x, W_xh, W_hh, b, h0):
        outputs, h_last = learner_rnn(*(t.float() for t in (x, W_xh, W_hh, b, h0)))
        return outputs.to(x.dtype), h_last.to(x.dtype)

    assert_caught("recurrent_forward", in_float32, checking.FLOAT32_PRECISION)


def test_gradient_solution_and_other_correct_versions_pass():
    assert_passes("gradient_by_distance", solution("gradient_by_distance"))
    assert_passes("gradient_by_distance", learner_gradients)
    assert_passes("gradient_by_distance", gradients_with_autograd_grad)


GRADIENT_MISTAKES = {
    "reuse x": ex.G_ACCUMULATED,
    "own position": ex.G_OWN_POSITION,
    "whole": ex.G_WHOLE_GRADIENT,
    "no probe": ex.G_NO_PROBE,
    "last position": ex.G_LAST_POSITION,
    "squared": ex.G_SQUARED,
}


def gradients_with(mistake):
    def candidate(layer, inputs, distances, probe):
        return learner_gradients(layer, inputs, distances, probe, mistake)

    return candidate


@pytest.mark.parametrize("mistake", GRADIENT_MISTAKES)
def test_each_gradient_mistake_is_named(mistake):
    assert_caught("gradient_by_distance", gradients_with(mistake), GRADIENT_MISTAKES[mistake])


def test_each_gradient_message_names_only_its_mistake():
    mistakes = {m: (gradients_with(m), phrase) for m, phrase in GRADIENT_MISTAKES.items()}
    assert_each_message_names_only_its_mistake(mistakes, lambda c: check("gradient_by_distance", c, quiet=True))


def test_gradient_on_the_callers_inputs_is_named():
    def on_the_inputs(layer, inputs, distances, probe):
        norms = []
        for t in distances:
            inputs.grad = None
            inputs.requires_grad_(True)
            (layer(inputs)[0, t] @ probe).backward()
            norms.append(inputs.grad[0, 0].norm().detach())
        return torch.stack(norms)

    assert_caught("gradient_by_distance", on_the_inputs, ex.G_INPUTS_CHANGED)


def test_gradient_cases_run_in_float32_and_float64_and_dtype_is_kept():
    assert {case[2].dtype for case in ex._gradient_cases()} == {torch.float32, torch.float64}

    def float32_always(layer, inputs, distances, probe):
        return learner_gradients(layer, inputs, distances, probe).float()

    assert_caught("gradient_by_distance", float32_always, "float32")


def test_gradient_vectors_instead_of_norms_are_named():
    def vectors(layer, inputs, distances, probe):
        grads = []
        for t in distances:
            x = inputs.clone().requires_grad_(True)
            (layer(x)[0, t] @ probe).backward()
            grads.append(x.grad[0, 0])
        return torch.stack(grads)

    assert_caught("gradient_by_distance", vectors, ex.G_SHAPE)


def test_gradient_stub_is_not_attempted():
    def gradient_by_distance(layer, inputs, distances, probe):
        raise NotImplementedError

    assert check("gradient_by_distance", gradient_by_distance, quiet=True).status == "not attempted"
