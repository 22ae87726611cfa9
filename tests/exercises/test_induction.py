"""Lesson 11's exercises: the solutions pass, each planted mistake (as a learner would write it) gets its own message."""

import pytest
import torch

from course_utils import induction
from course_utils.exercises import check, checking, solution
from course_utils.exercises import induction as ex
from tests.exercises.asserts import assert_caught, assert_each_message_names_only_its_mistake, assert_passes

# --------------------------------------------------------------------------- induction_scores


def loop_scores(weights, half_len):
    """The score written as a loop over the second-half queries: right."""
    total = 0
    for t in range(half_len, 2 * half_len):
        total = total + weights[..., t, t - half_len + 1]
    return total / half_len


def diagonal_scores(weights, half_len):
    """Right, with a slice of the key axis instead of the diagonal."""
    t = torch.arange(half_len, 2 * half_len)
    return weights[..., t, t - half_len + 1].mean(-1)


def on_repeated_token(weights, half_len):
    t = torch.arange(half_len, 2 * half_len)
    return weights[..., t, t - half_len].mean(-1)


def one_too_far(weights, half_len):
    t = torch.arange(half_len, 2 * half_len - 1)
    return weights[..., t, t - half_len + 2].mean(-1)


def whole_diagonal(weights, half_len):
    # includes query half_len - 1, the last of the first half
    return weights.diagonal(offset=-(half_len - 1), dim1=-2, dim2=-1).mean(-1)


def divided_by_all_queries(weights, half_len):
    t = torch.arange(half_len, 2 * half_len)
    return weights[..., t, t - half_len + 1].sum(-1) / (2 * half_len)


def every_query_wrapping(weights, half_len):
    rows = [weights[..., t, t - half_len + 1] for t in range(2 * half_len)]  # t - half_len + 1 < 0 wraps
    return torch.stack(rows, dim=-1).mean(-1)


def summed(weights, half_len):
    t = torch.arange(half_len, 2 * half_len)
    return weights[..., t, t - half_len + 1].sum(-1)


def transposed(weights, half_len):
    t = torch.arange(half_len, 2 * half_len)
    return weights[..., t - half_len + 1, t].mean(-1)


def previous_token(weights, half_len):
    t = torch.arange(half_len, 2 * half_len)
    return weights[..., t, t - 1].mean(-1)


def mean_over_heads(weights, half_len):
    t = torch.arange(half_len, 2 * half_len)
    return weights[..., t, t - half_len + 1].mean(-2)  # over the heads: [..., T/2] instead of [..., heads]


def no_mean(weights, half_len):
    t = torch.arange(half_len, 2 * half_len)
    return weights[..., t, t - half_len + 1]


def four_heads_loop(weights, half_len):
    """A loop over a head count fixed at 4 (the lesson's model has 4)."""
    scores = torch.zeros(weights.shape[:-2], dtype=weights.dtype)
    t = torch.arange(half_len, 2 * half_len)
    for h in range(4):
        scores[..., h] = weights[..., h, t, t - half_len + 1].mean(-1)
    return scores


def four_heads_reshape(weights, half_len):
    t = torch.arange(half_len, 2 * half_len)
    per_head = weights[..., t, t - half_len + 1].mean(-1)
    return per_head.reshape(*weights.shape[:-3], 4)


def no_leading_axes(weights, half_len):
    """Right on [heads, T, T] only: weights[:, t, key] indexes the wrong axes once layers or a batch come first."""
    t = torch.arange(half_len, 2 * half_len)
    return weights[:, t, t - half_len + 1].mean(-1)


def three_heads_padding(weights, half_len):
    """Fixed at 3 heads, filling any more heads with zeros: right for 3 heads or fewer only."""
    scores = torch.zeros(weights.shape[:-2], dtype=weights.dtype)
    t = torch.arange(half_len, 2 * half_len)
    for h in range(min(3, weights.shape[-3])):
        scores[..., h] = weights[..., h, t, t - half_len + 1].mean(-1)
    return scores


