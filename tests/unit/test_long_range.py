"""course_utils.long_range: the hairpin task, the two models, the measurements (lesson 05b)."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from course_utils import long_range as lr  # noqa: E402

PAIRS = {"A": "T", "T": "A", "C": "G", "G": "C"}


def test_complement_pairs_a_with_t_and_c_with_g():
    ids = torch.arange(4)
    assert [lr.BASES[i] for i in lr.complement(ids).tolist()] == [PAIRS[b] for b in lr.BASES]


def test_hairpin_targets_are_the_reverse_complement_of_the_strand():
    inputs, targets = lr.hairpins(5, 6, torch.Generator().manual_seed(0))
    assert inputs.shape == targets.shape == (5, 12)
    for row, target in zip(inputs, targets, strict=True):
        text = lr.to_text(row)
        strand, queries = text[:6], text[6:]
        assert set(strand) <= set(lr.BASES) and queries == "??????"
        assert target[:6].tolist() == [-100] * 6  # nothing to predict on the strand
        answer = "".join(lr.BASES[i] for i in target[6:].tolist())
        assert answer == "".join(PAIRS[b] for b in reversed(strand))


def test_hairpins_are_seeded_and_uniform():
    a = lr.hairpins(3, 4, torch.Generator().manual_seed(7))
    b = lr.hairpins(3, 4, torch.Generator().manual_seed(7))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    strand = lr.hairpins(4000, 4, torch.Generator().manual_seed(0))[0][:, :4]
    shares = torch.bincount(strand.flatten(), minlength=4).float() / strand.numel()
    assert torch.allclose(shares, torch.full((4,), 0.25), atol=0.02)  # no base to bet on: chance is 1/4


def test_partner_distances_are_query_position_minus_partner_position():
    n = 5
    expected = [(n + k) - (n - 1 - k) for k in range(n)]
    assert lr.partner_distances(n).tolist() == expected == [1, 3, 5, 7, 9]


@pytest.mark.parametrize(
    "call",
    [
        lambda: lr.hairpins(0, 4),
        lambda: lr.hairpins(2, 2.5),
        lambda: lr.partner_distances(-1),
        lambda: lr.attention_model(0),
        lambda: lr.RecurrentModel(hidden_size=0),
        lambda: lr.to_text(torch.zeros(2, 3, dtype=torch.long)),
    ],
)
def test_bad_input_raises_a_clear_error(call):
    with pytest.raises(ValueError, match="must|expected"):
        call()


def test_recurrent_forward_matches_pytorch_rnn():
    g = torch.Generator().manual_seed(0)
    x, h0 = torch.randn(3, 6, 4, generator=g), torch.randn(3, 5, generator=g)
    W_xh, W_hh, b = torch.randn(4, 5, generator=g), torch.randn(5, 5, generator=g), torch.randn(5, generator=g)
    rnn = nn.RNN(4, 5, batch_first=True)
    with torch.no_grad():
        rnn.weight_ih_l0.copy_(W_xh.T)
        rnn.weight_hh_l0.copy_(W_hh.T)
        rnn.bias_ih_l0.copy_(b)
        rnn.bias_hh_l0.zero_()
        expected, expected_last = rnn(x, h0[None])
    outputs, h_last = lr.recurrent_forward(x, W_xh, W_hh, b, h0)
    torch.testing.assert_close(outputs, expected)
    torch.testing.assert_close(h_last, expected_last[0])


def test_recurrent_model_reads_left_to_right():
    torch.manual_seed(0)
    model = lr.RecurrentModel().eval()
    inputs = lr.hairpins(2, 5, torch.Generator().manual_seed(1))[0]
    changed = inputs.clone()
    changed[:, 6] = (changed[:, 6] + 1) % 4  # change one token in the middle
    with torch.no_grad():
        before, after = model(inputs), model(changed)
    assert before.shape == (2, 10, 4)
    torch.testing.assert_close(before[:, :6], after[:, :6])  # earlier positions cannot see it
    assert not torch.allclose(before[:, 6:], after[:, 6:])


def test_the_two_models_are_of_similar_size():
    gru, attention = lr.RecurrentModel(), lr.attention_model(16)
    counts = lr.count_parameters(gru), lr.count_parameters(attention)
    assert counts[0] == 3 * (80 * 16 + 80 * 80 + 2 * 80) + 5 * 16 + 80 * 4 + 4  # GRU gates, embedding, read-out
    assert 0.8 < counts[0] / counts[1] < 1.2, counts


class _Oracle(nn.Module):
    """Answers every query from the strand, right up to distance ``reach``, wrong (A) beyond."""

    def __init__(self, reach):
        super().__init__()
        self.reach = reach
        self.dummy = nn.Parameter(torch.zeros(1))

    def forward(self, tokens):
        n = tokens.shape[1] // 2
        answers = torch.zeros_like(tokens)
        for k in range(n):
            if 2 * k + 1 <= self.reach:
                answers[:, n + k] = 3 - tokens[:, n - 1 - k]
        return nn.functional.one_hot(answers, 4).float()


def test_accuracy_by_distance_counts_right_answers_per_distance():
    inputs, targets = lr.hairpins(400, 4, torch.Generator().manual_seed(2))
    distances, perfect = lr.accuracy_by_distance(_Oracle(reach=99), inputs, targets)
    assert distances.tolist() == [1, 3, 5, 7] and perfect.tolist() == [1.0] * 4
    _, short = lr.accuracy_by_distance(_Oracle(reach=3), inputs, targets)
    guessed_a = (targets[:, 5:] == 0).float().mean(dim=0)  # beyond its reach the oracle says A
    assert short[:2].tolist() == [1.0, 1.0]
    torch.testing.assert_close(short[2:], guessed_a[1:])


def test_attention_on_partner_reads_the_anti_diagonal():
    n = 3
    weights = torch.zeros(2, 4, 1, 2 * n, 2 * n)  # [layers, B, heads, T, T]
    for k in range(n):
        weights[0, :, :, n + k, n - 1 - k] = 1.0  # layer 0 looks at the partner
        weights[1, :, :, n + k, n + k] = 1.0  # layer 1 looks at itself
    on_partner = lr.attention_on_partner(weights, n)
    assert on_partner.shape == (2, 1, n)
    assert on_partner[0].tolist() == [[1.0] * n] and on_partner[1].tolist() == [[0.0] * n]
    with pytest.raises(ValueError, match="expected attentions"):
        lr.attention_on_partner(weights[0], n)


def test_training_never_sees_the_held_out_strands():
    held_out = lr.hairpins(64, 3, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="held out"):
        # the training loop's first batch, drawn with the same seed, is exactly the held-out set
        lr.train_on_hairpins(lr.RecurrentModel(8, 4), 3, held_out, steps=1, batch_size=64, seed=0, progress=False)


def test_training_teaches_the_attention_model_every_distance():
    torch.manual_seed(0)
    model = lr.attention_model(4, d_model=16)
    held_out = lr.hairpins(50, 4, torch.Generator().manual_seed(1))
    history = lr.train_on_hairpins(model, 4, held_out, steps=120, progress=False)
    assert len(history["loss"]) == 120
    assert history["eval_steps"] == [50, 100, 120] and len(history["accuracy"]) == 3
    assert sum(history["loss"][-10:]) / 10 < 0.1 * history["loss"][0]
    _, accuracy = lr.accuracy_by_distance(model, *held_out)
    assert (accuracy > 0.9).all(), accuracy
    assert history["accuracy"][-1] == pytest.approx(accuracy.mean().item())


def test_plot_has_one_labelled_line_per_model_and_chance():
    distances = lr.partner_distances(3)
    fig = lr.plot_accuracy_by_distance(distances, {"GRU": torch.tensor([1.0, 0.5, 0.3]), "attention": torch.ones(3)})
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert labels == ["GRU", "attention", "chance (1/4)"]
    assert fig.axes[0].get_xlabel() and fig.axes[0].get_ylabel()
    plt.close(fig)


def test_recurrent_forward_refuses_an_unbatched_sequence_even_when_t_equals_d_in():
    x = torch.randn(4, 4)  # one sequence [T, d_in] with T == d_in: x[:, t] would silently read a feature
    W_xh, W_hh, b, h0 = torch.randn(4, 3), torch.randn(3, 3), torch.zeros(3), torch.zeros(3)
    with pytest.raises(ValueError, match=r"x must be \[B, T, d_in\].*pass x\[None\] and h0\[None\]"):
        lr.recurrent_forward(x, W_xh, W_hh, b, h0)
    outputs, h_last = lr.recurrent_forward(x[None], W_xh, W_hh, b, h0[None])
    assert outputs.shape == (1, 4, 3) and h_last.shape == (1, 3)


@pytest.mark.parametrize(
    "shapes, phrase",
    [
        (((2, 5, 3), (4, 6), (6, 6), (6,), (2, 6)), "W_xh must have shape [3, 6]"),
        (((2, 5, 3), (3, 6), (6, 6), (5,), (2, 6)), "b must have shape [6]"),
        (((2, 5, 3), (3, 6), (6, 6), (6,), (6,)), "h0 must have shape [2, 6]"),
    ],
)
def test_recurrent_forward_says_which_shape_was_expected(shapes, phrase):
    with pytest.raises(ValueError) as info:
        lr.recurrent_forward(*(torch.zeros(s) for s in shapes))
    assert phrase in str(info.value)


def test_gradient_by_distance_by_hand_on_a_linear_recurrence():
    # h_t = 0.5 h_{t-1} + x_t (one feature): d h_t / d x_0 = 0.5 ** t
    def layer(x):
        h, out = torch.zeros(1, 1), []
        for t in range(x.shape[1]):
            h = 0.5 * h + x[:, t]
            out.append(h)
        return torch.stack(out, 1)

    inputs = torch.randn(1, 6, 1)
    norms = lr.gradient_by_distance(layer, inputs, [0, 1, 3, 5], torch.ones(1))
    assert torch.allclose(norms, torch.tensor([1.0, 0.5, 0.125, 0.03125]))
    assert not inputs.requires_grad and inputs.grad is None
    with pytest.raises(ValueError, match="positions 0..5"):
        lr.gradient_by_distance(layer, inputs, [6], torch.ones(1))


def test_marked_bases_asks_each_marked_base_at_the_same_distance():
    inputs, targets, distances = lr.marked_bases(500, 4, 31, torch.Generator().manual_seed(0))
    assert inputs.shape == targets.shape == (500, 35)
    assert distances.min() >= 4 and distances.max() <= 31
    for row, target, d in zip(inputs, targets, distances.tolist(), strict=True):
        marked = (row >= len(lr.VOCAB)).nonzero().flatten().tolist()
        assert marked == list(range(31 - d, 35 - d))  # a block of 4, d positions before its queries
        assert row[31:].eq(lr.VOCAB.index(lr.QUERY)).all() and (target[:31] == -100).all()
        assert torch.equal(target[31:], 3 - (row[marked] - len(lr.VOCAB)))  # the complement of each marked base
    one = lr.marked_bases(2000, 1, 31, torch.Generator().manual_seed(0))[2]
    assert set(one.tolist()) == set(range(1, 32))  # one base: every distance 1..31
    assert lr.marked_bases(100, 1, 31, torch.Generator().manual_seed(0), min_distance=16)[2].min() >= 16
    with pytest.raises(ValueError, match="at most max_distance"):
        lr.marked_bases(2, 20, 16)


def test_one_marked_base_asks_for_its_complement_at_the_end():
    inputs, targets, distances = lr.one_marked_base(300, 10, torch.Generator().manual_seed(0))
    where = (inputs >= len(lr.VOCAB)).int().argmax(1)
    assert ((inputs >= len(lr.VOCAB)).sum(1) == 1).all() and torch.equal(distances, 9 - where)
    assert torch.equal(targets[:, -1], 3 - (inputs[torch.arange(300), where] - len(lr.VOCAB)))
    assert lr.to_text(inputs[0]).endswith("?") and any(c in "acgt" for c in lr.to_text(inputs[0]))


def test_a_control_task_records_its_learning_curve():
    torch.manual_seed(0)
    model = lr.RecurrentModel(hidden_size=8, embed_dim=4, vocab_size=len(lr.CONTROL_VOCAB))
    calls = []

    def evaluate():
        calls.append(len(calls))
        return {"measured": float(len(calls))}

    history = lr.train_on_task(
        model, lambda g: lr.marked_bases(8, 1, 7, g)[:2], steps=6, seed=0, evaluate=evaluate, eval_every=2
    )
    assert history["eval_steps"] == [2, 4, 6] and history["measured"] == [1.0, 2.0, 3.0]


def test_train_on_hairpins_measures_what_it_is_asked_to():
    held_out = lr.hairpins(16, 4, torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    model = lr.RecurrentModel(hidden_size=8, embed_dim=4)
    history = lr.train_on_hairpins(
        model, 4, held_out, steps=4, seed=2, eval_every=2, progress=False, evaluate=lambda: {"first": 0.5}
    )
    assert history["first"] == [0.5, 0.5] and "accuracy" not in history
