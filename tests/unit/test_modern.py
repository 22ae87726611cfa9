"""Lesson 08's reference code against Hugging Face's LLaMA, PyTorch's SDPA and FlexAttention."""

import warnings

import pytest
import torch
import torch.nn.functional as F

from course_utils import modern
from course_utils.attention import MultiHeadAttention, causal_mask, scaled_dot_product_attention
from course_utils.modern import (
    GroupedQueryAttention,
    apply_rope,
    kv_cache_bytes,
    repeat_kv,
    sliding_window_mask,
)


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------- against transformers' LLaMA


def _hf():
    """transformers' LLaMA code, imported when a test needs it (its import takes seconds at collection)."""
    from transformers.models.llama import modeling_llama

    return modeling_llama


def _llama(num_heads=4, num_kv_heads=2, hidden=32, theta=10000.0):
    hf = _hf()
    config = hf.LlamaConfig(
        hidden_size=hidden,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        intermediate_size=64,
        num_hidden_layers=1,
        vocab_size=16,
        max_position_embeddings=64,
        rope_parameters={"rope_type": "default", "rope_theta": theta},
        attn_implementation="eager",
    )
    torch.manual_seed(1)
    return config, hf.LlamaAttention(config, layer_idx=0).eval(), hf.LlamaRotaryEmbedding(config)


def _copy_llama_weights(ours, theirs):
    with torch.no_grad():
        ours.query_linear.weight.copy_(theirs.q_proj.weight)
        ours.key_linear.weight.copy_(theirs.k_proj.weight)
        ours.value_linear.weight.copy_(theirs.v_proj.weight)
        ours.output_linear.weight.copy_(theirs.o_proj.weight)


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1], ids=["MHA", "GQA", "MQA"])
def test_gqa_equals_llama_attention(num_kv_heads):
    config, llama, rotary = _llama(num_kv_heads=num_kv_heads, theta=500000.0)
    ours = GroupedQueryAttention(32, 4, num_kv_heads, rope_base=500000.0).eval()
    _copy_llama_weights(ours, llama)
    x = _randn(2, 7, 32)
    positions = torch.arange(3, 10)  # not starting at 0: as after a prompt already in the cache
    cos, sin = rotary(x, positions[None].expand(2, -1))
    additive = torch.zeros(7, 7).masked_fill(~causal_mask(7), float("-inf"))[None, None]
    with torch.no_grad():
        expected, _ = llama(x, position_embeddings=(cos, sin), attention_mask=additive)
        got = ours(x, mask=causal_mask(7), positions=positions)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_gqa_positions_default_to_0_to_s_minus_1():
    ours = GroupedQueryAttention(32, 4, 2, rope_base=10000.0).eval()
    x = _randn(1, 5, 32)
    torch.testing.assert_close(ours(x), ours(x, positions=torch.arange(5)))
    # shifting every position changes nothing (only offsets count); moving one token does
    torch.testing.assert_close(ours(x), ours(x, positions=torch.arange(100, 105)), atol=1e-5, rtol=0)
    assert not torch.allclose(ours(x), ours(x, positions=torch.tensor([0, 1, 2, 3, 9])), atol=1e-4)


@pytest.mark.parametrize("theta", [10000.0, 500000.0])
def test_apply_rope_equals_llama_rotary_embedding(theta):
    config, _, rotary = _llama(theta=theta)
    q, k = _randn(2, 4, 6, 8, seed=1), _randn(2, 2, 6, 8, seed=2)
    positions = torch.tensor([0, 1, 2, 5, 9, 40])
    cos, sin = rotary(q, positions[None].expand(2, -1))
    q_hf, k_hf = _hf().apply_rotary_pos_emb(q, k, cos, sin)
    torch.testing.assert_close(apply_rope(q, positions, theta), q_hf, atol=1e-5, rtol=0)
    torch.testing.assert_close(apply_rope(k, positions, theta), k_hf, atol=1e-5, rtol=0)


