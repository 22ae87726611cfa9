"""The exercise contract: check() never raises, stubs are 'not attempted', errors are explained."""

import torch

from course_utils.exercises import CheckResult, check, exercise_ids, hint, show_solution, solution
from course_utils.exercises.checking import Mistake, call, diagnose


def test_solution_passes_and_result_has_the_contract_fields():
    result = check("normalise_scores", solution("normalise_scores"), quiet=True)
    assert isinstance(result, CheckResult)
    assert result.passed is True
    assert isinstance(result.message, str) and result.message
    assert str(result).startswith("PASSED [normalise_scores]")


def test_stub_is_not_attempted():
    def stub(scores):
        raise NotImplementedError

    result = check("normalise_scores", stub, quiet=True)
    assert not result.passed
    assert result.status == "not attempted"
    assert "NotImplementedError" in result.message


def test_other_exceptions_are_explained_not_raised():
    def broken(scores):
        return scores.permute(-1, 0).view(-1) / scores.sum()  # permute of a 1-D tensor raises

    result = check("normalise_scores", broken, quiet=True)
    assert not result.passed and result.status == "not yet"
    assert "raised" in result.message


def test_view_on_non_contiguous_gets_its_own_advice():
    def viewer(scores):
        x = torch.ones(3, 4).t()
        x.view(-1)
        return scores

    result = check("normalise_scores", viewer, quiet=True)
    assert ".contiguous()" in result.message and "reshape" in result.message


def test_in_place_change_of_inputs_is_caught():
    def in_place(scores):
        scores /= scores.sum(dim=-1, keepdim=True)
        return scores

    result = check("normalise_scores", in_place, quiet=True)
    assert not result.passed and "in place" in result.message


def test_wrong_type_and_unknown_id_do_not_raise():
    assert "torch.Tensor" in check("normalise_scores", lambda s: s.tolist(), quiet=True).message
    result = check("no_such_exercise", lambda s: s, quiet=True)
    assert not result.passed and "unknown exercise id" in result.message
    assert not check("normalise_scores", None, quiet=True).passed  # not even callable


def test_check_prints_plain_text_outside_a_notebook(capsys):
    check("normalise_scores", solution("normalise_scores"))
    assert "PASSED [normalise_scores]" in capsys.readouterr().out


def test_hint_and_show_solution(capsys):
    hint("normalise_scores")
    show_solution("normalise_scores")
    out = capsys.readouterr().out
    assert "Hint 1 of" in out
    assert "def normalise_scores" in out


def test_call_and_diagnose_helpers():
    try:
        call(lambda x: x.add_(1), torch.zeros(2))
    except Mistake as m:
        assert "in place" in str(m)
    else:
        raise AssertionError("an in-place change was not caught")
    try:
        diagnose(torch.ones(2), torch.zeros(2), [("all ones", torch.ones(2))])
    except Mistake as m:
        assert str(m) == "all ones"
    else:
        raise AssertionError("a known mistake was not named")


def test_the_contract_ids_exist_once_all_lessons_are_in():
    assert "normalise_scores" in exercise_ids()


def _hints_of(exercise_id):
    from course_utils.exercises import _lookup

    return _lookup(exercise_id).hints


def test_hint_shows_the_mildest_first_and_one_more_per_level(capsys):
    hints = _hints_of("scaled_dot_product_attention")
    assert len(hints) >= 3  # the test needs an exercise with several hints
    hint("scaled_dot_product_attention")
    first = capsys.readouterr().out
    assert hints[0] in first and hints[1] not in first and hints[-1] not in first
    assert f"{len(hints) - 1} more hints" in first and 'hint("scaled_dot_product_attention", 2)' in first
    hint("scaled_dot_product_attention", 2)
    second = capsys.readouterr().out
    assert hints[0] in second and hints[1] in second and hints[-1] not in second
    hint("scaled_dot_product_attention", len(hints))
    last = capsys.readouterr().out
    assert all(h in last for h in hints) and "last hint" in last and "show_solution" in last
    hint("scaled_dot_product_attention")
    assert capsys.readouterr().out == first  # the same call shows the same hints (re-running a cell)


def test_hint_with_a_level_past_the_last_or_a_bad_level_does_not_raise(capsys):
    hints = _hints_of("normalise_scores")
    hint("normalise_scores", len(hints) + 5)
    assert "last hint" in capsys.readouterr().out
    for bad in (0, -1, 1.5, "2", True):
        hint("normalise_scores", bad)
        assert "level should be a whole number" in capsys.readouterr().out


def test_an_exercise_id_registered_twice_is_an_error():
    import pytest

    from course_utils.exercises import _REGISTRY, exercise

    exercise_ids()  # every lesson's ids registered
    before = _REGISTRY["normalise_scores"]
    with pytest.raises(ValueError, match="registered twice"):
        exercise("normalise_scores", solution=lambda s: s)(lambda candidate: None)
    assert _REGISTRY["normalise_scores"] is before  # the first registration stays


def test_not_right_shows_the_first_differing_position_not_the_first_values():
    import pytest

    expected = torch.arange(24.0).reshape(2, 3, 4)
    got = expected.clone()
    got[1, 0, 2] += 3.0
    got[1, 2, 3] += 5.0
    with pytest.raises(Mistake) as caught:
        diagnose(got, expected)
    message = str(caught.value)
    assert "largest difference 5 (at index [1, 2, 3])" in message
    assert "first difference is at index [1, 0, 2]" in message
    assert "expected: [14, 15]" in message and "got:      [17, 15]" in message
    assert "[0, 1, 2" not in message  # not the first (identical) values


def test_not_right_with_nan_where_the_reference_has_nan_elsewhere():
    import pytest

    expected = torch.tensor([[float("nan"), 1.0, 2.0]])
    got = torch.tensor([[float("nan"), 1.0, float("nan")]])
    with pytest.raises(Mistake) as caught:
        diagnose(got, expected)
    assert "first difference is at index [0, 2]" in str(caught.value)
