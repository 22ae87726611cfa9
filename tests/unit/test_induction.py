"""Lesson 11's induction-head toolkit: scores, the attention-only model, composition, path patching, ablation,
and the stored runs of scripts/train_induction.py."""

import math

import pytest
import torch
import torch.nn.functional as F

from course_utils import induction
from course_utils.attention import MultiHeadAttention, causal_mask, scaled_dot_product_attention
from course_utils.head_scores import previous_token_score

# --------------------------------------------------------------------------- induction_scores


def perfect_induction_weights(half_len, heads=2):
    seq = 2 * half_len
    weights = torch.zeros(heads, seq, seq)
    for t in range(seq):
        weights[:, t, t - half_len + 1 if t >= half_len else 0] = 1.0
    return weights


def test_a_perfect_induction_head_scores_one_and_a_previous_token_head_zero():
    assert torch.equal(induction.induction_scores(perfect_induction_weights(5), 5), torch.ones(2))
    previous = torch.zeros(3, 10, 10)
    previous[:, 0, 0] = 1
    for t in range(1, 10):
        previous[:, t, t - 1] = 1
    assert torch.equal(induction.induction_scores(previous, 5), torch.zeros(3))


def test_uniform_causal_attention_scores_the_mean_of_one_over_t_plus_one():
    half_len = 6
    weights = causal_mask(12).double()
    weights = weights / weights.sum(-1, keepdim=True)
    expected = sum(1 / (t + 1) for t in range(half_len, 2 * half_len)) / half_len
    assert induction.induction_scores(weights[None], half_len).item() == pytest.approx(expected)


@pytest.mark.parametrize("shape", [(4, 8, 8), (2, 3, 8, 8), (5, 2, 4, 8, 8)])
def test_scores_keep_every_leading_axis_and_match_a_loop(shape):
    g = torch.Generator().manual_seed(0)
    weights = torch.softmax(torch.randn(*shape, generator=g), dim=-1)
    loop = sum(weights[..., t, t - 4 + 1] for t in range(4, 8)) / 4
    got = induction.induction_scores(weights, 4)
    assert got.shape == shape[:-2]
    torch.testing.assert_close(got, loop)


@pytest.mark.parametrize(
    ("weights", "half_len", "words"),
    [
        (torch.randn(2, 8, 8), 4, "row summing to 1"),
        (torch.softmax(torch.randn(2, 8, 8), -1), 3, "T = 2 * half_len"),
        (torch.softmax(torch.randn(2, 8, 6), -1), 3, "square"),
        (torch.softmax(torch.randn(8, 8), -1), 4, "[..., heads, T, T]"),
        (torch.softmax(torch.randn(2, 8, 8), -1), 0, "positive int"),
        (torch.softmax(torch.randn(2, 8, 8), -1), 4.0, "positive int"),
        ([[0.5, 0.5]], 1, "[..., heads, T, T]"),
    ],
)
def test_scores_refuse_bad_input_clearly(weights, half_len, words):
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]").replace("*", r"\*")):
        induction.induction_scores(weights, half_len)


# --------------------------------------------------------------------------- data


def test_repeated_tokens_repeat_their_first_half():
    tokens = induction.repeated_tokens(5, 7, 20, torch.Generator().manual_seed(0))
    assert tokens.shape == (5, 14)
    assert torch.equal(tokens[:, :7], tokens[:, 7:])
    assert int(tokens.max()) < 20 and int(tokens.min()) >= 0


def test_training_batches_draw_the_half_length_so_position_cannot_tell_where_the_repeat_starts():
    g = torch.Generator().manual_seed(0)
    lengths = set()
    for _ in range(60):
        inputs, targets = induction.training_batch(g, batch=3, half_lens=(4, 9), vocab_size=11)
        assert torch.equal(inputs[:, 1:], targets[:, :-1])
        half = (inputs.shape[1] + 1) // 2
        assert torch.equal(inputs[:, :half], torch.cat([inputs, targets[:, -1:]], 1)[:, half:])
        lengths.add(half)
    assert lengths == set(range(4, 10))


# --------------------------------------------------------------------------- the model


