"""Lesson 06's exercises: score every head of a model for previous-token and same-word attention."""

import torch

from course_utils.exercises import exercise
from course_utils.exercises.checking import (
    LOW_PRECISION_TOLERANCE,
    Mistake,
    call,
    diagnose,
    expect_same_dtype,
    expect_tensor,
)
from course_utils.head_scores import is_punctuation, previous_token_score, same_word_score

# Distinctive phrases, one per mistake (the tests look for them).
PT_SELF = "you took the main diagonal attn[i, i]"
PT_NEXT = "you measured attention to the *next* token"
PT_QUERY_0 = "you divided by seq, counting query 0"
PT_SUMMED = "you summed the weights attn[i, i-1] instead of averaging them"
PT_WHOLE_BLOCK = "you averaged the whole block attn[..., 1:, :-1]"
PT_WRAPPED = "your loop includes query 0, and attn[0, -1] is not a previous token"
PT_ALL_EARLIER = "you added up the weights on *all* earlier tokens"
PT_DIAGONAL_DIMS = "pass dim1=-2, dim2=-1 (the query and key axes)"
PT_WRONG_AXIS = "you averaged over the wrong axis"
ONE_PER_HEAD = "one number per head is expected"
KEEP_LAYER_HEAD_AXES = "keep the layer and head axes"

SW_SELF = "you counted a token attending to *itself*"
SW_SPECIALS = "you treated the special tokens [CLS], [SEP] and [PAD] as words"
SW_PUNCTUATION = "you treated punctuation as words"
SW_NEITHER = "you counted neither special tokens nor punctuation out"
SW_ALL_QUERIES = "you averaged over *all* queries"
SW_MEAN_KEYS = "you took the *mean* over the keys"
SW_MEAN_OCCURRENCES = "you averaged a query's weights over its other occurrences instead of adding them up"
SW_EARLIER = "you counted only the *earlier* occurrences"
SW_SUMMED_QUERIES = "you added up the queries' weights instead of averaging them"


def _random_attention(shape, generator):
    # softmax rows of random scores: valid attention weights with a different value everywhere
    return torch.softmax(2.0 * torch.randn(*shape, generator=generator), dim=-1)


def _previous_token_pattern(layers, heads, seq):
    # every query puts all its weight on the token before it ([CLS] looks at itself)
    attn = torch.zeros(layers, heads, seq, seq)
    attn[..., 0, 0] = 1.0
    for i in range(1, seq):
        attn[..., i, i - 1] = 1.0
    return attn


def _known_mistakes(attn):
    seq = attn.shape[-1]
    below = attn.diagonal(offset=-1, dim1=-2, dim2=-1)  # attn[i, i-1], i = 1..seq-1
    wrapped = (
        f"{PT_WRAPPED}: Python's index -1 wraps around "
        "to the *last* key. Query 0 has no previous token; loop over i = 1..seq-1 and divide by seq-1."
    )
    all_earlier = (
        f"{PT_ALL_EARLIER} (everything below the diagonal, as with tril(-1)). "
        "The previous-token pattern is only the token right before: attn[i, i-1], the one diagonal just below "
        "the main one."
    )
    return [
        (
            f"{PT_SELF}: that is each token attending to itself. The previous "
            "token of query i is key i-1, the diagonal just *below* the main one: `diagonal(offset=-1, ...)`.",
            attn.diagonal(offset=0, dim1=-2, dim2=-1).mean(-1),
        ),
        (
            f"{PT_NEXT}, attn[i, i+1] (diagonal offset=+1, or the rows and "
            "columns swapped). Rows are queries, columns keys: the previous token is attn[i, i-1], offset=-1.",
            attn.diagonal(offset=1, dim1=-2, dim2=-1).mean(-1),
        ),
        (
            f"{PT_QUERY_0} (the [CLS] row), which has no previous token. Average over "
            "the seq-1 queries 1..seq-1 only: the mean of the seq-1 entries on the diagonal below the main one.",
            below.sum(-1) / seq,
        ),
        (
            f"{PT_SUMMED}: the score should be a mean weight between 0 and 1, whatever the sentence length.",
            below.sum(-1),
        ),
        (
            f"{PT_WHOLE_BLOCK}; only its diagonal entries attn[i, i-1] are "
            "'previous token' weights (take the diagonal first, then the mean).",
            attn[..., 1:, :-1].mean((-2, -1)),
        ),
        (wrapped, (below.sum(-1) + attn[..., 0, -1]) / seq),
        (wrapped, (below.sum(-1) + attn[..., 0, -1]) / (seq - 1)),
        (all_earlier, attn.tril(-1).sum(-1).mean(-1)),  # averaged over all seq queries
        (all_earlier, attn.tril(-1).sum(-1)[..., 1:].mean(-1)),  # over queries 1..seq-1
    ]


