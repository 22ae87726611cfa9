"""Lesson 05's exercise: the solution passes and each planted mistake gets its own message.

The planted mistakes are written the way a learner would write them (from the
layer's sublayers), not taken from the checker's own list.
"""

import torch
import torch.nn.functional as F

from course_utils.exercises import check, solution
from course_utils.exercises import transformer_layer as tl
from tests.exercises.asserts import assert_caught

ID = "encoder_layer_forward"


def run(candidate):
    return check(ID, candidate, quiet=True)


def learner_layer(
    layer,
    x,
    mask=None,
    *,
    attention_residual=True,
    ffn_residual=True,
    honour_norm_first=True,
    pass_mask=True,
    own_dropout=False,
    layer_dropout=True,
    swap_norms=False,
    norm_then_add=False,
    pre_overwrites_stream=False,
    pre_final_norm=False,
    call_layer=False,
):
    """A learner's forward pass with switches for the typical mistakes."""
    if call_layer:
        return layer(x, mask)
    n1, n2 = (layer.norm2, layer.norm1) if swap_norms else (layer.norm1, layer.norm2)
    m = mask if pass_mask else None

    def drop(h):
        if own_dropout:
            return F.dropout(h, 0.1)  # training=True by default: the bug
        return layer.dropout(h) if layer_dropout else h

    def attend(h):
        return drop(layer.self_attention(h, h, h, m))

    def ffn(h):
        return drop(layer.feed_forward(h))

    if layer.norm_first and honour_norm_first:
        if pre_overwrites_stream:
            x = n1(x)
            x = x + attend(x)
            x = n2(x)
            return x + ffn(x)
        h = x + attend(n1(x)) if attention_residual else attend(n1(x))
        out = h + ffn(n2(h)) if ffn_residual else ffn(n2(h))
        return n2(out) if pre_final_norm else out
    if norm_then_add:
        h = x + n1(attend(x))
        return h + n2(ffn(h))
    h = n1(x + attend(x)) if attention_residual else n1(attend(x))
    return n2(h + ffn(h)) if ffn_residual else n2(ffn(h))


def planted(**switches):
    def candidate(layer, x, mask=None):
        return learner_layer(layer, x, mask, **switches)

    return candidate


def test_reference_solution_passes():
    result = run(solution(ID))
    assert result.passed, result.message


def test_learner_style_correct_version_passes():
    result = run(planted())
    assert result.passed, result.message


def test_stub_is_not_attempted():
    def stub(layer, x, mask=None):
        raise NotImplementedError

    assert run(stub).status == "not attempted"


def test_missing_attention_residual():
    assert_caught(ID, planted(attention_residual=False), tl.NO_ATTENTION_RESIDUAL)


def test_missing_feed_forward_residual():
    assert_caught(ID, planted(ffn_residual=False), tl.NO_FFN_RESIDUAL)


def test_pre_and_post_norm_mixed_up():
    # always post-norm: passes the post-norm cases, caught on the pre-norm layer
    assert_caught(ID, planted(honour_norm_first=False), tl.WANTS_PRE_NORM)

    def always_pre(layer, x, mask=None):
        h = x + layer.dropout(layer.self_attention(*(layer.norm1(x),) * 3, mask))
        return h + layer.dropout(layer.feed_forward(layer.norm2(h)))

    assert_caught(ID, always_pre, tl.WANTS_POST_NORM)


def test_norm_before_the_residual_add():
    assert_caught(ID, planted(norm_then_add=True), tl.NORM_BEFORE_ADD)


def test_pre_norm_overwrites_residual_stream():
    assert_caught(ID, planted(pre_overwrites_stream=True), tl.PRE_NORM_STREAM)


def test_pre_norm_with_final_norm():
    assert_caught(ID, planted(pre_final_norm=True), tl.PRE_FINAL_NORM)


def test_norms_swapped():
    assert_caught(ID, planted(swap_norms=True), tl.NORMS_SWAPPED)


def test_mask_not_passed():
    assert_caught(ID, planted(pass_mask=False), tl.MASK_UNUSED)


def test_own_dropout_active_in_eval():
    assert_caught(ID, planted(own_dropout=True), tl.OWN_DROPOUT, "layer.dropout")


def test_layer_dropout_left_out_in_training():
    assert_caught(ID, planted(layer_dropout=False), tl.NO_LAYER_DROPOUT)


def test_dropout_on_the_residual_sum():
    def candidate(layer, x, mask=None):  # written independently of the checker's model of the mistake
        def attend(h):
            return layer.self_attention(h, h, h, mask)

        if layer.norm_first:
            x = layer.dropout(x + attend(layer.norm1(x)))
            return layer.dropout(x + layer.feed_forward(layer.norm2(x)))
        x = layer.norm1(layer.dropout(x + attend(x)))
        return layer.norm2(layer.dropout(x + layer.feed_forward(x)))

    assert_caught(ID, candidate, tl.DROPOUT_ON_SUM, "before the residual addition")


def test_calling_the_layer_itself_is_refused():
    assert_caught(ID, planted(call_layer=True), tl.LAYER_CALLED)


def test_wrong_shape_and_exceptions_are_explained():
    assert_caught(ID, lambda layer, x, mask=None: x[:, 0], "shape")
    assert_caught(ID, lambda layer, x, mask=None: layer.feed_forward(x.transpose(1, 2)), "raised")


def test_check_leaves_global_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    run(solution(ID))
    assert torch.equal(torch.rand(3), expected)
