"""Lesson 04's exercise: which token does each head attend to most?

The candidate is ``fn(weights, tokens) -> list of str``: weights ``[heads, q, k]``,
one answer per head, the key token with the largest attention on average over all
queries. The reference is ``course_utils.viz.most_attended_tokens``.
"""

import torch

from course_utils.exercises import exercise
from course_utils.exercises.checking import Mistake, call
from course_utils.viz import most_attended_tokens

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
    g = torch.Generator().manual_seed(4)
    random_heads = torch.softmax(3 * torch.randn(4, 6, 6, generator=g), dim=-1)
    sentence = "the cat sat on the mat".split()
    return [(_planted_case(), TOKENS), (random_heads, sentence)]


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
                f"return the tokens themselves (strings such as {expected[0]!r}), one per head, "
                f"not their positions or weights; you returned {shown} {context}. Use `tokens[i]`."
            )
        if not isinstance(got, (list, tuple)):
            raise Mistake(f"return a list with one token per head; you returned a {type(got).__name__}.")
        got = list(got)
        if got == expected:
            continue
        heads = weights.shape[0]
        mistakes = [
            (
                "you found the single largest weight in each column (`.max` over the queries); a head's "
                "favourite key is the one with the largest attention on AVERAGE over all queries (`.mean(dim=-2)`).",
                _answer(weights.amax(dim=-2).argmax(dim=-1), tokens),
            ),
            (
                "you counted which key wins for each query (a vote with argmax); average the weights "
                "over the queries instead, so every query's whole distribution counts.",
                _answer(
                    torch.stack([torch.bincount(h.argmax(dim=-1), minlength=len(tokens)) for h in weights]).argmax(
                        dim=-1
                    ),
                    tokens,
                ),
            ),
            (
                "you averaged over the keys (dim=-1): each row sums to 1, so every query looks the same. "
                "Average over the queries (dim=-2) to get the attention each KEY receives.",
                _answer(weights.mean(dim=-1).argmax(dim=-1), tokens),
            ),
            (
                "you gave one answer for all heads together; each head has its own pattern, so answer per head "
                "(average over the queries only, not over the heads).",
                _answer(weights.mean(dim=(0, 1)).argmax().repeat(heads), tokens),
            ),
        ]
        if len(got) != heads:
            raise Mistake(f"return one token per head: {heads} heads, but your list has {len(got)} entries {context}.")
        for message, wrong in mistakes:
            if got == wrong:
                raise Mistake(message)
        raise Mistake(f"not right {context}:\nexpected {expected}\ngot      {got}")