def test_repeat_kv_equals_llama_repeat_kv():
    x = _randn(2, 3, 5, 4)
    for n_rep in (1, 2, 4):
        torch.testing.assert_close(repeat_kv(x, n_rep), _hf().repeat_kv(x, n_rep), atol=0, rtol=0)


def test_repeat_kv_query_head_j_uses_kv_head_j_div_n_rep():
    x = _randn(1, 3, 2, 4)
    out = repeat_kv(x, 4)
    assert out.shape == (1, 12, 2, 4)
    for j in range(12):
        assert torch.equal(out[:, j], x[:, j // 4])


# --------------------------------------------------------------------------- against PyTorch


@pytest.mark.parametrize("num_kv_heads", [8, 4, 2, 1])
def test_gqa_equals_torch_sdpa_with_enable_gqa(num_kv_heads):
    q, k, v = (
        _randn(2, 8, 9, 16, seed=1),
        _randn(2, num_kv_heads, 9, 16, seed=2),
        _randn(2, num_kv_heads, 9, 16, seed=3),
    )
    got = modern.grouped_query_attention(q, k, v, mask=causal_mask(9), rope_base=None)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_gqa_with_as_many_kv_heads_as_heads_is_the_course_mha():
    torch.manual_seed(0)
    mha = MultiHeadAttention(24, 4, qkv_bias=False).eval()
    gqa = GroupedQueryAttention(24, 4, 4, bias=False).eval()
    with torch.no_grad():
        for name in ("query_linear", "key_linear", "value_linear", "output_linear"):
            getattr(gqa, name).weight.copy_(getattr(mha, name).weight)
    x, mask = _randn(2, 6, 24), causal_mask(6)
    with torch.no_grad():
        expected = mha(x, x, x, mask)
        # the course's MHA has an output bias and bias=False GQA has none: add it back
        got = gqa(x, mask=mask) + mha.output_linear.bias
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_gqa_bias_true_has_biases_on_all_four_projections():
    gqa = GroupedQueryAttention(16, 4, 2, bias=True)
    assert all(
        getattr(gqa, n).bias is not None for n in ("query_linear", "key_linear", "value_linear", "output_linear")
    )
    assert gqa.key_linear.weight.shape == (8, 16) and gqa.query_linear.weight.shape == (16, 16)


@pytest.mark.parametrize("mask", ["causal", "window"])
def test_changing_future_tokens_leaves_earlier_outputs_unchanged(mask):
    gqa = GroupedQueryAttention(16, 4, 2, rope_base=10000.0).eval()
    m = causal_mask(10) if mask == "causal" else sliding_window_mask(10, 3)
    x = _randn(1, 10, 16)
    changed = x.clone()
    changed[:, 6:] = _randn(1, 4, 16, seed=5)
    with torch.no_grad():
        before, after = gqa(x, mask=m), gqa(changed, mask=m)
    torch.testing.assert_close(before[:, :6], after[:, :6], atol=1e-6, rtol=0)
    assert not torch.allclose(before[:, 6:], after[:, 6:], atol=1e-3)  # the test can see a change


def test_sliding_window_attention_also_ignores_tokens_left_of_the_window():
    q, k, v = _randn(1, 2, 12, 8, seed=1), _randn(1, 2, 12, 8, seed=2), _randn(1, 2, 12, 8, seed=3)
    k2 = k.clone()
    k2[..., :4, :] = 0.0  # tokens 0..3 are out of reach of query 11 with window 8 (keys 4..11)
    a = modern.sliding_window_attention(q, k, v, window=8, block_size=5)
    b = modern.sliding_window_attention(q, k2, v, window=8, block_size=5)
    torch.testing.assert_close(a[..., 11:, :], b[..., 11:, :])
    assert not torch.allclose(a[..., 10, :], b[..., 10, :])  # query 10 still sees key 3


# --------------------------------------------------------------------------- RoPE properties


def test_rope_scores_depend_only_on_the_offset():
    q, k = _randn(16, seed=1), _randn(16, seed=2)

    def score(m, n):
        qm = apply_rope(q[None], torch.tensor([m]))
        kn = apply_rope(k[None], torch.tensor([n]))
        return (qm @ kn.T).item()

    assert score(5, 3) == pytest.approx(score(105, 103), abs=1e-4)
    assert score(7, 7) == pytest.approx((q @ k).item(), abs=1e-5)  # same position: no rotation left
    assert score(5, 3) != pytest.approx(score(5, 4), abs=1e-3)


def test_rope_keeps_lengths_and_position_zero_is_identity():
    x = _randn(3, 6, 8)
    rotated = apply_rope(x, torch.arange(6) * 7)
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(apply_rope(x, torch.zeros(6, dtype=torch.long)), x)


def test_rope_half_split_is_the_interleaved_rotation_of_permuted_features():
    d = 8
    x = _randn(5, d)
    positions = torch.arange(5)
    # the paper's layout: pairs (2i, 2i+1) rotated by position * theta_i
    theta = 10000.0 ** (-torch.arange(0, d, 2).float() / d)
    angle = positions[:, None].float() * theta
    even, odd = x[:, 0::2], x[:, 1::2]
    paper = torch.stack((even * angle.cos() - odd * angle.sin(), even * angle.sin() + odd * angle.cos()), -1).flatten(1)
    to_half = torch.cat((torch.arange(0, d, 2), torch.arange(1, d, 2)))  # (0, 2, 4, 6, 1, 3, 5, 7)
    torch.testing.assert_close(apply_rope(x[:, to_half], positions)[:, to_half.argsort()], paper)


# --------------------------------------------------------------------------- masks and their cost


def test_sliding_window_mask_by_definition():
    n, w = 9, 3
    causal, both = sliding_window_mask(n, w), sliding_window_mask(n, w, causal=False)
    assert causal.dtype == torch.bool and causal.shape == (n, n)
    for i in range(n):
        for j in range(n):
            assert causal[i, j].item() == (j <= i and i - j < w)
            assert both[i, j].item() == (abs(i - j) < w)
    assert torch.equal(sliding_window_mask(n, n), causal_mask(n))  # a window as long as the text: plain causal
    # rows 0..w-2 see 1..w-1 keys, the others w: n * w minus the (w - 1) w / 2 missing at the start
    assert int(causal.sum()) == 1 + 2 + 3 * (n - 2)
    assert int(sliding_window_mask(n, 1).sum()) == n  # only itself


@pytest.mark.parametrize("n, window, block", [(50, 8, 16), (37, 20, 7), (10, 1, 3), (12, 30, 5)])
def test_sliding_window_attention_equals_the_masked_reference(n, window, block):
    q, k, v = _randn(2, 3, n, 8, seed=1), _randn(2, 3, n, 8, seed=2), _randn(2, 3, n, 6, seed=3)
    expected = scaled_dot_product_attention(q, k, v, sliding_window_mask(n, window))[0]
    torch.testing.assert_close(modern.sliding_window_attention(q, k, v, window, block), expected, atol=1e-5, rtol=0)


def test_receptive_field_grows_by_window_minus_one_per_layer():
    assert modern.receptive_field(1, 4, 40) == 4
    assert modern.receptive_field(3, 4, 40) == 3 * 3 + 1
    assert modern.receptive_field(20, 4, 40) == 40  # capped by the text


# --------------------------------------------------------------------------- KV cache memory


def test_kv_cache_bytes_llama3_8b():
    # 32 layers, 8 KV heads of 128, 8192 tokens, bf16: 2 (K and V) * 32 * 8 * 128 * 8192 * 2 bytes = 1 GiB
    assert kv_cache_bytes(32, 8, 128, 8192) == 2**30
    assert kv_cache_bytes(32, 32, 128, 8192) == 4 * kv_cache_bytes(32, 8, 128, 8192)
    assert kv_cache_bytes(32, 8, 128, 8192, batch_size=3, bytes_per_value=4) == 6 * 2**30


def test_mla_cache_is_2_25_gqa_groups_for_deepseek_v2_dims():
    # DeepSeek-V2: d_c = 4 d_h = 512, d_h^R = d_h / 2 = 64: "GQA with only 2.25 groups"
    assert modern.mla_cache_bytes(60, 512, 64, 1000) * 1.0 == kv_cache_bytes(60, 1, 128, 1000) * 2.25


# --------------------------------------------------------------------------- FlexAttention mask and score mods


def _flex(q, k, v, mask_mod=None, score_mod=None):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    n = q.shape[-2]
    block_mask = create_block_mask(mask_mod, None, None, n, n, device="cpu") if mask_mod else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "called without torch.compile": eager on purpose
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)


def test_flex_mask_mods_equal_explicit_masks():
    from torch.nn.attention.flex_attention import create_mask

    n = 12
    q, k, v = _randn(1, 2, n, 8, seed=1), _randn(1, 2, n, 8, seed=2), _randn(1, 2, n, 8, seed=3)
    docs = torch.tensor([0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2])
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    explicit = {
        "causal": (modern.causal_mod, causal_mask(n)),
        "window": (modern.sliding_window_mod(4), sliding_window_mask(n, 4)),
        "document": (modern.document_mod(docs), (docs[:, None] == docs[None, :]) & (j <= i)),
        "prefix": (modern.prefix_lm_mod(5), (j < 5) | (j <= i)),
    }
    for name, (mask_mod, mask) in explicit.items():
        assert torch.equal(create_mask(mask_mod, None, None, n, n, device="cpu")[0, 0], mask), name
        expected = scaled_dot_product_attention(q, k, v, mask)[0]
        torch.testing.assert_close(_flex(q, k, v, mask_mod), expected, atol=1e-5, rtol=0, msg=name)


def test_flex_score_mods_equal_explicit_biases():
    n = 10
    q, k, v = _randn(1, 4, n, 8, seed=1) * 5, _randn(1, 4, n, 8, seed=2) * 5, _randn(1, 4, n, 8, seed=3)
    slopes = modern.alibi_slopes(4)
    torch.testing.assert_close(slopes, torch.tensor([2**-2, 2**-4, 2**-6, 2**-8]))
    distance = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs()
    bias = -slopes[:, None, None] * distance
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    torch.testing.assert_close(_flex(q, k, v, score_mod=modern.alibi_score_mod(slopes)), expected, atol=1e-5, rtol=0)
    scores = q @ k.transpose(-2, -1) / 8**0.5
    capped = torch.softmax(30 * torch.tanh(scores / 30), -1) @ v
    torch.testing.assert_close(_flex(q, k, v, score_mod=modern.softcap_score_mod(30.0)), capped, atol=1e-5, rtol=0)
    # another cap in the same process: PyTorch 2.15 recompiled a captured Python float as a symbolic one and failed
    capped_20 = torch.softmax(20 * torch.tanh(scores / 20), -1) @ v
    torch.testing.assert_close(_flex(q, k, v, score_mod=modern.softcap_score_mod(20)), capped_20, atol=1e-5, rtol=0)
    assert not torch.allclose(capped, torch.softmax(scores, -1) @ v, atol=1e-3)  # the cap changed something


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: GroupedQueryAttention(32, 4, 3), "divisible by num_kv_heads"),
        (lambda: GroupedQueryAttention(30, 4, 2), "divisible by num_heads"),
        (lambda: GroupedQueryAttention(24, 8, 2, rope_base=10000.0), "head_dim must be even"),
        (lambda: GroupedQueryAttention(32, 4.0, 2), "num_heads must be a positive int"),
        (lambda: GroupedQueryAttention(32, 4, 0), "num_kv_heads must be a positive int"),
        (lambda: apply_rope(torch.zeros(2, 5, 7), torch.arange(5)), "head_dim must be even"),
        (lambda: apply_rope(torch.zeros(2, 5, 8), torch.arange(4)), "one position per token"),
        (lambda: apply_rope(torch.zeros(2, 5, 8), torch.arange(5.0)), "integer tensor"),
        (lambda: apply_rope(torch.zeros(5, 8), torch.arange(5), base=1.0), "base must be a number > 1"),
        (lambda: repeat_kv(torch.zeros(2, 5, 8), 2), r"\[batch, kv_heads, seq_len, head_dim\]"),
        (lambda: repeat_kv(torch.zeros(1, 2, 5, 8), 0), "n_rep must be a positive int"),
        (lambda: sliding_window_mask(5, 0), "window must be a positive int"),
        (lambda: sliding_window_mask(5.0, 2), "seq_len must be a positive int"),
        (lambda: kv_cache_bytes(32, 8, 128, 8192.0), "seq_len must be a positive int"),
        (lambda: kv_cache_bytes(32, 8, 128, 8192, bytes_per_value=0), "bytes_per_value"),
        (lambda: modern.grouped_query_attention(*[torch.zeros(1, h, 3, 4) for h in (4, 3, 3)]), "not a multiple"),
        (lambda: GroupedQueryAttention(16, 4, 2)(torch.zeros(1, 3, 8)), r"d_model=16"),
        (lambda: modern.alibi_slopes(6), "power-of-two"),
    ],
)
def test_bad_input_gets_a_clear_error(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


# --------------------------------------------------------------------------- multi-head latent attention


def _small_mla():
    torch.manual_seed(3)
    return modern.MultiHeadLatentAttention(32, num_heads=4, head_dim=8, kv_lora_rank=12, rope_head_dim=6).eval()


def test_mla_equals_its_formula_head_by_head():
    mla, x, positions = _small_mla(), _randn(2, 7, 32), torch.arange(2, 9)
    h, d_h, d_r = 4, 8, 6
    q = (x @ mla.query_linear.weight.T).reshape(2, 7, h, d_h + d_r)
    latent = x @ mla.kv_down.weight.T
    rope_key = apply_rope(x @ mla.rope_key_linear.weight.T, positions)
    heads = []
    for head in range(h):
        rows = slice(head * d_h, (head + 1) * d_h)
        q_h = torch.cat((q[:, :, head, :d_h], apply_rope(q[:, :, head, d_h:], positions)), -1)
        k_h = torch.cat((latent @ mla.key_up.weight[rows].T, rope_key), -1)
        v_h = latent @ mla.value_up.weight[rows].T
        scores = (q_h @ k_h.transpose(-2, -1)) / (d_h + d_r) ** 0.5
        heads.append(torch.softmax(scores.masked_fill(~causal_mask(7), float("-inf")), -1) @ v_h)
    expected = torch.cat(heads, -1) @ mla.output_linear.weight.T
    with torch.no_grad():
        torch.testing.assert_close(mla(x, causal_mask(7), positions), expected, atol=1e-5, rtol=0)


def test_mla_absorbed_form_equals_the_expanded_one():
    mla, x = _small_mla(), _randn(2, 9, 32)
    with torch.no_grad():
        for mask in (None, causal_mask(9)):
            torch.testing.assert_close(mla.forward_absorbed(x, mask), mla(x, mask), atol=1e-5, rtol=0)


def test_mla_caches_latent_plus_rope_key_per_token():
    mla, x = _small_mla(), _randn(1, 5, 32)
    latent, rope_key = mla.compress(x)
    assert latent.shape == (1, 5, 12) and rope_key.shape == (1, 5, 6)
    numbers_per_token = latent.shape[-1] + rope_key.shape[-1]
    assert modern.mla_cache_bytes(1, 12, 6, 5, bytes_per_value=1) == numbers_per_token * 5


def test_mla_is_causal():
    mla, x = _small_mla(), _randn(1, 8, 32)
    changed = x.clone()
    changed[:, 5:] = 0.0
    with torch.no_grad():
        torch.testing.assert_close(mla(x, causal_mask(8))[:, :5], mla(changed, causal_mask(8))[:, :5])


def test_mla_bad_sizes():
    with pytest.raises(ValueError, match="head_dim must be even"):
        modern.MultiHeadLatentAttention(32, 4, 8, 12, 5)
    with pytest.raises(ValueError, match="kv_lora_rank must be a positive int"):
        modern.MultiHeadLatentAttention(32, 4, 8, 0, 4)


# --------------------------------------------------------------------------- sizes, precision, silent ignores


def _old_receptive_field(num_layers, window, seq_len):
    """The first edition's algorithm: compose the full n x n masks, layer by layer (O(layers n^3))."""
    step = sliding_window_mask(seq_len, window).float()
    reach = torch.eye(seq_len)
    for _ in range(num_layers):
        reach = ((reach @ step) > 0).float()
    return int(reach[-1].sum())


def test_receptive_field_equals_composing_the_full_masks_on_small_cases():
    for num_layers in range(1, 6):
        for window in range(1, 7):
            for seq_len in (1, 2, 5, 9, 17, 24):
                assert modern.receptive_field(num_layers, window, seq_len) == _old_receptive_field(
                    num_layers, window, seq_len
                ), (num_layers, window, seq_len)


def test_receptive_field_at_mistral_size_is_fast():
    import time

    start = time.process_time()
    assert modern.receptive_field(32, 4096, 8192) == 8192
    assert modern.receptive_field(2, 4096, 100_000) == 2 * 4095 + 1
    assert time.process_time() - start < 5  # the n^3 form took over 90 s for the first


@pytest.mark.parametrize("make_int", [lambda n: __import__("numpy").int64(n), lambda n: torch.tensor(n)])
def test_numpy_and_torch_integers_are_accepted_as_sizes(make_int):
    two, four, eight = make_int(2), make_int(4), make_int(8)
    assert modern.receptive_field(two, four, make_int(40)) == 7
    assert kv_cache_bytes(two, two, eight, four) == 2 * 2 * 2 * 8 * 4 * 2
    assert modern.mla_cache_bytes(two, four, two, eight) == 2 * 6 * 8 * 2
    assert sliding_window_mask(four, two).shape == (4, 4)
    assert repeat_kv(torch.zeros(1, 2, 3, 4), two).shape == (1, 4, 3, 4)
    assert GroupedQueryAttention(make_int(16), four, two).head_dim == 4
    assert modern.alibi_slopes(four).shape == (4,)


def test_apply_rope_float64_angles_are_float64():
    x = _randn(1, 131072, 8).double()
    positions = torch.arange(131072)
    theta = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    angles = positions.double()[:, None] * theta
    angles = torch.cat((angles, angles), dim=-1)
    expected = x * angles.cos() + modern.rotate_half(x) * angles.sin()
    assert (apply_rope(x, positions) - expected).abs().max() < 1e-9  # float32 angles: 2e-3 off


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_apply_rope_keeps_the_dtype(dtype):
    x = _randn(2, 6, 8).to(dtype)
    assert apply_rope(x, torch.arange(6)).dtype == dtype


def test_positions_without_rope_are_an_error_not_ignored():
    layer = GroupedQueryAttention(16, 4, 2).eval()
    x = _randn(1, 5, 16)
    with pytest.raises(ValueError, match="rope_base=None"):
        layer(x, positions=torch.arange(5) + 3)
    with pytest.raises(ValueError, match="rope_base=None"):
        modern.grouped_query_attention(*[_randn(1, 2, 3, 4)] * 3, positions=torch.arange(3), rope_base=None)
    layer(x)  # without positions it runs as before
