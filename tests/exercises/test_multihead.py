"""Lesson 03's checkers: the solutions and correct alternatives pass, every planted mistake is
named by its own message, stubs are 'not attempted'.

The planted mistakes are written the way a learner would write them (small modules and
functions), independently of the checker's own model of each mistake.
"""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from course_utils.exercises import check, checking, solution
from course_utils.exercises import multihead as mh
from tests.exercises.asserts import assert_caught, assert_passes


def result_of(exercise_id, candidate):
    return check(exercise_id, candidate, quiet=True)


# ------------------------------------------------------------------------------------------
# split_heads


def split_reference_style(x, num_heads):
    b, s, d = x.shape
    return x.view(b, s, num_heads, d // num_heads).transpose(1, 2)  # the article's view + transpose


def split_unflatten(x, num_heads):
    return x.unflatten(-1, (num_heads, -1)).permute(0, 2, 1, 3)


def split_chunks(x, num_heads):
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)


@pytest.mark.parametrize("candidate", [solution("split_heads"), split_reference_style, split_unflatten, split_chunks])
def test_split_heads_correct_versions_pass(candidate):
    assert_passes("split_heads", candidate)


SPLIT_MISTAKES = {
    "reshape without permute": (lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1), mh.SPLIT_NO_PERMUTE),
    "interleaved heads": (
        lambda x, h: x.reshape(x.shape[0], x.shape[1], -1, h).permute(0, 3, 1, 2),
        mh.SPLIT_INTERLEAVED,
    ),
    "permute forgotten": (
        lambda x, h: x.reshape(x.shape[0], x.shape[1], h, -1),
        mh.SPLIT_KEPT_SEQ_FIRST,
    ),
    "permute(0, 2, 3, 1)": (
        lambda x, h: x.reshape(x.shape[0], x.shape[1], h, -1).permute(0, 2, 3, 1),
        mh.SPLIT_WRONG_PERMUTE,
    ),
    "head count and head size swapped": (
        lambda x, h: x.reshape(x.shape[0], x.shape[1], -1, h).permute(0, 2, 1, 3),
        mh.SPLIT_SIZES_SWAPPED,
    ),
    "batch and heads merged": (
        lambda x, h: x.reshape(x.shape[0], x.shape[1], h, -1).transpose(1, 2).reshape(-1, x.shape[1], x.shape[2] // h),
        mh.SPLIT_MERGED_BATCH,
    ),
    "/ instead of //": (lambda x, h: x.reshape(x.shape[0], x.shape[1], h, x.shape[2] / h).transpose(1, 2), "//"),
    "batch size 1 only": (
        lambda x, h: x.squeeze(0).reshape(x.shape[1], h, -1).transpose(0, 1).unsqueeze(0),
        checking.ONLY_UNBATCHED,
    ),
    "batch size 1 only (hard-coded view)": (
        lambda x, h: (
            x.view(1, x.shape[1], h, -1).transpose(1, 2)
            if x.shape[0] == 1
            else x.reshape(1, -1, h, x.shape[2] // h).transpose(1, 2)
        ),
        checking.ONLY_UNBATCHED,
    ),
}


@pytest.mark.parametrize("name", SPLIT_MISTAKES)
def test_split_heads_mistakes_are_named(name):
    candidate, phrase = SPLIT_MISTAKES[name]
    assert_caught("split_heads", candidate, phrase)


def test_split_heads_stub_and_tuple():
    def stub(x, num_heads):
        raise NotImplementedError

    assert result_of("split_heads", stub).status == "not attempted"
    assert_caught("split_heads", lambda x, h: (split_unflatten(x, h), h), "not a tuple")


# ------------------------------------------------------------------------------------------
# combine_heads


def combine_seed_style(x):
    b = x.shape[0]
    return x.permute(0, 2, 1, 3).contiguous().view(b, -1, x.shape[1] * x.shape[3])  # the slides' version


def combine_cat(x):
    return torch.cat(x.unbind(dim=1), dim=-1)


def combine_flatten(x):
    return x.transpose(1, 2).flatten(2)


@pytest.mark.parametrize("candidate", [solution("combine_heads"), combine_seed_style, combine_cat, combine_flatten])
def test_combine_heads_correct_versions_pass(candidate):
    assert_passes("combine_heads", candidate)


def _combine_batch_one(x):
    _, h, s, d = x.shape
    return x[0].transpose(0, 1).reshape(1, s, h * d)


COMBINE_MISTAKES = {
    "reshape without permute": (
        lambda x: x.reshape(x.shape[0], x.shape[2], -1),
        mh.COMBINE_NO_PERMUTE,
    ),
    "wrong order": (
        lambda x: x.permute(0, 2, 3, 1).reshape(x.shape[0], x.shape[2], -1),
        mh.COMBINE_WRONG_ORDER,
    ),
    "view on a non-contiguous tensor": (
        lambda x: x.permute(0, 2, 1, 3).view(x.shape[0], x.shape[2], -1),
        ".contiguous()",
    ),
    "not merged": (lambda x: x.permute(0, 2, 1, 3), mh.COMBINE_NOT_MERGED),
    "heads summed": (lambda x: x.sum(dim=1), mh.COMBINE_LOST_HEADS),
    "heads stacked as positions": (
        lambda x: x.permute(0, 2, 1, 3).reshape(x.shape[0], -1, x.shape[3]),  # view(B, -1, d) with d the head size
        mh.COMBINE_HEADS_AS_POSITIONS,
    ),
    "batch size 1 only": (_combine_batch_one, checking.ONLY_UNBATCHED),
}


@pytest.mark.parametrize("name", COMBINE_MISTAKES)
def test_combine_heads_mistakes_are_named(name):
    candidate, phrase = COMBINE_MISTAKES[name]
    assert_caught("combine_heads", candidate, phrase)


def test_view_message_says_how_to_fix_it():
    result = result_of("combine_heads", COMBINE_MISTAKES["view on a non-contiguous tensor"][0])
    assert "reshape" in result.message and "contiguous" in result.message


def test_combine_heads_stub():
    def stub(x):
        raise NotImplementedError

    assert result_of("combine_heads", stub).status == "not attempted"


# ------------------------------------------------------------------------------------------
# multi_head_attention: a learner-style base class; each mistake overrides one piece


class Learner(nn.Module):
    """A correct learner solution, written in the slides' style."""

    qkv_bias = False

    def __init__(self, d_model, num_heads):
        super().__init__()
        assert d_model % num_heads == 0
        self.num_heads = num_heads
        self.d_model = d_model
        self.head_dim = d_model // num_heads
        self.query_linear = nn.Linear(d_model, d_model, bias=self.qkv_bias)
        self.key_linear = nn.Linear(d_model, d_model, bias=self.qkv_bias)
        self.value_linear = nn.Linear(d_model, d_model, bias=self.qkv_bias)
        self.output_linear = nn.Linear(d_model, d_model)

    def split_heads(self, x, batch_size):
        x = x.reshape(batch_size, x.size(1), self.num_heads, self.head_dim)
        return x.permute(0, 2, 1, 3)

    def scale(self):
        return self.head_dim**0.5

    def compute_attention(self, query, key, value, mask=None):
        scores = torch.matmul(query, key.transpose(-2, -1)) / self.scale()
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        attention_weights = F.softmax(scores, dim=-1)
        return torch.matmul(attention_weights, value)

    def combine_heads(self, x, batch_size):
        x = x.permute(0, 2, 1, 3).contiguous()
        return x.view(batch_size, -1, self.d_model)

    def project(self, query, key, value):
        return self.query_linear(query), self.key_linear(key), self.value_linear(value)

    def forward(self, query, key, value, mask=None):
        batch_size = query.size(0)
        q, k, v = self.project(query, key, value)
        q, k, v = (self.split_heads(t, batch_size) for t in (q, k, v))
        context = self.compute_attention(q, k, v, mask)
        return self.output_linear(self.combine_heads(context, batch_size))


class WithQKVBias(Learner):
    qkv_bias = True


class MinusOneE9(Learner):
    def compute_attention(self, query, key, value, mask=None):
        scores = query @ key.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)  # the article's choice
        return torch.softmax(scores, dim=-1) @ value


