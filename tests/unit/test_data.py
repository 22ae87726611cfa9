"""course_utils.data: the stored files, and a live rerun compared with a stored one within a tolerance."""

import pytest
import torch

from course_utils.data import assert_matches_stored, data_path


def test_data_path_finds_a_stored_file_and_names_a_missing_one():
    assert data_path("recall_results.json").is_file()
    with pytest.raises(FileNotFoundError, match="no_such_file.json"):
        data_path("no_such_file.json")


def test_a_rerun_within_the_tolerance_matches():
    stored = {"accuracy": 0.9731, "by_layer": [[0.8, 0.73], [0.15, 0.31]], "route": "noun"}
    live = {"accuracy": torch.tensor(0.9652), "by_layer": [[0.79, 0.74], [0.16, 0.3]], "route": "noun"}
    assert_matches_stored(live, stored, atol=0.02)


@pytest.mark.parametrize(
    "live, shown",
    [
        ({"accuracy": 0.94, "by_layer": [[0.8, 0.73], [0.15, 0.31]], "route": "noun"}, "['accuracy']: 0.94 vs 0.9731"),
        ({"accuracy": 0.97, "by_layer": [[0.8, 1.46], [0.15, 0.31]], "route": "noun"}, "['by_layer'][0][1]: 1.46"),
        ({"accuracy": 0.97, "by_layer": [[0.8, 0.73], [0.15, 0.31]], "route": "the"}, "'the' vs 'noun'"),
        ({"accuracy": 0.97, "by_layer": [[0.8, 0.73]], "route": "noun"}, "['by_layer']: 1 items vs 2"),
        ({"accuracy": 0.97, "route": "noun"}, "keys"),
    ],
)
def test_a_rerun_beyond_the_tolerance_says_where_it_differs(live, shown):
    stored = {"accuracy": 0.9731, "by_layer": [[0.8, 0.73], [0.15, 0.31]], "route": "noun"}
    with pytest.raises(AssertionError, match="differs from the stored seed 0 by more than 0.02") as caught:
        assert_matches_stored(live, stored, atol=0.02, what="the stored seed 0")
    assert shown in str(caught.value)


def test_keys_read_from_json_match_integer_keys():
    assert_matches_stored({1: 0.5, 31: 0.25}, {"1": 0.5, "31": 0.25}, atol=0)


@pytest.mark.parametrize("atol", [-0.1, "0.02", None])
def test_a_tolerance_that_is_not_a_number_is_refused(atol):
    with pytest.raises(ValueError, match="atol must be a number"):
        assert_matches_stored({"a": 1.0}, {"a": 1.0}, atol=atol)


def test_a_tensor_is_compared_with_the_list_json_stores():
    assert_matches_stored({"shares": torch.tensor([[0.8, 0.73]])}, {"shares": [[0.79, 0.74]]}, atol=0.02)
    with pytest.raises(AssertionError, match=r"\['shares'\]\[0\]\[1\]: 0.9 vs 0.74"):
        assert_matches_stored({"shares": torch.tensor([[0.8, 0.9]])}, {"shares": [[0.79, 0.74]]}, atol=0.02)
