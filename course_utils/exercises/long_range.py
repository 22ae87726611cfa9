"""Lesson 05b's exercise: the loop of a plain recurrent network, ``recurrent_forward``.

The solution is the course's reference, ``course_utils.long_range.recurrent_forward``.
The expected answer comes from an independent oracle, PyTorch's ``nn.RNN`` (tanh) with
the same weights copied in, run in float64. Each known mistake is recomputed on the same
inputs (``_variant``) and named when the learner's output matches it; mistakes of shape
(the outputs stacked on the wrong axis, only the last state returned, h0 among the
outputs, the pair in the wrong order) are named from the shapes.
"""

import torch
import torch.nn as nn

from course_utils import long_range
from course_utils.exercises import exercise
from course_utils.exercises.checking import Mistake, call, diagnose, expect_plain, expect_tensor, generator

# Distinctive phrases, one per mistake (the tests look for them).
NOT_CARRIED = "the hidden state is not carried from step to step"
NO_TANH = "the tanh is missing"
OTHER_ACTIVATION = "use tanh as the activation"
H0_IGNORED = "you ignored h0"
WEIGHTS_SWAPPED = "W_xh and W_hh are swapped"
WEIGHTS_TRANSPOSED = "you multiplied by the transposed weights"
LOOP_OVER_BATCH = "you looped over the batch axis"
STACKED_DIM0 = "you stacked the outputs along dim 0"
ONLY_LAST = "you returned only the last state"
H0_IN_OUTPUTS = "h0 is among your outputs"
PAIR_ORDER = "the pair is in the wrong order"
LAST_STATE_WRONG = "your h_T is not the state after the last step"
NOT_A_PAIR = "return a pair (outputs, h_T)"


def _oracle(x, W_xh, W_hh, b, h0):
    """PyTorch's own tanh RNN with the same weights (it stores them transposed, as nn.Linear does)."""
    rnn = nn.RNN(W_xh.shape[0], W_xh.shape[1], batch_first=True).double()
    with torch.no_grad():
        rnn.weight_ih_l0.copy_(W_xh.T)
        rnn.weight_hh_l0.copy_(W_hh.T)
        rnn.bias_ih_l0.copy_(b)
        rnn.bias_hh_l0.zero_()
        outputs, h_last = rnn(x.double(), h0.double()[None])
    return outputs.to(x.dtype), h_last[0].to(x.dtype)


def _variant(x, W_xh, W_hh, b, h0, *, carry=True, activation=torch.tanh, start=None, swap=False, transpose=False):
    """The loop with one planted mistake (keyword arguments); outputs only."""
    if swap:
        W_xh, W_hh = W_hh, W_xh
    if transpose:
        W_xh, W_hh = W_xh.T, W_hh.T
    first = h0 if start is None else start
    h, outputs = first, []
    for t in range(x.shape[1]):
        h = activation(x[:, t] @ W_xh + (h if carry else first) @ W_hh + b)
        outputs.append(h)
    return torch.stack(outputs, dim=1)


def _cases():
    g = generator(5)

    def case(description, batch, steps, d_in, d_h, scale=0.6):
        return (
            description,
            torch.randn(batch, steps, d_in, generator=g),
            torch.randn(d_in, d_h, generator=g) * scale,
            torch.randn(d_h, d_h, generator=g) * scale,
            torch.randn(d_h, generator=g) * 0.3,
            torch.randn(batch, d_h, generator=g),
        )

    # first a case where the swapped weights and axes still run, so those mistakes get their names
    return [
        case("x [3, 3, 4], d_h 4 (as many sequences as steps, d_in = d_h)", 3, 3, 4, 4),
        case("x [2, 5, 3], d_h 4", 2, 5, 3, 4),
        case("x [4, 7, 5], d_h 6, large weights", 4, 7, 5, 6, scale=1.5),
        case("x [1, 1, 2], d_h 3 (one step)", 1, 1, 2, 3),
    ]


