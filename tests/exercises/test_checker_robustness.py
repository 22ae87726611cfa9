"""check() stays calm whatever the learner's code does, and says what happened in the learner's terms.

Each test plants one thing a learner really writes (swapped arguments, sys.exit, a float64
constant, an unsolved helper, `if mask:`, a missing `return`, an endless loop, ...) and asserts
on the message the learner then reads.
"""

import inspect
import math
import random
import re
import signal
import threading
import time

import numpy as np
import pytest
import torch
from torch import nn

from course_utils.exercises import _REGISTRY, check, exercise, exercise_ids, solution
from course_utils.exercises import checking as checking_module
from course_utils.exercises.checking import Mistake, call, close, diagnose, expect_tensor, time_limit


def _normalise(scores):
    return scores / scores.sum(dim=-1, keepdim=True)


def _attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask == 0, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def _message_of(fn, *args):
    with pytest.raises(Mistake) as caught:
        call(fn, *args)
    return str(caught.value)


# --------------------------------------------------------------------------- 1. check never raises


def test_swapped_arguments_name_the_right_call():
    result = check(_normalise, "normalise_scores", quiet=True)
    assert not result.passed and result.status == "not yet"
    assert "swapped" in result.message
    assert 'check("normalise_scores", _normalise)' in result.message


def test_an_id_that_is_not_a_string_names_the_expected_call():
    result = check(3, _normalise, quiet=True)
    assert not result.passed
    assert "exercise id, a string" in result.message and "int" in result.message
    assert 'check("exercise_id", _normalise)' in result.message


def test_sys_exit_in_learner_code_is_caught_and_explained():
    import sys

    def quits(scores):
        sys.exit()

    result = check("normalise_scores", quits, quiet=True)
    assert not result.passed
    assert checking_module.EXIT_ADVICE in result.message


def test_keyboard_interrupt_still_stops_the_check():
    def interrupted(scores):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        check("normalise_scores", interrupted, quiet=True)


@pytest.fixture
def register():
    """Register throw-away exercises for one test, and remove them afterwards."""
    added = []

    def add(exercise_id, checker):
        exercise(exercise_id, solution=_normalise)(checker)
        added.append(exercise_id)

    yield add
    for exercise_id in added:
        _REGISTRY.pop(exercise_id, None)


def test_a_failure_in_the_checker_is_not_blamed_on_the_learner(register):
    def buggy_checker(candidate):
        got = call(candidate, torch.ones(2, 3))
        diagnose(got, [0.5, 0.5])  # a checker bug: the reference is a list, diagnose needs a tensor

    register("_buggy_checker", buggy_checker)
    result = check("_buggy_checker", _normalise, quiet=True)
    assert not result.passed
    assert "bug in the course, not in your code" in result.message
    assert "AttributeError" in result.message and "report" in result.message
    assert "your code raised" not in result.message


def test_learner_code_run_directly_by_a_checker_is_still_the_learners_error(register):
    def direct_checker(candidate):
        candidate(torch.ones(2))  # without call(): the error reaches check() as it is

    def broken(scores):
        return scores.permute(1, 0)

    register("_direct_checker", direct_checker)
    result = check("_direct_checker", broken, quiet=True)
    assert "your code raised RuntimeError" in result.message
    assert "bug in the course" not in result.message


def test_a_value_that_is_not_callable_is_explained():
    result = check("normalise_scores", _normalise(torch.ones(3)), quiet=True)
    assert checking_module.NOT_CALLABLE in result.message


# --------------------------------------------------------------------------- 2. float64 outputs


def _promoted(scores):
    # a numpy array turned into a tensor is float64, and float64 * float32 gives float64
    ones = torch.from_numpy(np.ones(scores.shape[-1]))
    return scores / scores.sum(dim=-1, keepdim=True) * ones


def test_a_float64_output_is_named_as_the_mistake():
    result = check("normalise_scores", _promoted, quiet=True)
    assert not result.passed and result.status == "not yet"
    assert checking_module.FLOAT64_OUTPUT in result.message
    assert "your code raised" not in result.message


