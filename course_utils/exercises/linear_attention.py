"""Lesson 12's exercises: linear attention as a recurrence, the delta rule, and the recall sequences.

The solutions are the course's reference code (``course_utils.linear_attention`` and
``course_utils.recall``). The expected answers come from oracles written here another way,
in float64: linear attention from the masked T x T matrix phi(Q) phi(K)^T (the parallel
form), the delta rule from its "forget then write" form S (I - beta k k^T) + beta v k^T,
the recall sequences by filling positions one by one. Each known mistake is recomputed on
the same inputs and named when the learner's output matches it.
"""

import torch
import torch.nn.functional as F

from course_utils import linear_attention, recall
from course_utils.exercises import exercise
from course_utils.exercises.checking import (
    RETURNED_NONE,
    KnownMistake,
    Mistake,
    call,
    close,
    comparable,
    diagnose,
    expect_ids,
    expect_tensor,
    generator,
    randn,
    tolerance,
)

# Distinctive phrases, one per mistake (the tests look for them).
LA_NO_NORMALISER = "there is no normaliser"
LA_CURRENT_NORMALISER = "your normaliser uses the current token only"
LA_READ_BEFORE_ADD = "you read the state before adding token t"
LA_PHI_ON_V = "you applied phi to the values"
LA_NOT_CAUSAL = "your sums run over the whole sequence"
LA_NO_PHI = "the feature map phi is missing"
LA_SOFTMAX = "this is softmax attention"
LA_RELU = "ReLU is not this exercise's feature map"
LA_EXP_PHI = "exp is not this exercise's feature map"
LA_WEIGHTS_OVER_QUERIES = "your weights sum to 1 over the queries"
LA_NORMALISER_BEFORE_ADD = "your normaliser z did not include token t yet"
LA_PHI_Q_ONLY = "you applied phi to q but not to k"
LA_PHI_K_ONLY = "you applied phi to k but not to q"
LA_ELU_WITHOUT_ONE = "your phi is F.elu(x) without the + 1"

DR_ADDITIVE = "you used the additive update"
DR_BETA_WRONG_TERM = "beta multiplies the wrong term"
DR_KEYS_NOT_NORMALISED = "the keys are not normalised"
DR_QUERIES_NOT_NORMALISED = "the queries are not normalised"
DR_READ_BEFORE_UPDATE = "you read the output before the update"
DR_NO_BETA = "beta is missing"
DR_NORMALISED_OVER_TIME = "you normalised over the time axis"
DR_READ_WITH_KEY = "you read the output with the key"
DR_BETA_TWICE = "beta is applied twice"

RS_ANSWER_LEAKED = "the queries show the answer"
RS_TARGETS_ON_PAIRS = "the pairs have targets"
RS_INDEX_AS_KEY = "the query tokens carry the pair's index, not its key"
RS_TARGET_IS_KEY = "the target is the key"
RS_SWAPPED_IDS = "key and value ids are swapped"
RS_QUERIES_FIRST = "the queries come before the pairs"
RS_NOT_A_PAIR = "return a pair (tokens, targets)"
RS_IGNORE_INDEX = "the pairs' targets must be -100"
RS_QUERY_OFF_BY_ONE = "your query index is off by one"


# --------------------------------------------------------------------------- linear attention


def _phi(x):
    return F.elu(x) + 1


def _causal_sums(q, k, v, *, phi_q=_phi, phi_k=_phi, phi_v=lambda v: v, diagonal=0, causal=True):
    """Oracle (and its variants): the masked T x T matrix phi(q_t) . phi(k_i), used as weights on v_i."""
    dtype = q.dtype
    q, k, v = phi_q(q.double()), phi_k(k.double()), phi_v(v.double())
    scores = q @ k.transpose(-2, -1)
    if causal:
        T = k.shape[-2]
        scores = scores * torch.ones(T, T, dtype=torch.bool).tril(diagonal)
    return scores, v, dtype


def _linear_oracle(q, k, v, **variant):
    scores, v, dtype = _causal_sums(q, k, v, **variant)
    return ((scores @ v) / scores.sum(-1, keepdim=True)).to(dtype)