def _split_result(got, x, h0, description):
    """The (outputs, h_T) pair, or a Mistake that names what came back instead."""
    batch, steps, d_h = x.shape[0], x.shape[1], h0.shape[1]
    if got is None:
        raise Mistake(f"your function returned None: did you forget the `return` line? {NOT_A_PAIR}.")
    if isinstance(got, torch.Tensor):
        if tuple(got.shape) == (batch, d_h):
            raise Mistake(
                f"{ONLY_LAST} ([B, d_h] = {tuple(got.shape)}): the lesson needs every step's state too. Keep each "
                f"new h in a list and return (torch.stack(states, dim=1), h) ({description})."
            )
        raise Mistake(f"{NOT_A_PAIR}, not one tensor of shape {tuple(got.shape)} ({description}).")
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise Mistake(f"{NOT_A_PAIR}; your function returned {type(got).__name__} ({description}).")
    outputs, h_last = got
    for value, what in ((outputs, "outputs"), (h_last, "h_T")):
        expect_tensor(value, dtype=x.dtype, what=what)
        expect_plain(value, x.device, what)
    if outputs.shape == (batch, d_h) and h_last.shape == (batch, steps, d_h) and steps > 1:
        raise Mistake(f"{PAIR_ORDER}: return (outputs, h_T), outputs first ({description}).")
    if outputs.shape == (batch, steps + 1, d_h):
        raise Mistake(
            f"{H0_IN_OUTPUTS} (shape [B, T + 1, d_h]): outputs[:, t] is the state after reading x[:, t], "
            f"so there are T of them and h0 is not one ({description})."
        )
    if outputs.shape == (steps, batch, d_h) and steps != batch:
        raise Mistake(
            f"{STACKED_DIM0} ([T, B, d_h]); the lesson keeps the batch first: torch.stack(states, dim=1) "
            f"gives [B, T, d_h] ({description})."
        )
    return outputs, h_last


@exercise(
    "recurrent_forward",
    solution=long_range.recurrent_forward,
    hints=[
        "Start with h = h0. For t in range(T) take the inputs of step t for the whole batch, x[:, t] "
        "([B, d_in]), compute the new h from them and the previous h, and append it to a list.",
        "The new state is torch.tanh(x[:, t] @ W_xh + h @ W_hh + b): W_xh turns the input into d_h features, "
        "W_hh mixes the previous state in. Then h is that new state, for the next step.",
        "After the loop, torch.stack(states, dim=1) is [B, T, d_h]; return it and the last h.",
    ],
)
def check_recurrent_forward(candidate):
    for description, x, W_xh, W_hh, b, h0 in _cases():
        expected, expected_last = _oracle(x, W_xh, W_hh, b, h0)
        got = call(candidate, x, W_xh, W_hh, b, h0)
        outputs, h_last = _split_result(got, x, h0, description)
        args = (x, W_xh, W_hh, b, h0)
        square = W_xh.shape[0] == W_xh.shape[1]
        mistakes = [
            (
                f"{NOT_CARRIED}: every step used h0 instead of the state the previous step computed. "
                f"Assign the new state to h inside the loop ({description}).",
                _variant(*args, carry=False),
            ),
            (
                f"{NOT_CARRIED} (each step started from zeros): the previous step's state must flow into "
                f"the next one through h @ W_hh ({description}).",
                _variant(*args, carry=False, start=torch.zeros_like(h0)),
            ),
            (
                f"{NO_TANH}: without it the state is a linear function of the inputs and can grow without "
                f"bound; h = torch.tanh(...) ({description}).",
                _variant(*args, activation=lambda z: z),
            ),
            (
                f"{OTHER_ACTIVATION} (yours matches a sigmoid) ({description}).",
                _variant(*args, activation=torch.sigmoid),
            ),
            (f"{OTHER_ACTIVATION} (yours matches a ReLU) ({description}).", _variant(*args, activation=torch.relu)),
            (
                f"{H0_IGNORED} and started from zeros: the first step must use the h0 you were given "
                f"(it carries what came before this chunk of the sequence) ({description}).",
                _variant(*args, start=torch.zeros_like(h0)),
            ),
        ]
        if square:  # these mistakes only run without an error when d_in = d_h
            mistakes += [
                (
                    f"{WEIGHTS_SWAPPED}: W_xh multiplies the input x[:, t], W_hh the previous state h ({description}).",
                    _variant(*args, swap=True),
                ),
                (
                    f"{WEIGHTS_TRANSPOSED}: with W_xh of shape [d_in, d_h] the product is x[:, t] @ W_xh, "
                    f"not @ W_xh.T (nn.Linear stores its weight transposed; these are not nn.Linear "
                    f"weights) ({description}).",
                    _variant(*args, transpose=True),
                ),
            ]
        if x.shape[0] == x.shape[1]:  # when B = T, these have the right shape
            mistakes.append(
                (
                    f"{STACKED_DIM0}: outputs[b, t] must be sequence b at step t; torch.stack(states, dim=1) "
                    f"puts the steps on axis 1 ({description}).",
                    expected.transpose(0, 1),
                )
            )
            mistakes.append(
                (
                    f"{LOOP_OVER_BATCH}: x[t] is sequence t, all its steps; the inputs of step t for the whole "
                    f"batch are x[:, t] (x is [B, T, d_in]) ({description}).",
                    _variant(x.transpose(0, 1), W_xh, W_hh, b, h0),
                )
            )
        diagnose(outputs, expected, mistakes, what="outputs", context=description)
        diagnose(
            h_last,
            expected_last,
            [
                (f"{LAST_STATE_WRONG}: you returned h0 ({description}).", h0),
                (f"{LAST_STATE_WRONG}: you returned the first step's state ({description}).", expected[:, 0]),
            ],
            what="h_T",
            context=description,
        )
