"""A check cannot be passed by replacing the functions it compares with (course_utils.exercises.tamper_guard)."""

import builtins
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.testing

from course_utils.exercises import check, tamper_guard

ROOT = Path(__file__).resolve().parents[2]


def _wrong_mask(seq_len):
    return torch.ones(seq_len, seq_len, dtype=torch.bool).triu()  # upper triangle: the future, not the past


def _wrong_weights(scores):
    return scores * 2


@pytest.fixture(autouse=True)
def _originals_back():
    yield
    tamper_guard.restore()  # whatever a test replaced, the next one starts clean


FORGERIES = [
    ("torch.allclose", lambda: setattr(torch, "allclose", lambda *a, **k: True)),
    ("torch.equal", lambda: setattr(torch, "equal", lambda *a, **k: True)),
    ("torch.testing.assert_close", lambda: setattr(torch.testing, "assert_close", lambda *a, **k: None)),
    ("torch.Tensor.equal", lambda: setattr(torch.Tensor, "equal", lambda *a, **k: True)),
    ("torch.Tensor.__eq__", lambda: setattr(torch.Tensor, "__eq__", lambda *a, **k: torch.tensor(True))),
    ("builtins.all", lambda: setattr(builtins, "all", lambda *a: True)),
]


@pytest.mark.parametrize("name, forge", FORGERIES, ids=[n for n, _ in FORGERIES])
def test_a_replaced_function_is_named_and_put_back(name, forge):
    assert tamper_guard.restore() == []
    forge()
    assert tamper_guard.restore() == [name]
    assert tamper_guard.restore() == []  # the original is back
    assert not torch.allclose(torch.zeros(2), torch.ones(2)) and not torch.equal(torch.zeros(2), torch.ones(2))
    assert not all([False]) and not torch.zeros(1).equal(torch.ones(1))


@pytest.mark.parametrize(
    "exercise_id, wrong, forge",
    [
        ("causal_mask", _wrong_mask, FORGERIES[1][1]),
        ("normalise_scores", _wrong_weights, FORGERIES[0][1]),
    ],
)
def test_forged_before_the_check_a_wrong_answer_does_not_pass(exercise_id, wrong, forge):
    forge()
    result = tamper_guard.guarded(check, exercise_id, wrong, quiet=True)
    assert result.status == "not yet" and "your notebook replaced" in result.message
    assert check(exercise_id, wrong, quiet=True).status == "not yet"  # and the original is back


def test_forged_while_the_check_runs_the_learner_code_does_not_pass():
    def sneaky(seq_len):
        torch.equal = lambda *a, **k: True
        return _wrong_mask(seq_len)

    result = tamper_guard.guarded(check, "causal_mask", sneaky, quiet=True)
    assert not result.passed and "`torch.equal`" in result.message and "put back" in result.message


def test_a_right_answer_untouched_passes_and_nothing_is_reported():
    from course_utils.attention import causal_mask

    result = tamper_guard.guarded(check, "causal_mask", causal_mask, quiet=True)
    assert result.passed and result.message == "all checks passed. Well done!"


def test_check_itself_is_not_fooled():
    torch.equal = lambda *a, **k: True
    assert not check("causal_mask", _wrong_mask, quiet=True).passed


def test_a_library_wrapping_a_function_is_not_tampering():
    import functools

    original = torch.manual_seed
    torch.manual_seed = functools.wraps(original)(lambda *a, **k: None)  # learner code, wearing the original's name
    assert tamper_guard.restore() == ["torch.manual_seed"] and torch.manual_seed is original
    # torch._dynamo wraps torch.manual_seed when it loads (lesson 09's imports load it): not the learner
    code = (
        "import sys, torch\nfrom course_utils.exercises import tamper_guard\nassert 'torch._dynamo' not in sys.modules\n"
        "seed = torch.manual_seed\nimport torch._dynamo\nassert torch.manual_seed is not seed\n"
        "print(tamper_guard.restore())"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr
