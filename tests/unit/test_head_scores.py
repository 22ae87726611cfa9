"""Head scores on hand-built attention patterns whose answers are known, and against brute-force loops."""

import pandas as pd
import pytest
import torch

from course_utils import head_scores as hs

TOKENS = ["[CLS]", "the", "cat", "sat", ",", "the", "cat", "slept", ".", "[SEP]"]
S = len(TOKENS)


def one_hot_rows(targets):
    """Attention [S, S] where query i puts all its weight on key targets[i]."""
    attn = torch.zeros(len(targets), len(targets))
    attn[torch.arange(len(targets)), torch.tensor(targets)] = 1.0
    return attn


def random_attention(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(*shape, generator=g) * 2, dim=-1)


def test_perfect_previous_and_next_token_heads():
    previous = one_hot_rows([0] + list(range(S - 1)))  # [CLS] looks at itself, i -> i-1
    following = one_hot_rows(list(range(1, S)) + [S - 1])  # i -> i+1, [SEP] looks at itself
    assert hs.previous_token_score(previous).item() == 1.0
    assert hs.next_token_score(following).item() == 1.0
    assert hs.next_token_score(previous).item() == 0.0
    # i -> i-1 is never i -> i+1; and the next-token head hits i-1 nowhere
    assert hs.previous_token_score(following).item() == 0.0


def test_uniform_attention_scores_one_over_n():
    uniform = torch.full((S, S), 1.0 / S)
    for score in (hs.previous_token_score(uniform), hs.next_token_score(uniform), hs.cls_score(uniform)):
        assert score.item() == pytest.approx(1 / S)
    assert hs.sep_score(uniform, TOKENS).item() == pytest.approx(1 / S)
    assert hs.punctuation_score(uniform, TOKENS).item() == pytest.approx(2 / S)  # ',' and '.'
    # each repeated word ("the", "cat") has exactly one other occurrence
    assert hs.same_word_score(uniform, TOKENS).item() == pytest.approx(1 / S)


def test_cls_sep_and_punctuation_heads():
    assert hs.cls_score(one_hot_rows([0] * S), TOKENS).item() == 1.0
    assert hs.sep_score(one_hot_rows([S - 1] * S), TOKENS).item() == 1.0
    half = (one_hot_rows([4] * S) + one_hot_rows([8] * S)) / 2  # half on ',' and half on '.'
    assert hs.punctuation_score(half, TOKENS).item() == 1.0
    assert hs.sep_score(half, TOKENS).item() == 0.0
    # [CLS]/[SEP] contain brackets but are not punctuation; word pieces are not either
    assert not hs.is_punctuation("[SEP]") and not hs.is_punctuation("##s") and hs.is_punctuation("'")


def test_same_word_head_ignores_itself_and_non_repeated_words():
    # the -> other the, cat -> other cat; everyone else attends to itself
    targets = list(range(S))
    targets[1], targets[5], targets[2], targets[6] = 5, 1, 6, 2
    assert hs.same_word_score(one_hot_rows(targets), TOKENS).item() == 1.0
    # attending to *itself* is not the same-word pattern
    assert hs.same_word_score(torch.eye(S), TOKENS).item() == 0.0
    # repeated [CLS]-like or punctuation tokens are not words
    with pytest.raises(ValueError, match="no word occurs twice"):
        hs.same_word_score(torch.eye(4), ["[CLS]", ".", ".", "[SEP]"])


def brute_force(attn, tokens):
    """Loops over every head, query and key: the definitions in words."""
    layers, heads, seq, _ = attn.shape
    out = {name: torch.zeros(layers, heads) for name in hs.PATTERNS}
    for layer in range(layers):
        for head in range(heads):
            a = attn[layer, head]
            out["previous token"][layer, head] = sum(a[i, i - 1] for i in range(1, seq)) / (seq - 1)
            out["next token"][layer, head] = sum(a[i, i + 1] for i in range(seq - 1)) / (seq - 1)
            out["[CLS]"][layer, head] = sum(a[i, 0] for i in range(seq)) / seq
            out["[SEP]"][layer, head] = (
                sum(a[i, j] for i in range(seq) for j in range(seq) if tokens[j] == "[SEP]") / seq
            )
            punct = [j for j in range(seq) if tokens[j] in {",", ".", "!", "?", "'"}]
            out["punctuation"][layer, head] = sum(a[i, j] for i in range(seq) for j in punct) / seq
            words = [i for i in range(seq) if tokens[i] not in {"[CLS]", "[SEP]"} and i not in punct]
            repeated = [i for i in words if any(tokens[j] == tokens[i] and j != i for j in words)]
            total = sum(a[i, j] for i in repeated for j in words if j != i and tokens[j] == tokens[i])
            out["same word"][layer, head] = total / len(repeated)
    return out


def test_scores_match_brute_force_on_random_attention():
    attn = random_attention(3, 4, S, S)
    scores = hs.score_heads(attn, TOKENS)
    expected = brute_force(attn, TOKENS)
    assert list(scores) == list(hs.PATTERNS)
    for name in hs.PATTERNS:
        assert scores[name].shape == (3, 4)
        torch.testing.assert_close(scores[name], expected[name], msg=name)


