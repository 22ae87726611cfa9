"""course_utils.linear_attention: the two forms of linear attention agree, the delta rule overwrites,
decoding memory is what the lesson says, and bad input is refused with a clear error."""

import pytest
import torch
import torch.nn.functional as F

from course_utils.attention import causal_mask, scaled_dot_product_attention
from course_utils.linear_attention import (
    decode_with_kv_cache,
    decode_with_state,
    delta_rule,
    feature_map,
    linear_attention_parallel,
    linear_attention_recurrent,
)


def _qkv(*shape, d_v=3, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*shape, generator=g, dtype=dtype)
    k = torch.randn(*shape, generator=g, dtype=dtype)
    v = torch.randn(*shape[:-1], d_v, generator=g, dtype=dtype)
    return q, k, v


def _by_hand(q, k, v):
    """o_t = sum_{i<=t} phi(q_t).phi(k_i) v_i / sum_{i<=t} phi(q_t).phi(k_i), one number at a time (2-D inputs)."""
    out = torch.zeros(q.shape[0], v.shape[1], dtype=torch.float64)
    for t in range(q.shape[0]):
        weights = [float((F.elu(q[t].double()) + 1) @ (F.elu(k[i].double()) + 1)) for i in range(t + 1)]
        for i, w in enumerate(weights):
            out[t] += w * v[i].double() / sum(weights)
    return out


def test_feature_map_is_elu_plus_one_and_positive():
    x = torch.tensor([-10.0, -1.0, 0.0, 2.0])
    assert torch.allclose(feature_map(x), torch.tensor([4.54e-5, 0.36787944, 1.0, 3.0]), atol=1e-6)
    assert (feature_map(x) > 0).all()


def test_recurrent_form_matches_a_computation_by_hand():
    q, k, v = _qkv(6, 4)
    assert torch.allclose(linear_attention_recurrent(q, k, v).double(), _by_hand(q, k, v), atol=1e-6)


@pytest.mark.parametrize("shape, d_v", [((5, 4), 3), ((2, 7, 4), 2), ((2, 3, 40, 8), 5), ((1, 1, 6), 6)])
def test_parallel_and_recurrent_forms_agree_to_1e_5(shape, d_v):
    q, k, v = _qkv(*shape, d_v=d_v, seed=len(shape))
    recurrent, parallel = linear_attention_recurrent(q, k, v), linear_attention_parallel(q, k, v)
    assert recurrent.shape == (*shape[:-1], d_v) and recurrent.dtype == torch.float32
    assert (recurrent - parallel).abs().max() < 1e-5


def test_linear_attention_is_causal_and_token_t_sees_itself():
    q, k, v = _qkv(2, 8, 4)
    changed_v = v.clone()
    changed_v[:, 5] += 10.0
    before, after = linear_attention_recurrent(q, k, v), linear_attention_recurrent(q, k, changed_v)
    assert torch.equal(before[:, :5], after[:, :5])  # the past does not see token 5
    assert (before[:, 5] - after[:, 5]).abs().min() > 0.01  # token 5 sees itself
    # the first token sees only itself: its output is its own value
    assert torch.allclose(before[:, 0], v[:, 0], atol=1e-6)


def test_delta_rule_matches_the_forget_then_write_form():
    q, k, v = _qkv(2, 9, 4, d_v=3, seed=3)
    beta = torch.rand(2, 9, generator=torch.Generator().manual_seed(4)) * 2
    qn, kn = q.double() / q.double().norm(dim=-1, keepdim=True), k.double() / k.double().norm(dim=-1, keepdim=True)
    S = torch.zeros(2, 3, 4, dtype=torch.float64)
    expected = []
    for t in range(9):
        kk = kn[:, t, :, None] * kn[:, t, None, :]
        S = S @ (torch.eye(4, dtype=torch.float64) - beta[:, t, None, None].double() * kk) + beta[
            :, t, None, None
        ].double() * (v[:, t, :, None].double() * kn[:, t, None, :])
        expected.append(torch.einsum("bvk,bk->bv", S, qn[:, t]))
    got = delta_rule(q, k, v, beta)
    assert got.shape == (2, 9, 3) and got.dtype == torch.float32
    assert torch.allclose(got.double(), torch.stack(expected, dim=1), atol=1e-5)


