"""The course's own short stories: a small probabilistic grammar that lesson 10's language model reads.

    text = story_corpus(num_stories=10_000, seed=0)   # the same string on every machine and Python version
    stories = story_information(10_000)               # each story with its exact information, in nats

Every story is made of sentences chosen by a seeded random generator. The grammar was
written for the course (no text is copied from elsewhere), and it has what makes
next-token prediction interesting:

- frequent words and fixed phrases ("Once upon a time", "said") that a bigram model half knows;
- names drawn from 336 invented ones ("Tomiro", "Belsa") that recur inside one story, so
  predicting the second "Tomiro" means copying it from earlier in the context;
- agreement: "she" / "he" follows the hero, "was" / "were" the number of the subject;
- quotes that open and close, and an object ("the red kite") named again later.

The generator records the information of every choice it draws (-ln p), so the grammar's
entropy, the lowest loss any model can reach on the stories, is exact (``entropy_per_token``).

The random generator is SplitMix64 (Steele, Lea and Flood, 2014, "Fast splittable
pseudorandom number generators") in plain integer arithmetic, not Python's ``random``,
whose algorithms may change between Python versions.
"""

import math

__all__ = [
    "StoryRandom",
    "story",
    "story_corpus",
    "story_information",
    "entropy_per_token",
    "NAMES",
    "NAME_STARTS",
    "NAME_ENDS",
]

_MASK = (1 << 64) - 1


class StoryRandom:
    """A seeded random generator that gives the same numbers on every machine (SplitMix64)."""

    def __init__(self, seed):
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {seed!r}")
        self.state = seed & _MASK
        # nats: the sum of -ln p over every choice drawn so far (each story's exact information)
        self.information = 0.0

    def next_int(self):
        """The next 64-bit random integer."""
        self.state = (self.state + 0x9E3779B97F4A7C15) & _MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    def below(self, n):
        """A random int in 0..n-1 (the modulo's bias is below 1e-17 for the small n used here)."""
        self.information += math.log(n)
        return self.next_int() % n

    def choice(self, options):
        return options[self.below(len(options))]

    def chance(self, percent):
        """True with probability percent / 100."""
        hit = self.next_int() % 100 < percent
        self.information -= math.log((percent if hit else 100 - percent) / 100)
        return hit


# Names are two syllables, so there are 24 x 14 = 336 of them, drawn uniformly: no model can
# guess a story's names before they appear, only copy them once they have.
NAME_STARTS = ("To", "Be", "Ma", "Li", "Ro", "Sa", "Ne", "Ka", "Pi", "Du", "Fe", "Go",
               "Ha", "Ji", "Lo", "Mi", "No", "Ru", "Si", "Ta", "Vi", "Wu", "Ye", "Zo")  # fmt: skip
NAME_ENDS = ("miro", "lsa", "rek", "nna", "bby", "dor", "lia", "ssa", "tto", "vin", "rra", "mel", "kus", "nda")
NAMES = tuple(start + end for start in NAME_STARTS for end in NAME_ENDS)

_KINDS = ("fox", "rabbit", "bear", "mouse", "duck", "cat", "dog", "owl", "frog", "goat")
_ADJECTIVES = ("little", "brave", "shy", "clever", "sleepy", "happy", "curious", "kind")
_PLACES = ("near the river", "in a small house", "at the edge of the forest", "on a green hill", "by the sea")
_RELATIONS = ("friend", "brother", "sister", "neighbour", "cousin")
_TIMES = ("morning", "evening", "day", "afternoon")
_COLOURS = ("red", "blue", "green", "yellow", "silver", "golden", "white")
_OBJECTS = ("kite", "ball", "hat", "box", "key", "boat", "drum", "lamp", "book", "shell")
_WHERE = ("under a tree", "in the grass", "behind the door", "near the water", "on the path")
_FEELINGS = ("happy", "surprised", "worried", "excited", "sad")
_REPLIES = (
    "We can keep it.",
    "It is not ours.",
    "Let us show it to everyone.",
    "I have never seen one like it.",
    "Maybe someone lost it.",
)
_ENDINGS = ("went to sleep", "had a warm dinner", "told the story to everyone", "sat by the fire")