SCORE_MISTAKES = {
    "weight on t - half_len": (on_repeated_token, ex.REPEATED_TOKEN),
    "weight on t - half_len + 2": (one_too_far, ex.ONE_TOO_FAR),
    "the whole diagonal": (whole_diagonal, ex.FIRST_HALF_TOO),
    "divided by T": (divided_by_all_queries, ex.FIRST_HALF_TOO),
    "every query, wrapping": (every_query_wrapping, ex.FIRST_HALF_TOO),
    "summed": (summed, ex.SUMMED),
    "transposed": (transposed, ex.TRANSPOSED),
    "previous token": (previous_token, ex.PREVIOUS_TOKEN),
    "mean over heads": (mean_over_heads, ex.WRONG_AXIS),
    "no mean": (no_mean, ex.WRONG_AXIS),
    "4 heads in a loop": (four_heads_loop, ex.HEADS_FIXED),
    "4 heads in a reshape": (four_heads_reshape, ex.HEADS_FIXED),
    "no axes before the heads": (no_leading_axes, ex.LEADING_AXES),
    "diagonal without its last entry": (
        lambda weights, half_len: weights.diagonal(-(half_len - 1), -2, -1)[..., :-1].mean(-1),
        ex.LAST_QUERY_DROPPED,
    ),
    "float32 arithmetic": (
        lambda weights, half_len: loop_scores(weights.float(), half_len).to(weights.dtype),
        checking.FLOAT32_PRECISION,
    ),
}


def test_induction_scores_solution_is_the_reference_and_passes():
    assert solution("induction_scores") is induction.induction_scores
    assert_passes("induction_scores", induction.induction_scores)


@pytest.mark.parametrize("candidate", [loop_scores, diagonal_scores], ids=lambda f: f.__name__)
def test_other_right_ways_pass(candidate):
    assert_passes("induction_scores", candidate)


def test_stub_is_not_attempted():
    def stub(weights, half_len):
        raise NotImplementedError

    assert check("induction_scores", stub, quiet=True).status == "not attempted"


@pytest.mark.parametrize("name", list(SCORE_MISTAKES))
def test_each_score_mistake_is_named(name):
    candidate, phrase = SCORE_MISTAKES[name]
    assert_caught("induction_scores", candidate, phrase)


@pytest.mark.parametrize(
    ("candidate", "words"),
    [(divided_by_all_queries, ex.ALL_T_QUERIES), (every_query_wrapping, ex.NEGATIVE_WRAP)],
    ids=["divided by T", "wrapping"],
)
def test_the_two_other_first_half_mistakes_say_what_happened(candidate, words):
    assert_caught("induction_scores", candidate, words)


def test_a_head_count_fixed_at_three_is_named():
    # right on every map of 3 heads or fewer, zeros for the others
    assert_caught("induction_scores", three_heads_padding, ex.HEADS_FIXED)


def test_score_messages_name_only_their_mistake():
    assert_each_message_names_only_its_mistake(
        SCORE_MISTAKES, lambda candidate: check("induction_scores", candidate, quiet=True)
    )


# --------------------------------------------------------------------------- k_composition


def composition_loop(
    model, reader_of=induction.qk_matrix, order="right", normalise=True, swap=False, heads=None, layers=(0, 1)
):
    """The table as a learner writes it; each argument plants one mistake."""
    first, second = model.layers[layers[0]], model.layers[layers[1]]
    n_read = second.num_heads if heads is None else heads
    n_write = first.num_heads if heads is None else heads
    table = torch.zeros(n_read, n_write)
    for r in range(n_read):
        for w in range(n_write):
            reader, writer = reader_of(second, r), induction.ov_matrix(first, w)
            product = {
                "right": reader @ writer,
                "writer first": writer @ reader,
                "writer transposed": reader @ writer.T,
            }[order]
            score = torch.linalg.matrix_norm(product)
            if normalise is True:
                score = score / (torch.linalg.matrix_norm(reader) * torch.linalg.matrix_norm(writer))
            elif normalise == "reader":
                score = score / torch.linalg.matrix_norm(reader)
            elif normalise == "spectral":
                score = torch.linalg.matrix_norm(product, 2) / (
                    torch.linalg.matrix_norm(reader, 2) * torch.linalg.matrix_norm(writer, 2)
                )
            table[r, w] = score
    return table.T if swap else table


