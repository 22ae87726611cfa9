"""Lesson 12's checkers: the solutions pass, and each planted mistake gets its own message.

The mistaken candidates are written the way a learner might write them (loops over the
tokens), independently of the checker's own mistake generators.
"""

import pytest
import torch
import torch.nn.functional as F

from course_utils.exercises import check, checking, solution
from course_utils.exercises import linear_attention as ex
from course_utils.recall import QUESTION
from tests.exercises.asserts import assert_caught, assert_each_message_names_only_its_mistake, assert_passes

# --------------------------------------------------------------------------- linear_attention_recurrent


def learner_linear(q, k, v, normaliser="all", read="after", phi_v=False, causal=True, phi=True, phi_on="qk"):
    fq, fk = (F.elu(q) + 1, F.elu(k) + 1) if phi is True else (phi(q), phi(k)) if phi else (q, k)
    fq, fk = fq if "q" in phi_on else q, fk if "k" in phi_on else k
    values = F.elu(v) + 1 if phi_v else v
    T = q.shape[-2]
    S = torch.zeros(*q.shape[:-2], q.shape[-1], v.shape[-1], dtype=q.dtype)
    z = torch.zeros(*q.shape[:-1][:-1], q.shape[-1], dtype=q.dtype)
    if not causal:  # the sums over the whole sequence, once
        S = torch.einsum("...tk,...tv->...kv", fk, values)
        z = fk.sum(-2)
    outputs = []
    for t in range(T):
        qt, kt = fq[..., t, :], fk[..., t, :]
        if read == "before":
            out = torch.einsum("...k,...kv->...v", qt, S) / (qt * z).sum(-1, keepdim=True)
        if causal:
            S = S + torch.einsum("...k,...v->...kv", kt, values[..., t, :])
            z = z + kt
        if read == "after":
            numerator = torch.einsum("...k,...kv->...v", qt, S)
            if normaliser == "all":
                out = numerator / (qt * z).sum(-1, keepdim=True)
            elif normaliser == "current":
                out = numerator / (qt * kt).sum(-1, keepdim=True)
            else:
                out = numerator
        outputs.append(out)
    return torch.stack(outputs, dim=-2)


def linear_as_masked_matrix(q, k, v):
    """A correct answer written another way: the parallel form."""
    scores = (F.elu(q) + 1) @ (F.elu(k) + 1).transpose(-2, -1)
    scores = scores.tril()
    return scores @ v / scores.sum(-1, keepdim=True)


def linear_as_softmax(q, k, v):
    T = q.shape[-2]
    scores = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(
        ~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")
    )
    return torch.softmax(scores, dim=-1) @ v


def linear_in_steps(q, k, v, add_s="first", add_z="first", eps=0.0):
    """The loop with S and z updated before or after the output is read, and an eps against 0/0."""
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    S = q.new_zeros(*q.shape[:-1][:-1], q.shape[-1], v.shape[-1])
    z = q.new_zeros(*q.shape[:-1][:-1], q.shape[-1])
    outputs = []
    for t in range(q.shape[-2]):
        kv, kt, qt = fk[..., t, :, None] * v[..., t, None, :], fk[..., t, :], fq[..., t, :]
        S, z = S + kv if add_s == "first" else S, z + kt if add_z == "first" else z
        numerator, denominator = (qt[..., :, None] * S).sum(-2), (qt * z).sum(-1, keepdim=True) + eps
        outputs.append(numerator / denominator)
        S, z = S + kv if add_s == "last" else S, z + kt if add_z == "last" else z
    return torch.stack(outputs, dim=-2)


def linear_normalised_over_queries(q, k, v):
    scores = ((F.elu(q) + 1) @ (F.elu(k) + 1).transpose(-2, -1)).tril()
    return scores / scores.sum(-2, keepdim=True) @ v


def in_float32(function):
    """A learner's function that computes in float32 whatever it is given, and hands back the input's dtype."""

    def computed_in_float32(*args):
        return function(*(a.float() for a in args)).to(args[0].dtype)

    return computed_in_float32


