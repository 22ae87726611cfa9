"""show_solution prints the algorithm: no input checks and no private helper of the course.

A reference function opens with its input checks, ``_validate.<check>(...)`` statements
(course_utils._validate); show_solution leaves them out. These tests check that no shown
solution, for any exercise id, calls or imports a name of the course that starts with ``_``;
that the checks go out whole and nothing else does; and that the reference functions, which
keep their checks, still refuse bad input with the same messages (every solution that has
checks must be in BAD_INPUTS, so a new one needs a case here: tests/tools/test_lesson_completeness.py).
"""

import ast
import re
import textwrap
from types import SimpleNamespace

import pytest
import torch

from course_utils import (
    attention,
    efficient,
    flash,
    head_scores,
    induction,
    language_model,
    linear_attention,
    long_context,
    long_range,
    modern,
    recall,
    serving,
    softmax,
    translation,
    vision,
)
from course_utils.exercises import _without_input_checks, exercise_ids, show_solution


def _private_course_names(shown):
    """What ``shown`` takes from the course under a name starting with "_" (dunders aside)."""
    tree = ast.parse(shown)
    bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    bound |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments) for a in n.args + n.kwonlyargs}

    def private(name):
        return name.startswith("_") and name != "_" and not (name.startswith("__") and name.endswith("__"))

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "course_utils":
            found += [node.module] if any(private(part) for part in node.module.split(".")) else []
            found += [f"{node.module}.{a.name}" for a in node.names if private(a.name)]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if any(private(part) for part in a.name.split("."))]
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and private(node.id):
            found += [] if node.id in bound else [node.id]
        elif isinstance(node, ast.Attribute) and private(node.attr):
            owner = node.value
            found += [] if isinstance(owner, ast.Name) and owner.id == "self" else [ast.unparse(node)]
    return sorted(set(found))


def _shown(exercise_id, capsys):
    show_solution(exercise_id)
    return capsys.readouterr().out


@pytest.mark.parametrize("exercise_id", exercise_ids())
def test_no_shown_solution_calls_or_imports_a_private_helper(exercise_id, capsys):
    shown = _shown(exercise_id, capsys)
    found = _private_course_names(shown)
    assert not found, (
        f"show_solution({exercise_id!r}) shows private helpers of the course: {found}. Move an input check into "
        f"course_utils._validate and call it at the top of the function; give a helper of the algorithm a "
        f"public name.\n---\n{shown}"
    )


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("from course_utils.attention import _positive_int\n", ["course_utils.attention._positive_int"]),
        ("from course_utils import _validate\n", ["course_utils._validate"]),
        ("from course_utils._validate import qkv\n", ["course_utils._validate"]),
        ("import course_utils._validate\n", ["course_utils._validate"]),
        ("def f(x):\n    _check(x)\n    return x\n", ["_check"]),
        ("def f(q, k, v):\n    _validate.qkv(q, k, v)\n    return q\n", ["_validate"]),
        ("def f(model, t):\n    model._check_tokens(t)\n    return t\n", ["model._check_tokens"]),
    ],
)
def test_the_finder_catches_each_kind_of_private_name(code, expected):
    assert _private_course_names(code) == expected


def test_the_finder_leaves_ordinary_code_alone():
    code = textwrap.dedent(
        """
        import torch
        from course_utils.attention import causal_mask


        class Layer(torch.nn.Module):
            def __init__(self, d):
                super().__init__()
                self._d = d

            def forward(self, x):
                _scale = self._d ** 0.5
                batch, _, d = x.shape
                return x / _scale, causal_mask(d)
        """
    )
    assert _private_course_names(code) == []


CHECKED = textwrap.dedent(
    '''
    def f(x, n, mask=None):
        """Docstring."""
        _validate.tensor("x", x, 2,
                         "[..., seq_len, d]")
        n = _validate.positive_int(
            n, "n"
        )
        y = x * n  # the algorithm
        _validate.mask_fits(mask, y.shape, y.device)  # not at the top: stays, and the test above flags it
        return y


    class C:
        def forward(self, x):
            _validate.qkv(x, x, x)
            return x
    '''
)


def test_input_checks_go_out_whole_and_nothing_else_does():
    expected = textwrap.dedent(
        '''
        def f(x, n, mask=None):
            """Docstring."""
            y = x * n  # the algorithm
            _validate.mask_fits(mask, y.shape, y.device)  # not at the top: stays, and the test above flags it
            return y


        class C:
            def forward(self, x):
                return x
        '''
    )
    assert _without_input_checks(CHECKED) == expected


def test_a_function_of_checks_only_keeps_them():
    source = "def only_checks(x):\n    _validate.qkv(x, x, x)\n"
    assert _without_input_checks(source) == source


