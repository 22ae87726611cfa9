"""course_utils.stories: lesson 10's corpus, its random numbers and the exact information of each story."""

import hashlib
import math

import pytest

from course_utils import language_model as lm
from course_utils.stories import StoryRandom, entropy_per_token, story_corpus, story_information


def test_splitmix64_matches_the_published_sequence():
    # the first outputs of SplitMix64 seeded with 0 (the reference C code by Vigna)
    rng = StoryRandom(0)
    assert [rng.next_int() for _ in range(3)] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]


def test_corpus_is_the_stored_one_and_long_enough():
    text = story_corpus(lm.NUM_STORIES)
    assert hashlib.sha256(text.encode()).hexdigest() == lm.trained_results()["corpus_sha256"]
    assert len(text) >= 3_500_000


def test_each_draw_adds_its_information():
    rng = StoryRandom(0)
    rng.below(4)
    assert rng.information == pytest.approx(math.log(4))
    hit = rng.chance(30)
    assert rng.information == pytest.approx(math.log(4) - math.log(0.3 if hit else 0.7))


def test_story_information_is_the_corpus_with_the_choices_it_took():
    stories = story_information(200, seed=4)
    assert "".join(text for text, _ in stories) == story_corpus(200, seed=4)
    # at least: hero (336 names), friend (335), two of the pronouns' 2, kinds, adjectives, colours, objects...
    floor = math.log(336 * 335 * 2 * 10 * 8 * 7 * 10)
    assert all(nats > floor for _, nats in stories)


def test_entropy_per_token_is_information_over_tokens():
    assert entropy_per_token([("a b\n", 2.0), ("c\n", 1.0)], lm.WordTokenizer.split) == pytest.approx(3.0 / 5)
    with pytest.raises(ValueError, match="story_information"):
        entropy_per_token([], lm.WordTokenizer.split)


def test_the_floor_lies_below_every_model_and_baseline():
    stored = lm.trained_results()
    floor = stored["grammar_validation_loss"]
    losses = [run["validation_loss"] for run in stored["runs"].values()]
    assert 0 < floor < min(losses) and max(losses) < stored["bigram_validation_loss"]


def test_names_recur_within_a_story():
    for line in story_corpus(50, seed=3).splitlines():
        hero = line.split(" named ")[1].split(".")[0] if " named " in line else line.split(" ")[0]
        assert line.count(hero) >= 3, line


def test_story_corpus_refuses_bad_sizes():
    with pytest.raises(ValueError, match="num_stories"):
        story_corpus(0)
    with pytest.raises(ValueError, match="seed"):
        StoryRandom(-1)