def _pronouns(rng):
    """A hero's pronouns: subject, object, possessive (agreement across the story)."""
    return rng.choice((("she", "her", "her"), ("he", "him", "his")))


def _name(rng, other=None):
    """One of the NAMES, never ``other`` (a hero's friend has a name of their own)."""
    return rng.choice(NAMES if other is None else tuple(name for name in NAMES if name != other))


def story(rng):
    """One story (a few sentences, on one line) drawn with the generator ``rng``."""
    hero = _name(rng)
    friend = _name(rng, other=hero)
    she, her, his = _pronouns(rng)
    kind, adjective = rng.choice(_KINDS), rng.choice(_ADJECTIVES)
    colour, thing = rng.choice(_COLOURS), rng.choice(_OBJECTS)
    an = "an" if adjective[0] in "aeiou" else "a"
    sentences = [
        rng.choice(
            (
                f"Once upon a time there was {an} {adjective} {kind} named {hero}.",
                f"{hero} was {an} {adjective} {kind} who lived {rng.choice(_PLACES)}.",
            )
        ),
        f"{she.capitalize()} had a {rng.choice(_RELATIONS)} called {friend}.",
        f"One {rng.choice(_TIMES)}, {hero} found a {colour} {thing} {rng.choice(_WHERE)}.",
        f'"Look, {friend}!" said {hero}. "I found a {colour} {thing}."',
    ]
    if rng.chance(50):
        feeling = rng.choice(_FEELINGS)
        sentences.append(f"{friend} was {feeling}, and {hero} was {feeling} too.")
    sentences.append(f'{friend} looked at the {thing} and said, "{rng.choice(_REPLIES)}"')
    if rng.chance(50):
        sentences.append(f"{hero} and {friend} were {rng.choice(_FEELINGS)}.")
    sentences.append(f"That night {hero} put the {colour} {thing} next to {his} bed and {rng.choice(_ENDINGS)}.")
    if rng.chance(40):
        sentences.append(f"{friend} said goodnight to {her}.")
    return " ".join(sentences)


def story_corpus(num_stories=1500, seed=0):
    """``num_stories`` stories, one per line (each ends with a newline), from one seeded generator."""
    if isinstance(num_stories, bool) or not isinstance(num_stories, int) or num_stories < 1:
        raise ValueError(f"num_stories must be a positive int, got {num_stories!r}")
    rng = StoryRandom(seed)
    return "".join(story(rng) + "\n" for _ in range(num_stories))


def story_information(num_stories=1500, seed=0):
    """[(story, nats)]: the stories of ``story_corpus(num_stories, seed)``, each with its exact information.

    A story's information is the sum of -ln p over the choices that wrote it; distinct choices
    write distinct stories, so it is -ln p(story) under the grammar. Its mean is the grammar's
    entropy: no model can have a lower expected loss on these stories (lesson 10's floor).
    """
    if isinstance(num_stories, bool) or not isinstance(num_stories, int) or num_stories < 1:
        raise ValueError(f"num_stories must be a positive int, got {num_stories!r}")
    rng = StoryRandom(seed)
    stories = []
    for _ in range(num_stories):
        before = rng.information
        stories.append((story(rng) + "\n", rng.information - before))
    return stories


def entropy_per_token(stories, split):
    """Nats per token of the grammar on ``stories`` (pairs from ``story_information``), cut by ``split(text)``.

    The total information of the stories over their number of tokens: the loss of a model that
    knows the grammar and has read every story from its start, the floor no model gets under.
    """
    if not stories or any(len(pair) != 2 for pair in stories):
        raise ValueError("stories must be a non-empty list of (story, nats) pairs from story_information()")
    return sum(nats for _, nats in stories) / sum(len(split(text)) for text, _ in stories)
