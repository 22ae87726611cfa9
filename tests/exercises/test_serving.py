"""Lesson 13's exercises: each solution passes, each planted mistake gets its own message."""

import numpy as np
import pytest
import torch

from course_utils import serving
from course_utils.exercises import check, solution
from course_utils.exercises import serving as ex
from tests.exercises.asserts import assert_caught, assert_each_message_names_only_its_mistake, assert_passes


def test_solutions_are_the_course_references_and_pass():
    for exercise_id in ("gather_blocks", "chunk_mask", "admit"):
        assert solution(exercise_id) is getattr(serving, exercise_id)
        assert_passes(exercise_id, solution(exercise_id))


def test_stubs_are_not_attempted():
    def stub(*args):
        raise NotImplementedError

    for exercise_id in ("gather_blocks", "chunk_mask", "admit"):
        assert check(exercise_id, stub, quiet=True).status == "not attempted"


# ---------------------------------------------------------------- gather_blocks


def gather(order="table", permute="permute", truncate=True, dtype=None):
    def candidate(pool, block_table, length):
        if dtype is not None:  # new tensors made without dtype=pool.dtype
            pool = pool.to(dtype)
        table = sorted(block_table) if order == "sorted" else block_table
        ids = torch.arange(len(table)) if order == "first" else torch.tensor(table)
        slots = pool[ids].reshape(-1, pool.shape[2], pool.shape[3])
        slots = slots[:length] if truncate else slots
        if permute == "none":
            return slots
        if permute == "reshape":
            return slots.reshape(pool.shape[2], slots.shape[0], pool.shape[3])
        return slots.transpose(0, 1)

    return candidate


def test_gather_written_another_way_passes():
    assert_passes("gather_blocks", gather())


GATHER_MISTAKES = {
    "no permute": (gather(permute="none"), ex.GB_NOT_PERMUTED),
    "reshape": (gather(permute="reshape"), ex.GB_VIEW_NOT_PERMUTE),
    "sorted": (gather(order="sorted"), ex.GB_POOL_ORDER),
    "first blocks": (gather(order="first"), ex.GB_FIRST_BLOCKS),
    "not truncated": (gather(truncate=False), ex.GB_NOT_TRUNCATED),
    "float32 result": (gather(dtype=torch.float32), ex.GB_DTYPE),
}


@pytest.mark.parametrize("name", GATHER_MISTAKES)
def test_gather_mistake_is_named(name):
    candidate, phrase = GATHER_MISTAKES[name]
    assert_caught("gather_blocks", candidate, phrase)


def test_a_tuple_from_gather_gets_gathers_own_hint():
    result = assert_caught("gather_blocks", lambda *args: (gather()(*args),), ex.GB_TUPLE_HINT)
    assert "scaled_dot_product_attention" not in result.message


def test_gather_messages_name_only_their_mistake():
    assert_each_message_names_only_its_mistake(GATHER_MISTAKES, lambda c: check("gather_blocks", c, quiet=True))


# ---------------------------------------------------------------- chunk_mask


def mask(diagonal_shift=0, cache=True, causal=True, invert=False, square=False, dtype=torch.bool, shifted=True,
         upper=False):  # fmt: skip
    def candidate(num_cached, chunk_length):
        if square:
            return torch.ones(chunk_length, chunk_length, dtype=dtype).tril()
        m = torch.ones(chunk_length, num_cached + chunk_length, dtype=torch.bool)
        if upper:
            return m.triu(diagonal=num_cached).to(dtype)
        if causal:
            m = m.tril(diagonal=(num_cached if shifted else 0) + diagonal_shift)
        if not cache:
            m[:, :num_cached] = False
        return (~m if invert else m).to(dtype)

    return candidate


def test_a_float_mask_of_ones_and_zeros_passes():
    assert_passes("chunk_mask", mask(dtype=torch.float32))


MASK_MISTAKES = {
    "causal only": (mask(square=True), ex.CM_CAUSAL_ONLY),
    "no cache": (mask(cache=False), ex.CM_NO_CACHE),
    "not causal": (mask(causal=False), ex.CM_NOT_CAUSAL),
    "sees next": (mask(diagonal_shift=1), ex.CM_SEES_NEXT),
    "misses itself": (mask(diagonal_shift=-1), ex.CM_MISSES_ITSELF),
    "inverted": (mask(invert=True), ex.CM_INVERTED),
    "not shifted": (mask(shifted=False), ex.CM_NOT_SHIFTED),
    "upper triangle": (mask(upper=True), ex.CM_UPPER),
}


@pytest.mark.parametrize("name", MASK_MISTAKES)
def test_mask_mistake_is_named(name):
    candidate, phrase = MASK_MISTAKES[name]
    assert_caught("chunk_mask", candidate, phrase)


def test_mask_messages_name_only_their_mistake():
    assert_each_message_names_only_its_mistake(MASK_MISTAKES, lambda c: check("chunk_mask", c, quiet=True))


def test_an_additive_mask_is_told_to_be_bool():
    def additive(num_cached, chunk_length):
        keep = serving.chunk_mask(num_cached, chunk_length)
        return torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))

    assert_caught("chunk_mask", additive, "Return a bool tensor")


# ---------------------------------------------------------------- admit


def admit(blocks="ceil", count_running=True, cap=True, count_blocks=True, skip=False, as_list=False):
    def candidate(waiting_lengths, num_running, num_free_blocks, block_size, max_batch):
        need = {
            "ceil": lambda n: -(-n // block_size),
            "floor": lambda n: n // block_size,
            "plus one": lambda n: n // block_size + 1,
        }[blocks]
        joined, free = [], num_free_blocks
        for n in waiting_lengths:
            full = cap and (num_running if count_running else 0) + len(joined) >= max_batch
            short = count_blocks and need(n) > free
            if full or short:
                if skip and short and not full:
                    continue
                break
            joined.append(n)
            free -= need(n)
        return joined if as_list else len(joined)

    return candidate


def test_admit_written_another_way_passes():
    assert_passes("admit", admit())


def test_a_count_made_with_numpy_passes():
    assert_passes("admit", lambda *args: np.int64(admit()(*args)))


ADMIT_MISTAKES = {
    "floor": (admit(blocks="floor"), ex.AD_FLOOR),
    "plus one": (admit(blocks="plus one"), ex.AD_EXTRA_BLOCK),
    "running": (admit(count_running=False), ex.AD_RUNNING),
    "max batch": (admit(cap=False), ex.AD_MAX_BATCH),
    "blocks": (admit(count_blocks=False), ex.AD_BLOCKS),
    "skip": (admit(skip=True), ex.AD_SKIP),
}


@pytest.mark.parametrize("name", ADMIT_MISTAKES)
def test_admit_mistake_is_named(name):
    candidate, phrase = ADMIT_MISTAKES[name]
    assert_caught("admit", candidate, phrase)


def test_admit_messages_name_only_their_mistake():
    assert_each_message_names_only_its_mistake(ADMIT_MISTAKES, lambda c: check("admit", c, quiet=True))


def test_admit_returning_the_lengths_is_told_to_return_a_count():
    assert_caught("admit", admit(as_list=True), "should return how many requests join, an int")
