"""Assertions the exercise tests share: a planted mistake is caught by name, a solution passes."""

from course_utils.exercises import check


def assert_caught(exercise_id, candidate, *phrases, not_phrases=()):
    """A planted mistake gets "not yet" with every one of ``phrases`` in its message and none of ``not_phrases``."""
    assert phrases, "say which phrase names the mistake"
    result = check(exercise_id, candidate, quiet=True)
    assert not result.passed, f"{exercise_id}: a wrong candidate passed (expected {phrases[0]!r})"
    assert result.status == "not yet", result.message
    for phrase in phrases:
        assert phrase in result.message, f"expected {phrase!r} in:\n{result.message}"
    for other in not_phrases:
        assert other not in result.message, f"{other!r} should not be in:\n{result.message}"
    return result


def assert_passes(exercise_id, candidate):
    result = check(exercise_id, candidate, quiet=True)
    assert result.passed, result.message


def assert_each_message_names_only_its_mistake(mistakes, run):
    """mistakes: {name: (candidate, phrase)}; no candidate's message holds another mistake's phrase."""
    phrases = {phrase for _, phrase in mistakes.values()}
    for name, (candidate, phrase) in mistakes.items():
        message = run(candidate).message
        others = [p for p in phrases if p != phrase and p in message]
        assert not others, f"{name}: the message also matches {others}: {message}"
