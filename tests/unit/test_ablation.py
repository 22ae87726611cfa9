"""Removing heads (lesson 06b): head_mask in course_utils.pretrained and the helpers of course_utils.ablation.

The oracle for an ablated model is an independent re-computation of BERT from the
checkpoint's tensors in plain torch (transformers 5's BertModel no longer takes a
head_mask), with each head's context vector scaled before the output projection.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from course_utils import ablation, pretrained

SENTENCES = ["The cat sat on the mat.", "A man is playing a guitar, loudly!", "Attention?"]


@pytest.fixture(scope="module")
def model():
    return pretrained.load_model(device="cpu")


def plain_bert(model, input_ids, head_mask):
    """BERT written from the checkpoint's tensors alone: last hidden state [B, S, d]."""
    from safetensors.torch import load_file

    w = load_file(str(pretrained.model_path() / "model.safetensors"))
    w = {k.removeprefix("bert."): v for k, v in w.items()}
    cfg = model.config
    eps, heads, d = cfg.layer_norm_eps, cfg.num_heads, cfg.hidden_size

    def ln(x, name):
        return F.layer_norm(x, (d,), w[f"{name}.weight"], w[f"{name}.bias"], eps)

    def lin(x, name):
        return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]

    seq = input_ids.shape[1]
    x = w["embeddings.word_embeddings.weight"][input_ids] + w["embeddings.position_embeddings.weight"][:seq]
    x = ln(x + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
    pad = (input_ids == 0)[:, None, None, :]
    for i in range(cfg.num_layers):
        p = f"encoder.layer.{i}."
        q, k, v = (
            lin(x, p + f"attention.self.{n}").unflatten(-1, (heads, -1)).transpose(1, 2)
            for n in ("query", "key", "value")
        )
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d // heads)
        weights = scores.masked_fill(pad, float("-inf")).softmax(-1)
        context = (weights @ v) * head_mask[i][None, :, None, None]  # [B, H, S, d_k], each head scaled
        context = context.transpose(1, 2).flatten(-2)
        x = ln(x + lin(context, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        hidden = F.gelu(lin(x, p + "intermediate.dense"))
        x = ln(x + lin(hidden, p + "output.dense"), p + "output.LayerNorm")
    return x


def test_no_mask_and_all_ones_give_todays_embeddings(model):
    out = pretrained.encode(SENTENCES, model)
    real = (out.input_ids != 0).unsqueeze(-1).float()
    today = F.normalize((out.last_hidden_state * real).sum(1) / real.sum(1), dim=-1)
    unmasked = pretrained.sentence_embeddings(SENTENCES, model)
    ones = pretrained.sentence_embeddings(SENTENCES, model, head_mask=torch.ones(6, 12))
    assert torch.equal(unmasked, today)
    assert torch.equal(ones, unmasked)


def test_plain_bert_without_a_mask_matches_the_course_encoder(model):
    out = pretrained.encode(SENTENCES, model)
    theirs = plain_bert(model, out.input_ids, torch.ones(6, 12))
    real = out.input_ids != 0
    torch.testing.assert_close(out.last_hidden_state[real], theirs[real], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("seed", [0, 1])
def test_masked_encoder_matches_an_independent_implementation(model, seed):
    g = torch.Generator().manual_seed(seed)
    head_mask = (torch.rand(6, 12, generator=g) > 0.3).float() * torch.rand(6, 12, generator=g).clamp(min=0.5)
    out = pretrained.encode(SENTENCES, model, head_mask=head_mask)
    theirs = plain_bert(model, out.input_ids, head_mask)
    real = out.input_ids != 0
    torch.testing.assert_close(out.last_hidden_state[real], theirs[real], atol=1e-4, rtol=1e-4)
    unmasked = pretrained.encode(SENTENCES, model).last_hidden_state
    assert (unmasked[real] - out.last_hidden_state[real]).abs().max() > 0.1  # the mask did something


def test_removing_one_head_zeroes_only_its_slice_of_the_output_projection_input(model):
    seen = {}

    def record(module, args, output):  # a forward hook sees the input after every pre-hook
        seen["x"] = args[0].clone()

    projection = model.encoder.layers[3].self_attention.output_linear
    handle = projection.register_forward_hook(record)
    try:
        pretrained.encode(SENTENCES, model)
        intact = seen["x"]
        pretrained.encode(SENTENCES, model, head_mask=ablation.heads_mask([(3, 7)]))
        ablated = seen["x"]
    finally:
        handle.remove()
    per_head, before = ablated.unflatten(-1, (12, 32)), intact.unflatten(-1, (12, 32))
    assert torch.equal(per_head[:, :, 7], torch.zeros_like(per_head[:, :, 7]))
    others = [h for h in range(12) if h != 7]
    assert torch.equal(per_head[:, :, others], before[:, :, others])  # layers 0-2 and the other heads untouched


def test_mean_ablation_puts_the_heads_mean_in_its_slice(model):
    means = pretrained.head_means(SENTENCES, model)
    assert means.shape == (6, 12, 32)
    seen = {}
    projection = model.encoder.layers[2].self_attention.output_linear
    handle = projection.register_forward_hook(lambda m, args, out: seen.update(x=args[0].clone()))
    try:
        pretrained.encode(SENTENCES, model, head_mask=ablation.heads_mask([(2, 5)]), means=means)
    finally:
        handle.remove()
    per_head = seen["x"].unflatten(-1, (12, 32))
    assert torch.allclose(per_head[:, :, 5], means[2, 5].expand_as(per_head[:, :, 5]))
    # the mean over real tokens of the intact outputs is what head_means returns
    handle = projection.register_forward_hook(lambda m, args, out: seen.update(x=args[0].clone()))
    try:
        out = pretrained.encode(SENTENCES, model)
    finally:
        handle.remove()
    real = out.input_ids != 0
    torch.testing.assert_close(seen["x"][real].unflatten(-1, (12, 32))[:, 5].mean(0), means[2, 5])


def test_hooks_are_removed_even_when_the_forward_raises(model, monkeypatch):
    layer = model.encoder.layers[4]

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(layer.feed_forward, "forward", broken)
    with pytest.raises(RuntimeError, match="boom"):
        pretrained.encode(SENTENCES, model, head_mask=ablation.heads_mask([(0, 0)]))
    monkeypatch.undo()
    for block in model.encoder.layers:
        assert not block.self_attention.output_linear._forward_pre_hooks


@pytest.mark.parametrize(
    ("head_mask", "error", "words"),
    [
        ([[1.0] * 12] * 6, TypeError, "torch tensor"),
        (torch.ones(12, 6), ValueError, "layers come first"),
        (torch.ones(6), ValueError, r"\[layers, heads\] = \[6, 12\]"),
        (torch.full((6, 12), 2.0), ValueError, r"\[0, 1\]"),
        (torch.full((6, 12), float("nan")), ValueError, r"\[0, 1\]"),
    ],
)
def test_bad_masks_get_clear_errors(model, head_mask, error, words):
    with pytest.raises(error, match=words):
        pretrained.sentence_embeddings(SENTENCES, model, head_mask=head_mask)
    for block in model.encoder.layers:
        assert not block.self_attention.output_linear._forward_pre_hooks


def test_bad_means_get_clear_errors(model):
    with pytest.raises(ValueError, match="need a head_mask"):
        pretrained.sentence_embeddings(SENTENCES, model, means=torch.zeros(6, 12, 32))
    with pytest.raises(ValueError, match="head_dim"):
        pretrained.sentence_embeddings(SENTENCES, model, head_mask=torch.ones(6, 12), means=torch.zeros(6, 12))
    with pytest.raises(ValueError, match="list"):
        pretrained.sentence_embeddings(SENTENCES, model, head_mask=torch.ones(6, 12), means=[0.0])


def test_attention_maps_and_hidden_states_take_the_mask(model):
    mask = ablation.heads_mask([(1, 3)])
    tokens, intact = pretrained.attention_maps(SENTENCES[0], model)
    _, ablated = pretrained.attention_maps(SENTENCES[0], model, head_mask=mask)
    assert torch.equal(intact[:2], ablated[:2])  # layers up to the removed head's see nothing
    assert not torch.allclose(intact[2:], ablated[2:])
    _, states = pretrained.hidden_states(SENTENCES[0], model, head_mask=mask)
    assert states.shape == (7, len(tokens), 384)


def test_pair_embedder_matches_full_runs(model):
    pairs, _ = ablation.load_pairs()
    pairs = pairs[:3] + pairs[-3:]
    embed_pairs = ablation.pair_embedder(pairs, model)
    for heads in ([], [(0, 2)], [(4, 1), (5, 9)]):
        mask = ablation.heads_mask(heads)
        a, b = embed_pairs(mask)
        full = pretrained.sentence_embeddings(
            [p for pair in zip(*pairs, strict=True) for p in pair], model, head_mask=mask
        )
        torch.testing.assert_close(F.normalize(torch.cat([a, b]), dim=-1), full, atol=1e-5, rtol=1e-4)


def test_paraphrase_gap_is_cosine_based():
    a = torch.tensor([[1.0, 0.0], [0.0, 3.0]])
    b = torch.tensor([[5.0, 0.0], [2.0, 0.0]])
    # pair 0 identical direction (cos 1), pair 1 orthogonal (cos 0)
    assert ablation.paraphrase_gap(a, b, torch.tensor([True, False])).item() == pytest.approx(1.0)


def test_stored_sweep_matches_a_fresh_computation(model):
    pairs, is_paraphrase = ablation.load_pairs()
    embed_pairs = ablation.pair_embedder(pairs, model)
    stored = ablation.load_sweep("zero")
    assert stored.shape == (6, 12)
    baseline = ablation.paraphrase_gap(*embed_pairs(torch.ones(6, 12)), is_paraphrase)
    for layer, head in [(5, 9), (3, 7), (1, 0)]:
        gap = ablation.paraphrase_gap(*embed_pairs(ablation.heads_mask([(layer, head)])), is_paraphrase)
        assert (baseline - gap).item() == pytest.approx(stored[layer, head].item(), abs=2e-4)


def test_random_heads_are_distinct_reproducible_and_respect_exclude():
    heads = ablation.random_heads(10, torch.Generator().manual_seed(0), exclude=[(1, 3)])
    assert len(set(heads)) == 10 and (1, 3) not in heads
    assert heads == ablation.random_heads(10, torch.Generator().manual_seed(0), exclude=[(1, 3)])


def test_subject_verb_sentences_have_single_token_subjects_and_verbs(model):
    for sentence, subject, verb in ablation.SUBJECT_VERB:
        tokens = model.tokenizer.encode(sentence).tokens
        assert subject in tokens and verb in tokens, tokens
    assert ablation.subject_verb_scores(model).shape == (len(ablation.SUBJECT_VERB), 6, 12)
