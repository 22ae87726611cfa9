"""Lesson 05b's exercises: the loop of a plain recurrent network, ``recurrent_forward``, and
the gradient that links token 0 to position t, ``gradient_by_distance``.

The solution is the course's reference, ``course_utils.long_range.recurrent_forward``.
The expected answer comes from an independent oracle, PyTorch's ``nn.RNN`` (tanh) with
the same weights copied in, run in float64. Each known mistake is recomputed on the same
inputs (``_variant``) and named when the learner's output matches it; mistakes of shape
(the outputs stacked on the wrong axis, only the last state returned, h0 among the
outputs, the pair in the wrong order) are named from the shapes. The cases run in float32
and float64.

``gradient_by_distance``'s expected answer is computed with ``torch.autograd.grad`` on a
fresh copy of the inputs for every position, independently of the reference's loop; its
cases are a random RNN (float32) and a random self-attention layer (float64).
"""

import torch
import torch.nn as nn

from course_utils import long_range
from course_utils.attention import MultiHeadAttention
from course_utils.exercises import exercise
from course_utils.exercises.checking import (
    RETURNED_NONE,
    Mistake,
    call,
    diagnose,
    expect_like,
    expect_same_dtype,
    expect_tensor,
    generator,
)

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
APPEND_BEFORE_UPDATE = "you appended the state before updating it"


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

    def in_float64(c):
        return (c[0] + ", float64", *(t.double() for t in c[1:]))

    # first a case where the swapped weights and axes still run, so those mistakes get their names
    return [
        case("x [3, 3, 4], d_h 4 (as many sequences as steps, d_in = d_h)", 3, 3, 4, 4),
        case("x [2, 5, 3], d_h 4", 2, 5, 3, 4),
        case("x [4, 7, 5], d_h 6, large weights", 4, 7, 5, 6, scale=1.5),
        case("x [1, 1, 2], d_h 3 (one step)", 1, 1, 2, 3),
        in_float64(case("x [2, 4, 3], d_h 5", 2, 4, 3, 5)),
    ]


def _split_result(got, x, h0, description):
    """The (outputs, h_T) pair, or a Mistake that names what came back instead."""
    batch, steps, d_h = x.shape[0], x.shape[1], h0.shape[1]
    if got is None:
        raise Mistake(f"{RETURNED_NONE} {NOT_A_PAIR}.")
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
        expect_like(value, x, what)
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
                f"{APPEND_BEFORE_UPDATE}: your outputs[:, 0] is h0 and the state after the last step is missing. "
                f"Inside the loop compute the new h first, then append it: outputs[:, t] is the state after "
                f"reading x[:, t] ({description}).",
                torch.cat([h0[:, None], expected[:, :-1]], dim=1),
            ),
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
        diagnose(outputs, expected, mistakes, what="outputs", context=description, dtype=x.dtype)
        diagnose(
            h_last,
            expected_last,
            [
                (f"{LAST_STATE_WRONG}: you returned h0 ({description}).", h0),
                (f"{LAST_STATE_WRONG}: you returned the first step's state ({description}).", expected[:, 0]),
            ],
            what="h_T",
            context=description,
            dtype=x.dtype,
        )


# ----------------------------------------------------------------------------------------------
# gradient_by_distance

G_ACCUMULATED = "your gradients add up from one position to the next"
G_OWN_POSITION = "you took the gradient with respect to x[0, t]"
G_WHOLE_GRADIENT = "you took the norm of the whole gradient"
G_NO_PROBE = "you summed the output instead of reading it along probe"
G_LAST_POSITION = "you read the output at the last position"
G_SQUARED = "you returned the squared norm"
G_INPUTS_CHANGED = "you set requires_grad on the caller's inputs"
G_SHAPE = "return one number per distance"
G_NOT_A_TENSOR = "return the norms as one tensor"


def _gradient_oracle(layer, inputs, distances, probe):
    """autograd.grad on a fresh leaf for every t: the gradient vectors [len(distances), B, T, d]."""
    grads = []
    for t in distances:
        x = inputs.detach().clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(layer(x)[0, t] @ probe, x)
        grads.append(grad)
    return torch.stack(grads)


def _gradient_cases():
    g = generator(7)
    d = 4
    W_xh, W_hh = torch.randn(d, d, generator=g) / d**0.5, torch.randn(d, d, generator=g) / d**0.5
    b, h0 = torch.zeros(d), torch.zeros(2, d)

    def rnn(x):
        return long_range.recurrent_forward(x, W_xh.to(x.dtype), W_hh.to(x.dtype), b.to(x.dtype), h0.to(x.dtype))[0]

    with torch.random.fork_rng(devices=[]):  # leave the learner's random numbers alone
        torch.manual_seed(8)
        mha = MultiHeadAttention(6, num_heads=2).double().eval()

    def attention(x):
        return mha(x, x, x)

    return [
        ("a random RNN, inputs [2, 12, 4] float32, distances [1, 3, 6, 11]", rnn,
         torch.randn(2, 12, d, generator=g), [1, 3, 6, 11], torch.randn(d, generator=g)),
        ("a random self-attention layer, inputs [2, 9, 6] float64, distances [0, 4, 8]", attention,
         torch.randn(2, 9, 6, generator=g).double(), [0, 4, 8], torch.randn(6, generator=g).double()),
    ]  # fmt: skip