def _check_shape(got, attn):
    """Name the usual reasons for a wrong shape before the generic message."""
    layers, heads, seq, _ = attn.shape
    expected = (layers, heads)
    if not isinstance(got, torch.Tensor) or tuple(got.shape) == expected:
        return expect_tensor(got, expected, what="scores [layers, heads]")
    shape = tuple(got.shape)
    if shape[:2] == (seq, seq):
        raise Mistake(
            f"the scores have shape {shape}, expected [layers, heads] = {expected}. `torch.diagonal` "
            f"works on dims 0 and 1 unless told otherwise: {PT_DIAGONAL_DIMS}."
        )
    if shape[:2] == expected:
        raise Mistake(
            f"the scores have shape {shape}: {ONE_PER_HEAD}, {expected}. "
            f"Average the weights attn[i, i-1] over the query positions (the last axis of the diagonal)."
        )
    if got.dim() <= 2 and (seq - 1 in shape or layers * heads in shape or len(shape) < 2):
        raise Mistake(
            f"the scores have shape {shape}: {PT_WRONG_AXIS}. {KEEP_LAYER_HEAD_AXES.capitalize()} "
            f"and average over the query positions only, giving [layers, heads] = {expected}."
        )
    expect_tensor(got, expected, what="scores [layers, heads]")


@exercise(
    "previous_token_score",
    solution=previous_token_score,
    hints=[
        "Row i of attn[l, h] holds query i's weights over the keys; the previous token of query i is key i-1. "
        "Query 0 has no previous token, so it does not count.",
        "The weights attn[..., i, i-1] for i = 1..seq-1 lie on one diagonal of each seq x seq matrix: "
        "just below the main diagonal.",
        "`attn.diagonal(offset=-1, dim1=-2, dim2=-1)` has shape [layers, heads, seq-1]; average it over its last axis.",
    ],
)
def check_previous_token_score(candidate):
    generator = torch.Generator().manual_seed(6)
    # random attention first, of a real model's shape (6 layers x 12 heads) and small/odd sizes:
    # there every known mistake gives a different number, so the message can name it
    # (on a perfect previous-token head, "divided by seq" and "all earlier tokens" agree)
    cases = [
        (_random_attention(shape, generator), f"random attention of shape {shape}")
        for shape in [(6, 12, 9, 9), (2, 3, 5, 5), (1, 4, 2, 2), (3, 1, 12, 12)]
    ]
    # then a perfect previous-token head: every score must be exactly 1
    cases.append((_previous_token_pattern(2, 3, 5), "every query attends only to the token before it: all scores 1"))
    low = _random_attention((2, 3, 6, 6), generator)
    cases += [(low.to(dtype), f"{str(dtype)[6:]} random attention of shape (2, 3, 6, 6)") for dtype in _OTHER_DTYPES]
    for attn, context in cases:
        got = call(candidate, attn)
        _check_shape(got, attn)
        expect_same_dtype(got, attn.dtype, "scores [layers, heads]", context)
        atol, rtol = LOW_PRECISION_TOLERANCE.get(attn.dtype, (1e-5, 1e-4))
        diagnose(
            got,
            previous_token_score(attn),
            _known_mistakes(attn),
            what="scores [layers, heads]",
            atol=atol,
            rtol=rtol,
            context=context,
        )


_OTHER_DTYPES = (torch.float64, torch.float16, torch.bfloat16)


# ----------------------------------------------------------------------------
# same_word_score: a score whose definition has several easy-to-miss details
# ----------------------------------------------------------------------------

# a sentence pair ([CLS] A [SEP] B [SEP]) where a word occurs three times, and [SEP] and ","
# repeat too: on random attention every known mistake below gives a different number
PAIR_TOKENS = ["[CLS]", "the", "cat", "saw", "the", "dog", ",", "the", "dog", "ran", ",", "[SEP]", "it", "ran", "[SEP]"]
SHORT_TOKENS = ["[CLS]", "a", "b", "a", "[SEP]"]
SPECIAL = ("[CLS]", "[SEP]", "[PAD]")


def _same_token(tokens, specials=False, punctuation=False, diagonal=False):
    """same[i, j]: query i and key j hold the same word; the flags give the wrong rules of mistakes."""
    n = len(tokens)
    word = [specials if t in SPECIAL else punctuation if is_punctuation(t) else True for t in tokens]
    return torch.tensor(
        [[tokens[i] == tokens[j] and (diagonal or i != j) and word[i] and word[j] for j in range(n)] for i in range(n)]
    )


