"""course_utils.transformer against PyTorch's own Transformer layers and the textbook formulas."""

import math

import numpy as np
import pytest
import torch
import torch.nn as nn

from course_utils.attention import padding_mask
from course_utils.transformer import (
    Encoder,
    EncoderLayer,
    FeedForward,
    SinusoidalPositionalEncoding,
    TinyTransformer,
    encoder_layer_forward,
)

D_MODEL, HEADS, D_FF = 16, 4, 32


def copy_into_torch(ours, theirs):
    """Copy an EncoderLayer's weights into an nn.TransformerEncoderLayer."""
    attn = ours.self_attention
    with torch.no_grad():
        theirs.self_attn.in_proj_weight.copy_(
            torch.cat([attn.query_linear.weight, attn.key_linear.weight, attn.value_linear.weight])
        )
        theirs.self_attn.in_proj_bias.copy_(
            torch.cat([attn.query_linear.bias, attn.key_linear.bias, attn.value_linear.bias])
        )
        theirs.self_attn.out_proj.weight.copy_(attn.output_linear.weight)
        theirs.self_attn.out_proj.bias.copy_(attn.output_linear.bias)
        for name in ("linear1", "linear2"):
            getattr(theirs, name).weight.copy_(getattr(ours.feed_forward, name).weight)
            getattr(theirs, name).bias.copy_(getattr(ours.feed_forward, name).bias)
        for name in ("norm1", "norm2"):
            getattr(theirs, name).weight.copy_(getattr(ours, name).weight)
            getattr(theirs, name).bias.copy_(getattr(ours, name).bias)


def torch_layer(norm_first):
    return nn.TransformerEncoderLayer(
        D_MODEL, HEADS, D_FF, dropout=0.0, activation="gelu", batch_first=True, norm_first=norm_first
    )


