"""Lesson 06b's ablation_effects exercise: the solution passes, each planted mistake gets its own message."""

import pytest
import torch
import torch.nn.functional as F

from course_utils.ablation import ablation_effects
from course_utils.exercises import ablation as ex
from course_utils.exercises import check, solution

EX = "ablation_effects"


def run(candidate):
    return check(EX, candidate, quiet=True)


def planted(
    similarity="cosine", baseline=True, sign=1, reset=True, remove="head", split=True, transpose=False, pooled=False
):
    """The per-head loop written out; each argument plants one mistake."""

    def candidate(embed_pairs, is_paraphrase, num_layers, num_heads):
        def gap(mask):
            a, b = embed_pairs(mask)
            s = F.cosine_similarity(a, b, dim=-1) if similarity == "cosine" else (a * b).sum(-1)
            if pooled:  # no groups at all
                return s.mean()
            return s[is_paraphrase].mean() - (s[~is_paraphrase].mean() if split else 0)

        shape = (num_heads, num_layers) if transpose else (num_layers, num_heads)
        base = gap(torch.ones(*shape))
        effects = torch.zeros(*shape)
        mask = torch.ones(*shape)
        for i in range(shape[0]):
            for j in range(shape[1]):
                if reset:
                    mask = torch.ones(*shape)
                if remove == "head":
                    mask[i, j] = 0.0
                elif remove == "layer":
                    mask[i] = 0.0
                else:  # keep only this head
                    mask = torch.zeros(*shape)
                    mask[i, j] = 1.0
                effects[i, j] = sign * ((base if baseline else 0) - gap(mask))
        return effects

    return candidate


def test_solution_is_the_course_reference_and_passes():
    assert solution(EX) is ablation_effects
    result = run(ablation_effects)
    assert result.passed, result.message


def test_loop_written_out_passes():
    result = run(planted())
    assert result.passed, result.message


def test_stub_is_not_attempted():
    def stub(embed_pairs, is_paraphrase, num_layers, num_heads):
        raise NotImplementedError

    assert run(stub).status == "not attempted"


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"similarity": "dot"}, ex.DOT_PRODUCT),
        ({"baseline": False, "sign": -1}, ex.GAP_WITHOUT_HEAD),
        ({"baseline": False}, ex.NO_BASELINE),
        ({"sign": -1}, ex.SIGN_FLIPPED),
        ({"reset": False}, ex.CUMULATIVE),
        ({"remove": "layer"}, ex.WHOLE_LAYER),
        ({"remove": "only"}, ex.ONLY_ONE_HEAD),
        ({"split": False}, ex.PARAPHRASES_ONLY),
        ({"transpose": True}, ex.LAYERS_FIRST),
        ({"pooled": True}, ex.ALL_PAIRS),
    ],
)
def test_each_planted_mistake_is_named(options, words):
    result = run(planted(**options))
    assert not result.passed
    assert words in result.message, result.message


def test_swapped_axes_on_a_square_model_are_named():
    def swapped(embed_pairs, is_paraphrase, num_layers, num_heads):
        return ablation_effects(embed_pairs, is_paraphrase, num_layers, num_heads).T.contiguous()

    # the first case (2 x 3) gives the wrong shape; a square-only swap must still be named
    def square_only(embed_pairs, is_paraphrase, num_layers, num_heads):
        effects = ablation_effects(embed_pairs, is_paraphrase, num_layers, num_heads)
        return effects.T.contiguous() if num_layers == num_heads else effects

    assert not run(swapped).passed
    result = run(square_only)
    assert not result.passed and ex.AXES_SWAPPED in result.message, result.message


def test_messages_differ():
    messages = {
        run(planted(**o)).message
        for o in ({"similarity": "dot"}, {"sign": -1}, {"reset": False}, {"remove": "layer"}, {"split": False})
    }
    assert len(messages) == 5


def test_checker_is_fast():
    import time

    start = time.process_time()
    run(ablation_effects)
    assert time.process_time() - start < 5
