"""The reference attention (course_utils.attention) against PyTorch's own, masks, and clear errors."""

import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from course_utils.attention import (
    MultiHeadAttention,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
    split_heads,
)

SHAPES = {  # (q, k, v) shapes: unbatched, batched, heads; L_q != L_k and d_v != d_k where possible
    "2-D": ((4, 8), (6, 8), (6, 5)),
    "3-D": ((2, 3, 16), (2, 5, 16), (2, 5, 7)),
    "4-D": ((2, 4, 3, 32), (2, 4, 6, 32), (2, 4, 6, 5)),
    "4-D self": ((3, 2, 7, 64), (3, 2, 7, 64), (3, 2, 7, 64)),
}


def _qkv(shapes, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=dtype) for s in shapes]


def _independent_weights(q, k, mask=None):
    """softmax(q k^T / sqrt(d_k)) written out with einsum, in float64."""
    scores = torch.einsum("...id,...jd->...ij", q.double(), k.double()) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask.bool(), float("-inf"))
    return torch.softmax(scores, dim=-1)


@pytest.mark.parametrize("name", SHAPES)
def test_matches_torch_sdpa_without_mask(name):
    q, k, v = _qkv(SHAPES[name])
    output, weights = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(output, F.scaled_dot_product_attention(q, k, v), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(weights.double(), _independent_weights(q, k), atol=1e-6, rtol=1e-6)
    assert output.shape == (*q.shape[:-1], v.shape[-1]) and weights.shape == (*q.shape[:-1], k.shape[-2])
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


def _masks():
    g = torch.Generator().manual_seed(1)
    lengths = torch.tensor([4, 6])
    pad = torch.arange(6)[None, :] < lengths[:, None]  # [2, 6]
    random = torch.rand(2, 4, 3, 6, generator=g) > 0.4
    random[..., 0] = True  # every row keeps at least one key
    return {
        "padding [2, 1, 1, 6] bool": ((2, 4, 3, 16), (2, 4, 6, 16), (2, 4, 6, 5), pad[:, None, None, :]),
        "padding [2, 1, 6] int": ((2, 3, 16), (2, 6, 16), (2, 6, 5), pad[:, None, :].long()),
        "causal [6, 6] bool": ((2, 4, 6, 8), (2, 4, 6, 8), (2, 4, 6, 8), torch.ones(6, 6, dtype=torch.bool).tril()),
        "causal [6, 6] float 0/1": ((6, 8), (6, 8), (6, 3), torch.ones(6, 6).tril()),
        "random per head [2, 4, 3, 6]": ((2, 4, 3, 16), (2, 4, 6, 16), (2, 4, 6, 5), random),
        "broadcast [6]": ((2, 3, 8), (2, 6, 8), (2, 6, 5), pad[0]),
    }


@pytest.mark.parametrize("name", _masks())
def test_matches_torch_sdpa_with_mask(name):
    q_shape, k_shape, v_shape, mask = _masks()[name]
    q, k, v = _qkv((q_shape, k_shape, v_shape), seed=2)
    output, weights = scaled_dot_product_attention(q, k, v, mask)
    # PyTorch: a BOOLEAN mask means True = attend (our convention); a float mask would be added
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.bool())
    torch.testing.assert_close(output, expected, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(weights.double(), _independent_weights(q, k, mask), atol=1e-6, rtol=1e-6)
    assert (weights[~torch.broadcast_to(mask.bool(), weights.shape)] == 0).all()


def test_causal_matches_torch_is_causal():
    q, k, v = _qkv(((2, 4, 7, 8), (2, 4, 7, 8), (2, 4, 7, 8)), seed=3)
    output, _ = scaled_dot_product_attention(q, k, v, causal_mask(7))
    torch.testing.assert_close(output, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-6, rtol=1e-6)


def test_float_mask_pitfall_of_torch_sdpa():
    """PyTorch ADDS a float mask to the scores: a 0/1 float mask silently does not mask."""
    q, k, v = _qkv(((5, 8), (5, 8), (5, 8)), seed=4)
    mask01 = torch.ones(5, 5).tril()
    ours, _ = scaled_dot_product_attention(q, k, v, mask01)
    wrong = F.scaled_dot_product_attention(q, k, v, attn_mask=mask01)
    assert not torch.allclose(ours, wrong, atol=1e-3)
    torch.testing.assert_close(
        ours, F.scaled_dot_product_attention(q, k, v, attn_mask=mask01.bool()), atol=1e-6, rtol=1e-6
    )


def test_float64_and_gradients():
    q, k, v = _qkv(SHAPES["3-D"], seed=5, dtype=torch.float64)
    output, _ = scaled_dot_product_attention(q, k, v)
    assert output.dtype == torch.float64
    q.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda q: scaled_dot_product_attention(q, k, v)[0], (q,))


