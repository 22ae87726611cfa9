"""course_utils.toy_task: the data, the held-out split, the accuracy and a short training run."""

import pytest
import torch
import torch.nn as nn

from course_utils.toy_task import ToyTask, accuracy, attention_by_value, attention_share, sequence_ids, train
from course_utils.transformer import TinyTransformer


def test_answers_match_python():
    inputs, targets = ToyTask("sort", 9, 10).sample(50, torch.Generator().manual_seed(0))
    assert inputs.shape == targets.shape == (50, 9) and inputs.dtype == torch.long
    assert 0 <= inputs.min() and inputs.max() <= 9
    for row, answer in zip(inputs.tolist(), targets.tolist(), strict=True):
        assert answer == sorted(row)
    inputs, targets = ToyTask("reverse", 5, 7).sample(50, torch.Generator().manual_seed(0))
    for row, answer in zip(inputs.tolist(), targets.tolist(), strict=True):
        assert answer == row[::-1]


def test_sampling_is_seeded():
    task = ToyTask()
    a = task.sample(8, torch.Generator().manual_seed(4))[0]
    b = task.sample(8, torch.Generator().manual_seed(4))[0]
    c = task.sample(8, torch.Generator().manual_seed(5))[0]
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_sequence_ids_read_digits_as_a_number():
    tokens = torch.tensor([[0, 4, 2, 9], [9, 9, 9, 9], [0, 0, 0, 1]])
    assert sequence_ids(tokens, 10).tolist() == [int("".join(map(str, row))) for row in tokens.tolist()]
    assert sequence_ids(torch.tensor([[1, 0, 1]]), 2).tolist() == [5]
    with pytest.raises(ValueError, match="too many"):
        sequence_ids(torch.zeros(1, 40, dtype=torch.long), 10)


def test_held_out_sequences_are_distinct_and_seeded():
    task = ToyTask("sort", 4, 3)  # only 81 possible sequences: duplicates are drawn often
    inputs, targets = task.held_out(60, seed=1)
    assert inputs.shape == (60, 4)
    assert len(set(map(tuple, inputs.tolist()))) == 60
    assert torch.equal(targets, inputs.sort(-1).values)
    assert torch.equal(task.held_out(60, seed=1)[0], inputs)
    with pytest.raises(ValueError, match="distinct"):
        task.held_out(82)


class Recorder(nn.Module):
    """Wraps a model and remembers every input it is trained on."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.seen = set()

    def forward(self, tokens):
        if self.training:
            self.seen.update(map(tuple, tokens.tolist()))
        return self.model(tokens)


def test_training_never_sees_held_out_sequences():
    task = ToyTask("reverse", 3, 3)  # 27 sequences; 10 held out
    held_out = task.held_out(10)
    recorder = Recorder(TinyTransformer(3, 8, 2, 1, max_len=3))
    train(recorder, task, held_out, steps=30, batch_size=32, progress=False)
    assert len(recorder.seen) == 17, "every other sequence should have been drawn by now"
    assert not recorder.seen & set(map(tuple, held_out[0].tolist()))


def test_training_with_the_held_out_seed_is_refused():
    # the held-out set of seed 1 is the first sequences that seed draws: a training run with the
    # same seed would get only held-out (dropped) sequences, empty batches and a NaN loss
    task = ToyTask("sort", 6, 10)
    held_out = task.held_out(200, seed=1)
    model = TinyTransformer(10, 8, 2, 1, max_len=6)
    with pytest.raises(ValueError, match="use another seed for training"):
        train(model, task, held_out, steps=3, seed=1, progress=False)


def test_accuracy_counts_tokens_and_whole_sequences():
    targets = torch.tensor([[1, 2, 3], [3, 2, 1], [0, 0, 0], [1, 1, 1]])
    predictions = torch.tensor([[1, 2, 3], [3, 0, 1], [0, 0, 0], [2, 2, 2]])  # 8 of 12 digits, 2 of 4 sequences

    class Fixed(nn.Module):
        """Predicts row r of `predictions` for an input row filled with r."""

        def __init__(self):
            super().__init__()
            self.dummy = nn.Parameter(torch.zeros(1))

        def forward(self, tokens):
            return nn.functional.one_hot(predictions[tokens[:, 0]], 4).float() + self.dummy

    model = Fixed().train()
    inputs = torch.arange(4)[:, None].expand(4, 3)
    token_acc, seq_acc = accuracy(model, inputs, targets, batch_size=3)  # two batches: 3 + 1 rows
    assert token_acc == pytest.approx(8 / 12) and seq_acc == pytest.approx(2 / 4)
    assert model.training, "accuracy() puts the model back in the mode it found it in"


def test_attention_summaries_against_a_loop():
    g = torch.Generator().manual_seed(0)
    attn = torch.softmax(torch.randn(2, 3, 2, 4, 4, generator=g), dim=-1)  # [layers, B, heads, q, k]
    inputs = torch.randint(0, 5, (3, 4), generator=g)
    marked = torch.rand(3, 4, 4, generator=g) > 0.5
    share = attention_share(attn, marked)
    by_value = attention_by_value(attn, inputs, 5)
    assert share.shape == (2, 2) and by_value.shape == (2, 2, 4, 5)
    for layer in range(2):
        for head in range(2):
            total, table = 0.0, torch.zeros(4, 5)
            for b in range(3):
                for q in range(4):
                    for k in range(4):
                        w = attn[layer, b, head, q, k].item()
                        total += w * marked[b, q, k].item()
                        table[q, inputs[b, k]] += w / 3
            assert share[layer, head].item() == pytest.approx(total / 12, abs=1e-6)
            torch.testing.assert_close(by_value[layer, head], table)
    torch.testing.assert_close(by_value.sum(-1), torch.ones(2, 2, 4))
    with pytest.raises(ValueError, match="marked"):
        attention_share(attn, marked[0])


def test_short_training_run_learns_to_reverse_and_is_deterministic():
    task = ToyTask("reverse", 6, 10)
    held_out = task.held_out(500)
    threads = torch.get_num_threads()
    histories = []
    for _ in range(2):
        torch.manual_seed(0)
        model = TinyTransformer(10, d_model=32, num_heads=2, num_layers=1, max_len=6)
        histories.append(train(model, task, held_out, steps=250, lr=1e-2, seed=0, progress=False))
    assert torch.get_num_threads() == threads, "train() restores the thread count"
    assert histories[0]["loss"] == histories[1]["loss"], "same seeds on the CPU: the same run"
    token_acc, seq_acc = accuracy(model, *held_out)
    assert seq_acc >= 0.99 and token_acc >= seq_acc
    assert histories[0]["sequence_accuracy"][-1] == seq_acc
    assert histories[0]["eval_steps"][-1] == 250 and len(histories[0]["loss"]) == 250


def test_without_positions_reversing_is_out_of_reach():
    # permutation-equivariant: position i cannot know which position it must copy from
    task = ToyTask("reverse", 6, 10)
    held_out = task.held_out(500)
    torch.manual_seed(0)
    model = TinyTransformer(10, d_model=32, num_heads=2, num_layers=1, max_len=6, positions=False)
    history = train(model, task, held_out, steps=150, lr=1e-2, seed=0, progress=False)
    assert history["sequence_accuracy"][-1] < 0.05
    assert history["token_accuracy"][-1] < 0.5


def test_bad_task_settings_raise():
    with pytest.raises(ValueError, match="unknown task"):
        ToyTask("shuffle")
    with pytest.raises(ValueError, match="seq_len"):
        ToyTask("sort", 1)
    with pytest.raises(ValueError, match="vocab_size"):
        ToyTask("sort", 5, 1)
