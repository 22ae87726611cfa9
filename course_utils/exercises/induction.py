"""Lesson 11's exercises: the induction score of every head, and K-composition.

The expected answers come from oracles written here in another way (a loop over the
query positions; the Frobenius norm as a square root of sums of squares), so a bug in
the reference in ``course_utils.induction`` cannot hide in the checker.

Each known mistake is recomputed on the same inputs and named when the learner's output
matches it. A head count fixed in the code is caught by running the same function on
maps with another number of heads.
"""

import torch

from course_utils import induction
from course_utils.exercises import exercise
from course_utils.exercises.checking import (
    ONE_TENSOR_HINT,
    Mistake,
    call,
    close,
    diagnose,
    expect_same_dtype,
    expect_tensor,
    generator,
)

# Distinctive phrases, one per mistake (the tests look for them).
REPEATED_TOKEN = "you scored the weight on key t - half_len itself"
ONE_TOO_FAR = "you scored the weight on key t - half_len + 2"
FIRST_HALF_TOO = "you averaged over the first half too"
ALL_T_QUERIES = "dividing by all T queries"
NEGATIVE_WRAP = "negative key indices wrap around"
SUMMED = "you summed the weights instead of averaging them"
TRANSPOSED = "you read the maps transposed"
PREVIOUS_TOKEN = "you measured the previous-token pattern"
WRONG_AXIS = "you averaged over the wrong axis"
HEADS_FIXED = "the number of heads is fixed in your code"
LAST_QUERY_DROPPED = "you left out the last query"
LEADING_AXES = "your code expects no axes before the heads"

Q_COMPOSITION = "you measured Q-composition"
V_COMPOSITION = "you measured V-composition"
WRONG_ORDER = "you multiplied in the wrong order"
WRITER_TRANSPOSED = "you transposed the writer's W_OV"
NOT_NORMALISED = "you did not divide by the norms"
ONE_NORM = "you divided by one norm only"
LAYERS_SWAPPED = "your table is transposed"
SPECTRAL = "you used another matrix norm"
WEIGHTS_FROM_WRONG_LAYERS = "you took W_QK from layer 0 and W_OV from layer 1"


# --------------------------------------------------------------------------- induction_scores