def test_fully_masked_row_gives_zeros_not_nan_and_finite_gradients():
    q, k, v = _qkv(((1, 3, 4), (1, 5, 4), (1, 5, 2)), seed=6)
    q.requires_grad_(True)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False
    output, weights = scaled_dot_product_attention(q, k, v, mask)
    assert not torch.isnan(output).any() and not torch.isnan(weights).any()
    assert (weights[..., 1, :] == 0).all() and (output[..., 1, :] == 0).all()
    # the other rows are untouched
    torch.testing.assert_close(weights[..., [0, 2], :].double(), _independent_weights(q, k, mask)[..., [0, 2], :])
    output.sum().backward()
    assert torch.isfinite(q.grad).all()
    # PyTorch's own SDPA makes the same choice
    torch.testing.assert_close(output, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=1e-6, rtol=1e-6)


def test_only_fully_masked_rows_are_zeroed_not_nan_from_nan_inputs():
    # zeroing a row with no allowed key must not hide a NaN that comes from the inputs (PyTorch keeps it too)
    q, k, v = _qkv(((3, 4), (5, 4), (5, 2)), seed=8)
    q[0, 0] = float("nan")
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False
    output, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.isnan(weights[0]).all() and torch.isnan(output[0]).all()
    assert (weights[1] == 0).all() and not torch.isnan(weights[2]).any()
    assert torch.isnan(F.scaled_dot_product_attention(q, k, v, attn_mask=mask)[0]).all()


def test_permutation_equivariance():
    q, k, v = _qkv(((6, 8), (6, 8), (6, 8)), seed=7)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    output, _ = scaled_dot_product_attention(q, k, v)
    permuted, _ = scaled_dot_product_attention(q[perm], k[perm], v[perm])
    torch.testing.assert_close(permuted, output[perm])


@pytest.mark.parametrize("n", [1, 2, 5, 9])
def test_causal_mask_values(n):
    mask = causal_mask(n)
    assert mask.shape == (n, n) and mask.dtype == torch.bool
    for i in range(n):
        for j in range(n):
            assert bool(mask[i, j]) == (j <= i), (i, j)


@pytest.mark.parametrize("bad", [0, -3, 2.0, "5", True])
def test_causal_mask_rejects_bad_length(bad):
    with pytest.raises((ValueError, TypeError), match="seq_len"):
        causal_mask(bad)


def test_padding_mask_values_and_shape():
    ids = torch.tensor([[5, 7, 9, 0, 0], [3, 4, 0, 0, 0], [1, 2, 3, 4, 6]])
    mask = padding_mask(ids)
    assert mask.shape == (3, 1, 1, 5) and mask.dtype == torch.bool
    for b in range(3):
        for j in range(5):
            assert bool(mask[b, 0, 0, j]) == (ids[b, j].item() != 0)
    assert padding_mask(ids, pad_id=3)[1, 0, 0].tolist() == [False, True, True, True, True]
    # it broadcasts over heads and queries
    q, k, v = _qkv(((3, 2, 4, 8), (3, 2, 5, 8), (3, 2, 5, 8)), seed=8)
    _, weights = scaled_dot_product_attention(q, k, v, mask)
    assert (weights[1, :, :, 2:] == 0).all()


