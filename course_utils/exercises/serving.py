"""Lesson 13's exercises: reading through a block table, the mask of a chunk against the cache, admission.

The solutions are the course's reference code (``course_utils.serving``). The expected answers come
from oracles written here another way: the gather slot by slot (block table[slot // size], offset
slot % size), the mask from slot positions compared one by one, admission by trying each request in
turn. Each known mistake is recomputed on the same inputs and named when the learner's output matches.
"""

import operator

import torch

from course_utils import serving
from course_utils.exercises import exercise
from course_utils.exercises.checking import Mistake, call, diagnose, expect_tensor, generator, randn

# Distinctive phrases, one per mistake (the tests look for them).
GB_NOT_PERMUTED = "the heads are not in front"
GB_VIEW_NOT_PERMUTE = "you reshaped where a permute was needed"
GB_POOL_ORDER = "you read the blocks in the pool's order"
GB_NOT_TRUNCATED = "you kept the unused slots of the last block"
GB_FIRST_BLOCKS = "you read the pool's first blocks"
GB_DTYPE = "your result is not in the pool's dtype"
GB_TUPLE_HINT = "gather_blocks returns one tensor, [H_kv, length, d]"

CM_CAUSAL_ONLY = "your mask has no columns for the cache"
CM_NO_CACHE = "the chunk cannot see the cache"
CM_NOT_CAUSAL = "every chunk token sees the whole chunk"
CM_SEES_NEXT = "each chunk token also sees the next one"
CM_MISSES_ITSELF = "a chunk token does not see itself"
CM_INVERTED = "your mask is inverted"
CM_NOT_SHIFTED = "your chunk tokens see only slots 0..i"
CM_UPPER = "you kept the upper triangle"

AD_FLOOR = "you rounded the blocks down"
AD_EXTRA_BLOCK = "you counted one block too many for a prompt that fills its blocks"
AD_RUNNING = "you left out the requests already running"
AD_MAX_BATCH = "you let the batch grow past max_batch"
AD_BLOCKS = "you did not count the free blocks"
AD_SKIP = "you let a later request pass one that does not fit"


# --------------------------------------------------------------------------- gather_blocks