def test_tables():
    attn = random_attention(2, 3, S, S, seed=1)
    attn[1, 2] = one_hot_rows([0] + list(range(S - 1)))  # plant a perfect previous-token head
    scores = hs.score_heads(attn, TOKENS, patterns=["previous token", "[CLS]"])
    table = hs.scores_table(scores)
    assert isinstance(table, pd.DataFrame)
    assert table.shape == (2 * 2, 3) and table.index.names == ["pattern", "layer"]
    assert table.loc[("previous token", 1), 2] == 1.0
    best = hs.best_heads(scores)
    assert best.loc["previous token"].tolist() == [1, 2, 1.0]
    assert list(best.columns) == ["layer", "head", "score"]


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match=r"\[\.\.\., seq, seq\]"):
        hs.previous_token_score(random_attention(3, 4, 5))
    with pytest.raises(ValueError, match="at least 2 tokens"):
        hs.previous_token_score(torch.ones(1, 1))
    with pytest.raises(ValueError, match="3 tokens for attention over 10 positions"):
        hs.sep_score(random_attention(S, S), ["[CLS]", "a", "[SEP]"])
    with pytest.raises(ValueError, match="no \\[SEP\\]"):
        hs.sep_score(random_attention(3, 3), ["[CLS]", "a", "b"])
    with pytest.raises(ValueError, match="no punctuation"):
        hs.punctuation_score(random_attention(3, 3), ["[CLS]", "a", "[SEP]"])
    with pytest.raises(ValueError, match="not \\[CLS\\]"):
        hs.cls_score(random_attention(3, 3), ["a", "b", "[SEP]"])
    with pytest.raises(ValueError, match="unknown pattern"):
        hs.score_heads(random_attention(1, 1, S, S), TOKENS, patterns=["diagonal"])
    with pytest.raises(ValueError, match=r"\[layers, heads, seq, seq\]"):
        hs.score_heads(random_attention(S, S), TOKENS)


def _scores(*shape, seed=0):
    """Raw attention scores (before softmax): negative entries, rows that do not sum to 1."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 2


@pytest.mark.parametrize("name", list(hs.PATTERNS))
@pytest.mark.parametrize(
    "not_weights",
    [
        _scores(2, 3, S, S),  # raw scores q k^T / sqrt(d_k)
        _scores(2, 3, S, S).exp(),  # positive, but never normalised
        random_attention(2, 3, S, S) * 0.5,  # rows sum to 0.5
    ],
    ids=["raw scores", "exp without normalising", "rows sum to 0.5"],
)
def test_scores_refuse_what_is_not_attention_weights(name, not_weights):
    with pytest.raises(ValueError, match="attention weights, every entry >= 0 and every row summing to 1") as info:
        hs.PATTERNS[name](not_weights, TOKENS)
    assert "softmax" in str(info.value)


def test_integer_attention_is_refused():
    with pytest.raises(ValueError, match="floating-point"):
        hs.previous_token_score(torch.eye(4, dtype=torch.long))


def test_half_precision_weights_are_accepted():
    attn = random_attention(2, 3, S, S)
    for dtype in (torch.float16, torch.bfloat16):
        got = hs.previous_token_score(attn.to(dtype)).float()
        torch.testing.assert_close(got, hs.previous_token_score(attn), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("name", [n for n in hs.PATTERNS if n not in ("previous token", "next token")])
def test_scores_refuse_a_string_as_the_token_list(name):
    sentence = "abcdefghij"  # as many characters as positions: a string would pass a length check
    assert len(sentence) == S
    with pytest.raises(TypeError, match="list \\(or tuple\\) of strings, one per position, got one string"):
        hs.PATTERNS[name](random_attention(2, 3, S, S), sentence)


@pytest.mark.parametrize("tokens", ["abcdefghij", TOKENS[:-1] + [3], None, iter(TOKENS)])
def test_score_heads_checks_the_tokens_for_every_pattern(tokens):
    with pytest.raises((TypeError, ValueError), match="tokens"):
        hs.score_heads(random_attention(2, 3, S, S), tokens, patterns=["previous token"])


def test_tokens_may_be_a_tuple():
    attn = random_attention(2, 3, S, S)
    torch.testing.assert_close(hs.sep_score(attn, tuple(TOKENS)), hs.sep_score(attn, TOKENS))


def test_real_model_has_a_previous_token_head():
    """MiniLM's layer 0 has a head that attends to the previous token almost perfectly."""
    from course_utils.pretrained import attention_maps, load_model

    tokens, attn = attention_maps("The cat sat on the mat, and then the cat slept.", load_model(device="cpu"))
    scores = hs.score_heads(attn, tokens)
    assert scores["previous token"].max() > 0.9
    assert scores["same word"].max() > 0.5


def test_most_attended_tokens_brute_force():
    w = random_attention(4, S, S, seed=3)
    got = hs.most_attended_tokens(w, TOKENS)
    for head in range(4):
        totals = [sum(w[head, i, j].item() for i in range(S)) for j in range(S)]
        assert got[head] == TOKENS[totals.index(max(totals))]