def small_model(heads=3, seed=0):
    torch.manual_seed(seed)
    return induction.AttentionOnly(vocab_size=11, max_len=12, d_model=12, num_heads=heads).eval()


def test_head_outputs_add_up_to_the_layers_output():
    torch.manual_seed(0)
    attention = MultiHeadAttention(12, 3)
    x = torch.randn(2, 5, 12)
    mask = causal_mask(5)
    per_head = induction.head_outputs(attention, x, mask=mask)
    assert per_head.shape == (2, 3, 5, 12)
    torch.testing.assert_close(per_head.sum(1) + attention.output_linear.bias, attention(x, x, x, mask))


def test_the_model_is_embeddings_plus_heads_read_by_the_unembedding():
    model = small_model()
    tokens = torch.randint(11, (2, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        x = model.token_embedding(tokens) + model.position_embedding(torch.arange(8))
        for layer in model.layers:
            x = x + layer(x, x, x, causal_mask(8))
        expected = model.unembed(x)
        logits, streams, per_head, weights = model.run(tokens)
    torch.testing.assert_close(logits, expected)
    assert len(streams) == 3 and len(per_head) == 2 and weights.shape == (2, 2, 3, 8, 8)
    assert torch.equal(weights.triu(1), torch.zeros_like(weights))  # causal


def test_a_zero_in_the_head_mask_removes_exactly_that_heads_output():
    model = small_model()
    tokens = torch.randint(11, (2, 8), generator=torch.Generator().manual_seed(2))
    keep = torch.ones(2, 3)
    with torch.no_grad():
        torch.testing.assert_close(model(tokens, keep), model(tokens))
        mask = keep.clone()
        mask[1, 2] = 0
        _, streams, per_head, _ = model.run(tokens)
        torch.testing.assert_close(model(tokens, mask), model.unembed(streams[2] - per_head[1][:, 2]))


def test_the_model_refuses_what_it_cannot_read():
    model = small_model()
    with pytest.raises(ValueError, match="integer token ids"):
        model(torch.randn(2, 5))
    with pytest.raises(ValueError, match="positions for 12 tokens"):
        model(torch.zeros(1, 13, dtype=torch.long))
    with pytest.raises(ValueError, match="0 .. 10"):
        model(torch.full((1, 4), 11))
    with pytest.raises(ValueError, match=r"\[layers, heads\] = \(2, 3\)"):
        model(torch.zeros(1, 4, dtype=torch.long), torch.ones(3, 2))


def test_half_losses_are_log_v_for_uniform_logits_and_zero_for_a_perfect_copier():
    tokens = induction.repeated_tokens(4, 6, 9, torch.Generator().manual_seed(3))
    first, second = induction.half_losses(torch.zeros(4, 12, 9), tokens, 6)
    assert first.item() == pytest.approx(math.log(9)) and second.item() == pytest.approx(math.log(9))
    perfect = 50.0 * F.one_hot(torch.roll(tokens, -1, dims=1), 9).float()  # knows every next token
    perfect[:, :6] = 0.0  # ... but only in the second half
    first, second = induction.half_losses(perfect, tokens, 6)
    assert first.item() == pytest.approx(math.log(9)) and second.item() == pytest.approx(0.0, abs=1e-6)
    torch.testing.assert_close(induction.second_half_loss(perfect, tokens, 6), torch.zeros(4), atol=1e-6, rtol=0)


# --------------------------------------------------------------------------- composition


def test_qk_and_ov_matrices_are_what_a_head_computes():
    torch.manual_seed(0)
    attention = MultiHeadAttention(12, 3)
    x_q, x_k = torch.randn(12), torch.randn(12)
    head = 1
    rows = slice(4, 8)
    q = attention.query_linear(x_q)[rows]
    k = attention.key_linear(x_k)[rows]
    with torch.no_grad():
        torch.testing.assert_close(x_q @ induction.qk_matrix(attention, head) @ x_k, q @ k)
        # a query that attends only to one position writes W_OV x of that position
        x = torch.randn(1, 2, 12)
        only_first = torch.tensor([[True, False], [True, False]])
        written = induction.head_outputs(attention, x, mask=only_first)[0, head, 1]
        torch.testing.assert_close(written, induction.ov_matrix(attention, head) @ x[0, 0])


def test_composition_score_is_one_for_aligned_and_zero_for_orthogonal_subspaces():
    a = torch.zeros(6, 6)
    a[:2, :2] = torch.randn(2, 2)
    b = torch.zeros(6, 6)
    b[:2, :2] = torch.eye(2) * 3
    c = torch.zeros(6, 6)
    c[4:, 4:] = torch.randn(2, 2)
    assert induction.composition_score(a, c) == pytest.approx(0.0)
    # the score of a with a multiple of the identity on its own subspace is ||a|| * 3 / (||a|| * 3 * sqrt(2))
    assert induction.composition_score(a, b) == pytest.approx(1 / math.sqrt(2))
    assert induction.composition_score(5 * a, b) == pytest.approx(induction.composition_score(a, b))


def test_k_composition_is_the_k_kind_of_composition_scores_and_differs_from_q_and_v():
    model = small_model()
    k = induction.k_composition(model)
    assert k.shape == (3, 3)
    torch.testing.assert_close(k, induction.composition_scores(model, "K"))
    assert not torch.allclose(k, induction.composition_scores(model, "Q"))
    assert not torch.allclose(k, induction.composition_scores(model, "V"))
    with pytest.raises(ValueError, match="'K', 'Q' or 'V'"):
        induction.composition_scores(model, "O")


def test_random_composition_baseline_is_reproducible_and_between_zero_and_one():
    scores = induction.random_composition_scores(12, 4, 50, torch.Generator().manual_seed(0))
    again = induction.random_composition_scores(12, 4, 50, torch.Generator().manual_seed(0))
    assert torch.equal(scores, again)
    assert scores.shape == (50,) and bool((scores > 0).all()) and bool((scores < 1).all())


# --------------------------------------------------------------------------- path patching


def test_path_patching_the_keys_recomputes_only_the_readers_keys():
    model = small_model()
    tokens = torch.randint(11, (2, 8), generator=torch.Generator().manual_seed(4))
    writer, reader = 0, 2
    logits, weights = induction.path_patched_logits(model, tokens, writer, reader, path="key")
    with torch.no_grad():
        _, streams, per_head, _ = model.run(tokens)
        layer = model.layers[1]
        stream, without = streams[1], streams[1] - per_head[0][:, writer]
        rows = slice(reader * 4, (reader + 1) * 4)
        q = layer.query_linear(stream)[..., rows]
        k = layer.key_linear(without)[..., rows]
        v = layer.value_linear(stream)[..., rows]
        context, expected_weights = scaled_dot_product_attention(q, k, v, causal_mask(8))
        patched = context @ layer.output_linear.weight[:, rows].T
        expected = model.unembed(streams[2] - per_head[1][:, reader] + patched)
    torch.testing.assert_close(weights[:, 0], expected_weights)
    torch.testing.assert_close(logits, expected)


def test_path_patching_several_readers_patches_each_of_them():
    model = small_model()
    tokens = torch.randint(11, (2, 8), generator=torch.Generator().manual_seed(6))
    logits, weights = induction.path_patched_logits(model, tokens, 1, [0, 2], path="query")
    assert weights.shape == (2, 2, 8, 8)
    one, w0 = induction.path_patched_logits(model, tokens, 1, 0, path="query")
    two, w2 = induction.path_patched_logits(model, tokens, 1, 2, path="query")
    torch.testing.assert_close(weights, torch.cat([w0, w2], dim=1))
    # the two readers' changes add up: logits are linear in the final stream
    intact = model(tokens).detach()
    torch.testing.assert_close(logits - intact, (one - intact) + (two - intact), atol=1e-5, rtol=1e-4)


def test_path_patching_a_silent_writer_changes_nothing():
    model = small_model()
    with torch.no_grad():
        model.layers[0].output_linear.weight[:, 0:4] = 0  # head 0 of layer 0 writes nothing
    tokens = torch.randint(11, (2, 8), generator=torch.Generator().manual_seed(5))
    for path in ("key", "query", "value"):
        logits, _ = induction.path_patched_logits(model, tokens, 0, 1, path=path)
        torch.testing.assert_close(logits, model(tokens).detach())
    with pytest.raises(ValueError, match="'key', 'query' or 'value'"):
        induction.path_patched_logits(model, tokens, 0, 1, path="output")


# --------------------------------------------------------------------------- intervals


def test_bootstrap_interval_holds_the_mean_and_narrows_with_more_sequences():
    g = torch.Generator().manual_seed(0)
    few, many = torch.randn(20, generator=g), torch.randn(2000, generator=g)
    mean, low, high = induction.bootstrap_interval(few)
    assert low < mean < high
    _, low_many, high_many = induction.bootstrap_interval(many)
    assert high_many - low_many < (high - low) / 4


# --------------------------------------------------------------------------- the stored runs


def _script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "train_induction.py"
    spec = importlib.util.spec_from_file_location("train_induction", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_stored_runs_were_made_with_the_lessons_settings_on_three_seeds_or_more():
    stored = induction.load_runs()
    settings = {**induction.SETTINGS, "half_lens": list(induction.SETTINGS["half_lens"])}
    assert stored["settings"] == settings
    assert len(stored["seeds"]) >= 3
    for seed in stored["seeds"]:
        run = stored["runs"][str(seed)]
        assert len(run["loss"]) == settings["steps"]
        assert run["eval_steps"] == list(range(0, settings["steps"] + 1, settings["eval_every"]))


def test_the_script_reproduces_the_first_steps_of_every_stored_run():
    assert _script().check(50) < 1e-3


def test_the_stored_weights_give_the_stored_scores_and_final_losses():
    stored = induction.load_runs()
    tokens = induction.evaluation_tokens()
    half = induction.SETTINGS["eval_half_len"]
    for seed in stored["seeds"]:
        model = induction.load_model(seed)
        run = stored["runs"][str(seed)]
        weights = model.attention(tokens).mean(0)
        assert torch.allclose(induction.induction_scores(weights, half), torch.tensor(run["induction"]), atol=1e-3)
        assert torch.allclose(previous_token_score(weights), torch.tensor(run["previous_token"]), atol=1e-3)
        with torch.no_grad():
            first, second = induction.half_losses(model(tokens), tokens, half)
        assert first.item() == pytest.approx(run["first_half"][-1], abs=1e-3)
        assert second.item() == pytest.approx(run["second_half"][-1], abs=1e-3)


def test_lookup_floor_by_hand():
    """A half without a repeated token costs a lookup nothing; one with a token twice costs its ambiguity."""
    distinct = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3]])
    assert induction.lookup_floor(distinct, 4).tolist() == [0.0]
    # 5 occurs twice in the half, followed by 7 and by 9: predicting after the 5s is a bet
    twice = torch.tensor([[5, 7, 5, 9, 5, 7, 5, 9]])
    # after position 4 (a 5): 1 of 2 earlier 5s is followed by 7; position 5 (a 7): certain;
    # position 6 (a 5): 1 of 3 earlier 5s is followed by 9
    expected = (math.log(2) + 0 + math.log(3)) / 3
    assert induction.lookup_floor(twice, 4).item() == pytest.approx(expected, abs=1e-6)
    with pytest.raises(ValueError, match="T = 2 \\* half_len"):
        induction.lookup_floor(twice, 3)


def test_copy_share_reads_the_heads_direct_path_only():
    """With a zero unembedding every head says token 0: the share is then that of targets equal to 0."""
    torch.manual_seed(0)
    model = induction.AttentionOnly(vocab_size=5, max_len=16, d_model=8, num_heads=2)
    with torch.no_grad():
        model.unembed.weight.zero_()
        model.unembed.bias.fill_(3.0)  # the bias is not the head's: it must not count
    tokens = torch.tensor([[0, 1, 2, 0, 1, 2], [3, 0, 4, 3, 0, 4]])
    targets = tokens[:, 4:]  # second-half predictions: tokens half_len + 1 .. T - 1
    assert induction.copy_share(model, tokens, 3, head=1) == pytest.approx((targets == 0).float().mean().item())
    with pytest.raises(ValueError, match="head must be a head"):
        induction.copy_share(model, tokens, 3, head=2)