def _gather_oracle(pool, table, length):
    size = pool.shape[1]
    return (
        torch.stack([pool[table[s // size], s % size] for s in range(length)], dim=1)
        if length
        else pool[:0, 0].permute(1, 0, 2)
    )


def _gather_cases():
    g = generator(13)
    return [
        ("a pool of 10 blocks of 4 slots, 2 heads, d = 3; table [7, 2, 5], 10 slots", randn(g, 10, 4, 2, 3), [7, 2, 5], 10),
        ("blocks of 1 slot, 3 heads, d = 2; table [4, 0, 3, 1], 4 slots", randn(g, 6, 1, 3, 2), [4, 0, 3, 1], 4),
        ("blocks of 16 slots, 4 heads, d = 16; table [2, 0], 17 slots", randn(g, 3, 16, 4, 16), [2, 0], 17),
        ("float64, blocks of 3 slots, table [1], 2 slots", randn(g, 2, 3, 2, 2, dtype=torch.float64), [1], 2),
    ]  # fmt: skip


def _gather_mistakes(pool, table, length, description):
    idx = torch.tensor(table)
    flat = pool[idx].reshape(-1, *pool.shape[2:])
    mistakes = [
        (f"{GB_VIEW_NOT_PERMUTE}: the slots come out [n, H_kv, d] and a reshape to [H_kv, n, d] mixes heads and "
         f"slots. Use .permute(1, 0, 2) (or .transpose(0, 1)) to move the head axis ({description}).",
         flat[:length].reshape(pool.shape[2], length, pool.shape[3])),
        (f"{GB_POOL_ORDER} (sorted block ids). The block table's order is the sequence's order: block table[0] holds "
         f"slots 0..block_size-1, whatever its id ({description}).",
         _gather_oracle(pool, sorted(table), length)),
        (f"{GB_FIRST_BLOCKS} (pool[:len(block_table)]) instead of the table's blocks: index the pool with the "
         f"table, pool[torch.tensor(block_table)] ({description}).",
         _gather_oracle(pool, list(range(len(table))), length)),
    ]  # fmt: skip
    return [(m, w) for m, w in mistakes if w.shape == (pool.shape[2], length, pool.shape[3])]


@exercise(
    "gather_blocks",
    solution=serving.gather_blocks,
    hints=[
        "pool[torch.tensor(block_table)] picks the sequence's blocks, in its order: [num_table_blocks, block_size, H_kv, d].",
        "Put the blocks one after another with .reshape(-1, H_kv, d): slot s of the sequence is row s. Keep the first "
        "`length` rows: the last block may be only part full.",
        "The cache holds [H_kv, n, d]: .permute(1, 0, 2) moves the heads in front.",
    ],
)
def check_gather_blocks(candidate):
    for description, pool, table, length in _gather_cases():
        got = call(candidate, pool, list(table), length)
        expected = _gather_oracle(pool, table, length)
        expect_tensor(got, what="gathered keys", tuple_hint=GB_TUPLE_HINT)
        if got.dtype != pool.dtype and got.is_floating_point():
            raise Mistake(f"{GB_DTYPE}: the pool is {pool.dtype}, yours is {got.dtype}. Index the pool itself, or make "
                          f"new tensors with dtype=pool.dtype (torch.zeros(..., dtype=pool.dtype)) and leave out "
                          f".float() ({description}).")  # fmt: skip
        heads, d = pool.shape[2], pool.shape[3]
        if tuple(got.shape) == (length, heads, d) and heads != length:
            raise Mistake(f"{GB_NOT_PERMUTED}: you returned [n, H_kv, d] = {tuple(got.shape)}; the cache holds "
                          f"[H_kv, n, d] = {tuple(expected.shape)}: .permute(1, 0, 2) ({description}).")  # fmt: skip
        if got.dim() == 3 and tuple(got.shape) == (heads, len(table) * pool.shape[1], d) and length % pool.shape[1]:
            raise Mistake(f"{GB_NOT_TRUNCATED}: you returned {got.shape[1]} slots, the sequence has {length}. The last "
                          f"block is only part full: keep the first `length` slots ({description}).")  # fmt: skip
        diagnose(got, expected, _gather_mistakes(pool, table, length, description), what="gathered keys",
                 context=description, atol=0, rtol=0)  # fmt: skip


# --------------------------------------------------------------------------- chunk_mask


def _chunk_oracle(num_cached, chunk_length, see=0, cache=True):
    rows = []
    for i in range(chunk_length):
        position = num_cached + i  # the slot of chunk token i
        rows.append(
            [
                (j < num_cached and cache) or (num_cached <= j <= position + see)
                for j in range(num_cached + chunk_length)
            ]
        )
    return torch.tensor(rows)


def _chunk_mistakes(num_cached, chunk_length, description):
    n = num_cached + chunk_length
    mistakes = [
        (f"{CM_NO_CACHE}: chunk token i must read every cached slot (columns 0..{num_cached - 1}) and the chunk up "
         f"to itself ({description}).", _chunk_oracle(num_cached, chunk_length, cache=False)),
        (f"{CM_NOT_CAUSAL}: chunk token i may read chunk tokens 0..i only, the later ones are its future "
         f"({description}).", torch.ones(chunk_length, n, dtype=torch.bool)),
        (f"{CM_SEES_NEXT}: token i sits at slot num_cached + i and reads slots 0..num_cached + i; "
         f"tril(diagonal=num_cached), not num_cached + 1 ({description}).", _chunk_oracle(num_cached, chunk_length, see=1)),
        (f"{CM_MISSES_ITSELF} (tril(diagonal=num_cached - 1)): token i reads its own slot num_cached + i too, as in "
         f"the causal mask's diagonal ({description}).", _chunk_oracle(num_cached, chunk_length, see=-1)),
        (f"{CM_INVERTED}: True means *may* read, as in the course's causal_mask ({description}).",
         ~_chunk_oracle(num_cached, chunk_length)),
        (f"{CM_NOT_SHIFTED} (tril() with diagonal 0, the causal mask of lesson 03 padded with columns): chunk token i "
         f"sits at slot num_cached + i and reads every cached slot and the chunk up to itself: "
         f"tril(diagonal=num_cached) ({description}).", torch.ones(chunk_length, n, dtype=torch.bool).tril()),
        (f"{CM_UPPER} (triu): a token reads the slots at or before its own, which lie below and left of the "
         f"diagonal: tril(diagonal=num_cached) ({description}).",
         torch.ones(chunk_length, n, dtype=torch.bool).triu(diagonal=num_cached)),
    ]  # fmt: skip
    return [(m, w.float()) for m, w in mistakes]


@exercise(
    "chunk_mask",
    solution=serving.chunk_mask,
    hints=[
        "The mask has a row per chunk token and a column per slot: [chunk_length, num_cached + chunk_length].",
        "Chunk token i sits at slot num_cached + i. It may read slot j when j <= num_cached + i: every cached slot, "
        "and the chunk up to itself.",
        "torch.ones(chunk_length, n, dtype=torch.bool).tril(diagonal=...) keeps j <= i + diagonal.",
    ],
)
def check_chunk_mask(candidate):
    for num_cached, chunk_length in [(5, 3), (0, 4), (9, 1), (2, 6), (16, 16)]:
        description = f"num_cached={num_cached}, chunk_length={chunk_length}"
        got = call(candidate, num_cached, chunk_length)
        expected = _chunk_oracle(num_cached, chunk_length)
        expect_tensor(got, what="mask")
        if tuple(got.shape) == (chunk_length, chunk_length) and num_cached:
            raise Mistake(f"{CM_CAUSAL_ONLY}: it is {tuple(got.shape)}, a causal mask of the chunk alone. The chunk "
                          f"reads the cache too: [chunk_length, num_cached + chunk_length] = {tuple(expected.shape)} "
                          f"({description}).")  # fmt: skip
        if got.dtype.is_floating_point and bool(((got != 0) & (got != 1)).any()):
            raise Mistake(f"the mask should hold True/False (or 1/0) where a token may/may not read; yours holds "
                          f"other values (an additive -inf mask?) ({description}). Return a bool tensor.")  # fmt: skip
        diagnose(got.float() if isinstance(got, torch.Tensor) else got, expected.float(),
                 _chunk_mistakes(num_cached, chunk_length, description), what="mask", context=description)  # fmt: skip


# --------------------------------------------------------------------------- admit


def _admit_oracle(lengths, running, free, size, max_batch, blocks=lambda n, s: -(-n // s), count_running=True,
                  cap=True, count_blocks=True, skip=False):  # fmt: skip
    admitted = 0
    for n in lengths:
        full = cap and (running if count_running else 0) + admitted >= max_batch
        short = count_blocks and blocks(n, size) > free
        if full or short:
            if skip and short and not full:
                continue
            break
        admitted, free = admitted + 1, free - blocks(n, size)
    return admitted


ADMIT_CASES = [
    # (waiting lengths, running, free blocks, block size, max batch): each tells a mistake apart
    ([8, 4, 5], 0, 4, 4, 8),  # exact multiples then a part-full block
    ([3, 9, 2, 2], 1, 3, 4, 8),  # the second does not fit, smaller ones behind it
    ([1, 1, 1, 1, 1], 6, 10, 16, 8),  # the batch is nearly full
    ([16, 16, 16], 0, 2, 16, 8),
    ([5, 5], 0, 1, 4, 1),
    ([30, 12, 7], 2, 5, 8, 4),
    ([2, 2, 2, 2, 2, 2], 2, 20, 4, 3),  # room for one more, plenty of blocks
    ([40, 3], 0, 3, 16, 8),  # a long prompt waits, with blocks for the short one
]


def _admit_mistakes(case):
    return [
        (f"{AD_FLOOR} (length // block_size): a prompt of 5 tokens in blocks of 4 needs 2 blocks, the second only "
         "part full. Use ceil: -(-length // block_size)", _admit_oracle(*case, blocks=lambda n, s: n // s)),
        (f"{AD_EXTRA_BLOCK} (length // block_size + 1): 8 tokens in blocks of 4 fill exactly 2. Use ceil: "
         "-(-length // block_size)", _admit_oracle(*case, blocks=lambda n, s: n // s + 1)),
        (f"{AD_RUNNING}: the batch already holds num_running requests, so only max_batch - num_running may join",
         _admit_oracle(*case, count_running=False)),
        (f"{AD_MAX_BATCH}: stop when num_running + admitted reaches max_batch", _admit_oracle(*case, cap=False)),
        (f"{AD_BLOCKS}: a request joins only if its prompt's blocks are free; subtract them from num_free_blocks for "
         "the next request", _admit_oracle(*case, count_blocks=False)),
        (f"{AD_SKIP}: first come, first served stops at the first request that does not fit (and returns a count "
         "from the front of the queue); letting smaller ones pass can starve a long prompt forever",
         _admit_oracle(*case, skip=True)),
    ]  # fmt: skip


@exercise(
    "admit",
    solution=serving.admit,
    hints=[
        "Walk the waiting lengths in order, counting admitted requests and the blocks still free.",
        "A request needs ceil(length / block_size) blocks: -(-length // block_size). Stop at the first one for which "
        "num_running + admitted == max_batch, or which needs more blocks than are free.",
        "Return how many joined (an int), not their lengths.",
    ],
)
def check_admit(candidate):
    # one count per case says little alone (two mistakes can give the same count), so a mistake is named
    # when the learner's counts equal its counts on every case
    answers = []
    for case in ADMIT_CASES:
        lengths, running, free, size, max_batch = case
        got = call(candidate, list(lengths), running, free, size, max_batch)
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        try:  # an int, or a numpy integer (a count made with numpy)
            count = None if isinstance(got, bool) else operator.index(got)
        except TypeError:
            count = None
        if count is None:
            raise Mistake(f"admit should return how many requests join, an int; got {got!r} ({_describe(case)}).")
        answers.append(count)
    expected = [_admit_oracle(*case) for case in ADMIT_CASES]
    if answers == expected:
        return
    wrong = next(i for i, (a, e) in enumerate(zip(answers, expected, strict=True)) if a != e)
    where = f"{_describe(ADMIT_CASES[wrong])}: {expected[wrong]} join, you said {answers[wrong]}"
    per_case = [_admit_mistakes(case) for case in ADMIT_CASES]
    for k, (message, _) in enumerate(per_case[0]):
        if [mistakes[k][1] for mistakes in per_case] == answers:
            raise Mistake(f"{message} ({where}).")
    raise Mistake(f"not the right count ({where}).")


def _describe(case):
    lengths, running, free, size, max_batch = case
    return (
        f"waiting_lengths={lengths}, num_running={running}, num_free_blocks={free}, block_size={size}, "
        f"max_batch={max_batch}"
    )