class Einsum(Learner):
    def compute_attention(self, query, key, value, mask=None):
        scores = torch.einsum("bhqd,bhkd->bhqk", query, key) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores.masked_fill(~mask.bool(), float("-inf"))
        return torch.einsum("bhqk,bhkd->bhqd", scores.softmax(dim=-1), value)


class PyTorchSDPA(Learner):
    def compute_attention(self, query, key, value, mask=None):
        return F.scaled_dot_product_attention(query, key, value, attn_mask=None if mask is None else mask.bool())


class ReshapeNotView(Learner):
    def split_heads(self, x, batch_size):
        return x.reshape(batch_size, -1, self.num_heads, self.head_dim).transpose(1, 2)

    def combine_heads(self, x, batch_size):
        return x.transpose(1, 2).reshape(batch_size, -1, self.d_model)


class UsesCourseFunctions(nn.Module):
    """The learner reuses split_heads / combine_heads / scaled_dot_product_attention from course_utils."""

    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.query_linear = nn.Linear(d_model, d_model, bias=False)
        self.key_linear = nn.Linear(d_model, d_model, bias=False)
        self.value_linear = nn.Linear(d_model, d_model, bias=False)
        self.output_linear = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        from course_utils.attention import combine_heads, scaled_dot_product_attention, split_heads

        q = split_heads(self.query_linear(query), self.num_heads)
        k = split_heads(self.key_linear(key), self.num_heads)
        v = split_heads(self.value_linear(value), self.num_heads)
        context, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.output_linear(combine_heads(context))


