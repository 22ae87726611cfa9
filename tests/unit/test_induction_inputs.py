"""course_utils.induction refuses what it cannot use, with an error that says what was expected,
where it used to return a number that looked right (a loss on the wrong positions, zeros for a head
that does not exist, a too-wide interval) or failed far from the slip."""

import re
import textwrap

import pytest
import torch

from course_utils import induction


def small_model(heads=3, seed=0):
    torch.manual_seed(seed)
    return induction.AttentionOnly(vocab_size=11, max_len=12, d_model=12, num_heads=heads).eval()


def repeated(batch=4, half_len=6, vocab=9, seed=0):
    return induction.repeated_tokens(batch, half_len, vocab, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("loss", [induction.half_losses, induction.second_half_loss])
def test_half_losses_refuse_a_half_len_that_does_not_match_the_sequence(loss):
    tokens = repeated(half_len=6)  # T = 12
    logits = torch.randn(4, 12, 9)
    for half_len in (5, 7):
        with pytest.raises(ValueError, match=f"T = 12 positions but half_len = {half_len}"):
            loss(logits, tokens, half_len)
    with pytest.raises(ValueError, match=r"half_len must be a positive int >= 2.*got 1"):
        loss(logits[:, :2], tokens[:, :2], 1)  # one token a half: no prediction inside the first half (nan)
    with pytest.raises(ValueError, match=r"tokens must be the integer ids \[batch, T\] = \[4, 12\]"):
        loss(logits, tokens[:, :10], 6)
    with pytest.raises(ValueError, match=r"logits must have shape \[batch, T, vocab\]"):
        loss(logits[0], tokens, 6)


@pytest.mark.parametrize("matrix", [induction.qk_matrix, induction.ov_matrix])
@pytest.mark.parametrize("head", [3, 7, -1, 1.0, True])
def test_qk_and_ov_matrices_refuse_a_head_the_layer_does_not_have(matrix, head):
    layer = small_model(heads=3).layers[0]
    with pytest.raises(ValueError, match=re.escape(f"head must be a head of the layer, an int in 0..2, got {head!r}")):
        matrix(layer, head)


def test_induction_scores_name_the_half_len_they_got():
    weights = torch.softmax(torch.randn(2, 24, 24), -1)
    with pytest.raises(ValueError, match=r"half_len must be a positive int.*got 12\.0 \(float\)"):
        induction.induction_scores(weights, 12.0)


def test_bootstrap_interval_wants_one_value_per_sequence():
    # a [2, n] tensor used to be resampled by rows and averaged over everything: a wrong interval
    g = torch.Generator().manual_seed(0)
    losses = torch.randn(2, 100, generator=g) + 2.25
    with pytest.raises(ValueError, match=r"1-D float tensor \[n\].*got torch.float32 \(2, 100\).*mean\(-1\)"):
        induction.bootstrap_interval(losses)
    with pytest.raises(ValueError, match=r"1-D float tensor \[n\].*got list"):
        induction.bootstrap_interval(losses[0].tolist())
    with pytest.raises(ValueError, match=r"1-D float tensor \[n\].*got torch.int64"):
        induction.bootstrap_interval(torch.arange(10))
    with pytest.raises(ValueError, match="at least one sequence"):
        induction.bootstrap_interval(torch.zeros(0))
    with pytest.raises(ValueError, match="level must be a number in"):
        induction.bootstrap_interval(losses[0], level=95)
    with pytest.raises(ValueError, match="draws must be a positive int"):
        induction.bootstrap_interval(losses[0], draws=0)


@pytest.mark.parametrize(
    "writers, readers, name",
    [(3, 0, "writers"), (-1, 0, "writers"), ([1, 1], 0, "writers"), ([], 0, "writers"), (0, [2, 2], "readers")],
)
def test_path_patching_refuses_heads_that_are_not_one_each_of_the_layer(writers, readers, name):
    # -1 used to pick the last head, and a head listed twice was removed twice
    model = small_model(heads=3)
    with pytest.raises(ValueError, match=rf"{name} must be a head \(an int in 0..2\) or a list of distinct heads"):
        induction.path_patched_logits(model, repeated(2, 5, 11), writers, readers)


def test_training_batch_defaults_fit_the_lessons_model():
    # the old defaults drew half lengths up to 24: 47 tokens for a model with 32 positions
    model = induction.make_model()
    g = torch.Generator().manual_seed(0)
    lengths = set()
    for _ in range(40):
        inputs, targets = induction.training_batch(g)
        lengths.add(inputs.shape[1])
        with torch.no_grad():
            model(inputs)  # refuses tokens beyond max_len
    assert max(lengths) == 2 * induction.SETTINGS["half_lens"][1] - 1 <= model.max_len


@pytest.mark.parametrize("half_lens", [(8,), (9, 4), (0, 3), 5, (2.0, 4)])
def test_training_batch_refuses_a_half_lens_that_is_not_a_range(half_lens):
    with pytest.raises(ValueError, match="half_lens must be a pair"):
        induction.training_batch(torch.Generator(), half_lens=half_lens)


def test_the_module_docstrings_example_runs():
    # the docstring used to show train(model, steps=..., seed=0); train returns (model, history)
    code = textwrap.dedent(next(block for block in induction.__doc__.split("\n\n") if "train(" in block))
    namespace = {"torch": torch, **vars(induction)}
    exec(code.replace("steps=100", "steps=2"), namespace)
    assert namespace["weights"].shape == (8, 2, 4, 24, 24)


def test_train_says_it_builds_its_own_model():
    with pytest.raises(TypeError, match=r"settings must be a dict like SETTINGS.*train\(SETTINGS, seed=0\)"):
        induction.train(small_model(), steps=1)


def test_load_model_refuses_a_seed_that_was_not_stored():
    with pytest.raises(ValueError, match=r"seed must be an int among the stored seeds"):
        induction.load_model(99)
    with pytest.raises(ValueError, match=r"seed must be an int among the stored seeds"):
        induction.load_model(0.0)


@pytest.mark.parametrize("args", [(0, 4, 9), (2, 0, 9), (2, 4, 0), (2, 4.0, 9)])
def test_repeated_tokens_refuse_sizes_that_are_not_positive_ints(args):
    with pytest.raises(ValueError, match="must be a positive int"):
        induction.repeated_tokens(*args, torch.Generator())


def test_the_model_wants_a_tensor_head_mask():
    with pytest.raises(TypeError, match=r"head_mask must be a tensor \[layers, heads\] = \(2, 3\), got list"):
        small_model()(torch.zeros(1, 4, dtype=torch.long), [[1, 1, 1], [1, 1, 1]])


@pytest.mark.parametrize("sizes", [(0, 4, 10), (8, 0, 10), (8, 4, 0), (8, 4.0, 10)])
def test_random_composition_scores_refuse_sizes_that_are_not_positive_ints(sizes):
    # a size of 0 used to give nan scores (0 / 0)
    with pytest.raises(ValueError, match="must be a positive int"):
        induction.random_composition_scores(*sizes, torch.Generator())