LINEAR_MISTAKES = {
    "no normaliser": (lambda q, k, v: learner_linear(q, k, v, normaliser=None), ex.LA_NO_NORMALISER),
    "current normaliser": (lambda q, k, v: learner_linear(q, k, v, normaliser="current"), ex.LA_CURRENT_NORMALISER),
    "read before add": (lambda q, k, v: learner_linear(q, k, v, read="before"), ex.LA_READ_BEFORE_ADD),
    "phi on v": (lambda q, k, v: learner_linear(q, k, v, phi_v=True), ex.LA_PHI_ON_V),
    "non-causal sums": (lambda q, k, v: learner_linear(q, k, v, causal=False), ex.LA_NOT_CAUSAL),
    "no phi": (lambda q, k, v: learner_linear(q, k, v, phi=False), ex.LA_NO_PHI),
    "softmax": (linear_as_softmax, ex.LA_SOFTMAX),
    "relu feature map": (lambda q, k, v: learner_linear(q, k, v, phi=F.relu), ex.LA_RELU),
    "exp feature map": (lambda q, k, v: learner_linear(q, k, v, phi=torch.exp), ex.LA_EXP_PHI),
    "weights normalised over the queries": (linear_normalised_over_queries, ex.LA_WEIGHTS_OVER_QUERIES),
    "read before add, eps against 0/0": (
        lambda q, k, v: linear_in_steps(q, k, v, add_s="last", add_z="last", eps=1e-9),
        ex.LA_READ_BEFORE_ADD,
    ),
    "numerator before add": (lambda q, k, v: linear_in_steps(q, k, v, add_s="last"), ex.LA_READ_BEFORE_ADD),
    "normaliser before add": (lambda q, k, v: linear_in_steps(q, k, v, add_z="last"), ex.LA_NORMALISER_BEFORE_ADD),
    "phi on q only": (lambda q, k, v: learner_linear(q, k, v, phi_on="q"), ex.LA_PHI_Q_ONLY),
    "phi on k only": (lambda q, k, v: learner_linear(q, k, v, phi_on="k"), ex.LA_PHI_K_ONLY),
    "elu without the + 1": (lambda q, k, v: learner_linear(q, k, v, phi=F.elu), ex.LA_ELU_WITHOUT_ONE),
    "float32 arithmetic": (in_float32(learner_linear), checking.FLOAT32_PRECISION),
}


def test_relu_feature_map_is_not_told_about_exp():
    message = check("linear_attention_recurrent", LINEAR_MISTAKES["relu feature map"][0], quiet=True).message
    assert "exp(" not in message, message


def test_linear_solution_and_other_correct_versions_pass():
    assert_passes("linear_attention_recurrent", solution("linear_attention_recurrent"))
    assert_passes("linear_attention_recurrent", learner_linear)
    assert_passes("linear_attention_recurrent", linear_as_masked_matrix)
    assert_passes("linear_attention_recurrent", linear_in_steps)


def test_an_eps_in_the_normaliser_is_not_taken_for_float32():
    # Katharopoulos et al.'s code adds 1e-6 to phi(q) . z; float64 arithmetic must still pass
    for eps in (1e-6, 1e-5):
        assert_passes("linear_attention_recurrent", lambda q, k, v, eps=eps: linear_in_steps(q, k, v, eps=eps))


@pytest.mark.parametrize("name", LINEAR_MISTAKES)
def test_each_linear_attention_mistake_is_named(name):
    candidate, phrase = LINEAR_MISTAKES[name]
    assert_caught("linear_attention_recurrent", candidate, phrase)


def test_linear_attention_messages_name_only_their_mistake():
    assert_each_message_names_only_its_mistake(
        LINEAR_MISTAKES, lambda c: check("linear_attention_recurrent", c, quiet=True)
    )


# --------------------------------------------------------------------------- delta_rule


