"""course_utils.recall and scripts/train_recall.py: the task, the eight models, and the stored results."""

import json

import pytest
import torch

from course_utils.data import data_path
from course_utils.recall import (
    MIXERS,
    NUM_KEYS,
    QUESTION,
    VARIANTS,
    RecallModel,
    accuracy_by_distance,
    count_parameters,
    evaluation_sets,
    gru_hidden_size,
    present_value_accuracy,
    random_recall_batch,
    recall_sequences,
    state_numbers,
    train_on_recall,
)

RESULTS = data_path("recall_results.json")


def test_recall_sequences_by_hand():
    keys, values, queries = torch.tensor([[5, 9, 2]]), torch.tensor([[40, 41, 7]]), torch.tensor([[2, 0]])
    tokens, targets = recall_sequences(keys, values, queries)
    assert tokens.tolist() == [[[5, 40], [9, 41], [2, 7], [2, QUESTION], [5, QUESTION]]]
    assert targets.tolist() == [[-100, -100, -100, 7, 40]]


def test_recall_sequences_refuses_bad_input():
    keys = torch.tensor([[1, 2]])
    with pytest.raises(ValueError, match="indices of pairs"):
        recall_sequences(keys, keys, torch.tensor([[2]]))
    with pytest.raises(ValueError, match="integer tensor"):
        recall_sequences(keys.float(), keys, torch.tensor([[0]]))
    with pytest.raises(ValueError, match="same B"):
        recall_sequences(keys, keys[:, :1], torch.tensor([[0]]))
    with pytest.raises(ValueError, match="at least one pair"):
        recall_sequences(keys[:, :0], keys[:, :0], torch.tensor([[0]]))


def test_random_batch_keys_distinct_and_distances_point_at_the_pair():
    tokens, targets, distances = random_recall_batch(50, 20, 8, torch.Generator().manual_seed(0))
    assert tokens.shape == (50, 28, 2) and targets.shape == (50, 28) and distances.shape == (50, 8)
    for b in range(50):
        assert len(set(tokens[b, :20, 0].tolist())) == 20  # distinct keys
        for j in range(8):
            pair = tokens[b, 20 + j - distances[b, j]]
            assert pair[0] == tokens[b, 20 + j, 0] and pair[1] == targets[b, 20 + j]
    assert (targets[:, :20] == -100).all() and (tokens[:, 20:, 1] == QUESTION).all()
    with pytest.raises(ValueError, match="num_queries <= num_pairs"):
        random_recall_batch(2, NUM_KEYS + 1, 2)


def test_parameter_counts_are_matched_within_two_percent():
    mixers = {name: count_parameters(RecallModel(name).mixer) for name in MIXERS}
    assert mixers["softmax"] == mixers["linear"] == mixers["window"] == 4 * 32 * 32
    for name in ("delta", "gru"):
        assert abs(mixers[name] - mixers["softmax"]) / mixers["softmax"] < 0.02, mixers
    assert gru_hidden_size(32) == 21


@pytest.mark.parametrize("mixer", MIXERS + VARIANTS)
def test_every_model_is_causal(mixer):
    torch.manual_seed(0)
    model = RecallModel(mixer).eval()
    tokens, _, _ = random_recall_batch(3, 16, 4, torch.Generator().manual_seed(1))
    changed = tokens.clone()
    changed[:, 10, 1] = (changed[:, 10, 1] + 1) % 64
    with torch.no_grad():
        before, after = model(tokens), model(changed)
    assert before.shape == (3, 20, 64)
    assert torch.allclose(before[:, :10], after[:, :10], atol=1e-6)
    assert not torch.allclose(before[:, 10], after[:, 10])


def test_the_window_sees_its_own_and_the_window_minus_one_tokens_before():
    torch.manual_seed(0)
    model = RecallModel("window", window=4).eval()
    tokens, _, _ = random_recall_batch(2, 16, 4, torch.Generator().manual_seed(1))
    changed = tokens.clone()
    changed[:, 5, 1] = (changed[:, 5, 1] + 1) % 64
    with torch.no_grad():
        before, after = model(tokens), model(changed)
    assert not torch.allclose(before[:, 8], after[:, 8])  # 8 - 5 = 3 < 4: in the window
    assert torch.allclose(before[:, 9:], after[:, 9:], atol=1e-6)  # 9 - 5 = 4: out of it


def test_state_numbers():
    sizes = {name: state_numbers(RecallModel(name), 72) for name in MIXERS + VARIANTS}
    assert sizes == {"softmax": 2 * 32 * 72, "window": 2 * 32 * 16, "linear": 32 * 32 + 32, "delta": 32 * 32,
                     "gru": 21, "delta-no-silu": 32 * 32, "delta+delta": 2 * 32 * 32,
                     "delta+softmax": 32 * 32 + 2 * 32 * 72}  # fmt: skip