def _same_word_mistakes(attn, tokens):
    right = _same_token(tokens)
    repeated = right.any(-1)
    per_query = (attn * right).sum(-1)  # [..., seq]: each query's weight on its other occurrences

    def score(same, queries=None):
        queries = same.any(-1) if queries is None else queries
        return (attn * same).sum(-1)[..., queries].mean(-1)

    words = torch.tensor([t not in SPECIAL and not is_punctuation(t) for t in tokens])
    with_self = _same_token(tokens, diagonal=True)
    earlier = right.tril(-1)  # key j before query i
    self_message = (
        f"{SW_SELF} (j = i): every token equals itself, so a head that "
        "only looks at itself would score high. Count only the *other* occurrences, j != i."
    )
    return [
        (self_message, score(with_self, repeated)),
        (self_message, score(with_self, words)),  # every word counted as repeated (it matches itself)
        (
            f"{SW_SPECIALS}: a second [SEP] is not the same *word* again. Leave them out (and punctuation too).",
            score(_same_token(tokens, specials=True)),
        ),
        (
            f"{SW_PUNCTUATION}: a comma attending to another comma is not a lexical pattern. "
            "Leave out tokens for which `is_punctuation(token)` is True.",
            score(_same_token(tokens, punctuation=True)),
        ),
        (
            f"{SW_NEITHER}: [SEP] -> [SEP] and ',' -> ',' are not the "
            "same word. Keep only real words (not [CLS]/[SEP]/[PAD], not `is_punctuation`).",
            score(_same_token(tokens, specials=True, punctuation=True)),
        ),
        (
            f"{SW_ALL_QUERIES} (divided by seq). Only the queries whose word occurs again count: "
            "average over them, the set R in the formula.",
            per_query.mean(-1),
        ),
        (
            f"{SW_MEAN_KEYS} (dividing by seq) where a query's weights on its other "
            "occurrences should be *added up*: sum over the keys (dim=-1), then average over the repeated queries.",
            (attn * right).mean(-1)[..., repeated].mean(-1),
        ),
        (
            f"{SW_MEAN_OCCURRENCES}: a query whose "
            "word occurs three times may split its weight over two others, and both count in full.",
            ((attn * right).sum(-1) / right.sum(-1).clamp(min=1))[..., repeated].mean(-1),
        ),
        (
            f"{SW_EARLIER} (key j < query i). The pattern is the same word "
            "anywhere else in the input, before or after.",
            score(earlier, repeated),
        ),
        (
            f"{SW_EARLIER} (key j < query i). The pattern is the same word "
            "anywhere else in the input, before or after.",
            score(earlier),
        ),
        (
            f"{SW_SUMMED_QUERIES}: the score is a mean weight between 0 and 1, whatever the number of repeated words.",
            per_query[..., repeated].sum(-1),
        ),
    ]


def _same_word_pattern(layers, tokens):
    """Head 0: each repeated word splits its weight over its other occurrences, the rest look at [CLS];
    head 1 attends to itself only. The right scores are 1 and 0."""
    same = _same_token(tokens)
    perfect = same / same.sum(-1, keepdim=True).clamp(min=1)  # rows without a repeated word stay 0 ...
    perfect[~same.any(-1), 0] = 1.0  # ... and put their weight on [CLS]
    return torch.stack([perfect, torch.eye(len(tokens))]).expand(layers, 2, -1, -1).clone()


def _check_same_word_shape(got, attn):
    layers, heads, seq, _ = attn.shape
    expected = (layers, heads)
    if isinstance(got, torch.Tensor) and tuple(got.shape) != expected:
        if tuple(got.shape[:2]) == expected:
            raise Mistake(
                f"the scores have shape {tuple(got.shape)}: {ONE_PER_HEAD}, {expected}. "
                f"Average each query's weight on its other occurrences over the repeated queries (last axis)."
            )
        raise Mistake(
            f"the scores have shape {tuple(got.shape)}, expected [layers, heads] = {expected}: "
            f"{KEEP_LAYER_HEAD_AXES} and reduce only the query and key axes (-2 and -1)."
        )
    expect_tensor(got, expected, what="scores [layers, heads]")


@exercise(
    "same_word_score",
    solution=same_word_score,
    hints=[
        "For each query i whose word occurs elsewhere, add up its weights attn[..., i, j] on the *other* "
        "positions j with the same token (j != i); then average over those queries only. [CLS], [SEP], [PAD] "
        "and punctuation are not words.",
        "Build a boolean matrix same[i, j] = (tokens[i] == tokens[j] and i != j and both are words), with "
        "`is_punctuation` for punctuation. A query counts if its row of `same` has any True: `same.any(-1)`.",
        "`(attn * same).sum(-1)` is [layers, heads, seq]: each query's weight on its other occurrences (a sum "
        "over the keys, the last axis). Keep the counted queries with a boolean index on the last axis, then `.mean(-1)`.",
    ],
)
def check_same_word_score(candidate):
    generator = torch.Generator().manual_seed(66)
    cases = [
        (_random_attention((6, 12, len(PAIR_TOKENS), len(PAIR_TOKENS)), generator), PAIR_TOKENS, "random attention"),
        (_random_attention((2, 3, 5, 5), generator), SHORT_TOKENS, "random attention, 5 tokens"),
        (
            _same_word_pattern(2, PAIR_TOKENS),
            PAIR_TOKENS,
            "head 0 puts all of each repeated word's weight on its other occurrences (score 1), head 1 attends "
            "only to itself (score 0)",
        ),
    ]
    for attn, tokens, context in cases:
        got = call(candidate, attn, list(tokens))
        _check_same_word_shape(got, attn)
        context = f"{context}; tokens {tokens}"
        diagnose(
            got,
            same_word_score(attn, tokens),
            _same_word_mistakes(attn, tokens),
            what="scores [layers, heads]",
            context=context,
        )