def learner_delta(q, k, v, beta, update="delta", norm_k=True, norm_q=True, read="after", axis=-1, eps=0.0):
    if norm_k:
        k = k / (k.norm(dim=axis, keepdim=True) + eps)
    if norm_q:
        q = q / (q.norm(dim=axis, keepdim=True) + eps)
    S = torch.zeros(*k.shape[:-2], v.shape[-1], k.shape[-1], dtype=q.dtype)
    outputs = []
    for t in range(k.shape[-2]):
        kt, vt, bt, qt = k[..., t, :], v[..., t, :], beta[..., t].unsqueeze(-1), q[..., t, :]
        before = torch.einsum("...vk,...k->...v", S, qt)
        recalled = torch.einsum("...vk,...k->...v", S, kt)
        if update == "delta":
            write = bt * (vt - recalled)
        elif update == "additive":
            write = bt * vt
        elif update == "beta on v":
            write = bt * vt - recalled
        elif update == "beta on recalled":
            write = vt - bt * recalled
        elif update == "beta twice":  # beta on the error, and again on the key it is written under
            write = bt * (vt - recalled)
            kt = bt * kt
        S = S + torch.einsum("...v,...k->...vk", write, kt)
        if read == "key":
            outputs.append(torch.einsum("...vk,...k->...v", S, k[..., t, :]))
        else:
            outputs.append(before if read == "before" else torch.einsum("...vk,...k->...v", S, qt))
    return torch.stack(outputs, dim=-2)


def delta_with_transposed_state(q, k, v, beta):
    """A correct answer with the state kept as [d_k, d_v] (S^T): the same outputs."""
    q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    S = torch.zeros(*k.shape[:-2], k.shape[-1], v.shape[-1], dtype=q.dtype)
    outputs = []
    for t in range(k.shape[-2]):
        kt = k[..., t, :]
        error = v[..., t, :] - (kt.unsqueeze(-1) * S).sum(-2)
        S = S + beta[..., t, None, None] * kt.unsqueeze(-1) * error.unsqueeze(-2)
        outputs.append((q[..., t, :].unsqueeze(-1) * S).sum(-2))
    return torch.stack(outputs, dim=-2)


DELTA_MISTAKES = {
    "additive": (lambda *a: learner_delta(*a, update="additive"), ex.DR_ADDITIVE),
    "beta on v": (lambda *a: learner_delta(*a, update="beta on v"), ex.DR_BETA_WRONG_TERM),
    "beta on recalled": (lambda *a: learner_delta(*a, update="beta on recalled"), ex.DR_BETA_WRONG_TERM),
    "keys not normalised": (lambda *a: learner_delta(*a, norm_k=False), ex.DR_KEYS_NOT_NORMALISED),
    "queries not normalised": (lambda *a: learner_delta(*a, norm_q=False), ex.DR_QUERIES_NOT_NORMALISED),
    "read before update": (lambda *a: learner_delta(*a, read="before"), ex.DR_READ_BEFORE_UPDATE),
    "no beta": (lambda q, k, v, beta: learner_delta(q, k, v, torch.ones_like(beta)), ex.DR_NO_BETA),
    "normalised over time": (lambda *a: learner_delta(*a, axis=1), ex.DR_NORMALISED_OVER_TIME),
    "read with the key": (lambda *a: learner_delta(*a, read="key"), ex.DR_READ_WITH_KEY),
    "beta twice": (lambda *a: learner_delta(*a, update="beta twice"), ex.DR_BETA_TWICE),
    "float32 arithmetic": (in_float32(learner_delta), checking.FLOAT32_PRECISION),
}


def test_delta_solution_and_other_correct_versions_pass():
    assert_passes("delta_rule", solution("delta_rule"))
    assert_passes("delta_rule", learner_delta)
    assert_passes("delta_rule", delta_with_transposed_state)


def test_an_eps_in_the_norms_is_not_taken_for_float32():
    def rsqrt_norm(x):  # x / sqrt(|x|^2 + 1e-6), as linear-attention kernels often normalise
        return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)

    for eps in (1e-6, 1e-5):
        assert_passes("delta_rule", lambda *a, eps=eps: learner_delta(*a, eps=eps))
    assert_passes(
        "delta_rule",
        lambda q, k, v, beta: learner_delta(rsqrt_norm(q), rsqrt_norm(k), v, beta, norm_k=False, norm_q=False),
    )


@pytest.mark.parametrize("name", DELTA_MISTAKES)
def test_each_delta_rule_mistake_is_named(name):
    candidate, phrase = DELTA_MISTAKES[name]
    assert_caught("delta_rule", candidate, phrase)


def test_delta_rule_messages_name_only_their_mistake():
    # "beta on v" and "beta on recalled" share one phrase on purpose (one mistake, two ways)
    distinct = {k: v for k, v in DELTA_MISTAKES.items() if k != "beta on recalled"}
    assert_each_message_names_only_its_mistake(distinct, lambda c: check("delta_rule", c, quiet=True))


