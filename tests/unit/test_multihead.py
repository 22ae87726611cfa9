"""The reference multi-head attention (course_utils.attention) against independent oracles:
torch.nn.MultiheadAttention after copying weights, index formulas for split/combine,
parameter and FLOP formulas, and clear errors for bad inputs."""

import pytest
import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode

from course_utils.attention import MultiHeadAttention, causal_mask, combine_heads, padding_mask, split_heads

ATOL = RTOL = 1e-6  # float32
D_MODEL, HEADS = 32, 4


def close(a, b):
    torch.testing.assert_close(a, b, atol=ATOL, rtol=RTOL)


def make_pair(qkv_bias, torch_bias=True, seed=0):
    """The course's module and nn.MultiheadAttention holding the same weights.

    nn.MultiheadAttention keeps W_q, W_k, W_v stacked in one [3*d, d] in_proj_weight
    (and their biases in in_proj_bias); out_proj is the output projection."""
    torch.manual_seed(seed)
    ours = MultiHeadAttention(D_MODEL, HEADS, qkv_bias=qkv_bias)
    with torch.no_grad():  # non-zero biases, so a bias in the wrong place shows
        for linear in (ours.query_linear, ours.key_linear, ours.value_linear, ours.output_linear):
            if linear.bias is not None:
                linear.bias.normal_()
    theirs = nn.MultiheadAttention(D_MODEL, HEADS, bias=torch_bias, batch_first=True)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(
            torch.cat([ours.query_linear.weight, ours.key_linear.weight, ours.value_linear.weight])
        )
        if torch_bias:
            qkv = (ours.query_linear, ours.key_linear, ours.value_linear)
            # the slides' layout has no Q/K/V bias: PyTorch's in_proj_bias is then zero
            theirs.in_proj_bias.copy_(
                torch.cat([lin.bias if lin.bias is not None else torch.zeros(D_MODEL) for lin in qkv])
            )
            theirs.out_proj.bias.copy_(ours.output_linear.bias)
        theirs.out_proj.weight.copy_(ours.output_linear.weight)
    return ours, theirs


def inputs(batch=2, lq=5, lk=None, seed=1):
    g = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, lq, D_MODEL, generator=g)
    if lk is None:
        return query, query, query
    return query, torch.randn(batch, lk, D_MODEL, generator=g), torch.randn(batch, lk, D_MODEL, generator=g)


# ------------------------------------------------------------------------------------------
# equality with torch.nn.MultiheadAttention


@pytest.mark.parametrize("qkv_bias", [True, False], ids=["all-bias (the article)", "slides"])
@pytest.mark.parametrize("lk", [None, 8], ids=["self", "cross"])
@pytest.mark.parametrize("fast_path", [False, True], ids=["training-mode path", "eval no_grad path"])
def test_equals_nn_multihead_attention(qkv_bias, lk, fast_path):
    ours, theirs = make_pair(qkv_bias)
    query, key, value = inputs(lk=lk)
    if fast_path:  # PyTorch takes its fused "fast path" for self-attention in eval mode without grad
        ours.eval()
        theirs.eval()
    with torch.no_grad() if fast_path else torch.enable_grad():
        expected, _ = theirs(query, key, value, need_weights=False)
        close(ours(query, key, value), expected)


def test_slides_layout_against_bias_free_pytorch_plus_our_output_bias():
    """nn.MultiheadAttention(bias=False) drops the output bias as well; the slides keep it.
    So: PyTorch's bias-free output + our output bias == our output."""
    ours, theirs = make_pair(qkv_bias=False, torch_bias=False)
    assert theirs.in_proj_bias is None and theirs.out_proj.bias is None
    query, key, value = inputs(lk=6)
    expected, _ = theirs(query, key, value)
    close(ours(query, key, value), expected + ours.output_linear.bias)
    with torch.no_grad():
        ours.output_linear.bias.zero_()
    close(ours(query, key, value), expected)


@pytest.mark.parametrize("qkv_bias", [True, False])
def test_attention_weights_equal_pytorch_per_head_and_averaged(qkv_bias):
    ours, theirs = make_pair(qkv_bias)
    query, key, value = inputs(batch=3, lq=4, lk=7)
    ours(query, key, value)
    per_head = theirs(query, key, value, need_weights=True, average_attn_weights=False)[1]
    averaged = theirs(query, key, value, need_weights=True)[1]  # average_attn_weights=True is the default
    assert ours.attention_weights.shape == per_head.shape == (3, HEADS, 4, 7)
    close(ours.attention_weights, per_head)
    close(ours.attention_weights.mean(dim=1), averaged)