def test_the_delta_mixer_is_deltanets_silu_then_l2_and_the_variant_leaves_out_the_silu():
    """Yang et al. (2024): q and k through SiLU, then L2-normalised (delta_rule normalises inside)."""
    from course_utils.linear_attention import delta_rule

    torch.manual_seed(0)
    model = RecallModel("delta")
    bare = RecallModel("delta-no-silu")
    bare.load_state_dict(model.state_dict())  # the same weights: only the SiLU differs
    x = torch.randn(2, 6, 32)
    layer = model.mixer
    q, k, v = layer.query_linear(x), layer.key_linear(x), layer.value_linear(x)
    beta = torch.sigmoid(layer.beta_linear(x))[..., 0]
    silu = torch.nn.functional.silu
    assert torch.allclose(layer(x), layer.output_linear(delta_rule(silu(q), silu(k), v, beta)), atol=1e-6)
    assert torch.allclose(bare.mixer(x), layer.output_linear(delta_rule(q, k, v, beta)), atol=1e-6)
    assert not torch.allclose(layer(x), bare.mixer(x), atol=1e-3)


def test_a_hybrid_runs_its_delta_layer_first_then_softmax_each_with_a_residual():
    torch.manual_seed(0)
    model = RecallModel("delta+softmax").eval()
    first, second = model.mixer
    assert first.kind == "delta" and second.kind == "softmax"
    tokens, _, _ = random_recall_batch(2, 8, 4, torch.Generator().manual_seed(1))
    x = model.key_embedding(tokens[..., 0]) + model.value_embedding(tokens[..., 1])
    x = x + first(x)
    x = x + second(x)
    with torch.no_grad():
        assert torch.allclose(model(tokens), model.readout(model.norm(x)), atol=1e-6)


def test_present_value_accuracy_by_hand():
    """A guess among the values shown: 1 when every pair shows the answer's value, 1 / P when only its own pair does."""
    keys = torch.arange(4)[None]
    same, distinct = torch.full((1, 4), 7), torch.tensor([[1, 2, 3, 4]])
    queries = torch.tensor([[0, 3]])
    for values, expected in ((same, 1.0), (distinct, 0.25), (torch.tensor([[1, 1, 3, 4]]), (0.5 + 0.25) / 2)):
        tokens, targets = recall_sequences(keys, values, queries)
        assert present_value_accuracy({4: (tokens, targets, torch.zeros(1, 2))}) == {4: pytest.approx(expected)}


def test_accuracy_by_distance_counts_each_distance():
    eval_set = evaluation_sets([8], num_queries=8, size=16)[8]

    class Oracle(torch.nn.Module):  # answers from the sequence itself: always right
        def forward(self, tokens):
            answers = torch.zeros(*tokens.shape[:2], 64)
            for b in range(tokens.shape[0]):
                lookup = {k: v for k, v in tokens[b, :8].tolist()}
                for t in range(8, tokens.shape[1]):
                    answers[b, t, lookup[tokens[b, t, 0].item()]] = 1
            return answers

    oracle = Oracle()
    oracle.weight = torch.nn.Parameter(torch.zeros(1))  # a parameter, for the device
    distances, accuracy = accuracy_by_distance(oracle, *eval_set)
    assert distances.tolist() == sorted(set(eval_set[2].flatten().tolist()))
    assert (accuracy == 1).all()


# --------------------------------------------------------------------------- the stored results


@pytest.fixture(scope="module")
def stored():
    return json.loads(RESULTS.read_text())


def test_stored_results_hold_three_seeds_of_every_mixer_with_the_script_settings(stored):
    from scripts.train_recall import SETTINGS

    assert stored["settings"] == SETTINGS
    runs = {(r["mixer"], r["seed"]) for r in stored["runs"]}
    assert runs == {(m, s) for m in MIXERS + VARIANTS for s in (0, 1, 2)}
    for run in stored["runs"]:
        assert list(run["accuracy_by_pairs"]) == [str(p) for p in SETTINGS["pair_counts"]]
        assert len(run["first_losses"]) == SETTINGS["first_losses_stored"]


@pytest.mark.parametrize(
    "mixer, seed", [("linear", 0), ("gru", 1), ("delta", 2), ("delta-no-silu", 0), ("delta+softmax", 1)]
)
def test_the_script_reproduces_the_stored_first_steps(stored, mixer, seed):
    """The first 20 steps of a stored run, rerun with the script's settings, give the stored losses."""
    settings = stored["settings"]
    run = next(r for r in stored["runs"] if (r["mixer"], r["seed"]) == (mixer, seed))
    torch.manual_seed(seed)
    model = RecallModel(mixer, d_model=settings["d_model"], window=settings["window"])
    assert count_parameters(model) == run["parameters"]
    history = train_on_recall(
        model, pair_counts=settings["pair_counts"], num_queries=settings["num_queries"], steps=settings["steps"],
        batch_size=settings["batch_size"], lr=settings["lr"], seed=seed, progress=False, stop_after=20,
    )  # fmt: skip
    assert len(history["loss"]) == 20
    assert history["loss"] == pytest.approx(run["first_losses"][:20], abs=1e-4)
