"""course_utils.recall refuses what it cannot use, with an error that says what was expected,
where it used to run on (token ids without the pair axis, a key or value outside the vocabulary)."""

import json

import pytest
import torch

from course_utils import recall
from course_utils.data import data_path
from course_utils.recall import MIXERS, NUM_KEYS, NUM_VALUES, QUESTION, VARIANTS, RecallModel, recall_sequences


@pytest.mark.parametrize("mixer", MIXERS + VARIANTS)
def test_every_model_refuses_tokens_without_the_pair_axis(mixer):
    # [B, T] ids used to be read as B tokens of T ids for gru, linear and delta, and run
    torch.manual_seed(0)
    tokens = torch.randint(0, NUM_KEYS, (2, 10))
    with pytest.raises(
        ValueError, match=r"tokens must be an integer tensor \[batch, T, 2\].*got torch.int64 \(2, 10\)"
    ):
        RecallModel(mixer)(tokens)


@pytest.mark.parametrize(
    "tokens, match",
    [
        (torch.zeros(2, 5, 2), r"integer tensor \[batch, T, 2\]"),
        (torch.zeros(2, 5, 3, dtype=torch.long), r"integer tensor \[batch, T, 2\]"),
        (torch.zeros(2, 0, 2, dtype=torch.long), "no position"),
        (torch.tensor([[[NUM_KEYS, 3]]]), rf"key ids in 0..{NUM_KEYS - 1}"),
        (torch.tensor([[[3, QUESTION + 1]]]), rf"value ids or the question mark {QUESTION}"),
        (torch.tensor([[[-1, 3]]]), rf"key ids in 0..{NUM_KEYS - 1}"),
    ],
)
def test_the_model_refuses_tokens_it_cannot_embed(tokens, match):
    with pytest.raises(ValueError, match=match):
        RecallModel("softmax")(tokens)


def test_the_model_reads_the_question_mark():
    tokens, _ = recall_sequences(torch.tensor([[1, 2]]), torch.tensor([[5, 6]]), torch.tensor([[1]]))
    assert RecallModel("delta")(tokens).shape == (1, 3, NUM_VALUES)


@pytest.mark.parametrize(
    "keys, values, match",
    [
        ([[100, 1]], [[3, 4]], rf"keys must be key ids in 0..{NUM_KEYS - 1}, got 1..100"),
        ([[-1, 1]], [[3, 4]], rf"keys must be key ids in 0..{NUM_KEYS - 1}"),
        ([[0, 1]], [[QUESTION, 4]], rf"values must be value ids \(id {QUESTION} is the question mark of a query\)"),
        ([[0, 1]], [[3, -2]], rf"values must be value ids .* in 0..{NUM_VALUES - 1}"),
        ([[7, 7]], [[3, 4]], "keys of a sequence must be distinct"),
    ],
)
def test_recall_sequences_refuses_ids_outside_the_task(keys, values, match):
    # key 100 and value 64 (the '?' id) used to go through: the value would read as a question
    with pytest.raises(ValueError, match=match):
        recall_sequences(torch.tensor(keys), torch.tensor(values), torch.tensor([[0]]))


def test_gru_hidden_size_wants_a_positive_d_model():
    with pytest.raises(ValueError, match="d_model must be a positive int"):
        recall.gru_hidden_size(0)


def test_accuracy_by_distance_wants_one_batch():
    model = RecallModel("softmax")
    tokens, targets, distances = recall.random_recall_batch(4, 6, 3, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="must come from one batch"):
        recall.accuracy_by_distance(model, tokens, targets[:2], distances)
    with pytest.raises(ValueError, match=r"distances must be an integer tensor \[batch, n\]"):
        recall.accuracy_by_distance(model, tokens, targets, distances[0])


def test_stored_results_are_the_file_in_data_and_do_not_depend_on_the_working_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    expected = json.loads(data_path(recall.RESULTS_FILE).read_text())
    assert recall.stored_results() == expected
