"""Lesson 05's exercise `training_step`: the solution passes, each usual mistake gets its own message.

The mistakes are written the way a learner writes them (a training step with one thing
wrong), not taken from the checker's list.
"""

import time

import pytest
import torch
import torch.nn.functional as F

from course_utils.exercises import check, solution
from course_utils.exercises import transformer_layer as tl
from course_utils.toy_task import ToyTask, train, training_step
from course_utils.transformer import TinyTransformer
from tests.exercises.asserts import assert_caught

ID = "training_step"


def run(candidate):
    return check(ID, candidate, quiet=True)


def learner_step(
    model,
    optimizer,
    inputs,
    targets,
    *,
    train_mode=True,
    loss="flatten",
    zero_grad="before backward",
    backward=True,
    step="after backward",
    returns="item",
):
    """A learner's training step, with switches for the usual mistakes."""
    if train_mode:
        model.train()
    logits = model(inputs)
    vocab = logits.shape[-1]
    losses = {
        "flatten": lambda: F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1)),
        "permute": lambda: F.cross_entropy(logits.permute(0, 2, 1), targets),
        "no reshape": lambda: F.cross_entropy(logits, targets),
        "sum": lambda: F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1), reduction="sum"),
        "softmax first": lambda: F.cross_entropy(torch.softmax(logits, dim=-1).reshape(-1, vocab), targets.reshape(-1)),
        "nll on logits": lambda: F.nll_loss(logits.view(-1, vocab), targets.view(-1)),
        "transposed flatten": lambda: F.cross_entropy(logits.transpose(1, 2).reshape(-1, vocab), targets.reshape(-1)),
        "rows of seq_len": lambda: F.cross_entropy(logits.reshape(-1, logits.shape[1]), targets.reshape(-1)),
    }
    value = losses[loss]()
    if step == "before backward":
        optimizer.step()
    if zero_grad == "before backward":
        optimizer.zero_grad()
    if backward:
        value.backward()
    if zero_grad == "after backward":
        model.zero_grad()
    if step == "after backward":
        optimizer.step()
    if returns == "tensor":
        return value
    if returns == "nothing":
        return None
    if returns == "loss after the update":
        with torch.no_grad():
            return F.cross_entropy(model(inputs).reshape(-1, vocab), targets.reshape(-1)).item()
    return value.item()


def planted(**switches):
    def candidate(model, optimizer, inputs, targets):
        return learner_step(model, optimizer, inputs, targets, **switches)

    return candidate


def test_reference_solution_passes():
    assert solution(ID) is training_step
    result = run(training_step)
    assert result.passed, result.message


@pytest.mark.parametrize("loss", ["flatten", "permute"])
def test_learner_style_correct_versions_pass(loss):
    result = run(planted(loss=loss))
    assert result.passed, result.message


def test_stub_is_not_attempted():
    def stub(model, optimizer, inputs, targets):
        raise NotImplementedError

    assert run(stub).status == "not attempted"


def test_gradients_accumulate_without_zero_grad():
    assert_caught(ID, planted(zero_grad="never"), tl.STALE_GRADIENTS, "zero_grad")


def test_zero_grad_between_backward_and_step():
    assert_caught(ID, planted(zero_grad="after backward"), tl.NO_GRADIENTS, "BEFORE backward")


def test_backward_forgotten():
    assert_caught(ID, planted(backward=False), tl.NO_GRADIENTS, "loss.backward()")


def test_step_forgotten():
    assert_caught(ID, planted(step="never"), tl.NO_STEP, "optimizer.step()")


@pytest.mark.parametrize("zero_grad", ["before backward", "never"])
def test_step_before_backward(zero_grad):
    assert_caught(ID, planted(step="before backward", zero_grad=zero_grad), tl.STEP_BEFORE_BACKWARD)


def test_loss_over_the_wrong_axis():
    assert_caught(ID, planted(loss="no reshape"), tl.CLASSES_ON_AXIS_1)


def test_flattened_to_the_wrong_row_length():
    assert_caught(ID, planted(loss="rows of seq_len"), tl.ROWS_DIFFER, "reshape(-1, logits.shape[-1])")


def test_summed_loss():
    assert_caught(ID, planted(loss="sum"), tl.LOSS_SUMMED)


def test_softmax_before_cross_entropy():
    assert_caught(ID, planted(loss="softmax first"), tl.SOFTMAX_FIRST)


def test_nll_loss_on_logits():
    assert_caught(ID, planted(loss="nll on logits"), tl.NLL_ON_LOGITS)


def test_scrambled_flatten():
    assert_caught(ID, planted(loss="transposed flatten"), tl.PAIRED_WRONGLY)


def test_returning_the_tensor():
    assert_caught(ID, planted(returns="tensor"), tl.RETURN_FLOAT, "not the tensor")


def test_returning_nothing():
    assert_caught(ID, planted(returns="nothing"), "returned None", tl.RETURN_FLOAT)


def test_returning_the_loss_after_the_update():
    assert_caught(ID, planted(returns="loss after the update"), tl.LOSS_AFTER_UPDATE)


def test_model_left_in_eval_mode():
    assert_caught(ID, planted(train_mode=False), tl.LEFT_IN_EVAL, "model.train()")


def test_check_is_fast_and_leaves_global_random_state_alone():
    run(training_step)  # first call pays for imports
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    start = time.perf_counter()
    run(training_step)
    elapsed = time.perf_counter() - start
    assert torch.equal(torch.rand(3), expected)
    assert elapsed < 2.0, f"the check took {elapsed:.2f} s"


def test_train_runs_the_given_step_and_wants_a_float():
    task = ToyTask("sort", 4, 5)
    held_out = task.held_out(20)
    calls = []

    def counting_step(model, optimizer, inputs, targets):
        calls.append(inputs.shape)
        return training_step(model, optimizer, inputs, targets)

    history = train(TinyTransformer(5, 8, 2, 1, max_len=4), task, held_out, steps=3, progress=False, step=counting_step)
    assert len(calls) == 3 and len(history["loss"]) == 3

    with pytest.raises(TypeError, match="Python float"):
        train(
            TinyTransformer(5, 8, 2, 1, max_len=4),
            task,
            held_out,
            steps=1,
            progress=False,
            step=planted(returns="tensor"),
        )
