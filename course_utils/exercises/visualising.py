"""Lesson 04's exercises: which token does each head attend to most, and how focused is each head?

``most_attended_tokens``: the candidate is ``fn(weights, tokens) -> list of str``: weights
``[heads, q, k]``, one answer per head, the key token with the largest attention on average
over all queries. The reference is ``course_utils.head_scores.most_attended_tokens``.

``attention_entropy``: the candidate is ``fn(weights) -> Tensor``: weights ``[..., q, k]``,
the entropy of each query's row (in nats, 0 * ln 0 = 0) averaged over the queries, one
number per head. The reference is ``course_utils.head_scores.attention_entropy``.
"""

import math

import torch

from course_utils.exercises import exercise
from course_utils.exercises.checking import (
    LOW_PRECISION_TOLERANCE,
    Mistake,
    call,
    diagnose,
    expect_same_dtype,
    expect_tensor,
    generator,
)
from course_utils.head_scores import attention_entropy, most_attended_tokens

# Distinctive phrases, one per mistake (the tests look for them).
MA_LARGEST_WEIGHT = "you found the single largest weight in each column"
MA_VOTE = "you counted which key wins for each query"
MA_WRONG_AXIS = "you averaged over the keys (dim=-1)"
MA_ALL_HEADS = "you gave one answer for all heads together"
MA_NOT_TOKENS = "return the tokens themselves"
MA_NOT_A_LIST = "return a list with one token per head"
MA_HEAD_COUNT = "return one token per head"
E_NAN = "0 * log(0)"
E_NEGATIVE = "your entropies are negative"
E_LOG2 = "you used log2 (bits)"
E_NORMALISED = "you divided by ln(k)"
E_SUMMED = "you summed the row entropies over the queries"
E_COLUMNS = "you took the entropy down each column"
E_AVERAGE_FIRST = "you averaged the rows first"
E_PER_QUERY = "you returned one entropy per query"
E_PER_HEAD = "the output should have one number per head"

TOKENS = ["Orange", "is", "my", "favorite", "fruit"]


def _planted_case():
    """Four heads, chosen so that every planted mistake gives another answer.

    Head 0: "fruit" gets the most attention on average, but the single largest weight
    (0.9) goes to "is". Head 1 mostly attends to "my", head 2 to "favorite". Head 3:
    three queries narrowly prefer "my" (a vote would pick it), but two put 0.9 on
    "Orange", which gets the most attention on average.
    """
    w = torch.full((4, 5, 5), 0.05)
    w[0, :, 4] = 0.6  # every query gives "fruit" 0.6 ...
    w[0, 0] = torch.tensor([0.025, 0.9, 0.025, 0.025, 0.025])  # ... except "Orange", which puts 0.9 on "is"
    w[1, :, 2] = 0.8
    w[2, :, 3] = 0.8
    w[2, 0] = torch.tensor([0.85, 0.05, 0.0, 0.1, 0.0])
    w[3, :3] = torch.tensor([0.30, 0.1, 0.35, 0.15, 0.1])
    w[3, 3:] = torch.tensor([0.9, 0.025, 0.025, 0.025, 0.025])
    return w / w.sum(dim=-1, keepdim=True)


def _cases():
    """The planted case, then random heads of several sizes (so a hard-coded head count fails)."""
    g = generator(4)
    sentence = "the cat sat on the mat".split()
    cases = [(_planted_case(), TOKENS), (torch.softmax(3 * torch.randn(4, 6, 6, generator=g), dim=-1), sentence)]
    # one head; three heads; six heads with 4 queries over 7 keys (cross-attention: q != k)
    for heads, queries, keys in [(1, 5, 5), (3, 6, 6), (6, 4, 7)]:
        weights = torch.softmax(3 * torch.randn(heads, queries, keys, generator=g), dim=-1)
        cases.append((weights, (TOKENS + ["!", "?"])[:keys]))
    return cases


def _answer(indices, tokens):
    return [tokens[i] for i in indices.tolist()]


