"""course_utils.context_use: each measurement tells a model that reads its context from one that
does not, on small oracles whose answers are known."""

import math

import pytest
import torch
import torch.nn as nn

from course_utils import context_use
from course_utils import language_model as lm
from course_utils.stories import NAMES, story_corpus

STORIES = story_corpus(40, seed=5).splitlines(keepends=True)
# the stories' words, and every name spelled both ways (at the start of a story and after a space)
TOKENIZER = lm.WordTokenizer(lm.WordTokenizer.split("".join(STORIES)) + list(NAMES) + [" " + n for n in NAMES])


class Oracle(nn.Module):
    """logits(ids) from a rule: a stand-in for a trained model with known behaviour."""

    def __init__(self, rule, context=128):
        super().__init__()
        self.vocab_size, self.context, self.rule = TOKENIZER.vocab_size, context, rule

    def forward(self, ids):
        return torch.stack([torch.stack([self.rule(row[: t + 1]) for t in range(len(row))]) for row in ids])


def bigram_rule(seen):
    """Reads only the last token: no context at all."""
    generator = torch.Generator().manual_seed(int(seen[-1]))
    return torch.randn(TOKENIZER.vocab_size, generator=generator)


def copy_first_name_rule(seen):
    """Puts probability 0.9 on " <the first name of the text>", wherever it is asked."""
    logits = torch.zeros(TOKENIZER.vocab_size)
    names = [i for i in seen.tolist() if TOKENIZER.words[i].strip() in NAMES]
    if names:
        spelled = " " + TOKENIZER.words[names[0]].strip()
        logits[TOKENIZER.index[spelled]] = math.log(0.9 * (TOKENIZER.vocab_size - 1) / 0.1)
    return logits


def induction_rule(seen):
    """Predicts the token that followed the last earlier occurrence of the current token."""
    logits = torch.zeros(TOKENIZER.vocab_size)
    earlier = (seen[:-1] == seen[-1]).nonzero()
    if len(earlier):
        logits[seen[earlier[-1] + 1]] = 20.0
    return logits


def test_a_model_that_copies_the_name_loses_when_the_first_mention_is_swapped():
    kept, swapped = context_use.name_losses(Oracle(copy_first_name_rule), TOKENIZER, STORIES[:10])
    assert kept < 0.2 < 3 < swapped


def test_later_mention_loss_is_name_losses_first_number():
    for rule in (copy_first_name_rule, bigram_rule):
        kept, _ = context_use.name_losses(Oracle(rule), TOKENIZER, STORIES[:10])
        assert context_use.later_mention_loss(Oracle(rule), TOKENIZER, STORIES[:10]) == pytest.approx(kept, abs=1e-6)
    assert context_use.later_mention_loss(Oracle(copy_first_name_rule), TOKENIZER, STORIES[:10]) < 0.2


def test_a_model_without_context_is_not_moved_by_the_swap():
    kept, swapped = context_use.name_losses(Oracle(bigram_rule), TOKENIZER, STORIES[:10])
    assert kept == pytest.approx(swapped, abs=1e-6)


def test_repeats_separate_copying_from_reading_one_token():
    first, second = context_use.repeat_losses(Oracle(induction_rule), TOKENIZER, length=8, count=4)
    assert first > 5 and second < 0.1
    first, second = context_use.repeat_losses(Oracle(bigram_rule), TOKENIZER, length=8, count=4)
    assert first == pytest.approx(second, abs=1e-5)  # copy 2 scores the same pairs of tokens as copy 1


def test_a_model_that_reads_one_token_gains_nothing_from_the_whole_window():
    ids = TOKENIZER.encode("".join(STORIES))
    whole, near = context_use.window_losses(Oracle(bigram_rule, context=24), ids, window=4, scored=8, count=2)
    assert whole == pytest.approx(near, abs=1e-5)
    whole, near = context_use.window_losses(Oracle(induction_rule, context=24), ids, window=4, scored=8, count=2)
    assert whole != pytest.approx(near, abs=1e-3)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda m: context_use.name_losses(m, TOKENIZER, STORIES[0]), "list of story lines"),
        (lambda m: context_use.later_mention_loss(m, TOKENIZER, []), "list of story lines"),
        (lambda m: context_use.name_losses(m, TOKENIZER, ["Tomiro ran.", "A fox ran."]), "names its hero twice"),
        (lambda m: context_use.repeat_losses(m, TOKENIZER, length=100), r"length must lie in 2\.\.64"),
        (lambda m: context_use.window_losses(m, TOKENIZER.encode(STORIES[0]), window=120), "at most the context"),
        (lambda m: context_use.window_losses(m, torch.zeros(5, dtype=torch.long)), "at least"),
    ],
)
def test_bad_input_is_refused_with_what_was_expected(call, match):
    with pytest.raises(ValueError, match=match):
        call(Oracle(bigram_rule))