def test_padding_mask_converts_to_key_padding_mask():
    """Ours: True = may attend. PyTorch's key_padding_mask: True = ignore this key. So negate."""
    ours, theirs = make_pair(qkv_bias=True)
    query, key, value = inputs(batch=2, lq=4, lk=6)
    token_ids = torch.tensor([[5, 6, 7, 8, 0, 0], [5, 6, 7, 8, 9, 0]])
    mask = padding_mask(token_ids)  # [B, 1, 1, L_k]
    expected, weights = theirs(query, key, value, key_padding_mask=~mask[:, 0, 0, :], average_attn_weights=False)
    close(ours(query, key, value, mask), expected)
    close(ours.attention_weights, weights)
    assert (ours.attention_weights[0, :, :, 4:] == 0).all()


@pytest.mark.parametrize("as_float", [False, True], ids=["bool attn_mask", "float -inf attn_mask"])
def test_causal_mask_converts_to_attn_mask(as_float):
    ours, theirs = make_pair(qkv_bias=False)
    query, key, value = inputs(batch=2, lq=5)
    allowed = causal_mask(5)
    if as_float:  # a float attn_mask is *added* to the scores: 0 where allowed, -inf where not
        attn_mask = torch.zeros(5, 5).masked_fill(~allowed, float("-inf"))
    else:
        attn_mask = ~allowed  # bool attn_mask: True = NOT allowed
    expected, weights = theirs(query, key, value, attn_mask=attn_mask, average_attn_weights=False)
    close(ours(query, key, value, allowed), expected)
    close(ours.attention_weights, weights)
    assert (ours.attention_weights.triu(diagonal=1) == 0).all()


def test_per_head_mask_and_padding_together():
    """A [B, H, L_q, L_k] mask is PyTorch's 3-D attn_mask of shape [B*H, L_q, L_k]."""
    ours, theirs = make_pair(qkv_bias=True)
    query, key, value = inputs(batch=2, lq=4, lk=6)
    g = torch.Generator().manual_seed(3)
    per_head = (torch.rand(2, HEADS, 4, 6, generator=g) > 0.4) | (torch.arange(6) == 0)  # key 0 always allowed
    pad = torch.tensor([[True] * 6, [True] * 5 + [False]])[:, None, None, :]
    expected, weights = theirs(
        query,
        key,
        value,
        attn_mask=~per_head.reshape(2 * HEADS, 4, 6),
        key_padding_mask=~pad[:, 0, 0, :],
        average_attn_weights=False,
    )
    close(ours(query, key, value, per_head & pad), expected)
    close(ours.attention_weights, weights)


def test_three_dimensional_mask_applies_to_every_head():
    ours, _ = make_pair(qkv_bias=False)
    query, key, value = inputs(batch=2, lq=4, lk=6)
    mask = torch.rand(2, 4, 6, generator=torch.Generator().manual_seed(4)) > 0.3
    mask[..., 0] = True
    close(ours(query, key, value, mask), ours(query, key, value, mask[:, None]))


def test_fully_masked_row_gives_zero_context_not_nan():
    ours, _ = make_pair(qkv_bias=False)
    query, key, value = inputs(batch=1, lq=3, lk=4)
    mask = torch.ones(1, 1, 3, 4, dtype=torch.bool)
    mask[0, 0, 1] = False  # query 1 may attend to nothing
    out = ours(query, key, value, mask)
    assert not out.isnan().any()
    assert (ours.attention_weights[0, :, 1] == 0).all()
    close(out[0, 1], ours.output_linear.bias)  # zero context -> only the output bias remains


# ------------------------------------------------------------------------------------------
# split / combine against index formulas


@pytest.mark.parametrize("b,s,d_model,h", [(1, 3, 6, 2), (2, 5, 12, 3), (3, 4, 8, 8), (2, 2, 16, 1)])
def test_split_and_combine_match_index_formulas(b, s, d_model, h):
    d = d_model // h
    x = torch.randn(b, s, d_model)
    heads = split_heads(x, h)
    assert heads.shape == (b, h, s, d)
    back = combine_heads(heads)
    for bi in range(b):
        for hi in range(h):
            for si in range(s):
                for j in range(d):
                    assert heads[bi, hi, si, j] == x[bi, si, hi * d + j]  # head hi owns features hi*d ... hi*d+d-1
                    assert back[bi, si, hi * d + j] == heads[bi, hi, si, j]
    assert torch.equal(back, x)  # exact round trip: only indices move


def test_combine_then_split_round_trip():
    heads = torch.randn(2, 4, 5, 3)
    assert torch.equal(split_heads(combine_heads(heads), 4), heads)