@pytest.mark.parametrize("bad", [torch.tensor([1, 2, 0]), torch.zeros(2, 3, 4, dtype=torch.long), [[1, 0]]])
def test_padding_mask_rejects_bad_ids(bad):
    with pytest.raises(ValueError, match=r"\[batch, seq_len\]"):
        padding_mask(bad)


BAD_INPUTS = {
    "q and k feature sizes differ": (((3, 8), (5, 7), (5, 4)), None, ValueError, "same feature size d_k"),
    "k and v lengths differ": (((3, 8), (5, 8), (4, 4)), None, ValueError, "same number of positions"),
    "mask does not broadcast": (
        ((2, 3, 8), (2, 5, 8), (2, 5, 4)),
        torch.ones(3, 4, dtype=torch.bool),
        ValueError,
        "does not broadcast",
    ),
    "mask would enlarge the scores": (
        ((2, 5, 8), (2, 5, 8), (2, 5, 4)),
        torch.ones(2, 1, 1, 5, dtype=torch.bool),  # a 4-D padding mask on 3-D scores
        ValueError,
        "does not broadcast",
    ),
    "mask holds other values than 0/1": (((3, 8), (5, 8), (5, 4)), torch.full((3, 5), 2.0), ValueError, "only 0/1"),
    "additive -inf mask": (
        ((3, 8), (5, 8), (5, 4)),
        torch.zeros(3, 5).masked_fill(torch.eye(3, 5) == 1, float("-inf")),
        ValueError,
        "only 0/1",
    ),
    "1-D query": (((8,), (5, 8), (5, 4)), None, ValueError, r"\[\.\.\., seq_len, features\]"),
    "mask is a list": (((3, 8), (5, 8), (5, 4)), [[1] * 5] * 3, TypeError, "mask must be a torch.Tensor"),
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_inputs_raise_clear_errors(name):
    shapes, mask, error, message = BAD_INPUTS[name]
    q, k, v = _qkv(shapes)
    with pytest.raises(error, match=message):
        scaled_dot_product_attention(q, k, v, mask)


def test_integer_tensors_are_rejected():
    q = torch.ones(3, 8, dtype=torch.long)
    with pytest.raises(TypeError, match="floating-point"):
        scaled_dot_product_attention(q, q, q)


def test_non_tensor_inputs_are_rejected():
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        scaled_dot_product_attention([[1.0, 2.0]], torch.ones(1, 2), torch.ones(1, 2))


@pytest.mark.parametrize("d_model, num_heads", [(10, 3), (64, 5), (6, 4)])
def test_multihead_rejects_indivisible_d_model(d_model, num_heads):
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(d_model, num_heads)


def test_multihead_rejects_wrong_input_shape():
    mha = MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match="d_model=16"):
        mha(torch.ones(2, 3, 8), torch.ones(2, 3, 8), torch.ones(2, 3, 8))
    with pytest.raises(ValueError, match=r"\[batch, seq_len, d_model"):
        mha(torch.ones(3, 16), torch.ones(3, 16), torch.ones(3, 16))


# ------------------------------------------------------------------------------------------
# key_padding_mask: the unambiguous way to pass a [batch, L_k] padding mask

LENGTHS = [3, 5, 1]  # real tokens per sentence; B = 3 sentences of L_k = 5 positions


def _key_padding_mask(lengths=LENGTHS, length=5):
    return torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]  # [B, L_k], True = real token


def _one_sentence_at_a_time(q, k, v, lengths, extra_mask=None):
    """Oracle: each sentence alone, its keys cut to its real tokens, through PyTorch's SDPA."""
    outputs = []
    for b, n in enumerate(lengths):
        mask = None if extra_mask is None else extra_mask[..., :n].bool()
        outputs.append(F.scaled_dot_product_attention(q[b], k[b][..., :n, :], v[b][..., :n, :], attn_mask=mask))
    return torch.stack(outputs)