def test_delta_rule_overwrites_a_key_where_adding_would_blur():
    """Write v1 under a key, then v2 under the same key with beta = 1: reading the key gives v2 exactly."""
    k = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    v = torch.tensor([[1.0, 2.0], [5.0, -1.0]])
    q = k.clone()
    out = delta_rule(q, k, v, torch.ones(2))
    assert torch.allclose(out[1], v[1])
    assert torch.allclose(out[0], v[0])
    half = delta_rule(q, k, v, torch.tensor([1.0, 0.5]))  # beta = 0.5: halfway from the old value to the new
    assert torch.allclose(half[1], (v[0] + v[1]) / 2)
    assert torch.equal(delta_rule(q, k, v, torch.zeros(2)), torch.zeros(2, 2))  # beta = 0 writes nothing


def test_delta_rule_normalises_q_and_k():
    q, k, v = _qkv(2, 5, 4, seed=7)
    beta = torch.full((2, 5), 0.7)
    assert torch.allclose(delta_rule(q * 3, k * 0.2, v, beta), delta_rule(q, k, v, beta), atol=1e-5)


def test_decoding_memory_constant_for_the_state_and_growing_for_the_kv_cache():
    q, k, v = _qkv(1, 64, 8, d_v=8, seed=5)
    state_out, state_bytes = decode_with_state(q, k, v)
    cache_out, cache_bytes = decode_with_kv_cache(q, k, v)
    assert torch.allclose(state_out, linear_attention_parallel(q, k, v), atol=1e-5)
    assert torch.allclose(cache_out, scaled_dot_product_attention(q, k, v, causal_mask(64))[0], atol=1e-5)
    assert state_bytes.unique().tolist() == [(8 * 8 + 8) * 4]  # S and z in float32, whatever the length
    assert cache_bytes.tolist() == [2 * 8 * 4 * (t + 1) for t in range(64)]  # one key and one value per token


@pytest.mark.parametrize(
    "fn", [linear_attention_recurrent, linear_attention_parallel, decode_with_state, decode_with_kv_cache]
)
def test_bad_inputs_are_refused_clearly(fn):
    q, k, v = _qkv(2, 5, 4)
    with pytest.raises(ValueError, match="same shape"):
        fn(q, k[..., :3], v)
    with pytest.raises(ValueError, match="same shape"):
        fn(q, k[:, :4], v)
    with pytest.raises(ValueError, match="leading axes"):
        fn(q, k, v[:, :4])
    with pytest.raises(ValueError, match="T = 0"):
        fn(q[:, :0], k[:, :0], v[:, :0])
    with pytest.raises(ValueError, match="floating-point"):
        fn(q.long(), k.long(), v.long())
    with pytest.raises(ValueError, match="at least 2 dims"):
        fn(q[0, 0], k[0, 0], v[0, 0])
    with pytest.raises(ValueError, match="one device and dtype"):
        fn(q, k, v.double())


def test_delta_rule_refuses_bad_beta_and_shapes():
    q, k, v = _qkv(2, 5, 4)
    beta = torch.full((2, 5), 0.5)
    with pytest.raises(ValueError, match=r"in \[0, 2\]"):
        delta_rule(q, k, v, beta * 5)
    with pytest.raises(ValueError, match=r"in \[0, 2\]"):
        delta_rule(q, k, v, beta - 1)
    with pytest.raises(ValueError, match=r"beta must be a tensor \[..., T\]"):
        delta_rule(q, k, v, beta[:, :4])
    with pytest.raises(ValueError, match=r"beta must be a tensor \[..., T\]"):
        delta_rule(q, k, v, 0.5)
    with pytest.raises(ValueError, match="T = 0"):
        delta_rule(q[:, :0], k[:, :0], v[:, :0], beta[:, :0])
    with pytest.raises(ValueError, match="leading axes"):
        delta_rule(q, k, v[:1], beta)
    assert delta_rule(q, k, v, torch.full((2, 5), 2.0)).isfinite().all()  # the bounds themselves are allowed