def _z(*shape, dtype=torch.float32):
    return torch.zeros(*shape, dtype=dtype)


# exercise id -> [(a bad call of the reference, the error it raises, what its message says)]; the messages
# are the ones the reference functions gave before their checks moved to course_utils._validate
BAD_INPUTS = {
    "apply_rope": [
        (lambda: modern.apply_rope(_z(4, 8), torch.arange(3)), ValueError, "one position per token: x has 4 tokens"),
    ],
    "block_backward": [
        (
            lambda: flash.block_backward(_z(2, 4), _z(3, 4), _z(3, 4), _z(2, 4), _z(3), _z(2), 0.5),
            ValueError,
            "lse_i and d_i must have shape (2,), one number per query of q_i, got (3,) and (2,)",
        )
    ],
    "causal_mask": [(lambda: attention.causal_mask(0), ValueError, "seq_len must be a positive int, got 0 (int)")],
    "combine_heads": [
        (
            lambda: attention.combine_heads(_z(2, 3, 4)),
            ValueError,
            "combine_heads expects a [batch, heads, seq_len, head_dim] tensor, got shape (2, 3, 4)",
        )
    ],
    "decode_with_cache": [
        (
            lambda: language_model.decode_with_cache(
                SimpleNamespace(_check_tokens=lambda tokens: None), _z(1, 2, dtype=torch.long), 0
            ),
            ValueError,
            "steps must be a positive int, got 0",
        )
    ],
    "delta_rule": [
        (
            lambda: linear_attention.delta_rule(_z(5, 3), _z(4, 3), _z(4, 2), _z(4)),
            ValueError,
            "q and k must have the same shape [..., T, d_k], got [5, 3] and [4, 3]",
        )
    ],
    "document_mask_mod": [
        (lambda: modern.document_mod(_z(3)), ValueError, "document_ids must be a 1-D integer tensor"),
    ],
    "filter_logits": [
        (lambda: language_model.filter_logits(_z(5), temperature=0), ValueError, "temperature must be a number > 0"),
        (lambda: language_model.filter_logits(_z(5), top_k=0), ValueError, "top_k must be None or an int >= 1"),
    ],
    "gradient_by_distance": [
        (
            lambda: long_range.gradient_by_distance(42, _z(1, 3, 2), [0], _z(2)),
            TypeError,
            "layer must be a function of x [B, T, d] -> [B, T, d_out], got int",
        )
    ],
    "grouped_query_attention": [
        (
            lambda: modern.grouped_query_attention(_z(1, 3, 4, 8), _z(1, 2, 4, 8), _z(1, 2, 4, 8), None),
            ValueError,
            "q has 3 heads, not a multiple of the 2 key/value heads",
        )
    ],
    "induction_scores": [
        (
            lambda: induction.induction_scores(torch.full((1, 6, 6), 1 / 6), 2),
            ValueError,
            "the sequence has T = 6 positions but half_len = 2",
        )
    ],
    "linear_attention_recurrent": [
        (
            lambda: linear_attention.linear_attention_recurrent(_z(0, 3), _z(0, 3), _z(0, 2)),
            ValueError,
            "the sequence is empty (T = 0)",
        )
    ],
    "multi_head_attention": [
        (
            lambda: attention.MultiHeadAttention(6, 4),
            ValueError,
            "d_model=6 must be divisible by num_heads=4 so every head gets d_model // num_heads features",
        ),
        (
            lambda: attention.MultiHeadAttention(8, 2)(_z(1, 3, 4), _z(1, 3, 4), _z(1, 3, 4)),
            ValueError,
            "query must have shape [batch, seq_len, d_model=8], got (1, 3, 4)",
        ),
    ],
    "next_token_loss": [
        (
            lambda: language_model.next_token_loss(_z(1, 1, 5), _z(1, 1, dtype=torch.long)),
            ValueError,
            "predicting the next token needs seq_len >= 2, got 1",
        )
    ],
    "occlude_patches": [
        (
            lambda: vision.occlude_patches(_z(1, 1, 4, 4), _z(1, 3, dtype=torch.bool), 2, _z(1, 1, 4, 4)),
            ValueError,
            "which must be a bool tensor [batch, num_patches] = [1, 4]",
        )
    ],
    "online_softmax": [
        (
            lambda: efficient.online_softmax(_z(3, dtype=torch.long), 2),
            ValueError,
            "x must be a non-empty floating-point tensor [..., n], got a torch.int64 tensor of shape (3,)",
        )
    ],
    "patchify": [(lambda: vision.patchify(_z(2, 16, 16, 3), 4), ValueError, "look channels-last")],
    "previous_token_score": [
        (lambda: head_scores.previous_token_score(torch.ones(1, 1)), ValueError, "needs at least 2 tokens, got 1"),
    ],
    "gather_blocks": [
        (
            lambda: serving.gather_blocks(_z(4, 2, 1, 3), [1, 4], 3),
            ValueError,
            "block ids [4] are not blocks of this pool (0..3)",
        )
    ],
    "chunk_mask": [
        (lambda: serving.chunk_mask(-1, 2), ValueError, "num_cached must be an int >= 0 (slots already in the cache)")
    ],
    "admit": [
        (lambda: serving.admit([3, 0], 0, 4, 4, 8), ValueError, "waiting_lengths must be a list of prompt lengths")
    ],
    "recall_sequences": [
        (
            lambda: recall.recall_sequences(
                _z(1, 2, dtype=torch.long), _z(1, 2, dtype=torch.long), torch.tensor([[2]])
            ),
            ValueError,
            "queries are indices of pairs, 0..1",
        )
    ],
    "recurrent_forward": [
        (
            lambda: long_range.recurrent_forward(_z(3, 2), _z(2, 4), _z(4, 4), _z(4), _z(4)),
            ValueError,
            "x must be [B, T, d_in] (batch first), got shape (3, 2) (one sequence [T, d_in]?",
        )
    ],
    "repeat_kv": [(lambda: modern.repeat_kv(_z(1, 2, 3, 4), 0), ValueError, "n_rep must be a positive int, got 0")],
    "running_logsumexp": [
        (lambda: flash.running_logsumexp([]), ValueError, "score_blocks must hold at least one block of scores"),
    ],
    "same_word_score": [
        (
            lambda: head_scores.same_word_score(torch.full((2, 2), 0.5), ["a"]),
            ValueError,
            "1 tokens for attention over 2 positions",
        )
    ],
    "sample_next_token": [
        (
            lambda: language_model.sample_next_token(_z(5)),
            ValueError,
            "logits must have shape [batch, vocab], got (5,)",
        ),
    ],
    "scaled_dot_product_attention": [
        (
            lambda: attention.scaled_dot_product_attention(
                _z(2, 3, 4), _z(2, 5, 4), _z(2, 5, 4), mask=torch.ones(2, 5)
            ),
            ValueError,
            "mask of shape (2, 5) does not broadcast to the scores' shape (2, 3, 5) ([..., L_q, L_k])",
        ),
        (
            lambda: attention.scaled_dot_product_attention(
                _z(3, 4), _z(5, 4), _z(5, 4), key_padding_mask=torch.ones(1, 5)
            ),
            ValueError,
            "key_padding_mask needs batched inputs q [batch, ..., L_q, d_k]",
        ),
        (lambda: attention.scaled_dot_product_attention(_z(3, 4), _z(5, 3), _z(5, 4)), ValueError, "same feature size"),
    ],
    "sliding_window_mask": [
        (lambda: modern.sliding_window_mask(4, 0), ValueError, "window must be a positive int, got 0 (int)"),
    ],
    "split_heads": [
        (lambda: attention.split_heads(_z(1, 3, 6), 4), ValueError, "d_model=6 is not divisible by num_heads=4"),
    ],
    "stable_softmax": [
        (
            lambda: softmax.stable_softmax(torch.tensor([1, 2])),
            TypeError,
            "softmax needs a floating-point tensor (e.g. float32), got torch.int64: use x.float()",
        )
    ],
    "swap_and_translate": [
        (
            lambda: translation.swap_and_translate(None, ["the blue car"], ["the dog"], 1),
            ValueError,
            "a donor must have as many words as its sentence",
        )
    ],
    "tiled_attention": [
        (
            lambda: efficient.tiled_attention(_z(2, 4), _z(3, 4), _z(3, 4), 0),
            ValueError,
            "block_size must be a positive int, got 0 (int)",
        )
    ],
    "yarn_frequencies": [
        (
            lambda: long_context.yarn_frequencies(16, 10000.0, 4.0, 128, beta_fast=1, beta_slow=32),
            ValueError,
            "beta_fast must be larger than beta_slow: turns over the trained length (YaRN: 32 and 1)",
        ),
        (
            lambda: long_context.yarn_frequencies(2, 10000.0, 4.0, 128),
            ValueError,
            "RoPE rotates pairs of features: head_dim must be even and at least 4, got 2",
        ),
        (
            lambda: long_context.yarn_frequencies(16, 10000.0, 0.5, 128),
            ValueError,
            "factor must be >= 1: how many times the trained length the text may be (1 changes nothing), got 0.5",
        ),
    ],
}


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [pytest.param(*case, id=f"{i}-{n}") for i, cases in BAD_INPUTS.items() for n, case in enumerate(cases)],
)
def test_the_reference_still_refuses_bad_input_clearly(call, error, message):
    with pytest.raises(error, match=re.escape(message)):
        call()