def _linear_cases():
    g = generator(12)
    return [
        ("q, k [2, 6, 4], v [2, 6, 3]", randn(g, 2, 6, 4), randn(g, 2, 6, 4), randn(g, 2, 6, 3)),
        ("q, k [7, 5], v [7, 2] (no batch axis)", randn(g, 7, 5), randn(g, 7, 5), randn(g, 7, 2)),
        (  # float64 shows float32 arithmetic; shifted by 1000, phi(q_t) . z_t is over 1e6, so the usual eps
            # in the normaliser (1e-6 in Katharopoulos et al.'s code) changes nothing float64 can see
            "q, k [2, 3, 8, 4] + 1000, v [2, 3, 8, 6], float64",
            randn(g, 2, 3, 8, 4, dtype=torch.float64) + 1000,
            randn(g, 2, 3, 8, 4, dtype=torch.float64) + 1000,
            randn(g, 2, 3, 8, 6, dtype=torch.float64),
        ),
        (
            "q, k [1, 9, 3] scaled by 4 (large inputs)",
            randn(g, 1, 9, 3, scale=4),
            randn(g, 1, 9, 3, scale=4),
            randn(g, 1, 9, 2),
        ),  # fmt: skip
        ("one token: q, k [1, 1, 4], v [1, 1, 3]", randn(g, 1, 1, 4), randn(g, 1, 1, 4), randn(g, 1, 1, 3)),
    ]