@pytest.mark.parametrize("heads", [None, 2], ids=["3-D", "4-D"])
@pytest.mark.parametrize("as_int", [False, True], ids=["bool", "0/1"])
def test_key_padding_mask_hides_each_sentences_own_padding(heads, as_int):
    # L_q == B == 3: exactly the case where a [B, L_k] mask passed as mask= is read as [L_q, L_k]
    per_sentence = (heads,) if heads else ()
    q, k, v = _qkv(((3, *per_sentence, 3, 8), (3, *per_sentence, 5, 8), (3, *per_sentence, 5, 4)), seed=20)
    keys = _key_padding_mask()
    output, weights = scaled_dot_product_attention(q, k, v, key_padding_mask=keys.long() if as_int else keys)
    torch.testing.assert_close(output, _one_sentence_at_a_time(q, k, v, LENGTHS), atol=1e-6, rtol=1e-6)
    for b, n in enumerate(LENGTHS):
        assert (weights[b, ..., n:] == 0).all()
    # the pitfall it avoids: as mask=, sentence i's padding lands on query i of every sentence
    misread, _ = scaled_dot_product_attention(q, k, v, keys)
    assert not torch.allclose(misread, output)


def test_key_padding_mask_and_mask_combine_by_and():
    q, k, v = _qkv(((3, 2, 5, 8), (3, 2, 5, 8), (3, 2, 5, 4)), seed=21)
    output, weights = scaled_dot_product_attention(q, k, v, causal_mask(5), key_padding_mask=_key_padding_mask())
    allowed = causal_mask(5) & _key_padding_mask()[:, None, None, :]
    torch.testing.assert_close(weights, _independent_weights(q, k, allowed).float().nan_to_num(0.0), atol=1e-6, rtol=0)
    # sentence 2 has one real token: every query may see key 0 and only key 0
    assert (weights[2, :, :, 0] == 1).all()
    # the same result as the 4-D mask the lessons build by hand
    torch.testing.assert_close(output, scaled_dot_product_attention(q, k, v, allowed)[0], atol=0, rtol=0)


def test_a_fully_padded_sentence_gives_zeros_not_nan():
    q, k, v = _qkv(((2, 3, 8), (2, 4, 8), (2, 4, 4)), seed=22)
    keys = torch.tensor([[True, True, False, False], [False, False, False, False]])
    output, weights = scaled_dot_product_attention(q, k, v, key_padding_mask=keys)
    assert (output[1] == 0).all() and (weights[1] == 0).all()
    assert torch.isfinite(output).all()


def test_multihead_key_padding_mask_matches_torch_with_the_opposite_convention():
    torch.manual_seed(3)
    ours = MultiHeadAttention(16, 4, qkv_bias=True)
    theirs = torch.nn.MultiheadAttention(16, 4, batch_first=True)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(
            torch.cat([ours.query_linear.weight, ours.key_linear.weight, ours.value_linear.weight])
        )
        theirs.in_proj_bias.copy_(torch.cat([ours.query_linear.bias, ours.key_linear.bias, ours.value_linear.bias]))
        theirs.out_proj.weight.copy_(ours.output_linear.weight)
        theirs.out_proj.bias.copy_(ours.output_linear.bias)
    x = torch.randn(3, 3, 16, generator=torch.Generator().manual_seed(4))
    memory = torch.randn(3, 5, 16, generator=torch.Generator().manual_seed(5))
    keys = _key_padding_mask()
    expected, _ = theirs(x, memory, memory, key_padding_mask=~keys)  # PyTorch: True = ignore this key
    torch.testing.assert_close(ours(x, memory, memory, key_padding_mask=keys), expected, atol=1e-5, rtol=1e-5)
    mask = causal_mask(5)[2:]  # [3, 5]: queries are the last 3 of 5 positions
    expected, _ = theirs(x, memory, memory, key_padding_mask=~keys, attn_mask=~mask)
    torch.testing.assert_close(ours(x, memory, memory, mask, key_padding_mask=keys), expected, atol=1e-5, rtol=1e-5)


