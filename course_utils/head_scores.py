"""Scoring attention heads for the patterns of lesson 06 (as in the notes on visualising attention).

Every score takes attention weights ``attn`` of shape [..., seq, seq] (for a
whole model: [layers, heads, seq, seq]; row i = query token i, its weights over
the keys sum to 1) and returns one number per head, shape [...]:
the average weight a query puts on the keys the pattern names.

    previous token   key i-1                 (positional head)
    next token       key i+1                 (positional head)
    [CLS]            the first token
    [SEP]            the [SEP] token(s)      (often a "no-op": nothing better to look at)
    punctuation      tokens made of punctuation only
    same word        other occurrences of the query's own token

A score of 1 means every query puts all its weight on that pattern; a head that
spreads its weight evenly over n tokens scores about 1/n.

``attention_entropy`` (lesson 04) measures how focused a head is rather than where it
looks: each query row's entropy in nats, averaged over the queries, one number per head.
``most_attended_tokens`` (lesson 04) names each head's favourite key token instead of a number.
"""

import string

import torch

from course_utils import _validate

__all__ = [
    "previous_token_score",
    "next_token_score",
    "cls_score",
    "sep_score",
    "punctuation_score",
    "same_word_score",
    "attention_entropy",
    "most_attended_tokens",
    "is_punctuation",
    "PATTERNS",
    "score_heads",
    "scores_table",
    "best_heads",
]

SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[PAD]")


def _weight_on(attn, key_mask):
    """Mean over all queries of the total weight on the chosen keys -> [...]."""
    key_mask = torch.tensor(key_mask, device=attn.device, dtype=attn.dtype)
    per_query = (attn * key_mask).sum(-1)  # [..., seq]: weight each query puts on those keys
    return per_query.mean(-1)


def previous_token_score(attn):
    """Mean weight of query i on key i-1, over queries 1..seq-1 (query 0 has no previous token)."""
    _validate.attention_map(attn, min_len=2)
    # the diagonal just below the main one holds attn[i, i-1] for i = 1..seq-1
    return attn.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)


def next_token_score(attn):
    """Mean weight of query i on key i+1, over queries 0..seq-2 (the last token has no next one)."""
    _validate.attention_map(attn, min_len=2)
    return attn.diagonal(offset=1, dim1=-2, dim2=-1).mean(-1)


def cls_score(attn, tokens=None):
    """Mean weight on the first token ([CLS] in BERT), over all queries."""
    _validate.attention_map(attn)
    if tokens is not None:
        _validate.tokens_for(attn, tokens)
        if tokens[0] != "[CLS]":
            raise ValueError(f"the first token is {tokens[0]!r}, not [CLS]")
    return attn[..., 0].mean(-1)


def sep_score(attn, tokens):
    """Mean total weight on the [SEP] token(s), over all queries."""
    _validate.attention_map(attn)
    _validate.tokens_for(attn, tokens)
    is_sep = [t == "[SEP]" for t in tokens]
    if not any(is_sep):
        raise ValueError("there is no [SEP] token in tokens")
    return _weight_on(attn, is_sep)


def is_punctuation(token):
    """',' '.' '!' '?' ... but not [CLS]/[SEP]/[PAD] and not word pieces with letters."""
    return token not in SPECIAL_TOKENS and len(token) > 0 and all(ch in string.punctuation for ch in token)


def punctuation_score(attn, tokens):
    """Mean total weight on punctuation tokens, over all queries."""
    _validate.attention_map(attn)
    _validate.tokens_for(attn, tokens)
    is_punct = [is_punctuation(t) for t in tokens]
    if not any(is_punct):
        raise ValueError(f"there is no punctuation among the tokens {tokens}")
    return _weight_on(attn, is_punct)