COMPOSITION_MISTAKES = {
    "Q-composition": (
        lambda m: composition_loop(m, reader_of=lambda a, h: induction.qk_matrix(a, h).T),
        ex.Q_COMPOSITION,
    ),
    "V-composition": (lambda m: composition_loop(m, reader_of=induction.ov_matrix), ex.V_COMPOSITION),
    "wrong order": (lambda m: composition_loop(m, order="writer first"), ex.WRONG_ORDER),
    "no norms": (lambda m: composition_loop(m, normalise=False), ex.NOT_NORMALISED),
    "one norm": (lambda m: composition_loop(m, normalise="reader"), ex.ONE_NORM),
    "spectral": (lambda m: composition_loop(m, normalise="spectral"), ex.SPECTRAL),
    "transposed table": (lambda m: composition_loop(m, swap=True), ex.LAYERS_SWAPPED),
    "weights from the wrong layers": (lambda m: composition_loop(m, layers=(1, 0)), ex.WEIGHTS_FROM_WRONG_LAYERS),
    "4 heads fixed": (lambda m: composition_loop(m, heads=4), ex.HEADS_FIXED),
    "writer transposed": (lambda m: composition_loop(m, order="writer transposed"), ex.WRITER_TRANSPOSED),
}


def test_k_composition_solution_is_the_reference_and_passes():
    assert solution("k_composition") is induction.k_composition
    assert_passes("k_composition", induction.k_composition)
    assert_passes("k_composition", composition_loop)


def test_k_composition_stub_is_not_attempted():
    def stub(model):
        raise NotImplementedError

    assert check("k_composition", stub, quiet=True).status == "not attempted"


@pytest.mark.parametrize("name", list(COMPOSITION_MISTAKES))
def test_each_composition_mistake_is_named(name):
    candidate, phrase = COMPOSITION_MISTAKES[name]
    assert_caught("k_composition", candidate, phrase)


def test_composition_messages_name_only_their_mistake():
    assert_each_message_names_only_its_mistake(
        COMPOSITION_MISTAKES, lambda candidate: check("k_composition", candidate, quiet=True)
    )


def test_checking_does_not_change_the_learners_random_state():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check("k_composition", induction.k_composition, quiet=True)
    assert torch.equal(torch.rand(3), expected)


# --------------------------------------------------------------------------- unusual outputs


@pytest.mark.parametrize(
    ("convert", "words"),
    [
        (lambda t: t.tolist(), "torch.Tensor"),
        (lambda t: t.detach().numpy(), "torch.Tensor"),
        (lambda t: None, "return"),
        (lambda t: t * float("nan"), "NaN"),
        (lambda t: t[None], "shape"),
    ],
    ids=["list", "numpy", "None", "NaN", "extra axis"],
)
@pytest.mark.parametrize("exercise_id", ["induction_scores", "k_composition"])
def test_unusual_outputs_get_a_message_about_the_output_not_a_checker_failure(exercise_id, convert, words):
    reference = solution(exercise_id)
    result = check(exercise_id, lambda *args: convert(reference(*args)), quiet=True)
    assert result.status == "not yet"
    assert words in result.message, result.message
    assert "course" not in result.message.lower()  # not reported as a bug in the course's checker


@pytest.mark.parametrize("exercise_id", ["induction_scores", "k_composition"])
def test_a_float64_answer_to_float32_input_is_named(exercise_id):
    reference = solution(exercise_id)
    result = check(exercise_id, lambda *args: reference(*args).double(), quiet=True)
    assert not result.passed and "float64" in result.message


def test_an_answer_that_requires_grad_passes():
    assert_passes("k_composition", lambda model: induction.k_composition(model).requires_grad_())


@pytest.mark.parametrize("name", ["induction_scores", "k_composition"])
def test_a_returned_tuple_is_not_blamed_on_attention(name):
    right = solution(name)
    message = check(name, lambda *args: (right(*args),), quiet=True).message
    assert checking.RETURNED_A_TUPLE in message and checking.ONE_TENSOR_HINT in message, message
    assert "scaled_dot_product_attention" not in message, message