BAD_KEY_PADDING_MASKS = {
    "[L_k] only": (torch.ones(5, dtype=torch.bool), r"\[batch, L_k\] = \[3, 5\], got \(5,\)"),
    "[B, 1, 1, L_k]": (torch.ones(3, 1, 1, 5, dtype=torch.bool), r"\[batch, L_k\] = \[3, 5\]"),
    "wrong length": (torch.ones(3, 4, dtype=torch.bool), r"\[batch, L_k\] = \[3, 5\], got \(3, 4\)"),
    "values other than 0/1": (torch.full((3, 5), 2), "only 0/1"),
    "a list": ([[1] * 5] * 3, "must be a torch.Tensor"),
}


@pytest.mark.parametrize("name", BAD_KEY_PADDING_MASKS)
def test_bad_key_padding_masks_raise_clear_errors(name):
    bad, message = BAD_KEY_PADDING_MASKS[name]
    q, k, v = _qkv(((3, 2, 3, 8), (3, 2, 5, 8), (3, 2, 5, 4)))
    with pytest.raises((ValueError, TypeError), match=message):
        scaled_dot_product_attention(q, k, v, key_padding_mask=bad)


def test_key_padding_mask_needs_batched_inputs():
    q, k, v = _qkv(((3, 8), (5, 8), (5, 4)))
    with pytest.raises(ValueError, match="needs batched inputs"):
        scaled_dot_product_attention(q, k, v, key_padding_mask=torch.ones(1, 5, dtype=torch.bool))


@pytest.mark.parametrize(
    "shapes",
    [
        ((4, 3, 8), (4, 5, 8), (4, 5, 4)),
        ((4, 2, 3, 8), (4, 2, 5, 8), (4, 2, 5, 4)),
        ((4, 2, 1, 8), (4, 2, 5, 8), (4, 2, 5, 4)),
    ],
    ids=["3-D", "4-D", "4-D, one query"],
)
def test_a_batch_first_2d_mask_is_refused_with_the_two_fixes(shapes):
    """A [B, L_k] padding mask as mask=, where B != L_q: named as such, with key_padding_mask and the reshape."""
    q, k, v = _qkv(shapes)
    keys = _key_padding_mask([5, 2, 3, 4])
    with pytest.raises(ValueError, match="looks like the batch size 4") as info:
        scaled_dot_product_attention(q, k, v, keys)
    assert "key_padding_mask=mask" in str(info.value) and "padding_mask()" in str(info.value)


def test_a_per_sentence_3d_mask_on_per_head_scores_is_refused_with_the_fix():
    q, k, v = _qkv(((4, 2, 3, 8), (4, 2, 5, 8), (4, 2, 5, 4)))
    mask = torch.ones(4, 3, 5, dtype=torch.bool)  # [batch, L_q, L_k], no head axis
    with pytest.raises(ValueError, match=r"a 3-D mask is read as \[heads, L_q, L_k\].*mask\[:, None\]"):
        scaled_dot_product_attention(q, k, v, mask)
    scaled_dot_product_attention(q, k, v, mask[:, None])  # the fix the message names


def test_legit_2d_masks_keep_working_whatever_the_batch_size():
    # a causal [L, L] mask on [B, H, L, d] inputs with B == L: the first dim is L_q, not the batch
    q, k, v = _qkv(((4, 2, 4, 8), (4, 2, 4, 8), (4, 2, 4, 8)), seed=23)
    output, _ = scaled_dot_product_attention(q, k, v, causal_mask(4))
    torch.testing.assert_close(output, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-6, rtol=1e-6)
    # one sentence: a [1, L_k] mask broadcasts over the queries and means the same as key_padding_mask
    q, k, v = _qkv(((1, 3, 8), (1, 5, 8), (1, 5, 4)), seed=24)
    keys = _key_padding_mask([2], 5)
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, keys)[0], scaled_dot_product_attention(q, k, v, key_padding_mask=keys)[0]
    )


# ------------------------------------------------------------------------------------------
# inputs that are not float32 tensors of matching sizes: clear errors that name the fix