class ArticleStyle(nn.Module):
    """The article's class with the contract's attribute names: biases everywhere, view + transpose."""

    def __init__(self, d_model, num_heads):
        super().__init__()
        self.d_model, self.num_heads, self.d_k = d_model, num_heads, d_model // num_heads
        self.query_linear = nn.Linear(d_model, d_model)
        self.key_linear = nn.Linear(d_model, d_model)
        self.value_linear = nn.Linear(d_model, d_model)
        self.output_linear = nn.Linear(d_model, d_model)

    def forward(self, q, k, v, mask=None):
        batch_size = q.size(0)
        q, k, v = self.query_linear(q), self.key_linear(k), self.value_linear(v)
        q = q.view(batch_size, -1, self.num_heads, self.d_k).transpose(1, 2)
        k = k.view(batch_size, -1, self.num_heads, self.d_k).transpose(1, 2)
        v = v.view(batch_size, -1, self.num_heads, self.d_k).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        context = torch.matmul(torch.softmax(scores, dim=-1), v)
        context = context.transpose(1, 2).contiguous().view(batch_size, -1, self.d_model)
        return self.output_linear(context)


@pytest.mark.parametrize(
    "candidate",
    [
        solution("multi_head_attention"),
        Learner,
        WithQKVBias,
        MinusOneE9,
        Einsum,
        PyTorchSDPA,
        ReshapeNotView,
        UsesCourseFunctions,
        ArticleStyle,
    ],
    ids=lambda c: c.__name__,
)
def test_multi_head_attention_correct_versions_pass(candidate):
    assert_passes("multi_head_attention", candidate)


# --- planted mistakes


class SplitNoPermute(Learner):
    def split_heads(self, x, batch_size):
        return x.reshape(batch_size, self.num_heads, -1, self.head_dim)


class CombineNoPermute(Learner):
    def combine_heads(self, x, batch_size):
        return x.reshape(batch_size, -1, self.d_model)