def _random_weights(shape, g, causal=False):
    """Softmax rows of random scores: valid attention weights with a different value everywhere.

    Not causal by default: the upper triangle then holds weight too, so reading the maps
    transposed gives another number than reading them right.
    """
    scores = 2.0 * torch.randn(*shape, generator=g)
    if causal:
        seq = shape[-1]
        scores = scores.masked_fill(~torch.ones(seq, seq, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(scores, dim=-1)


def _on_key(weights, half_len, shift, queries):
    """Oracle: mean over ``queries`` of weights[t, t - half_len + 1 + shift], one query at a time."""
    rows = [weights[..., t, t - half_len + 1 + shift] for t in queries]
    return torch.stack(rows, dim=-1).mean(-1)


def _expected_scores(weights, half_len):
    return _on_key(weights, half_len, 0, range(half_len, 2 * half_len))


def _score_mistakes(weights, half_len):
    seq = weights.shape[-1]
    second = range(half_len, seq)
    correct_keys = torch.stack([weights[..., t, t - half_len + 1] for t in second], dim=-1)
    mistakes = [
        (
            f"{REPEATED_TOKEN}, the earlier copy of the current token. An induction head attends to the "
            f"token *after* it, the one that came next last time: key t - half_len + 1.",
            _on_key(weights, half_len, -1, second),
        ),
        (
            f"{ONE_TOO_FAR}, one past the token that came next last time: use key t - half_len + 1.",
            _on_key(weights, half_len, 1, range(half_len, seq - 1)),
        ),
        (
            f"{FIRST_HALF_TOO}: query half_len - 1 is still in the first half (its token has not been seen "
            f"before). Average over the half_len queries t = half_len .. T - 1 only.",
            _on_key(weights, half_len, 0, range(half_len - 1, seq)),
        ),
        (
            f"{FIRST_HALF_TOO}, {ALL_T_QUERIES}: in the first half there is no earlier copy to look "
            f"at. Average over the half_len queries of the second half only (divide by half_len).",
            correct_keys.sum(-1) / seq,
        ),
        (
            f"{SUMMED}: the score is a mean weight between 0 and 1 whatever half_len is.",
            correct_keys.sum(-1),
        ),
        (
            f"{PREVIOUS_TOKEN}, the weight on key t - 1. The induction pattern looks half_len - 1 places back: "
            f"key t - half_len + 1.",
            _on_key(weights, half_len, half_len - 2, second),
        ),
        (
            f"{TRANSPOSED}: the last axis is the keys and the one before it the queries, so query t's weight on "
            f"key j is weights[..., t, j], not weights[..., j, t].",
            _on_key(weights.transpose(-2, -1), half_len, 0, second),
        ),
    ]
    mistakes.append(
        (
            f"{LAST_QUERY_DROPPED}, t = T - 1, and kept query half_len - 1 of the first half: the diagonal "
            f"starts at query half_len - 1, so drop its first entry, [..., 1:], not its last.",
            _on_key(weights, half_len, 0, range(half_len - 1, seq - 1)),
        )
    )
    # a loop over every query t = 0 .. T-1 reads key t - half_len + 1 < 0 in the first half, and Python
    # indexes such keys from the end of the row
    wrapped = torch.stack([weights[..., t, t - half_len + 1] for t in range(seq)], dim=-1)
    mistakes.append(
        (
            f"{FIRST_HALF_TOO}, and there the {NEGATIVE_WRAP} (weights[t, -3] is a key near the end of the row). "
            f"Loop over the second-half queries t = half_len .. T - 1 only.",
            wrapped.mean(-1),
        )
    )
    return mistakes


def _check_score_shape(got, weights):
    expected = tuple(weights.shape[:-2])
    if not isinstance(got, torch.Tensor) or tuple(got.shape) == expected:
        return expect_tensor(got, expected, what="scores [..., heads]", tuple_hint=ONE_TENSOR_HINT)
    shape, seq, heads = tuple(got.shape), weights.shape[-1], weights.shape[-3]
    if len(shape) == len(expected) + 1 and shape[:-1] == expected:
        raise Mistake(
            f"the scores have shape {shape}, expected {expected}: one number per head. {WRONG_AXIS}: average "
            f"the weights on key t - half_len + 1 over the query positions t, the last axis of what you took out."
        )
    if len(shape) == len(expected) and shape[-1] != heads and shape[:-1] == expected[:-1]:
        raise Mistake(
            f"the scores have shape {shape}, expected {expected} (heads on the last axis). {WRONG_AXIS}: "
            f"keep the head axis (dim -3 of the weights) and average over the query positions."
        )
    if seq in shape or len(shape) < len(expected):
        raise Mistake(
            f"the scores have shape {shape}, expected {expected}: {WRONG_AXIS}. Keep every axis before the "
            f"[T, T] maps and average over the query positions only."
        )
    expect_tensor(got, expected, what="scores [..., heads]", tuple_hint=ONE_TENSOR_HINT)


def _score_cases():
    g = generator(11)
    return [
        ("4 heads, half_len 5: weights [4, 10, 10]", _random_weights((4, 10, 10), g), 5),
        ("2 layers x 3 heads, half_len 6: weights [2, 3, 12, 12]", _random_weights((2, 3, 12, 12), g), 6),
        ("batch 2 x 5 heads, half_len 4, causal: weights [2, 5, 8, 8]", _random_weights((2, 5, 8, 8), g, True), 4),
        ("1 head, half_len 7, float64: weights [1, 14, 14]", _random_weights((1, 14, 14), g).double(), 7),
        ("6 heads, half_len 3: weights [3, 2, 6, 6, 6]", _random_weights((3, 2, 6, 6, 6), g), 3),
    ]


def _perfect_induction(heads, half_len):
    """Every second-half query puts all its weight on key t - half_len + 1: scores exactly 1."""
    seq = 2 * half_len
    weights = torch.zeros(heads, seq, seq)
    for t in range(seq):
        weights[:, t, max(0, t - half_len + 1) if t >= half_len else t] = 1.0
    return weights


@exercise(
    "induction_scores",
    solution=induction.induction_scores,
    hints=[
        "In the second half, the query at position t holds the same token as position t - half_len; the token "
        "that came after it last time is at t - half_len + 1. Only queries t = half_len .. T - 1 count.",
        "weights[..., t, t - half_len + 1] for those t lie on one diagonal of each T x T map: "
        "`weights.diagonal(offset=-(half_len - 1), dim1=-2, dim2=-1)` gives them for t = half_len - 1 .. T - 1.",
        "Drop the first entry of that diagonal (query half_len - 1, still the first half) and average the rest: "
        "`weights.diagonal(offset=-(half_len - 1), dim1=-2, dim2=-1)[..., 1:].mean(-1)`.",
    ],
)
def check_induction_scores(candidate):
    passed_heads = []  # head counts of the cases already passed
    cases = _score_cases() + [
        ("a perfect induction head, 3 heads, half_len 4: all scores 1", _perfect_induction(3, 4), 4)
    ]
    for description, weights, half_len in cases:
        heads = weights.shape[-3]
        try:
            got = call(candidate, weights, half_len)
            _check_score_shape(got, weights)
        except Mistake as mistake:
            # name a cause only where its control, the same case without it, comes out right
            fixed = [h for h in passed_heads if h != heads and _right_on(candidate, _with_heads(weights, h), half_len)]
            if weights.dim() > 3 and _right_on(candidate, weights.flatten(0, -4)[0], half_len):
                raise Mistake(
                    f"{LEADING_AXES}: it scores one map set [heads, T, T] right but not these weights "
                    f"({description}). Index from the end, weights[..., t, key], so that any axes before the "
                    f"heads (layers, batch) are carried along.\n(what went wrong: {mistake})"
                ) from None
            if fixed:
                raise Mistake(
                    f"{HEADS_FIXED}: it gave the right scores for {fixed[0]} heads but not for {heads} "
                    f"({description}). Read the head count from the weights (`weights.shape[-3]`), or better, "
                    f"work on whole tensors so the head axis is carried along.\n(what went wrong: {mistake})"
                ) from None
            raise
        mistakes = _score_mistakes(weights, half_len)
        expected = _expected_scores(weights, half_len)
        for counted in range(1, heads):  # a loop over a fixed, smaller head count leaves the others at 0
            mistakes.append(
                (
                    f"{HEADS_FIXED}: only the first {counted} of the {heads} heads got a score, the others "
                    f"are 0 ({description}). Read the head count from the weights (`weights.shape[-3]`), or "
                    f"work on whole tensors so the head axis is carried along.",
                    _padded(expected, counted),
                )
            )
        diagnose(
            got,
            expected,
            mistakes,
            what="scores [..., heads]",
            context=description,
            dtype=weights.dtype,
            tuple_hint=ONE_TENSOR_HINT,
        )
        expect_same_dtype(got, weights.dtype, "scores", description)
        passed_heads.append(heads)


def _right_on(candidate, weights, half_len):
    """A control: does the candidate score these weights right? (Its errors here are not reported.)"""
    try:
        got = call(candidate, weights, half_len)
    except Mistake:
        return False
    expected = _expected_scores(weights, half_len)
    return isinstance(got, torch.Tensor) and close(got, expected)


def _with_heads(weights, heads):
    """Random weights of the same shape, but with ``heads`` heads."""
    shape = (*weights.shape[:-3], heads, *weights.shape[-2:])
    return _random_weights(shape, generator(12)).to(weights.dtype)


def _padded(scores, heads):
    """The scores with every head from ``heads`` on set to 0 (a loop over a fixed, smaller head count)."""
    out = scores.clone()
    out[..., heads:] = 0
    return out


# --------------------------------------------------------------------------- k_composition


def _frobenius(m):
    return (m.double() ** 2).sum().sqrt()


def _composition_oracle(
    model, reader_of, order="reader first", normalise="both", layers=(0, 1), writer_of=induction.ov_matrix
):
    """[layer-1 heads, layer-0 heads] for one way of computing the score; the arguments plant mistakes
    (layers: the writer's layer, then the reader's)."""
    first, second = model.layers[layers[0]], model.layers[layers[1]]
    table = torch.zeros(second.num_heads, first.num_heads, dtype=torch.float64)
    for r in range(second.num_heads):
        for w in range(first.num_heads):
            reader, writer = reader_of(second, r).double(), writer_of(first, w).double()
            product = reader @ writer if order == "reader first" else writer @ reader
            if normalise == "spectral":
                norm = torch.linalg.matrix_norm(reader, 2) * torch.linalg.matrix_norm(writer, 2)
                table[r, w] = torch.linalg.matrix_norm(product, 2) / norm
                continue
            norm = {
                "both": _frobenius(reader) * _frobenius(writer),
                "none": 1.0,
                "reader": _frobenius(reader),
                "writer": _frobenius(writer),
            }[normalise]
            table[r, w] = _frobenius(product) / norm
    return table


def _qk(attention, head):
    return induction.qk_matrix(attention, head)


def _qk_transposed(attention, head):
    return induction.qk_matrix(attention, head).T


def _ov_transposed(attention, head):
    return induction.ov_matrix(attention, head).T


def _composition_mistakes(model):
    right = _composition_oracle(model, _qk)
    return [
        (
            f"{Q_COMPOSITION}: W_QK^T @ W_OV asks whether the *queries* read what the layer-0 head wrote. "
            f"The score is x_q^T W_QK x_k, and the key side x_k comes in from the right: K-composition is "
            f"W_QK @ W_OV.",
            _composition_oracle(model, _qk_transposed),
        ),
        (
            f"{V_COMPOSITION} (W_OV of the layer-1 head @ W_OV of the layer-0 head): that is whether its values "
            f"read the writer. Use its W_QK = qk_matrix(second, reader_head).",
            _composition_oracle(model, induction.ov_matrix),
        ),
        (
            f"{WRONG_ORDER} (W_OV @ W_QK): the writer's output enters the reader's keys, so the writer acts "
            f"first, on the right: W_QK @ W_OV.",
            _composition_oracle(model, _qk, order="writer first"),
        ),
        (
            f"{WRITER_TRANSPOSED} (W_QK @ W_OV^T): W_OV maps what the writer reads to what it writes into the "
            f"residual stream, and W_QK reads that from the right as it is, so the product is W_QK @ W_OV.",
            _composition_oracle(model, _qk, writer_of=_ov_transposed),
        ),
        (
            f"{NOT_NORMALISED}: ||W_QK W_OV||_F alone grows with the size of the weights. Divide by "
            f"||W_QK||_F * ||W_OV||_F, so the score lies between 0 and 1.",
            _composition_oracle(model, _qk, normalise="none"),
        ),
        (
            f"{ONE_NORM} (of W_QK): divide by ||W_QK||_F * ||W_OV||_F.",
            _composition_oracle(model, _qk, normalise="reader"),
        ),
        (
            f"{ONE_NORM} (of W_OV): divide by ||W_QK||_F * ||W_OV||_F.",
            _composition_oracle(model, _qk, normalise="writer"),
        ),
        (
            f"{SPECTRAL} (the largest singular value, ord=2): the score of Elhage et al. uses the Frobenius norm, "
            f"torch.linalg.matrix_norm(m) (the default, ord='fro').",
            _composition_oracle(model, _qk, normalise="spectral"),
        ),
        (
            f"{LAYERS_SWAPPED}: rows are the layer-1 heads (the readers), columns the layer-0 heads "
            f"(the writers); you put the layer-0 heads first.",
            right.T,
        ),
        (
            f"{WEIGHTS_FROM_WRONG_LAYERS}: the reader is a layer-1 head, qk_matrix(model.layers[1], r), and the "
            f"writer a layer-0 head, ov_matrix(model.layers[0], w); layer 0 writes before layer 1 reads.",
            _composition_oracle(model, _qk, layers=(1, 0)),
        ),
    ]


def _composition_models():
    cases = []
    for description, d_model, heads in (
        ("d_model 16, 4 heads", 16, 4),
        ("d_model 12, 3 heads", 12, 3),
        ("d_model 8, 2 heads", 8, 2),
    ):
        torch.manual_seed(0)  # the checker's own models; preserved_state puts the learner's seed back
        cases.append((description, induction.AttentionOnly(vocab_size=7, max_len=6, d_model=d_model, num_heads=heads)))
    return cases


@exercise(
    "k_composition",
    solution=induction.k_composition,
    hints=[
        "For every layer-1 head r (rows) and layer-0 head w (columns): reader = qk_matrix(model.layers[1], r), "
        "writer = ov_matrix(model.layers[0], w).",
        "The key of the layer-1 head is computed from x_k, and the writer's part of x_k is W_OV x: so the product "
        "is reader @ writer (the writer acts first, on the right).",
        "score = torch.linalg.matrix_norm(reader @ writer) / (torch.linalg.matrix_norm(reader) * "
        "torch.linalg.matrix_norm(writer)); loop over range(model.layers[1].num_heads) and range(model.layers[0].num_heads).",
    ],
)
def check_k_composition(candidate):
    passed_heads = []
    for description, model in _composition_models():
        heads = model.num_heads
        expected = _composition_oracle(model, _qk)
        try:
            with torch.no_grad():
                got = call(candidate, model)
            if isinstance(got, torch.Tensor) and tuple(got.shape) != tuple(expected.shape) and passed_heads:
                raise Mistake(f"the table has shape {tuple(got.shape)}, expected {tuple(expected.shape)}")
        except Mistake as mistake:
            if passed_heads:
                raise Mistake(
                    f"{HEADS_FIXED}: it gave the right table for {passed_heads[0]} heads per layer but not for "
                    f"{heads} ({description}). Loop over range(model.layers[0].num_heads) and "
                    f"range(model.layers[1].num_heads).\n(what went wrong: {mistake})"
                ) from None
            raise
        if isinstance(got, torch.Tensor):
            got = got.detach()
        diagnose(
            got,
            expected.float(),
            _composition_mistakes(model),
            what="K-composition table",
            context=description,
            tuple_hint=ONE_TENSOR_HINT,
        )
        passed_heads.append(heads)