@pytest.mark.parametrize(
    "convert, fix",
    [
        (lambda t: t.numpy().astype("float64"), r"torch.from_numpy\(q\).float\(\)"),
        (lambda t: t.tolist(), "torch.tensor"),
    ],
    ids=["numpy", "list"],
)
def test_non_tensor_inputs_name_the_conversion(convert, fix):
    q, k, v = _qkv(((3, 8), (5, 8), (5, 4)))
    with pytest.raises(TypeError, match="q must be a torch.Tensor") as info:
        scaled_dot_product_attention(convert(q), k, v)
    assert re.search(fix, str(info.value))


def test_float64_inputs_are_fine_when_they_agree():
    q, k, v = _qkv(SHAPES["3-D"], dtype=torch.float64)
    output, weights = scaled_dot_product_attention(q, k, v)
    assert output.dtype == weights.dtype == torch.float64
    torch.testing.assert_close(output, F.scaled_dot_product_attention(q, k, v))


def test_mixed_dtypes_are_refused_with_the_fix():
    q, k, v = _qkv(SHAPES["3-D"])
    with pytest.raises(
        TypeError, match=r"share one dtype, got torch.float64, torch.float32 and torch.float32.*\.float\(\)"
    ):
        scaled_dot_product_attention(torch.from_numpy(q.numpy().astype("float64")), k, v)


@pytest.mark.parametrize(
    "shapes",
    [((2, 3, 8), (3, 5, 8), (3, 5, 4)), ((2, 4, 3, 8), (2, 2, 5, 8), (2, 2, 5, 4)), ((2, 3, 8), (2, 5, 8), (3, 5, 4))],
    ids=["batch sizes", "head counts", "k and v batches"],
)
def test_mismatched_batch_or_head_sizes_are_named(shapes):
    q, k, v = _qkv(shapes)
    with pytest.raises(ValueError, match=r"leading \(batch, head\) dimensions .* do not broadcast"):
        scaled_dot_product_attention(q, k, v)


def test_multihead_attention_names_bad_inputs():
    mha = MultiHeadAttention(16, 4)
    x = torch.randn(2, 3, 16)
    with pytest.raises(
        TypeError, match=r"query must be a torch.Tensor, got ndarray.*torch.from_numpy\(query\).float\(\)"
    ):
        mha(x.numpy(), x, x)
    with pytest.raises(TypeError, match=r"key must be a torch.Tensor, got list"):
        mha(x, x.tolist(), x)
    with pytest.raises(TypeError, match=r"value is torch.float64 but the layer's weights are torch.float32"):
        mha(x, x, x.double())
    assert mha.double()(x.double(), x.double(), x.double()).dtype == torch.float64  # a float64 layer is fine
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \[batch, L_k\] = \[2, 3\]"):
        mha.float()(x, x, x, key_padding_mask=torch.ones(3, 3))


# ------------------------------------------------------------------------------------------
# sizes: numpy integers are integers; bools and floats are not


@pytest.mark.parametrize("n", [np.int64(4), np.int32(4), torch.tensor(4)], ids=["np.int64", "np.int32", "0-d tensor"])
def test_integer_like_sizes_are_accepted(n):
    assert torch.equal(causal_mask(n), causal_mask(4))
    x = torch.randn(2, 3, 8)
    assert torch.equal(split_heads(x, n), split_heads(x, 4))
    mha = MultiHeadAttention(np.int64(8), n)
    assert type(mha.num_heads) is int and type(mha.d_model) is int and mha.head_dim == 2
    assert mha(x, x, x).shape == (2, 3, 8)


@pytest.mark.parametrize("bad", [True, 4.0, np.float64(4.0), "4", None, np.int64(0)])
def test_non_integer_sizes_are_refused(bad):
    for make, name in (
        (lambda: causal_mask(bad), "seq_len"),
        (lambda: split_heads(torch.randn(2, 3, 8), bad), "num_heads"),
        (lambda: MultiHeadAttention(8, bad), "num_heads"),
        (lambda: MultiHeadAttention(bad, 2), "d_model"),
    ):
        with pytest.raises(ValueError, match=f"{name} must be a positive int, got"):
            make()