@exercise(
    "most_attended_tokens",
    solution=most_attended_tokens,
    hints=[
        "Column j of a head's [q, k] matrix holds the attention every query gives to key token j.",
        "Average each column over the queries: `weights.mean(dim=-2)` gives [heads, k].",
        "Then take the key with the largest average per head, `.argmax(dim=-1)`, and turn the indices into tokens.",
    ],
)
def check_most_attended_tokens(candidate):
    for weights, tokens in _cases():
        got = call(candidate, weights, tokens)
        expected = most_attended_tokens(weights, tokens)
        context = f"(weights of shape {tuple(weights.shape)}, tokens {tokens})"
        if isinstance(got, torch.Tensor) or (isinstance(got, (list, tuple)) and got and not isinstance(got[0], str)):
            shown = got.tolist() if isinstance(got, torch.Tensor) else list(got)
            raise Mistake(
                f"{MA_NOT_TOKENS} (strings such as {expected[0]!r}), one per head, "
                f"not their positions or weights; you returned {shown} {context}. Use `tokens[i]`."
            )
        if not isinstance(got, (list, tuple)):
            raise Mistake(f"{MA_NOT_A_LIST}; you returned a {type(got).__name__}.")
        got = list(got)
        if got == expected:
            continue
        heads = weights.shape[0]
        mistakes = [
            (
                f"{MA_LARGEST_WEIGHT} (`.max` over the queries); a head's "
                "favourite key is the one with the largest attention on AVERAGE over all queries (`.mean(dim=-2)`).",
                _answer(weights.amax(dim=-2).argmax(dim=-1), tokens),
            ),
            (
                f"{MA_VOTE} (a vote with argmax); average the weights "
                "over the queries instead, so every query's whole distribution counts.",
                _answer(
                    torch.stack([torch.bincount(h.argmax(dim=-1), minlength=len(tokens)) for h in weights]).argmax(
                        dim=-1
                    ),
                    tokens,
                ),
            ),
            (
                f"{MA_WRONG_AXIS}: each row sums to 1, so every query looks the same. "
                "Average over the queries (dim=-2) to get the attention each KEY receives.",
                _answer(weights.mean(dim=-1).argmax(dim=-1), tokens),
            ),
            (
                f"{MA_ALL_HEADS}; each head has its own pattern, so answer per head "
                "(average over the queries only, not over the heads).",
                _answer(weights.mean(dim=(0, 1)).argmax().repeat(heads), tokens),
            ),
        ]
        if len(got) != heads:
            raise Mistake(
                f"{MA_HEAD_COUNT}: {heads} heads, but your list has {len(got)} entries {context}. "
                "Read the number of heads from the input (weights.shape[0]) instead of writing it into the code."
            )
        for message, wrong in mistakes:
            if got == wrong:
                raise Mistake(message)
        raise Mistake(f"not right {context}:\nexpected {expected}\ngot      {got}")


# ----------------------------------------------------------------------------------------------
# attention_entropy


def _entropy_cases():
    """(weights, description): several head counts and shapes, masked (zero) weights, q != k."""
    g = generator(40)
    causal = torch.ones(6, 6).tril().bool()
    masked = torch.softmax((2 * torch.randn(2, 3, 6, 6, generator=g)).masked_fill(~causal, float("-inf")), dim=-1)
    one_hot = torch.eye(5)[None].repeat(2, 1, 1)
    one_hot[1] = 0.2  # head 0 looks at one key per query, head 1 spreads evenly
    return [
        (torch.softmax(2 * torch.randn(3, 5, 7, generator=g), dim=-1), "3 heads, 5 queries over 7 keys"),
        (one_hot, "2 heads: one looks at itself only, one spreads evenly over 5 keys"),
        (masked, "[layers=2, heads=3, 6, 6] with a causal mask: the masked weights are exactly 0"),
        (masked.double(), "float64 [2, 3, 6, 6] with a causal mask"),
        (masked.bfloat16(), "bfloat16 [2, 3, 6, 6] with a causal mask"),
    ]