# --------------------------------------------------------------------------- recall_sequences


def learner_sequences(keys, values, queries, leak=False, pair_targets=False, index_key=False, target_key=False,
                      swap=False, queries_first=False, ignore=-100, one_based=False):  # fmt: skip
    B, P = keys.shape
    rows_tokens, rows_targets = [], []
    for b in range(B):
        seq = [[keys[b, i].item(), values[b, i].item()] for i in range(P)]
        tgt = [values[b, i].item() if pair_targets else ignore for i in range(P)]
        asked, answers = [], []
        for j in queries[b].tolist():
            if one_based:  # read as 1..P: pair 0 becomes keys[b, -1], Python's last
                j = j - 1
            key = j if index_key else keys[b, j].item()
            asked.append([key, values[b, j].item() if leak else QUESTION])
            answers.append(keys[b, j].item() if target_key else values[b, j].item())
        if swap:
            seq, asked = [s[::-1] for s in seq], [a[::-1] for a in asked]
        rows_tokens.append(asked + seq if queries_first else seq + asked)
        rows_targets.append(answers + tgt if queries_first else tgt + answers)
    return torch.tensor(rows_tokens), torch.tensor(rows_targets)


RECALL_MISTAKES = {
    "answer leaked": (lambda *a: learner_sequences(*a, leak=True), ex.RS_ANSWER_LEAKED),
    "pairs have targets": (lambda *a: learner_sequences(*a, pair_targets=True), ex.RS_TARGETS_ON_PAIRS),
    "index as key": (lambda *a: learner_sequences(*a, index_key=True), ex.RS_INDEX_AS_KEY),
    "target is key": (lambda *a: learner_sequences(*a, target_key=True), ex.RS_TARGET_IS_KEY),
    "ids swapped": (lambda *a: learner_sequences(*a, swap=True), ex.RS_SWAPPED_IDS),
    "queries first": (lambda *a: learner_sequences(*a, queries_first=True), ex.RS_QUERIES_FIRST),
    "pairs' targets -1": (lambda *a: learner_sequences(*a, ignore=-1), ex.RS_IGNORE_INDEX),
    "pairs' targets 0": (lambda *a: learner_sequences(*a, ignore=0), ex.RS_IGNORE_INDEX),
    "queries read as 1-based": (lambda *a: learner_sequences(*a, one_based=True), ex.RS_QUERY_OFF_BY_ONE),
}


def test_recall_solution_and_other_correct_versions_pass():
    assert_passes("recall_sequences", solution("recall_sequences"))
    assert_passes("recall_sequences", learner_sequences)


@pytest.mark.parametrize("name", RECALL_MISTAKES)
def test_each_recall_sequences_mistake_is_named(name):
    candidate, phrase = RECALL_MISTAKES[name]
    assert_caught("recall_sequences", candidate, phrase)


def test_recall_messages_name_only_their_mistake():
    assert_each_message_names_only_its_mistake(RECALL_MISTAKES, lambda c: check("recall_sequences", c, quiet=True))


def test_recall_wrong_types_are_reported():
    assert_caught("recall_sequences", lambda k, v, q: None, checking.RETURNED_NONE)
    assert_caught("recall_sequences", lambda k, v, q: learner_sequences(k, v, q)[0], ex.RS_NOT_A_PAIR)
    assert_caught(
        "recall_sequences", lambda k, v, q: tuple(t.float() for t in learner_sequences(k, v, q)), checking.NOT_IDS
    )


# --------------------------------------------------------------------------- all three


def test_stubs_are_not_attempted():
    def stub(*args):
        raise NotImplementedError

    for exercise_id in ("linear_attention_recurrent", "delta_rule", "recall_sequences"):
        assert check(exercise_id, stub, quiet=True).status == "not attempted"


def test_inputs_are_not_changed_in_place():
    def zero_v(q, k, v):
        out = learner_linear(q, k, v)
        v.zero_()
        return out

    assert_caught("linear_attention_recurrent", zero_v, "changed `v` in place")

    def normalise_k_in_place(q, k, v, beta):
        k /= k.norm(dim=-1, keepdim=True)
        return learner_delta(q, k, v, beta)

    assert_caught("delta_rule", normalise_k_in_place, "changed `k` in place")