class BothNoPermute(SplitNoPermute, CombineNoPermute):
    pass


class ViewNotContiguous(Learner):
    def combine_heads(self, x, batch_size):
        return x.permute(0, 2, 1, 3).view(batch_size, -1, self.d_model)


class WrongOrder(Learner):
    def combine_heads(self, x, batch_size):
        return x.permute(0, 2, 3, 1).reshape(batch_size, -1, self.d_model)


class Interleaved(Learner):
    def split_heads(self, x, batch_size):
        return x.reshape(batch_size, x.size(1), self.head_dim, self.num_heads).permute(0, 3, 1, 2)

    def combine_heads(self, x, batch_size):
        return x.permute(0, 2, 3, 1).reshape(batch_size, -1, self.d_model)


class NoOutputProjection(Learner):
    def forward(self, query, key, value, mask=None):
        batch_size = query.size(0)
        q, k, v = (self.split_heads(t, batch_size) for t in self.project(query, key, value))
        return self.combine_heads(self.compute_attention(q, k, v, mask), batch_size)


class OneProjection(Learner):
    def project(self, query, key, value):
        return self.query_linear(query), self.query_linear(key), self.query_linear(value)


class AliasedProjection(Learner):
    def __init__(self, d_model, num_heads):
        super().__init__(d_model, num_heads)
        self.key_linear = self.value_linear = self.query_linear


class IgnoresKeyValue(Learner):
    def project(self, query, key, value):
        return self.query_linear(query), self.key_linear(query), self.value_linear(query)


class ScaleByDModel(Learner):
    def scale(self):
        return self.d_model**0.5


class NoScale(Learner):
    def scale(self):
        return 1.0


class IgnoresMask(Learner):
    def compute_attention(self, query, key, value, mask=None):
        return super().compute_attention(query, key, value, None)


class InvertedMask(Learner):
    def compute_attention(self, query, key, value, mask=None):
        return super().compute_attention(query, key, value, None if mask is None else mask == 0)


class InvertedMaskMinusOneE9(MinusOneE9):
    def compute_attention(self, query, key, value, mask=None):
        return super().compute_attention(query, key, value, None if mask is None else mask == 0)


class SoftmaxOverQueries(Learner):
    def compute_attention(self, query, key, value, mask=None):
        scores = query @ key.transpose(-2, -1) / self.scale()
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        return torch.softmax(scores, dim=-2) @ value


class NaiveExp(Learner):
    def compute_attention(self, query, key, value, mask=None):
        scores = query @ key.transpose(-2, -1) / self.scale()
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        e = scores.exp()  # overflows for the checker's large-magnitude case
        return e / e.sum(dim=-1, keepdim=True) @ value


class ReturnsTuple(Learner):
    def compute_attention(self, query, key, value, mask=None):
        scores = query @ key.transpose(-2, -1) / self.scale()
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        self._weights = torch.softmax(scores, dim=-1)
        return self._weights @ value

    def forward(self, query, key, value, mask=None):
        return super().forward(query, key, value, mask), self._weights


class BatchOneOnly(Learner):
    def split_heads(self, x, batch_size):
        return x.view(1, -1, self.num_heads, self.head_dim).transpose(1, 2)  # batch hard-coded to 1

    def combine_heads(self, x, batch_size):
        return x.transpose(1, 2).reshape(1, -1, self.d_model)


class ReturnsHeads(Learner):
    def forward(self, query, key, value, mask=None):
        batch_size = query.size(0)
        q, k, v = (self.split_heads(t, batch_size) for t in self.project(query, key, value))
        return self.compute_attention(q, k, v, mask)


class SeedNames(nn.Module):
    """The article's attribute names: the checker cannot find query_linear."""

    def __init__(self, d_model, num_heads):
        super().__init__()
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        return self.W_o(query)