def _entropy_mistakes(w, n_keys):
    """(message, what the mistake returns) for the usual slips (computed without the NaN of 0 * ln 0)."""

    def xlogx(t):
        return torch.xlogy(t, t)

    expected = attention_entropy(w)
    return [
        (
            f"{E_NEGATIVE}: H = -sum_j w_j ln w_j has a minus sign (ln w_j <= 0 for weights <= 1).",
            -expected,
        ),
        (
            f"{E_LOG2}; this lesson measures entropy in nats, with the natural log torch.log, "
            "so that a head spread evenly over k keys scores ln(k).",
            expected / math.log(2),
        ),
        (
            f"{E_NORMALISED}, the largest possible entropy; return the entropy itself, in nats.",
            expected / math.log(n_keys),
        ),
        (
            f"{E_SUMMED}; average them (.mean(dim=-1) after the sum over the "
            "keys), so heads over short and long inputs compare.",
            expected * w.shape[-2],
        ),
        (
            f"{E_COLUMNS} (a sum over the queries, dim=-2). A row of weights (one query, "
            "all keys) is the distribution: sum -w ln w over the keys (dim=-1), then average over the queries.",
            -xlogx(w).sum(dim=-2).mean(dim=-1),
        ),
        (
            f"{E_AVERAGE_FIRST} and took the entropy of the average. Each query has its own distribution: "
            "a previous-token head has sharp rows (entropy near 0) whose average is spread over all keys. "
            "Take each row's entropy, then average the entropies.",
            -xlogx(w.mean(dim=-2)).sum(dim=-1),
        ),
    ]


@exercise(
    "attention_entropy",
    solution=attention_entropy,
    hints=[
        "One query's weights over the keys (a row) are a probability distribution; its entropy is "
        "H = -sum_j w_j ln w_j. Compute it for every row (sum over dim=-1), then average over the queries.",
        "Masked keys have weight exactly 0, and 0 * log(0) is 0 * -inf = NaN in floating point. "
        "torch.xlogy(w, w) computes w * ln(w) with 0 for w = 0.",
        "Use dim=-1 and dim=-2 (never a fixed number of heads or dimensions), so [heads, q, k] and "
        "[layers, heads, q, k] both work: `-torch.xlogy(w, w).sum(dim=-1).mean(dim=-1)`.",
    ],
)
def check_attention_entropy(candidate):
    for weights, description in _entropy_cases():
        expected = attention_entropy(weights)
        got = call(candidate, weights.clone())
        context = f"weights of shape {tuple(weights.shape)}: {description}"
        expect_tensor(got, what="output")
        if tuple(got.shape) == tuple(weights.shape[:-1]):
            raise Mistake(
                f"{E_PER_QUERY}, shape {tuple(got.shape)} ({context}); "
                f"average over the queries too, for one number per head: shape {tuple(expected.shape)}."
            )
        if tuple(got.shape) != tuple(expected.shape):
            raise Mistake(
                f"{E_PER_HEAD}, shape {tuple(expected.shape)} (the input's shape "
                f"without the last two axes), but has shape {tuple(got.shape)} ({context}). Reduce over dim=-1 and "
                "dim=-2 only, without a fixed number of heads or dimensions."
            )
        expect_same_dtype(got, weights.dtype, "output", context)
        atol, rtol = LOW_PRECISION_TOLERANCE.get(weights.dtype, (1e-5, 1e-4))
        diagnose(
            got,
            expected,
            known_mistakes=_entropy_mistakes(weights, weights.shape[-1]),
            atol=atol,
            rtol=rtol,
            context=context,
            nonfinite_advice=f"a weight of exactly 0 (a masked key) gives {E_NAN} = 0 * -inf = NaN. "
            "Its term of the entropy is 0: use torch.xlogy(w, w), which is w * ln(w) with 0 where w = 0.",
        )
