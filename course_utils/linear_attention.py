"""Attention with a fixed-size state: linear attention and the delta rule (lesson 12).

Softmax attention keeps every key and value it has seen (the KV cache grows with the
sequence). Linear attention (Katharopoulos, Vyas, Pappas and Fleuret 2020, "Transformers
are RNNs: Fast Autoregressive Transformers with Linear Attention") replaces
exp(q . k) by phi(q) . phi(k) with a feature map phi(x) = elu(x) + 1 > 0. The sums over
past tokens then factor into one d_k x d_v matrix S and one d_k vector z, updated per
token:

    S_t = S_{t-1} + phi(k_t) v_t^T,   z_t = z_{t-1} + phi(k_t),   o_t = phi(q_t)^T S_t / phi(q_t)^T z_t

The delta rule (Schlag, Irie and Schmidhuber 2021, "Linear Transformers Are Secretly
Fast Weight Programmers"; Yang, Wang, Zhang, Shen and Kim 2024, "Parallelizing Linear
Transformers with the Delta Rule over Sequence Length", DeltaNet) writes only what the
state gets wrong for a key: S_t = S_{t-1} + beta_t (v_t - S_{t-1} k_t) k_t^T, o_t = S_t q_t.

    out = linear_attention_recurrent(q, k, v)        # [..., T, d_v], token t sees 0..t
    out = linear_attention_parallel(q, k, v)          # the same numbers, all tokens at once
    out = delta_rule(q, k, v, beta)                   # beta [..., T] in [0, 2]
    outputs, held = decode_with_kv_cache(q, k, v)     # bytes kept after each token
    outputs, held = decode_with_state(q, k, v)
"""

import torch
import torch.nn.functional as F

from course_utils import _validate

__all__ = [
    "feature_map",
    "linear_attention_recurrent",
    "linear_attention_parallel",
    "delta_rule",
    "decode_with_kv_cache",
    "decode_with_state",
]


def feature_map(x):
    """phi(x) = elu(x) + 1: positive everywhere, so phi(q) . phi(k) > 0 plays the part of exp(q . k)."""
    return F.elu(x) + 1


def linear_attention_recurrent(q, k, v):
    """Causal linear attention, one token after the other, with a state of fixed size.

    q, k: [..., T, d_k]; v: [..., T, d_v]. Returns [..., T, d_v].
    """
    _validate.linear_qkv(q, k, v)
    q, k = feature_map(q), feature_map(k)
    S = q.new_zeros(*k.shape[:-2], k.shape[-1], v.shape[-1])  # [..., d_k, d_v]: sum of phi(k_i) v_i^T
    z = q.new_zeros(*k.shape[:-2], k.shape[-1])  # [..., d_k]: sum of phi(k_i), the normaliser
    outputs = []
    for t in range(k.shape[-2]):
        S = S + k[..., t, :, None] * v[..., t, None, :]  # add token t first: it sees itself
        z = z + k[..., t, :]
        numerator = (q[..., t, :, None] * S).sum(-2)  # phi(q_t)^T S_t: [..., d_v]
        denominator = (q[..., t, :] * z).sum(-1, keepdim=True)  # phi(q_t)^T z_t > 0
        outputs.append(numerator / denominator)
    return torch.stack(outputs, dim=-2)


def linear_attention_parallel(q, k, v):
    """The same causal linear attention for all tokens at once: phi(Q) phi(K)^T, masked, row-normalised.

    It builds the T x T matrix, like softmax attention; the recurrent form never does.
    """
    _validate.linear_qkv(q, k, v)
    scores = feature_map(q) @ feature_map(k).transpose(-2, -1)  # [..., T, T], all positive
    T = k.shape[-2]
    scores = scores * torch.ones(T, T, dtype=torch.bool, device=k.device).tril()  # token t sees 0..t
    return (scores @ v) / scores.sum(-1, keepdim=True)


def delta_rule(q, k, v, beta):
    """The delta rule: before writing v_t under key k_t, subtract what the state already returns for k_t.

    q, k: [..., T, d_k]; v: [..., T, d_v]; beta: [..., T] in [0, 2]. Returns [..., T, d_v].
    q and k are L2-normalised inside; the state S [..., d_v, d_k] starts at zero; o_t = S_t q_t.
    """
    _validate.linear_qkv(q, k, v)
    _validate.beta_gates(beta, k)
    q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)  # unit keys: S k = v exactly after a write with beta = 1
    S = q.new_zeros(*k.shape[:-2], v.shape[-1], k.shape[-1])  # [..., d_v, d_k]
    outputs = []
    for t in range(k.shape[-2]):
        k_t, v_t, b_t = k[..., t, :], v[..., t, :], beta[..., t, None]
        recalled = (S @ k_t[..., None])[..., 0]  # what the state holds for k_t now: [..., d_v]
        S = S + (b_t * (v_t - recalled))[..., :, None] * k_t[..., None, :]  # write the error, not v_t
        outputs.append((S @ q[..., t, :, None])[..., 0])  # read after the update
    return torch.stack(outputs, dim=-2)


def _held_bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def decode_with_kv_cache(q, k, v):
    """Softmax attention decoded token by token with a KV cache: (outputs [..., T, d_v], bytes held [T]).

    ``bytes held`` entry t is the size of the cache after token t: every key and value so far.
    """
    _validate.linear_qkv(q, k, v)
    keys, values = k[..., :0, :], v[..., :0, :]
    outputs, held = [], []
    for t in range(k.shape[-2]):
        keys = torch.cat([keys, k[..., t : t + 1, :]], dim=-2)  # the cache grows by one key and one value
        values = torch.cat([values, v[..., t : t + 1, :]], dim=-2)
        weights = torch.softmax(q[..., t : t + 1, :] @ keys.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1)
        outputs.append(weights @ values)
        held.append(_held_bytes([keys, values]))
    return torch.cat(outputs, dim=-2), torch.tensor(held)


def decode_with_state(q, k, v):
    """Linear attention decoded token by token: (outputs [..., T, d_v], bytes held [T]), the state S and z."""
    _validate.linear_qkv(q, k, v)
    phi_q, phi_k = feature_map(q), feature_map(k)
    S = q.new_zeros(*k.shape[:-2], k.shape[-1], v.shape[-1])
    z = q.new_zeros(*k.shape[:-2], k.shape[-1])
    outputs, held = [], []
    for t in range(k.shape[-2]):
        S = S + phi_k[..., t, :, None] * v[..., t, None, :]  # the state is overwritten, not extended
        z = z + phi_k[..., t, :]
        outputs.append((phi_q[..., t, :, None] * S).sum(-2) / (phi_q[..., t, :] * z).sum(-1, keepdim=True))
        held.append(_held_bytes([S, z]))
    return torch.stack(outputs, dim=-2), torch.tensor(held)
