"""Does lesson 10's language model read its context? Three measurements, each with its control.

    from course_utils.context_use import later_mention_loss, name_losses, repeat_losses, window_losses
    name_losses(model, tokenizer, stories)    # later mentions of the hero: (earlier mention kept, swapped)
    later_mention_loss(model, tokenizer, stories)  # the first of the two alone
    repeat_losses(model, tokenizer)           # random story words, then the same words: (first copy, second)
    window_losses(model, ids, window=16)      # the end of the context: (whole context read, last 16 only)

- A name is drawn at random, so no model can predict a hero's first mention; a later mention is
  cheap only for a model that copies it. The control swaps the first mention for another name:
  if the model copies, the later mentions now cost more.
- Random words have no grammar to predict them, so only copying makes the second copy cheaper
  than the first (lesson 11's induction heads do exactly that).
- The same predictions made from the whole context or from its last few tokens: the gap is what
  the context beyond those tokens is worth to the model.
"""

import torch
import torch.nn.functional as F

from course_utils import _validate
from course_utils.stories import NAMES, StoryRandom

__all__ = ["name_losses", "later_mention_loss", "repeat_losses", "window_losses", "story_words"]


def _token_losses(model, ids):
    """ids [B, T] -> the loss of predicting token t from tokens < t, [B, T - 1] (column t - 1 scores token t)."""
    with torch.no_grad():
        logits = model(ids)
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")


def _hero_mentions(pieces):
    """The story's first name (its hero) and its positions among the story's tokens."""
    hero = next((p.strip() for p in pieces if p.strip() in NAMES), None)
    return hero, [i for i, p in enumerate(pieces) if p.strip() == hero]  # none for a story without a name


@torch.no_grad()
def name_losses(model, tokenizer, stories, seed=0):
    """Mean loss on the hero's later mentions: (with the first mention, with it swapped for another name).

    stories: story lines (each cut to ``model.context`` tokens). The swapped name is drawn with
    ``StoryRandom(seed)`` among the names that are not in the story (and that the vocabulary spells
    the way the mention is spelled, with or without a space before it).
    """
    kept, swapped, later = _mention_texts(model, tokenizer, stories, seed)
    return _mention_loss(model, kept, later, tokenizer), _mention_loss(model, swapped, later, tokenizer)


@torch.no_grad()
def later_mention_loss(model, tokenizer, stories):
    """name_losses' first number alone, at half the cost: the mean loss on the hero's later mentions."""
    kept, _, later = _mention_texts(model, tokenizer, stories, seed=0)
    return _mention_loss(model, kept, later, tokenizer)


def _mention_texts(model, tokenizer, stories, seed):
    """Token ids of each story with a hero named twice or more, as written and with the first mention
    swapped, and the positions of the hero's later mentions."""
    if isinstance(stories, str) or not stories:
        raise ValueError("stories must be a non-empty list of story lines, e.g. corpus_text.splitlines()[-300:]")
    rng = StoryRandom(seed)
    rows, swapped_rows, later = [], [], []
    for story in stories:
        pieces = tokenizer.split(story)[: model.context]
        hero, mentions = _hero_mentions(pieces)
        if len(mentions) < 2:
            continue
        first = pieces[mentions[0]]  # " Tomiro" or, at the start of a story, "Tomiro"
        others = [first.replace(hero, n) for n in NAMES if n not in story]
        swapped = list(pieces)
        swapped[mentions[0]] = rng.choice([o for o in others if o in tokenizer.index])
        rows.append(tokenizer.encode("".join(pieces)))
        swapped_rows.append(tokenizer.encode("".join(swapped)))
        later.append(mentions[1:])
    if not rows:
        raise ValueError(
            f"none of the {len(stories)} stories names its hero twice or more: nothing to measure; "
            "give more stories, e.g. language_model.validation_stories()[:150]"
        )
    return rows, swapped_rows, later


def _mention_loss(model, rows, later, tokenizer):
    """Mean loss of predicting token m of each row, for each m in its ``later`` (rows padded at the end:
    a causal model never reads ahead); the loss is taken at those positions only."""
    pad = tokenizer.index["\n"]
    ids = torch.full((len(rows), max(len(r) for r in rows)), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
    row, column = torch.tensor([(i, m) for i, mentions in enumerate(later) for m in mentions]).T
    logits = model(ids)[row, column - 1]  # the prediction made at m - 1 is the one for token m
    return F.cross_entropy(logits, ids[row, column], reduction="none").mean().item()


def story_words(tokenizer):
    """The ids of the vocabulary's words that follow a space (" fox", " said", " Tomiro", ...)."""
    return torch.tensor([i for i, w in enumerate(tokenizer.words) if w.startswith(" ") and w[1:].isalpha()])


@torch.no_grad()
def repeat_losses(model, tokenizer, length=32, count=64, seed=0):
    """count texts of ``length`` random story words, then the same words again: (loss on copy 1, on copy 2).

    The first word of each copy is not scored (nothing before it says what it is).
    """
    length = _validate.positive_int(length, "length")
    count = _validate.positive_int(count, "count")
    if length < 2 or 2 * length > model.context:
        raise ValueError(f"length must lie in 2..{model.context // 2}, so both copies fit the context, got {length}")
    words = story_words(tokenizer)
    generator = torch.Generator().manual_seed(seed)
    half = words[torch.randint(len(words), (count, length), generator=generator)]
    losses = _token_losses(model, torch.cat([half, half], dim=1))
    return losses[:, : length - 1].mean().item(), losses[:, length:].mean().item()


@torch.no_grad()
def window_losses(model, ids, window=16, scored=32, count=64):
    """Predictions of the last ``scored`` positions of context-long crops: (reading the whole crop, the last ``window`` tokens).

    ids: a long text's token ids [N]; count crops of ``model.context`` tokens are cut from it, one after another.
    """
    window = _validate.positive_int(window, "window")
    scored, count = _validate.positive_int(scored, "scored"), _validate.positive_int(count, "count")
    context = model.context
    if scored + window > context:
        raise ValueError(f"scored + window must be at most the context ({context}), got {scored} + {window}")
    _validate.token_ids(ids, "ids", model.vocab_size, min_len=count * context)
    crops = ids[: count * context].reshape(count, context)
    whole = _token_losses(model, crops)[:, -scored:].mean()
    near = []
    for t in range(context - scored, context):  # predict token t from tokens t - window .. t - 1
        with torch.no_grad():
            logits = model(crops[:, t - window : t])[:, -1]
        near.append(F.cross_entropy(logits, crops[:, t]))
    return whole.item(), torch.stack(near).mean().item()