def _linear_mistakes(q, k, v, description):
    scores, v64, dtype = _causal_sums(q, k, v)
    phi_q, phi_k = _phi(q.double()), _phi(k.double())
    own = (phi_q * phi_k).sum(-1, keepdim=True)  # phi(q_t) . phi(k_t): the current token alone
    T = k.shape[-2]
    before, v_before, _ = _causal_sums(q, k, v, diagonal=-1)
    with torch.no_grad():
        plain_softmax = (
            torch.softmax(
                (q.double() @ k.double().transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(
                    ~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")
                ),
                dim=-1,
            )
            @ v.double()
        )
    return [
        (
            f"{LA_NO_NORMALISER}: you returned phi(q_t)^T S_t, a sum that grows with t. Divide by phi(q_t)^T z_t, "
            f"where z_t = z_(t-1) + phi(k_t) sums the keys as S sums phi(k) v^T ({description}).",
            (scores @ v64).to(dtype),
        ),
        (
            f"{LA_CURRENT_NORMALISER}: you divided by phi(q_t)^T phi(k_t). The weights must sum to 1 over all the "
            f"tokens 0..t, so divide by phi(q_t)^T z_t with z_t = phi(k_0) + ... + phi(k_t) ({description}).",
            ((scores @ v64) / own).to(dtype),
        ),
        (
            f"{LA_READ_BEFORE_ADD}: token t must see itself. Add phi(k_t) v_t^T to S and phi(k_t) to z first, "
            f"then compute o_t (yours gives 0/0 = NaN at t = 0) ({description}).",
            ((before @ v_before) / before.sum(-1, keepdim=True)).to(dtype),
        ),
        (
            f"{LA_PHI_ON_V}: phi only replaces exp(q . k) in the scores; the values are summed as they are: "
            f"S_t = S_(t-1) + phi(k_t) v_t^T ({description}).",
            _linear_oracle(q, k, v, phi_v=_phi),
        ),
        (
            f"{LA_NOT_CAUSAL}: every output used all T tokens. Token t may only see 0..t: update S and z "
            f"inside the loop and read o_t right after token t's update ({description}).",
            _linear_oracle(q, k, v, causal=False),
        ),
        (
            f"{LA_NO_PHI}: apply phi(x) = F.elu(x) + 1 to q and k first (it keeps every score positive, so the "
            f"normaliser cannot be zero or negative) ({description}).",
            _linear_oracle(q, k, v, phi_q=lambda x: x, phi_k=lambda x: x),
        ),
        (
            f"{LA_PHI_Q_ONLY}: the scores are phi(q_t) . phi(k_i), so the keys need phi too: S sums phi(k_i) v_i^T "
            f"and z sums phi(k_i). Raw keys can make a score, and the normaliser, negative ({description}).",
            _linear_oracle(q, k, v, phi_k=lambda x: x),
        ),
        (
            f"{LA_PHI_K_ONLY}: the scores are phi(q_t) . phi(k_i), so the queries need phi too: read with "
            f"phi(q_t)^T S_t / (phi(q_t) . z_t). A raw query can make a score, and the normaliser, negative "
            f"({description}).",
            _linear_oracle(q, k, v, phi_q=lambda x: x),
        ),
        (
            f"{LA_ELU_WITHOUT_ONE}: elu(x) is negative for x < 0 (down to -1), so scores can be negative and the "
            f"normaliser phi(q_t) . z_t can come near 0 or below it. F.elu(x) + 1 is positive everywhere "
            f"({description}).",
            _linear_oracle(q, k, v, phi_q=F.elu, phi_k=F.elu),
        ),
        (
            f"{LA_SOFTMAX}: softmax over q . k / sqrt(d_k) is what linear attention replaces. Use phi(q) . phi(k) "
            f"as the weights, through the state S and normaliser z ({description}).",
            plain_softmax.to(dtype),
        ),
        (
            f"{LA_EXP_PHI}: phi(x) = F.elu(x) + 1. exp(q) . exp(k) is a different kernel (and overflows for large "
            f"inputs); elu + 1 is the linear-attention feature map of Katharopoulos et al. ({description}).",
            _linear_oracle(q, k, v, phi_q=torch.exp, phi_k=torch.exp),
        ),
        (
            f"{LA_WEIGHTS_OVER_QUERIES} (a sum over dim -2, down a column of the T x T matrix). Output t divides by "
            f"its own row's sum over the keys 0..t, phi(q_t) . z_t ({description}).",
            ((scores / scores.sum(-2, keepdim=True)) @ v64).to(dtype),
        ),
        (
            f"{LA_READ_BEFORE_ADD}: your numerator phi(q_t)^T S left token t out. Add phi(k_t) v_t^T to S "
            f"first, then read it ({description}).",
            ((before @ v_before) / scores.sum(-1, keepdim=True)).to(dtype),
        ),
    ]


def _linear_partial_mistakes(q, k, v, description):
    """Mistakes that give 0/0 or x/0 somewhere: recognised where their own result is finite, since a learner's
    code may turn those places into 0 or anything else (an eps in the denominator)."""
    scores, v64, dtype = _causal_sums(q, k, v)
    before, _, _ = _causal_sums(q, k, v, diagonal=-1)
    return [
        (
            f"{LA_RELU}: phi(x) = F.elu(x) + 1. ReLU sets every negative feature to 0, so phi(q_t) . z_t can be 0 "
            f"and the output 0/0; elu + 1 is positive everywhere ({description}).",
            _linear_oracle(q, k, v, phi_q=F.relu, phi_k=F.relu),
        ),
        (
            f"{LA_READ_BEFORE_ADD}: token t must see itself. Add phi(k_t) v_t^T to S and phi(k_t) to z first, "
            f"then compute o_t ({description}).",
            ((before @ v64) / before.sum(-1, keepdim=True)).to(dtype),
        ),
        (
            f"{LA_NORMALISER_BEFORE_ADD} (you divided by phi(q_t) . z_(t-1), x/0 at t = 0): add phi(k_t) to z "
            f"first, then divide ({description}).",
            ((scores @ v64) / before.sum(-1, keepdim=True)).to(dtype),
        ),
    ]


def _name_partial_mistake(got, partial_mistakes, dtype):
    """Raise the first mistake whose result equals ``got`` wherever that result is finite."""
    atol, rtol = tolerance(dtype)
    for message, wrong in partial_mistakes:
        finite = torch.isfinite(wrong)
        if comparable(got, wrong) and finite.any() and close(got[finite], wrong[finite], atol, rtol):
            raise KnownMistake(message)


def _diagnose_with_partial(got, expected, mistakes, partial_mistakes, description, nonfinite_advice):
    """diagnose, with dtype-aware tolerances; a generic failure is looked at once more for a partial mistake."""
    try:
        diagnose(got, expected, mistakes, context=description, nonfinite_advice=nonfinite_advice, dtype=expected.dtype)
    except KnownMistake:
        raise
    except Mistake:
        _name_partial_mistake(got, partial_mistakes, expected.dtype)
        raise


_LINEAR_NONFINITE = (
    "a normaliser of 0 (0/0 gives NaN, x/0 inf)? With phi(x) = F.elu(x) + 1 every feature is positive, so "
    "phi(q_t) . z_t > 0 once token t is in z."
)


@exercise(
    "linear_attention_recurrent",
    solution=linear_attention.linear_attention_recurrent,
    hints=[
        "Apply phi(x) = F.elu(x) + 1 to q and k once, at the start. Start S at zeros [..., d_k, d_v] and z at "
        "zeros [..., d_k] (q.new_zeros(...) keeps the dtype and device).",
        "For t in range(T): S = S + phi(k_t) v_t^T (an outer product: k_t[..., :, None] * v_t[..., None, :]) and "
        "z = z + phi(k_t); then o_t = phi(q_t)^T S / (phi(q_t) . z). Index the time axis as q[..., t, :].",
        "phi(q_t)^T S is (q_t[..., :, None] * S).sum(-2); the normaliser is (q_t * z).sum(-1, keepdim=True). "
        "Collect the o_t in a list and torch.stack(outputs, dim=-2).",
    ],
)
def check_linear_attention_recurrent(candidate):
    for description, q, k, v in _linear_cases():
        expected = _linear_oracle(q, k, v)
        got = call(candidate, q, k, v)
        expect_tensor(got, dtype=q.dtype, what="output")
        mistakes = _linear_mistakes(q, k, v, description)
        partial = _linear_partial_mistakes(q, k, v, description)
        _diagnose_with_partial(got, expected, mistakes, partial, description, _LINEAR_NONFINITE)


# --------------------------------------------------------------------------- delta rule


def _delta_oracle(q, k, v, beta, *, normalise_q=True, normalise_k=True, axis=-1, rule="delta", read="after"):
    """Oracle and variants, in float64: S_t = S_(t-1) (I - b k k^T) + b v k^T, with S [..., d_v, d_k].

    read: "after" (o_t = S_t q_t), "before" (S_(t-1) q_t) or "key" (S_t k_t)."""
    dtype = q.dtype
    q, k, v, beta = q.double(), k.double(), v.double(), beta.double()
    if normalise_q:
        q = q / q.norm(dim=axis, keepdim=True)
    if normalise_k:
        k = k / k.norm(dim=axis, keepdim=True)
    d_k = k.shape[-1]
    S = torch.zeros(*k.shape[:-2], v.shape[-1], d_k, dtype=torch.float64)
    eye = torch.eye(d_k, dtype=torch.float64)
    outputs = []
    for t in range(k.shape[-2]):
        k_t, v_t, b = k[..., t, :], v[..., t, :], beta[..., t, None, None]
        outer_kk = k_t[..., :, None] * k_t[..., None, :]
        outer_vk = v_t[..., :, None] * k_t[..., None, :]
        previous = S
        if rule == "delta":
            S = S @ (eye - b * outer_kk) + b * outer_vk
        elif rule == "additive":
            S = S + b * outer_vk
        elif rule == "additive, no beta":
            S = S + outer_vk
        elif rule == "beta on v":  # (beta v - S k) k^T
            S = S - S @ outer_kk + b * outer_vk
        elif rule == "beta on S k":  # (v - beta S k) k^T
            S = S - b * (S @ outer_kk) + outer_vk
        elif rule == "no beta":
            S = S @ (eye - outer_kk) + outer_vk
        elif rule == "beta twice":  # beta^2 (v - S k) k^T
            S = S @ (eye - b * b * outer_kk) + b * b * outer_vk
        state = S if read in ("after", "key") else previous
        reader = k_t if read == "key" else q[..., t, :]
        outputs.append((state @ reader[..., None])[..., 0])
    return torch.stack(outputs, dim=-2).to(dtype)


def _delta_cases():
    g = generator(21)

    def case(description, *shape, d_v, dtype=torch.float32, repeat=False, scale=1.0):
        q, k = randn(g, *shape, scale=scale, dtype=dtype), randn(g, *shape, scale=scale, dtype=dtype)
        if repeat:  # a key written twice: the delta rule replaces its value, the additive rule adds to it
            k = torch.cat([k[..., :2, :], k[..., :1, :] * 2, k[..., 3:, :]], dim=-2)
        v = randn(g, *shape[:-1], d_v, dtype=dtype)
        beta = (torch.rand(*shape[:-1], generator=g, dtype=torch.float64) * 0.8 + 0.1).to(dtype)
        return description, q, k, v, beta

    return [
        case("q, k [2, 6, 4], v [2, 6, 3], beta [2, 6], token 2 repeats token 0's key", 2, 6, 4, d_v=3, repeat=True),
        case("q, k [7, 5], v [7, 2], beta [7] (no batch axis)", 7, 5, d_v=2),
        # float64 shows float32 arithmetic; with |q|, |k| near 1e6 an eps in the norm (k / (|k| + 1e-6))
        # changes nothing float64 can see
        case("q, k [2, 3, 8, 4] times 1e6, v [2, 3, 8, 6], float64", 2, 3, 8, 4, d_v=6, dtype=torch.float64, scale=1e6),
        case("one token: q, k [1, 1, 4], v [1, 1, 3]", 1, 1, 4, d_v=3),
    ]


def _delta_mistakes(q, k, v, beta, description):
    def variant(**kwargs):
        return _delta_oracle(q, k, v, beta, **kwargs)

    return [
        (
            f"{DR_ADDITIVE}: S + beta v k^T only adds, so a key written twice returns the sum of its values. "
            f"Subtract what the state already holds for k_t: S + beta (v_t - S k_t) k_t^T ({description}).",
            variant(rule="additive"),
        ),
        (
            f"{DR_ADDITIVE} (without beta, too): write the error, beta_t (v_t - S k_t), not v_t ({description}).",
            variant(rule="additive, no beta"),
        ),
        (
            f"{DR_BETA_WRONG_TERM}: you wrote (beta v_t - S k_t) k_t^T. beta scales the whole error: "
            f"beta_t (v_t - S k_t) k_t^T ({description}).",
            variant(rule="beta on v"),
        ),
        (
            f"{DR_BETA_WRONG_TERM}: you wrote (v_t - beta S k_t) k_t^T. beta scales the whole error: "
            f"beta_t (v_t - S k_t) k_t^T ({description}).",
            variant(rule="beta on S k"),
        ),
        (
            f"{DR_NO_BETA}: you used beta = 1 everywhere; multiply the error by beta[..., t] ({description}).",
            variant(rule="no beta"),
        ),
        (
            f"{DR_BETA_TWICE}: your write is beta_t^2 (v_t - S k_t) k_t^T (a beta on the error and another on k_t, "
            f"or on the outer product). Multiply by beta_t once: S + beta_t (v_t - S k_t) k_t^T ({description}).",
            variant(rule="beta twice"),
        ),
        (
            f"{DR_KEYS_NOT_NORMALISED}: with |k| != 1, S k after a write is not v (it is scaled by |k|^2), and "
            f"the update can blow up. Normalise k (and q) over the last axis first: F.normalize(k, dim=-1) "
            f"({description}).",
            variant(normalise_k=False),
        ),
        (
            f"{DR_KEYS_NOT_NORMALISED} (nor the queries): F.normalize(q, dim=-1) and F.normalize(k, dim=-1) "
            f"first ({description}).",
            variant(normalise_k=False, normalise_q=False),
        ),
        (
            f"{DR_QUERIES_NOT_NORMALISED}: normalise q over the last axis too, F.normalize(q, dim=-1) ({description}).",
            variant(normalise_q=False),
        ),
        (
            f"{DR_READ_BEFORE_UPDATE}: o_t = S_t q_t uses the state after token t's write, so token t sees "
            f"its own pair ({description}).",
            variant(read="before"),
        ),
        (
            f"{DR_READ_WITH_KEY}: o_t = S_t q_t, the query asks the state. S_t k_t only gives back what was just "
            f"written under k_t, (1 - beta_t) S_(t-1) k_t + beta_t v_t ({description}).",
            variant(read="key"),
        ),
        (
            f"{DR_NORMALISED_OVER_TIME} (dim -2, the tokens): each key and each query must have length 1 on "
            f"its own, F.normalize(k, dim=-1) over the features ({description}).",
            variant(axis=-2),
        ),
    ]


_DELTA_NONFINITE = (
    "a norm of 0, or a state that grew without bound? F.normalize(x, dim=-1) gives unit keys and queries (and "
    "never divides by 0), and with unit keys and beta in (0, 1) the update cannot grow."
)


@exercise(
    "delta_rule",
    solution=linear_attention.delta_rule,
    hints=[
        "Normalise first: q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1). Start S at zeros "
        "[..., d_v, d_k] (q.new_zeros(*k.shape[:-2], d_v, d_k)).",
        "For each t: recalled = S @ k_t (what the state returns for this key now, [..., d_v]); then "
        "S = S + beta_t (v_t - recalled) k_t^T, an outer product of [..., d_v] and [..., d_k].",
        "With k_t = k[..., t, :]: recalled = (S @ k_t[..., None])[..., 0]; the outer product is "
        "error[..., :, None] * k_t[..., None, :]; beta_t = beta[..., t, None]. Read o_t = S @ q_t after the "
        "update and stack the outputs on dim=-2.",
    ],
)
def check_delta_rule(candidate):
    for description, q, k, v, beta in _delta_cases():
        expected = _delta_oracle(q, k, v, beta)
        got = call(candidate, q, k, v, beta)
        expect_tensor(got, dtype=q.dtype, what="output")
        diagnose(got, expected, _delta_mistakes(q, k, v, beta, description), context=description,
                 nonfinite_advice=_DELTA_NONFINITE, dtype=q.dtype)  # fmt: skip


# --------------------------------------------------------------------------- recall sequences


def _recall_oracle(keys, values, queries, *, leak=False, pair_targets=False, index_as_key=False,
                   target_is_key=False, swap=False, queries_first=False, shift=0):  # fmt: skip
    """Fill the positions one by one: pair i at position i, query j at position P + j.

    shift: query j asks for pair queries[b, j] + shift instead, wrapping round as Python's negative indices do."""
    B, P = keys.shape
    Q = queries.shape[1]
    tokens = torch.zeros(B, P + Q, 2, dtype=torch.long)
    targets = torch.full((B, P + Q), -100, dtype=torch.long)
    for b in range(B):
        for i in range(P):
            tokens[b, i] = torch.tensor([keys[b, i], values[b, i]])
            if pair_targets:
                targets[b, i] = values[b, i]
        for j in range(Q):
            pair = (queries[b, j] + shift) % P
            key = pair if index_as_key else keys[b, pair]
            tokens[b, P + j] = torch.tensor([key, values[b, pair] if leak else recall.QUESTION])
            targets[b, P + j] = keys[b, pair] if target_is_key else values[b, pair]
    if swap:
        tokens = tokens.flip(-1)
    if queries_first:
        tokens = torch.cat([tokens[:, P:], tokens[:, :P]], dim=1)
        targets = torch.cat([targets[:, P:], targets[:, :P]], dim=1)
    return tokens, targets


def _recall_cases():
    g = generator(33)

    def case(description, B, P, Q):
        keys = torch.rand(B, recall.NUM_KEYS, generator=g).argsort(dim=1)[:, :P]
        values = torch.randint(0, recall.NUM_VALUES, (B, P), generator=g)
        queries = torch.rand(B, P, generator=g).argsort(dim=1)[:, :Q]
        return description, keys, values, queries

    return [
        case("keys, values [2, 5], queries [2, 3]", 2, 5, 3),
        case("keys, values [3, 8], queries [3, 8]", 3, 8, 8),
        case("keys, values [1, 1], queries [1, 1]", 1, 1, 1),
    ]


def _split_pair(got, description):
    if got is None:
        raise Mistake(f"{RETURNED_NONE} {RS_NOT_A_PAIR}.")
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise Mistake(f"{RS_NOT_A_PAIR}; your function returned {type(got).__name__} ({description}).")
    return got


@exercise(
    "recall_sequences",
    solution=recall.recall_sequences,
    hints=[
        "The pairs come first: tokens[:, :P] = stack([keys, values], dim=-1). Then one token per query: the asked "
        "key and the value QUESTION. Targets: -100 on the pairs, the asked value on the queries.",
        "keys.gather(1, queries) picks, for every sequence, the keys of the pairs asked for ([B, Q]); "
        "values.gather(1, queries) their values, the answers.",
        "torch.full_like(asked_keys, QUESTION) makes the question marks; torch.cat([pairs, questions], dim=1) "
        "and torch.cat([torch.full_like(keys, -100), answers], dim=1) give tokens and targets.",
    ],
)
def check_recall_sequences(candidate):
    for description, keys, values, queries in _recall_cases():
        expected_tokens, expected_targets = _recall_oracle(keys, values, queries)
        tokens, targets = _split_pair(call(candidate, keys, values, queries), description)
        for got, what in ((tokens, "tokens"), (targets, "targets")):
            expect_ids(got, keys.device, what, description)
        mistakes = [
            (
                f"{RS_QUERIES_FIRST}: a query can only be answered after its pair has been shown (the models are "
                f"causal); put the P pairs first, then the Q queries ({description}).",
                dict(queries_first=True),
            ),
            (
                f"{RS_SWAPPED_IDS}: tokens[..., 0] is the key id and tokens[..., 1] the value id "
                f"(QUESTION on a query) ({description}).",
                dict(swap=True),
            ),
            (
                f"{RS_ANSWER_LEAKED}: a query token holds the asked key and the value id QUESTION; with the value "
                f"in it the model could copy the answer from its own input ({description}).",
                dict(leak=True),
            ),
            (
                f"{RS_INDEX_AS_KEY}: queries holds indices of pairs (0..P-1); the query token needs the key of "
                f"that pair, keys.gather(1, queries) ({description}).",
                dict(index_as_key=True),
            ),
            (
                f"{RS_TARGET_IS_KEY}: the model must answer with the asked pair's value, values.gather(1, queries) "
                f"({description}).",
                dict(target_is_key=True),
            ),
            (
                f"{RS_QUERY_OFF_BY_ONE}: you used pair queries - 1 (pair 0 became index -1, the last pair), as "
                f"if the indices counted from 1. queries holds 0..P-1: keys.gather(1, queries) are the asked keys "
                f"and values.gather(1, queries) the answers, with no - 1 ({description}).",
                dict(shift=-1),
            ),
            (
                f"{RS_TARGETS_ON_PAIRS}: a pair only shows information; nothing can be predicted there. Its "
                f"target is -100, which the loss ignores ({description}).",
                dict(pair_targets=True),
            ),
        ]
        for what, index in (("tokens", 0), ("targets", 1)):
            got = (tokens, targets)[index]
            expected = (expected_tokens, expected_targets)[index]
            named = [(message, _recall_oracle(keys, values, queries, **kwargs)[index]) for message, kwargs in mistakes]
            try:
                diagnose(got, expected, named, what=what, atol=0, rtol=0, context=description)
            except KnownMistake:
                raise
            except Mistake:
                if what == "targets":
                    _other_ignore_value(got, expected, description)
                raise


def _other_ignore_value(got, expected, description):
    """The pairs' targets all one number other than -100, the queries' right."""
    pairs = expected == -100
    if not comparable(got, expected) or not pairs.any():
        return
    filled = got[pairs]
    if (filled == filled[0]).all() and torch.equal(got[~pairs], expected[~pairs]):
        raise KnownMistake(
            f"{RS_IGNORE_INDEX}, cross_entropy's ignore_index; with {filled[0].item()} the loss would ask the model "
            f"to predict that id at every pair ({description})."
        )