def _expect_one_tensor(got, description):
    """The card asks for a tensor [len(distances)]: a list or tuple of norms is not one."""
    if isinstance(got, (list, tuple)):
        raise Mistake(
            f"{G_NOT_A_TENSOR} [len(distances)], not a Python {type(got).__name__} ({description}): collect the "
            f"0-d norms in a list and return torch.stack(norms), which keeps the inputs' dtype."
        )
    expect_tensor(got, what=f"result ({description})")


_NORMS_AS_TENSORS = "Keep the norms as tensors (torch.stack) instead of Python floats turned into a new dtype."


@exercise(
    "gradient_by_distance",
    solution=long_range.gradient_by_distance,
    hints=[
        "For each t: make x a copy of the inputs that records gradients, x = inputs.detach().clone()."
        "requires_grad_(True); run out = layer(x); read position t of sequence 0 along the probe, "
        "out[0, t] @ probe, and call .backward() on that number.",
        "x.grad is now [B, T, d]; the gradient with respect to token 0 is x.grad[0, 0]. Its size is "
        "x.grad[0, 0].norm(). Keep it, and make a fresh x for the next t (a reused x adds the gradients up).",
        "After the loop, torch.stack(norms) gives the tensor [len(distances)].",
    ],
)
def check_gradient_by_distance(candidate):
    for description, layer, inputs, distances, probe in _gradient_cases():
        got = call(candidate, layer, inputs, list(distances), probe)
        if inputs.requires_grad or inputs.grad is not None:
            inputs.requires_grad_(False)
            inputs.grad = None
            raise Mistake(
                f"{G_INPUTS_CHANGED} ({description}): requires_grad_ and backward changed the tensor you were given. "
                f"Work on a copy, x = inputs.detach().clone().requires_grad_(True), a fresh one for every t."
            )
        _expect_one_tensor(got, description)
        grads = _gradient_oracle(layer, inputs, distances, probe)  # [n, B, T, d]
        expected = grads[:, 0, 0].norm(dim=-1)
        if got.dim() != 1 or got.numel() != len(distances):
            raise Mistake(
                f"{G_SHAPE}: a tensor of shape [{len(distances)}] for distances {list(distances)}, got shape "
                f"{tuple(got.shape)} ({description}). The gradient with respect to token 0 is a vector; keep its "
                f"norm, x.grad[0, 0].norm()."
            )
        expect_same_dtype(got, inputs.dtype, "result", description, _NORMS_AS_TENSORS)
        own = torch.stack([grads[i, 0, t] for i, t in enumerate(distances)]).norm(dim=-1)
        last = _gradient_oracle(layer, inputs, [inputs.shape[1] - 1] * len(distances), probe)[:, 0, 0].norm(dim=-1)
        summed = []
        for t in distances:
            x = inputs.detach().clone().requires_grad_(True)
            summed.append(torch.autograd.grad(layer(x)[0, t].sum(), x)[0][0, 0].norm())
        mistakes = [
            (
                f"{G_ACCUMULATED} ({description}): backward() adds to x.grad, so one x reused for every t sums the "
                f"gradients of all earlier positions. Make a fresh copy of the inputs for every t "
                f"(or zero x.grad before each backward).",
                grads.cumsum(dim=0)[:, 0, 0].norm(dim=-1),
            ),
            (
                f"{G_OWN_POSITION} ({description}): the question is how strongly token 0 moves position t, so "
                f"take x.grad[0, 0], the gradient with respect to the first input.",
                own,
            ),
            (
                f"{G_WHOLE_GRADIENT} ({description}), every position of every sequence: keep only the gradient "
                f"with respect to token 0 of sequence 0, x.grad[0, 0].norm().",
                grads.flatten(1).norm(dim=-1),
            ),
            (
                f"{G_NO_PROBE} ({description}): backward needs one number; read position t along the fixed "
                f"direction, layer(x)[0, t] @ probe, so every t is measured the same way.",
                torch.stack(summed),
            ),
            (
                f"{G_LAST_POSITION} for every t ({description}): read the output at position t, layer(x)[0, t].",
                last,
            ),
            (f"{G_SQUARED} ({description}): the size of a vector is its norm, x.grad[0, 0].norm().", expected**2),
        ]
        diagnose(got.detach(), expected, mistakes, what="result", context=description, rtol=1e-3, dtype=inputs.dtype)