def randomise_norms(module, seed=0):
    """LayerNorm starts as the identity affine map; random ones make norm1/norm2 order matter."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(1 + 0.3 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.3 * torch.randn(m.bias.shape, generator=g))


TOKENS = torch.tensor([[5, 3, 9, 2, 7, 1], [4, 8, 6, 0, 0, 0]])  # second sequence: 3 padding positions


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
@pytest.mark.parametrize("with_mask", [False, True], ids=["no-mask", "padding-mask"])
def test_encoder_layer_matches_torch(norm_first, with_mask):
    torch.manual_seed(0)
    ours = EncoderLayer(D_MODEL, HEADS, D_FF, norm_first=norm_first).eval()
    randomise_norms(ours)
    theirs = torch_layer(norm_first).eval()
    copy_into_torch(ours, theirs)
    x = torch.randn(2, 6, D_MODEL)
    mask = padding_mask(TOKENS) if with_mask else None
    with torch.no_grad():
        got = ours(x, mask)
        # PyTorch's key padding mask means the opposite: True = ignore this key
        expected = theirs(x, src_key_padding_mask=(TOKENS == 0) if with_mask else None)
    real = (TOKENS != 0)[..., None] if with_mask else torch.ones(2, 6, 1, dtype=torch.bool)
    # PyTorch's fast path may leave padded query positions as zeros; compare the real tokens
    torch.testing.assert_close(got * real, expected * real, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_encoder_stack_matches_torch(norm_first):
    torch.manual_seed(1)
    ours = Encoder(3, D_MODEL, HEADS, D_FF, norm_first=norm_first).eval()
    randomise_norms(ours)
    final = nn.LayerNorm(D_MODEL) if norm_first else None
    theirs = nn.TransformerEncoder(torch_layer(norm_first), 3, norm=final, enable_nested_tensor=False).eval()
    for a, b in zip(ours.layers, theirs.layers, strict=True):
        copy_into_torch(a, b)
    if norm_first:
        theirs.norm.load_state_dict(ours.final_norm.state_dict())
    x = torch.randn(2, 6, D_MODEL)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=1e-5)


def test_forward_is_the_exercise_solution_in_training_mode_too():
    layer = EncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.2).train()
    x = torch.randn(2, 6, D_MODEL)
    torch.manual_seed(5)
    a = layer(x)
    torch.manual_seed(5)
    b = encoder_layer_forward(layer, x)
    torch.manual_seed(6)
    c = layer(x)
    assert torch.equal(a, b)
    assert not torch.equal(a, c), "dropout should be active in training mode"
    layer.eval()
    assert torch.equal(layer(x), layer(x)), "dropout must be off in eval mode"


def test_feed_forward_is_position_wise():
    ff = FeedForward(D_MODEL, D_FF)
    x = torch.randn(2, 6, D_MODEL)
    out = ff(x)
    for pos in range(6):  # one position alone gives the same as inside the sequence
        torch.testing.assert_close(ff(x[:, pos : pos + 1]), out[:, pos : pos + 1])
    expected = ff.linear2(0.5 * ff.linear1(x) * (1 + torch.erf(ff.linear1(x) / math.sqrt(2))))  # exact GELU
    torch.testing.assert_close(out, expected)


def test_parameter_count_matches_torch_and_the_formula():
    for d, h, f in [(D_MODEL, HEADS, D_FF), (768, 12, 3072), (1024, 16, 4096)]:
        with torch.device("meta"):  # no memory needed to count
            ours = EncoderLayer(d, h, f)
            theirs = nn.TransformerEncoderLayer(d, h, f, batch_first=True)
        count = sum(p.numel() for p in ours.parameters())
        assert count == sum(p.numel() for p in theirs.parameters())
        # 4 projections d x d (+ bias), two feed-forward matrices (+ biases), two LayerNorms
        assert count == 4 * (d * d + d) + (d * f + f) + (f * d + d) + 2 * 2 * d
    assert sum(p.numel() for p in EncoderLayer(1024, 16, 4096).parameters()) == 12_596_224  # BERT-large layer


def permute_check(model_fn, x, perm):
    out, attn = model_fn(x)
    out_p, attn_p = model_fn(x[:, perm])
    return out[:, perm], out_p, attn[..., perm, :][..., perm], attn_p


def test_self_attention_without_positions_is_permutation_equivariant():
    torch.manual_seed(2)
    enc = Encoder(2, D_MODEL, HEADS, D_FF).eval()
    x = torch.randn(2, 7, D_MODEL)
    perm = torch.tensor([3, 0, 6, 1, 5, 2, 4])

    def run(inp):
        with torch.no_grad():
            return enc(inp), enc.attentions()

    out_then_shuffle, shuffle_then_out, attn_shuffled, attn_of_shuffled = permute_check(run, x, perm)
    torch.testing.assert_close(shuffle_then_out, out_then_shuffle, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(attn_of_shuffled, attn_shuffled, atol=1e-6, rtol=1e-5)


def test_positions_break_the_equivariance():
    torch.manual_seed(2)
    enc = Encoder(2, D_MODEL, HEADS, D_FF).eval()
    pe = SinusoidalPositionalEncoding(D_MODEL, max_len=16)
    x = torch.randn(2, 7, D_MODEL)
    perm = torch.tensor([3, 0, 6, 1, 5, 2, 4])
    with torch.no_grad():
        out_then_shuffle = enc(pe(x))[:, perm]
        shuffle_then_out = enc(pe(x[:, perm]))
    assert (out_then_shuffle - shuffle_then_out).abs().max() > 0.1


def test_tiny_transformer_without_positions_cannot_tell_order():
    torch.manual_seed(3)
    tokens = torch.tensor([[1, 4, 2, 8, 5]])
    perm = torch.tensor([4, 2, 0, 3, 1])
    blind = TinyTransformer(10, D_MODEL, HEADS, 2, positions=False).eval()
    seeing = TinyTransformer(10, D_MODEL, HEADS, 2, positions=True).eval()
    with torch.no_grad():
        torch.testing.assert_close(blind(tokens[:, perm]), blind(tokens)[:, perm], atol=1e-5, rtol=1e-5)
        assert (seeing(tokens[:, perm]) - seeing(tokens)[:, perm]).abs().max() > 0.1


def test_encoder_keeps_attentions_and_hidden_states():
    enc = Encoder(3, D_MODEL, HEADS, D_FF)
    with pytest.raises(RuntimeError, match="run the encoder"):
        enc.attentions()
    x = torch.randn(2, 6, D_MODEL)
    out = enc(x, padding_mask(TOKENS))
    attn = enc.attentions()
    assert attn.shape == (3, 2, HEADS, 6, 6)
    torch.testing.assert_close(attn.sum(-1), torch.ones(3, 2, HEADS, 6))
    assert (attn[:, 1, :, :, 3:] == 0).all(), "padding keys get no attention"
    assert len(enc.hidden_states) == 4 and enc.hidden_states[0] is x
    assert torch.equal(enc.hidden_states[-1], out)  # post-norm: no final norm


def test_tiny_transformer_shapes():
    model = TinyTransformer(12, D_MODEL, HEADS, 3, max_len=10)
    logits = model(torch.randint(0, 12, (4, 9)))
    assert logits.shape == (4, 9, 12)
    assert model.attentions().shape == (3, 4, HEADS, 9, 9)
    assert model.encoder.layers[0].feed_forward.linear1.out_features == 4 * D_MODEL


@pytest.mark.parametrize("d_model", [6, 7, 16])
def test_sinusoidal_encoding_matches_the_formula(d_model):
    pe = SinusoidalPositionalEncoding(d_model, max_len=20)
    got = pe(torch.zeros(1, 20, d_model))[0]
    expected = torch.zeros(20, d_model, dtype=torch.float64)
    for pos in range(20):
        for i in range(d_model):
            angle = pos / 10000 ** ((i - i % 2) / d_model)  # PE(pos, 2k) = sin(pos / 10000^(2k/d)), 2k+1: cos
            expected[pos, i] = math.sin(angle) if i % 2 == 0 else math.cos(angle)
    torch.testing.assert_close(got.double(), expected, atol=1e-5, rtol=1e-5)
    x = torch.randn(3, 5, d_model)
    torch.testing.assert_close(pe(x), x + got[:5])  # added, the same for every sequence in the batch


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="divisible"):
        EncoderLayer(10, 3, 20)
    layer = EncoderLayer(D_MODEL, HEADS, D_FF)
    with pytest.raises(ValueError, match="d_model=16"):
        layer(torch.randn(2, 5, 8))
    with pytest.raises(ValueError, match=r"\[batch, seq_len, d_model"):
        layer(torch.randn(5, D_MODEL))
    with pytest.raises(ValueError, match="does not broadcast"):
        layer(torch.randn(2, 5, D_MODEL), torch.ones(2, 1, 1, 4))
    with pytest.raises(ValueError, match="num_layers"):
        Encoder(0, D_MODEL, HEADS, D_FF)
    pe = SinusoidalPositionalEncoding(D_MODEL, max_len=8)
    with pytest.raises(ValueError, match="exceeds max_len=8"):
        pe(torch.zeros(1, 9, D_MODEL))
    with pytest.raises(ValueError, match="d_model=16"):
        pe(torch.zeros(9, D_MODEL))
    with pytest.raises(ValueError, match="positive int"):
        SinusoidalPositionalEncoding(0)
    model = TinyTransformer(10, D_MODEL, HEADS, 1)
    with pytest.raises(ValueError, match="integer tensor"):
        model(torch.rand(2, 5))
    with pytest.raises(ValueError, match="integer tensor"):
        model(torch.arange(5))
    with pytest.raises(ValueError, match=r"0\.\.9"):
        model(torch.tensor([[1, 2, 10]]))
    with pytest.raises(ValueError, match="vocab_size"):
        TinyTransformer(1)


def test_numpy_integer_sizes_are_accepted_and_floats_refused():
    model = TinyTransformer(
        np.int64(10), d_model=np.int64(8), num_heads=np.int64(2), num_layers=np.int64(2), max_len=np.int64(6)
    )
    assert model(torch.randint(0, 10, (2, 5))).shape == (2, 5, 10)
    assert type(model.vocab_size) is int and len(model.encoder.layers) == 2
    assert FeedForward(np.int64(8), np.int32(16))(torch.randn(1, 2, 8)).shape == (1, 2, 8)
    for make, name in (
        (lambda bad: Encoder(bad, 8, 2, 16), "num_layers"),
        (lambda bad: SinusoidalPositionalEncoding(8, max_len=bad), "max_len"),
        (lambda bad: TinyTransformer(bad), "vocab_size"),
        (lambda bad: FeedForward(8, bad), "d_ff"),
        (lambda bad: EncoderLayer(bad, 2, 16), "d_model"),
    ):
        for bad in (True, 8.0, np.float64(8.0)):
            with pytest.raises(ValueError, match=f"{name} must be a positive int"):
                make(bad)