def same_word_score(attn, tokens):
    """Mean weight a repeated token puts on its *other* occurrences ("the" -> the other "the"s).

    Only queries whose token occurs more than once count; the diagonal (a token
    attending to itself) does not, or every self-attending head would score.
    """
    _validate.attention_map(attn)
    _validate.tokens_for(attn, tokens)
    seq = len(tokens)
    same = torch.tensor([[tokens[i] == tokens[j] and i != j for j in range(seq)] for i in range(seq)])
    # special tokens and punctuation repeat too, but that is not a lexical pattern
    word = torch.tensor([t not in SPECIAL_TOKENS and not is_punctuation(t) for t in tokens])
    same = same & word[:, None] & word[None, :]
    repeated = same.any(-1)
    if not repeated.any():
        raise ValueError(f"no word occurs twice in {tokens}: the same-word score needs a repeated word")
    per_query = (attn * same.to(attn.device, attn.dtype)).sum(-1)  # [..., seq]
    return per_query[..., repeated.to(attn.device)].mean(-1)


# name -> function(attn, tokens) for every pattern the lesson scores
PATTERNS = {
    "previous token": lambda attn, tokens: previous_token_score(attn),
    "next token": lambda attn, tokens: next_token_score(attn),
    "[CLS]": cls_score,
    "[SEP]": sep_score,
    "punctuation": punctuation_score,
    "same word": same_word_score,
}


def attention_entropy(weights):
    """How spread out each head's attention is: each query row's entropy, averaged over the queries.

    weights: [..., q, k] attention weights, each row summing to 1 (e.g. [heads, q, k] or
    [layers, heads, q, k]). Returns [...] in nats: 0 when every query puts all its weight
    on one key, ln(k) when every query spreads evenly over k keys.
    """
    # H(row) = -sum_j w_j ln w_j; a masked key has w_j = 0 and contributes 0 (0 * ln 0 = 0),
    # which torch.xlogy(w, w) = w * ln(w) computes without the NaN of 0 * -inf
    per_query = -torch.xlogy(weights, weights).sum(dim=-1)  # [..., q]
    return per_query.mean(dim=-1)


def most_attended_tokens(weights, tokens):
    """For each head, the key token it attends to most, on average over all queries.

    weights: [heads, q, k] attention weights (torch tensor); tokens: the k key tokens.
    Returns a list with one token per head (lesson 04's exercise).
    """
    received = weights.mean(dim=-2)  # [heads, k]: the average weight each key receives
    best = received.argmax(dim=-1)  # [heads]: the key with the most attention
    return [tokens[i] for i in best.tolist()]


def score_heads(attn, tokens, patterns=None):
    """{pattern name: scores [layers, heads]} for attention [layers, heads, seq, seq] of one sentence."""
    if not isinstance(attn, torch.Tensor) or attn.dim() != 4:
        shape = tuple(attn.shape) if isinstance(attn, torch.Tensor) else type(attn).__name__
        raise ValueError(f"attn must be [layers, heads, seq, seq] for one sentence, got {shape}")
    _validate.tokens_for(attn, tokens)
    names = list(PATTERNS) if patterns is None else list(patterns)
    unknown = [n for n in names if n not in PATTERNS]
    if unknown:
        raise ValueError(f"unknown pattern(s) {unknown}; known: {list(PATTERNS)}")
    return {name: PATTERNS[name](attn, tokens).cpu() for name in names}


def scores_table(scores, decimals=2):
    """One table, rows (pattern, layer), columns heads: the layers x heads grid of each pattern."""
    import pandas as pd  # here, not at the top: every check imports this module, few need a table

    frames = {}
    for name, s in scores.items():
        frame = pd.DataFrame(s.double().numpy().round(decimals))
        frame.index.name, frame.columns.name = "layer", "head"
        frames[name] = frame
    return pd.concat(frames, names=["pattern"])


def best_heads(scores, decimals=2):
    """The highest-scoring head per pattern: a table with pattern, layer, head, score."""
    import pandas as pd

    rows = []
    for name, s in scores.items():
        flat = int(torch.argmax(s))
        layer, head = divmod(flat, s.shape[-1])
        rows.append({"pattern": name, "layer": layer, "head": head, "score": round(float(s[layer, head]), decimals)})
    return pd.DataFrame(rows).set_index("pattern")