class PerHeadSizedProjections(Learner):
    def __init__(self, d_model, num_heads):
        super().__init__(d_model, num_heads)
        self.query_linear = nn.Linear(d_model, d_model // num_heads, bias=False)


class NoOutputBias(Learner):
    def __init__(self, d_model, num_heads):
        super().__init__(d_model, num_heads)
        self.output_linear = nn.Linear(d_model, d_model, bias=False)


class MixedBias(Learner):
    def __init__(self, d_model, num_heads):
        super().__init__(d_model, num_heads)
        self.query_linear = nn.Linear(d_model, d_model)


MHA_MISTAKES = [
    (SplitNoPermute, mh.MHA_SPLIT_NO_PERMUTE),
    (CombineNoPermute, mh.MHA_COMBINE_NO_PERMUTE),
    (BothNoPermute, mh.MHA_BOTH_NO_PERMUTE),
    (ViewNotContiguous, ".contiguous()"),
    (WrongOrder, mh.MHA_WRONG_ORDER),
    (Interleaved, mh.MHA_INTERLEAVED),
    (NoOutputProjection, mh.MHA_NO_OUTPUT_PROJECTION),
    (OneProjection, mh.MHA_SHARED_PROJECTION),
    (AliasedProjection, mh.MHA_SHARED_PROJECTION),
    (IgnoresKeyValue, mh.MHA_KV_IGNORED),
    (ScaleByDModel, mh.MHA_SCALE_MODEL),
    (NoScale, mh.MHA_NO_SCALE),
    (IgnoresMask, mh.MHA_MASK_IGNORED),
    (InvertedMask, mh.MHA_INVERTED_MASK),
    (InvertedMaskMinusOneE9, mh.MHA_INVERTED_MASK),
    (SoftmaxOverQueries, mh.MHA_SOFTMAX_QUERIES),
    (NaiveExp, mh.MHA_NAN),
    (ReturnsTuple, mh.MHA_TUPLE),
    (BatchOneOnly, checking.ONLY_UNBATCHED),
    (ReturnsHeads, mh.MHA_UNCOMBINED),
    (SeedNames, "no attribute `query_linear`"),
    (PerHeadSizedProjections, "`query_linear.weight` has shape"),
    (NoOutputBias, "`output_linear` has no bias"),
    (MixedBias, "only query_linear has a bias"),
]


@pytest.mark.parametrize("candidate,phrase", MHA_MISTAKES, ids=[c.__name__ for c, _ in MHA_MISTAKES])
def test_multi_head_attention_mistakes_are_named(candidate, phrase):
    assert_caught("multi_head_attention", candidate, phrase, not_phrases=["largest difference"])


def test_each_mha_mistake_has_its_own_message():
    messages = {c.__name__: result_of("multi_head_attention", c).message for c, _ in MHA_MISTAKES}
    # the same mistake, written two ways
    same = [("OneProjection", "AliasedProjection"), ("InvertedMask", "InvertedMaskMinusOneE9")]
    for a, b in same:
        assert messages[a] == messages[b]
    assert len(set(messages.values())) == len(MHA_MISTAKES) - len(same)


def test_view_in_mha_gets_the_contiguous_advice():
    message = result_of("multi_head_attention", ViewNotContiguous).message
    assert "reshape" in message and "view" in message


def test_an_error_names_the_case_and_cross_attention_lengths():
    class QueryLengthEverywhere(Learner):
        def split_heads(self, x, batch_size):
            return x.reshape(batch_size, self.seq_len, self.num_heads, self.head_dim).permute(0, 2, 1, 3)

        def forward(self, query, key, value, mask=None):
            self.seq_len = query.size(1)  # wrong for key and value in cross-attention
            return super().forward(query, key, value, mask)

    assert_caught("multi_head_attention", QueryLengthEverywhere, "(checking cross-attention")
    assert_caught("multi_head_attention", QueryLengthEverywhere, "read each tensor's own length")


def test_passing_on_the_pair_from_scaled_dot_product_attention_is_explained():
    from course_utils.attention import combine_heads, scaled_dot_product_attention, split_heads

    class PassesThePair(Learner):
        def forward(self, query, key, value, mask=None):
            q, k, v = (split_heads(t, self.num_heads) for t in self.project(query, key, value))
            return self.output_linear(combine_heads(scaled_dot_product_attention(q, k, v, mask)))

    assert_caught("multi_head_attention", PassesThePair, "pass on the output only")


def test_unknown_wrong_result_shows_the_difference():
    class HalfOutput(Learner):
        def forward(self, query, key, value, mask=None):
            return 0.5 * super().forward(query, key, value, mask)

    assert_caught("multi_head_attention", HalfOutput, "largest difference")


def test_multi_head_attention_stubs_are_not_attempted():
    class StubInit(nn.Module):
        def __init__(self, d_model, num_heads):
            super().__init__()
            raise NotImplementedError

    class StubForward(Learner):
        def forward(self, query, key, value, mask=None):
            raise NotImplementedError

    assert result_of("multi_head_attention", StubInit).status == "not attempted"
    assert result_of("multi_head_attention", StubForward).status == "not attempted"


def test_not_a_module_is_explained():
    class NotAModule:  # `class MultiHeadAttention:` without (nn.Module)
        def __init__(self, d_model, num_heads):
            self.num_heads = num_heads

    assert_caught("multi_head_attention", NotAModule, "not an nn.Module")


def test_an_instance_instead_of_the_class_is_explained():
    assert_caught("multi_head_attention", Learner(8, 2), "not an instance")


def test_the_check_leaves_the_global_random_stream_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    check("multi_head_attention", Learner, quiet=True)
    assert torch.equal(torch.rand(3), expected)


def test_checker_inputs_are_not_changed_in_place():
    class InPlace(Learner):
        def forward(self, query, key, value, mask=None):
            out = super().forward(query, key, value, mask)
            query.mul_(2)
            return out

    assert_caught("multi_head_attention", InPlace, "in place")


def test_the_checkers_model_of_each_mistake_agrees_with_the_reference_when_correct():
    """The checker's knob-model of MHA (_mha) with no knob turned equals the reference module."""
    for qkv_bias in (False, True):
        w = mh._reference_weights(16, qkv_bias, seed=1)
        ref = solution("multi_head_attention")(16, 4, qkv_bias=qkv_bias)
        mh._load_into(ref, w)
        q, k = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
        mask = mh._make_mask("padding", 2, 4, 3, 5, seed=0)
        torch.testing.assert_close(mh._mha(w, q, k, k, mask, 4), ref(q, k, k, mask), atol=1e-6, rtol=1e-6)


# ------------------------------------------------------------------------------------------
# Python slips inside the class: the framework's message must come through, not a generic one


class NoSuperInit(Learner):
    def __init__(self, d_model, num_heads):  # forgets super().__init__()
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.query_linear = nn.Linear(d_model, d_model, bias=False)


class TrueDivisionHeadDim(Learner):
    def __init__(self, d_model, num_heads):
        super().__init__(d_model, num_heads)
        self.head_dim = d_model / num_heads  # 8 / 2 == 4.0, a float in a shape


class PairNotUnpacked(Learner):
    def forward(self, query, key, value, mask=None):
        from course_utils.attention import scaled_dot_product_attention

        batch_size = query.size(0)
        q, k, v = (self.split_heads(t, batch_size) for t in self.project(query, key, value))
        context = scaled_dot_product_attention(q, k, v, mask)  # (output, weights)
        return self.output_linear(self.combine_heads(context, batch_size))


class ReturnsTheAttentionPair(Learner):
    def forward(self, query, key, value, mask=None):
        from course_utils.attention import scaled_dot_product_attention

        batch_size = query.size(0)
        q, k, v = (self.split_heads(t, batch_size) for t in self.project(query, key, value))
        return scaled_dot_product_attention(q, k, v, mask)


@pytest.mark.parametrize(
    "candidate, phrases",
    [
        (NoSuperInit, ["super().__init__()", "before Module.__init__() call"]),
        (TrueDivisionHeadDim, ["//", "(checking self-attention, batch 1"]),
        (PairNotUnpacked, ["unpack", "(checking self-attention, batch 1"]),
        (ReturnsTheAttentionPair, [mh.MHA_RETURNED_ATTENTION_PAIR]),
    ],
    ids=lambda c: getattr(c, "__name__", "")[:30],
)
def test_python_slips_in_the_module_get_their_own_message(candidate, phrases):
    result = result_of("multi_head_attention", candidate)
    assert not result.passed and result.status == "not yet", result.message
    for phrase in phrases:
        assert phrase in result.message, f"expected {phrase!r} in:\n{result.message}"
    assert "checker itself" not in result.message and checking.ONLY_UNBATCHED not in result.message


# ------------------------------------------------------------------------------------------
# unusual outputs: a named mistake, never a crash of the checker; sizes that cannot be hard-coded


def _strided(t):
    strided = torch.stack([t, t], dim=-1)[..., 0]  # same values, not contiguous
    assert not strided.is_contiguous()
    return strided


CONVERSIONS = {
    "int": (lambda t: t.long(), "dtype"),
    "float64": (lambda t: t.double(), "float64"),
    "meta device": (lambda t: t.to("meta"), checking.OTHER_DEVICE),
}


@pytest.mark.parametrize("name", CONVERSIONS)
def test_unusual_outputs_get_a_mistake_not_a_crash(name):
    convert, phrase = CONVERSIONS[name]

    class Converted(Learner):
        def forward(self, query, key, value, mask=None):
            return convert(super().forward(query, key, value, mask))

    assert_caught("split_heads", lambda x, h: convert(split_unflatten(x, h)), phrase)
    assert_caught("combine_heads", lambda x: convert(combine_flatten(x)), phrase)
    assert_caught("multi_head_attention", Converted, phrase, not_phrases=["checker itself"])


def test_non_contiguous_outputs_pass():
    class Strided(Learner):
        def forward(self, query, key, value, mask=None):
            return _strided(super().forward(query, key, value, mask))

    assert_passes("split_heads", lambda x, h: _strided(split_unflatten(x, h)))
    assert_passes("combine_heads", lambda x: _strided(combine_flatten(x)))
    assert_passes("multi_head_attention", Strided)


def test_cases_vary_every_size_a_learner_might_hard_code():
    for cases in (mh.SPLIT_CASES, mh.COMBINE_CASES):
        for axis in range(4):
            assert len({case[axis] for case in cases}) >= 3
    for key in ("batch", "d_model", "heads", "lq"):
        assert len({case[key] for case in mh.MHA_CASES}) >= 3
    head_dims = {case["d_model"] // case["heads"] for case in mh.MHA_CASES}
    assert len(head_dims) >= 3
    assert len({case["mask"] for case in mh.MHA_CASES}) >= 4


@pytest.mark.parametrize(
    "fixed",
    [dict(heads=2), dict(head_dim=4), dict(batch=1)],
    ids=lambda d: next(iter(d)),
)
def test_hard_coded_sizes_are_caught(fixed):
    class HardCoded(Learner):
        def split_heads(self, x, batch_size):
            heads = fixed.get("heads", self.num_heads)
            head_dim = fixed.get("head_dim", x.size(-1) // heads)
            batch = fixed.get("batch", batch_size)
            return x.reshape(batch, -1, heads, head_dim).permute(0, 2, 1, 3)

        def combine_heads(self, x, batch_size):
            return x.permute(0, 2, 1, 3).reshape(fixed.get("batch", batch_size), -1, self.d_model)

    assert not result_of("multi_head_attention", HardCoded).passed