def test_combine_accepts_a_non_contiguous_input():
    x = torch.randn(2, 5, 4, 3).transpose(1, 2)  # [2, 4, 5, 3], not contiguous
    assert not x.is_contiguous()
    assert torch.equal(combine_heads(x), x.contiguous().permute(0, 2, 1, 3).reshape(2, 5, 12))


# ------------------------------------------------------------------------------------------
# weights shape, parameter and FLOP counts


def test_attention_weights_shape_and_rows_sum_to_one():
    ours, _ = make_pair(qkv_bias=False)
    query, key, value = inputs(batch=3, lq=4, lk=9)
    out = ours(query, key, value)
    assert out.shape == (3, 4, D_MODEL)
    assert ours.attention_weights.shape == (3, HEADS, 4, 9)
    assert not ours.attention_weights.requires_grad
    close(ours.attention_weights.sum(dim=-1), torch.ones(3, HEADS, 4))


@pytest.mark.parametrize("d_model,h", [(8, 2), (64, 8), (512, 8), (384, 12)])
def test_parameter_counts(d_model, h):
    def count(module):
        return sum(p.numel() for p in module.parameters())

    assert count(MultiHeadAttention(d_model, h)) == 4 * d_model**2 + d_model  # slides: only the output has a bias
    assert count(MultiHeadAttention(d_model, h, qkv_bias=True)) == 4 * d_model**2 + 4 * d_model
    assert count(nn.MultiheadAttention(d_model, h)) == 4 * d_model**2 + 4 * d_model
    assert count(nn.MultiheadAttention(d_model, h, bias=False)) == 4 * d_model**2


@pytest.mark.parametrize(
    "b,lq,lk,d_model,h", [(1, 10, 10, 512, 8), (2, 4, 7, 64, 4), (3, 6, 6, 64, 1), (3, 6, 6, 64, 16)]
)
def test_flop_formula(b, lq, lk, d_model, h):
    """Matrix-multiply FLOPs (a multiply-add counts 2): projections 2*B*L*d^2 each,
    scores and weighted sum 2*B*L_q*L_k*d each. The number of heads does not appear."""
    module = MultiHeadAttention(d_model, h)
    query, key = torch.randn(b, lq, d_model), torch.randn(b, lk, d_model)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        module(query, key, key)
    formula = 2 * b * (2 * lq + 2 * lk) * d_model**2 + 4 * b * lq * lk * d_model
    assert counter.get_total_flops() == formula


# ------------------------------------------------------------------------------------------
# bad inputs raise clear errors


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: MultiHeadAttention(30, 4), "divisible by num_heads=4"),
        (lambda: MultiHeadAttention(32, 0), "num_heads must be a positive int"),
        (lambda: MultiHeadAttention(32, 2.0), "num_heads must be a positive int"),
        (lambda: split_heads(torch.randn(2, 3, 10), 4), "not divisible by num_heads=4"),
        (lambda: split_heads(torch.randn(3, 10), 2), "[batch, seq_len, d_model]"),
        (lambda: split_heads(torch.randn(2, 3, 8), 0), "num_heads must be a positive int"),
        (lambda: split_heads([[1.0, 2.0]], 1), "got list"),
        (lambda: combine_heads(torch.randn(2, 3, 8)), "[batch, heads, seq_len, head_dim]"),
        # the pair (output, weights) of scaled_dot_product_attention passed on by mistake
        (lambda: combine_heads((torch.randn(1, 2, 3, 4), torch.rand(1, 2, 3, 3))), "pass on the output only"),
    ],
)
def test_bad_construction_and_shapes(make, message):
    with pytest.raises(ValueError) as info:
        make()
    assert message in str(info.value)


@pytest.mark.parametrize(
    "args, message",
    [
        ((torch.randn(2, 5, 16), torch.randn(2, 5, 16), torch.randn(2, 5, 16)), "d_model=32"),
        ((torch.randn(5, 32), torch.randn(5, 32), torch.randn(5, 32)), "[batch, seq_len, d_model=32]"),
        ((torch.randn(2, 5, 32), torch.randn(3, 6, 32), torch.randn(3, 6, 32)), "same batch size"),
        ((torch.randn(2, 5, 32), torch.randn(2, 6, 32), torch.randn(2, 7, 32)), "same length L_k"),
        ((torch.randn(2, 5, 32), torch.randn(2, 6, 32), torch.randn(2, 6, 32), torch.ones(5, 5)), "does not broadcast"),
        ((torch.randn(2, 5, 32),) * 3 + (torch.full((5, 5), 0.5),), "only 0/1"),
    ],
)
def test_bad_forward_inputs(args, message):
    ours, _ = make_pair(qkv_bias=False)
    with pytest.raises(ValueError) as info:
        ours(*args)
    assert message in str(info.value)