def test_float64_is_named_for_attention_outputs_too():
    def promoted_attention(q, k, v, mask=None):
        out, weights = _attention(q, k, v, mask)
        return out.double(), weights.double()

    result = check("scaled_dot_product_attention", promoted_attention, quiet=True)
    assert checking_module.FLOAT64_OUTPUT in result.message
    assert "raised" not in result.message


def test_comparisons_accept_any_floating_dtype():
    a32 = torch.tensor([1.0, 2.0])
    assert close(a32.double(), a32) and close(a32, a32.double()) and close(a32.half(), a32)
    with pytest.raises(Mistake, match=checking_module.FLOAT64_OUTPUT):
        diagnose(a32.double(), a32)
    with pytest.raises(Mistake, match="float64"):
        expect_tensor(a32.double(), (2,), dtype=torch.float32)
    diagnose(a32, a32.double())  # a float64 reference is fine for a float32 answer


# --------------------------------------------------------------------------- 3. unsolved helpers


def test_an_unsolved_helper_is_named_with_the_import_of_the_course_version():
    def stable_softmax(x, dim=-1):  # the learner's lesson-02 stub, still unsolved
        raise NotImplementedError

    def attention(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        weights = stable_softmax(scores, dim=-1)
        return weights @ v, weights

    result = check("scaled_dot_product_attention", attention, quiet=True)
    assert result.status == "not yet"
    assert "`stable_softmax`" in result.message and "stub" in result.message
    assert "from course_utils.softmax import stable_softmax" in result.message
    assert "fill in the cell above" not in result.message


def test_an_unsolved_helper_without_a_course_version_is_named():
    def my_helper(scores):
        raise NotImplementedError

    def normalise(scores):
        return my_helper(scores)

    result = check("normalise_scores", normalise, quiet=True)
    assert "`my_helper`" in result.message and result.status == "not yet"


def test_a_method_stub_of_the_candidate_class_is_not_attempted():
    class Stub(solution("multi_head_attention")):  # __init__ done, forward still a stub
        def forward(self, query, key, value, mask=None):
            raise NotImplementedError

    assert check("multi_head_attention", Stub, quiet=True).status == "not attempted"


def test_a_module_without_forward_is_told_so():
    reference = solution("multi_head_attention")

    class Misspelled(reference):
        forward = nn.Module.forward  # as if `def forward` had a typo: nn.Module's placeholder is used

    result = check("multi_head_attention", Misspelled, quiet=True)
    assert checking_module.NO_FORWARD in result.message and result.status == "not yet"


# --------------------------------------------------------------------------- 4. common learner errors


def test_if_mask_on_a_tensor_gets_its_own_advice():
    def attention(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return weights @ v, weights

    result = check("scaled_dot_product_attention", attention, quiet=True)
    assert "`if mask is not None:`" in result.message


def test_a_module_without_super_init_gets_its_own_advice():
    reference = solution("multi_head_attention")

    class NoSuper(reference):
        def __init__(self, d_model, num_heads):
            self.query_linear = nn.Linear(d_model, d_model, bias=False)

    result = check("multi_head_attention", NoSuper, quiet=True)
    assert "super().__init__()" in result.message


def test_a_missing_return_is_said_directly():
    def no_return(scores):
        scores / scores.sum(dim=-1, keepdim=True)

    result = check("normalise_scores", no_return, quiet=True)
    assert result.message.startswith(checking_module.RETURNED_NONE)
    assert "shape" not in result.message
    with pytest.raises(Mistake, match=re.escape(checking_module.RETURNED_NONE)):
        expect_tensor(None)


def test_true_division_in_a_shape_gets_the_floor_division_advice():
    def split(x, num_heads):
        b, s, d = x.shape
        return x.view(b, s, num_heads, d / num_heads).transpose(1, 2)

    result = check("split_heads", split, quiet=True)
    assert "use // for integer division" in result.message.lower()
    assert "// for integer division" in _message_of(lambda n: list(range(n / 2)), 6)


def test_an_attention_tuple_that_is_not_unpacked_is_explained():
    def no_unpack(q, k, v):
        return _attention(q, k, v) @ torch.ones(q.shape[-1], 2)

    message = _message_of(no_unpack, torch.ones(3, 4), torch.ones(3, 4), torch.ones(3, 4))
    assert "returns (output, weights)" in message and "unpack it" in message
    with pytest.raises(Mistake, match="unpack it"):
        expect_tensor(_attention(torch.ones(3, 4), torch.ones(3, 4), torch.ones(3, 4)))


def test_torch_where_with_an_integer_mask_gets_its_own_advice():
    def attention(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = torch.where(mask, scores, float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        return weights @ v, weights

    result = check("scaled_dot_product_attention", attention, quiet=True)
    assert "`mask.bool()` or `mask == 1`" in result.message


def test_an_in_place_change_names_the_parameter():
    def in_place(scores):
        scores /= scores.sum(dim=-1, keepdim=True)
        return scores

    assert "your function changed `scores` in place" in check("normalise_scores", in_place, quiet=True).message

    def masks_in_place(q, k, v, mask=None):
        if mask is not None:
            mask.fill_(1)
        return _attention(q, k, v, mask)

    result = check("scaled_dot_product_attention", masks_in_place, quiet=True)
    assert "your function changed `mask` in place" in result.message


# --------------------------------------------------------------------------- 5. which call failed


def test_an_error_names_the_arguments_of_the_call_that_raised():
    def fails(q, k, v, mask=None):
        raise ValueError("boom")

    q, k, v = torch.ones(2, 3, 5, 8), torch.ones(2, 3, 7, 8), torch.ones(2, 3, 7, 4)
    mask = torch.ones(5, 7, dtype=torch.bool)
    message = _message_of(fails, q, k, v, mask)
    assert message.startswith("your code raised ValueError: boom")
    assert "while called with q [2, 3, 5, 8] float32, k [2, 3, 7, 8], v [2, 3, 7, 4], mask [5, 7] bool" in message
    assert "mask=None" in _message_of(fails, q, k, v)


def test_a_function_with_the_wrong_parameters_is_told_how_it_is_called():
    def too_few(q, k, v):
        return q

    mask = torch.ones(2, 2, dtype=torch.bool)
    message = _message_of(too_few, torch.ones(2, 4), torch.ones(2, 4), torch.ones(2, 4), mask)
    assert "keep the parameters of the exercise cell" in message
    assert "argument 1 [2, 4] float32, argument 2 [2, 4], argument 3 [2, 4], argument 4 [2, 2] bool" in message


def test_a_check_names_the_case_that_raised():
    def only_without_mask(q, k, v, mask=None):
        if mask is not None:
            raise ValueError("masks are not done yet")
        return _attention(q, k, v)

    result = check("scaled_dot_product_attention", only_without_mask, quiet=True)
    assert "while called with q [" in result.message and "mask [" in result.message


# --------------------------------------------------------------------------- 6. global state


def test_learner_changes_to_global_state_do_not_leak():
    def meddles(scores):
        torch.manual_seed(0)
        random.seed(0)
        np.random.seed(0)
        torch.set_default_dtype(torch.float64)
        torch.set_grad_enabled(False)
        torch.set_printoptions(precision=10)
        torch.set_num_threads(torch.get_num_threads() + 1)
        return _normalise(scores).float()

    torch.manual_seed(1234)
    random.seed(1234)
    np.random.seed(1234)
    want = (torch.rand(3), random.random(), np.random.rand())
    torch.manual_seed(1234)
    random.seed(1234)
    np.random.seed(1234)
    threads, precision = torch.get_num_threads(), torch._tensor_str.get_printoptions()["precision"]

    check("normalise_scores", meddles, quiet=True)

    got = (torch.rand(3), random.random(), np.random.rand())
    assert torch.equal(got[0], want[0]) and got[1:] == want[1:]
    assert torch.get_default_dtype() == torch.float32
    assert torch.is_grad_enabled()
    assert torch.get_num_threads() == threads
    assert torch._tensor_str.get_printoptions()["precision"] == precision


# --------------------------------------------------------------------------- 7. endless loops

on_main_thread = pytest.mark.skipif(
    not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread(),
    reason="the time limit needs SIGALRM on the main thread",
)


@on_main_thread
def test_an_endless_loop_is_stopped_after_the_time_limit(monkeypatch):
    monkeypatch.setattr(checking_module, "TIME_LIMIT_S", 1)

    def loops(scores):
        while True:
            pass

    handler = signal.getsignal(signal.SIGALRM)
    start = time.monotonic()
    result = check("normalise_scores", loops, quiet=True)
    assert time.monotonic() - start < 20  # 1 s, plus a loaded machine's slack
    assert "your code ran longer than 1 s" in result.message and "endless loop" in result.message
    assert "called with scores [" in result.message
    assert signal.getsignal(signal.SIGALRM) is handler
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0


@on_main_thread
def test_the_time_limit_gives_back_an_earlier_handler_and_timer():
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(True))
    try:
        signal.setitimer(signal.ITIMER_REAL, 50)
        with time_limit(5):
            assert signal.getitimer(signal.ITIMER_REAL)[0] <= 5
        remaining = signal.getitimer(signal.ITIMER_REAL)[0]
        assert 40 < remaining <= 50
        assert signal.getsignal(signal.SIGALRM) is not signal.SIG_DFL and not fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_off_the_main_thread_there_is_no_limit_and_no_signal_change():
    seen = []

    def worker():
        with time_limit(0.01):
            time.sleep(0.05)
            seen.append(signal.getitimer(signal.ITIMER_REAL)[0] if hasattr(signal, "getitimer") else 0)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [0]


# --------------------------------------------------------------------------- 8. the HTML block


def test_html_keeps_line_breaks_and_alignment():
    result = check("normalise_scores", lambda s: s * 2, quiet=True)
    assert "expected: " in result.message and "\ngot:      " in result.message
    block = result._html()
    assert "white-space:pre-wrap" in block and "white-space:normal" not in block
    assert "<br>" not in block
    assert "\ngot:      " in block


@on_main_thread
def test_a_checker_that_runs_too_long_is_the_courses_problem(register, monkeypatch):
    monkeypatch.setattr(checking_module, "TIME_LIMIT_S", 1)

    def slow_checker(candidate):
        call(candidate, torch.ones(3))
        time.sleep(30)  # the checker itself, not the learner's code, takes the time

    register("_slow_checker", slow_checker)
    result = check("_slow_checker", _normalise, quiet=True)
    assert "bug in the course" in result.message and "longer than 1 s" in result.message


def test_hint_and_show_solution_take_any_id_without_raising(capsys):
    from course_utils.exercises import hint, show_solution

    hint(3)
    show_solution(["not", "an", "id"])
    assert capsys.readouterr().out.count("unknown exercise id") == 2


# --------------------------------------------------------------------------- 9. every exercise


def _stub_of(exercise_id):
    """The learner's unsolved cell for this exercise: the solution's signature, raising NotImplementedError."""
    reference = solution(exercise_id)
    if inspect.isclass(reference):

        class Stub(reference):  # __init__ done, forward still a stub
            def forward(self, *args, **kwargs):
                raise NotImplementedError

        return Stub

    def stub(*args, **kwargs):
        raise NotImplementedError

    stub.__signature__ = inspect.signature(reference)
    return stub


# a Triton kernel is launched by its checker, not called: its stub is tests/exercises/test_flash_kernel.py's
CALLED = [i for i in exercise_ids() if inspect.isfunction(solution(i)) or inspect.isclass(solution(i))]


@pytest.mark.parametrize("exercise_id", CALLED)
def test_every_exercise_calls_an_unsolved_stub_not_attempted(exercise_id):
    result = check(exercise_id, _stub_of(exercise_id), quiet=True)
    assert result.status == "not attempted", result.message


@pytest.mark.parametrize("exercise_id", exercise_ids())
def test_every_exercise_explains_a_value_that_is_not_callable(exercise_id):
    result = check(exercise_id, 3.0, quiet=True)
    assert result.status == "not yet" and "checker itself" not in result.message, result.message
