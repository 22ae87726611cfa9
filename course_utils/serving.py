"""Serving attention (lesson 13): a paged KV cache, continuous batching, chunked prefill, prefix caching.

Public API (tests outside the course rely on these names):

    from course_utils.serving import PagedKVCache, generate_batch
    cache = PagedKVCache(num_layers=3, num_blocks=64, block_size=16, num_kv_heads=4, head_dim=16)
    cache.allocate("a"); cache.append("a", 0, keys, values)   # keys/values [H_kv, t, d], before RoPE
    keys, values = cache.gather("a", 0)                        # [H_kv, n, d]
    outputs = generate_batch(model, prompts, max_new_tokens=20, scheduler="continuous")

- ``PagedKVCache``: keys and values in fixed-size blocks of one preallocated pool per layer
  ([num_blocks, block_size, H_kv, d]); each sequence owns a block table (the same for every
  layer), blocks are taken on demand and given back when a sequence ends (vLLM's PagedAttention:
  Kwon et al. 2023, "Efficient Memory Management for Large Language Model Serving with
  PagedAttention"). With prefix caching, full blocks are shared between sequences that start
  with the same tokens, with reference counts.
- ``gather_blocks``, ``chunk_mask``, ``admit``: the lesson's exercises (read through a block
  table; the mask of a chunk against the cache; continuous batching's admission rule).
- ``paged_forward``: one forward of lesson 10's model over the new tokens of many sequences
  at once, flattened into one matrix for the weights; attention reads every sequence's
  slots through its block table, padded to the longest, in one call.
- ``serve``: the scheduler loop (static or continuous batching, chunked prefill, prefix
  caching, preemption), with what it measured; ``generate_batch``: its outputs alone.

Like lesson 10's ``LayerCache``, the pool keeps keys *before* RoPE and rotates them by their
slot when attention reads them; a sequence's slots are its positions, so a shared prefix sits
at the same positions in every sequence that shares it, and its keys are the same.
"""

import time
from collections import deque
from dataclasses import dataclass, field

import torch

from course_utils import _validate
from course_utils.attention import scaled_dot_product_attention, split_heads
from course_utils.modern import apply_rope, repeat_kv

__all__ = [
    "PagedKVCache",
    "OutOfBlocks",
    "gather_blocks",
    "chunk_mask",
    "admit",
    "paged_forward",
    "serve",
    "ServeResult",
    "generate_batch",
    "dense_cache_slots",
]


class OutOfBlocks(RuntimeError):
    """The pool has no free block left for a sequence (the scheduler preempts or refuses a request)."""


# ---------------------------------------------------------------- the exercises


def gather_blocks(pool, block_table, length):
    """The first ``length`` slots of one sequence, read through its block table (exercise 1).

    pool: [num_blocks, block_size, H_kv, d]; block_table: the sequence's block ids, in order.
    Returns [H_kv, length, d], as a dense cache holds them.
    """
    _validate.gather_inputs(pool, block_table, length)
    blocks = pool[torch.tensor(block_table, dtype=torch.long, device=pool.device)]  # [b, block_size, H, d]
    slots = blocks.reshape(-1, *pool.shape[2:])[:length]  # the blocks one after another: [length, H, d]
    return slots.permute(1, 0, 2)  # heads first: [H, length, d]


def chunk_mask(num_cached, chunk_length):
    """Which slots the tokens of a chunk may read (exercise 2): [chunk_length, num_cached + chunk_length], True = may.

    Chunk token i sits at slot num_cached + i: it reads every cached slot and the chunk's tokens 0..i.
    """
    _validate.chunk_sizes(num_cached, chunk_length)
    n = num_cached + chunk_length
    return torch.ones(chunk_length, n, dtype=torch.bool).tril(diagonal=num_cached)


def admit(waiting_lengths, num_running, num_free_blocks, block_size, max_batch):
    """How many requests from the front of the queue join the batch now (exercise 3).

    First come, first served: a request joins while the batch has room (max_batch) and the pool
    has the blocks its prompt fills, ceil(length / block_size); the first that does not fit
    stops the queue (letting later, smaller ones pass could starve it forever).
    """
    _validate.admit_inputs(waiting_lengths, num_running, num_free_blocks, block_size, max_batch)
    admitted, free = 0, num_free_blocks
    for length in waiting_lengths:
        needed = -(-length // block_size)  # ceil: a part-filled block is a whole block
        if num_running + admitted >= max_batch or needed > free:
            break
        admitted, free = admitted + 1, free - needed
    return admitted


# ---------------------------------------------------------------- the paged KV cache


class PagedKVCache:
    """Keys (before RoPE) and values of many sequences in blocks of ``block_size`` slots.

    One pool per layer, [num_blocks, block_size, H_kv, d], allocated once. A sequence's block
    table lists its blocks in order; the same table serves every layer. ``register_tokens``
    tells the cache which tokens a sequence's slots hold, so its full blocks can be found by
    later sequences with the same prefix (``allocate(seq_id, prompt)``).
    """

    def __init__(self, num_layers, num_blocks, block_size, num_kv_heads, head_dim, dtype=torch.float32):
        sizes = {
            name: _validate.positive_int(value, name)
            for name, value in (
                ("num_layers", num_layers),
                ("num_blocks", num_blocks),
                ("block_size", block_size),
                ("num_kv_heads", num_kv_heads),
                ("head_dim", head_dim),
            )
        }
        self.num_layers, self.num_blocks, self.block_size = num_layers, num_blocks, block_size
        shape = (num_blocks, block_size, sizes["num_kv_heads"], sizes["head_dim"])
        self.keys = [torch.zeros(shape, dtype=dtype) for _ in range(num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype) for _ in range(num_layers)]
        self._free = deque(range(num_blocks))  # oldest freed first: cached blocks stay findable longest
        self._refs = [0] * num_blocks  # how many sequences' tables hold each block
        self._tables, self._lengths, self._tokens = {}, {}, {}
        self._key_of, self._block_of = {}, {}  # full cached blocks <-> the prefix that filled them
        self.reused_tokens = 0  # prompt tokens found in the cache instead of computed

    @property
    def num_free_blocks(self):
        return len(self._free)

    def _sequence(self, seq_id):
        if seq_id not in self._tables:
            known = sorted(map(str, self._tables)) or "none"
            raise KeyError(f"unknown seq_id {seq_id!r}: allocate(seq_id) it first (sequences now: {known})")
        return self._tables[seq_id]

    def block_table(self, seq_id):
        return list(self._sequence(seq_id))

    def length(self, seq_id, layer=-1):
        """Slots written for seq_id in ``layer`` (by default the last layer: the tokens complete in every layer)."""
        self._sequence(seq_id)
        return self._lengths[seq_id][_validate.cache_layer(self, layer)]

    def _take_block(self, seq_id):
        if not self._free:
            raise OutOfBlocks(
                f"the pool's {self.num_blocks} blocks are all in use: no block left for sequence {seq_id!r}; "
                f"free a finished sequence, or make the pool larger (num_blocks)"
            )
        block = self._free.popleft()
        key = self._key_of.pop(block, None)  # a reused block no longer holds its old prefix
        if key is not None:
            del self._block_of[key]
        self._refs[block] = 1
        return block

    def allocate(self, seq_id, prompt=None):
        """Start a sequence; return how many of its tokens are already cached (0 without a prompt).

        With a prompt, every full block that an earlier sequence filled with the same tokens
        from the start is shared (its reference count goes up): a block's keys depend on every
        token before it, so it is looked up by its own tokens chained to its prefix's key. At
        least one token is left to compute, since its logits are what the next step needs.
        """
        if seq_id in self._tables:
            raise ValueError(f"seq_id {seq_id!r} is already allocated: free(seq_id) it first, or pick another id")
        table, key = [], None
        if prompt is not None:
            prompt = _validate.token_list(prompt, "prompt")
            # blocks that end before the prompt's last token: that one is always computed
            for start in range(0, len(prompt) - self.block_size, self.block_size):
                key = (key, tuple(prompt[start : start + self.block_size]))
                block = self._block_of.get(key)
                if block is None:
                    break
                if self._refs[block] == 0:
                    self._free.remove(block)
                self._refs[block] += 1
                table.append(block)
        cached = len(table) * self.block_size
        self._tables[seq_id], self._lengths[seq_id] = table, [cached] * self.num_layers
        self._tokens[seq_id] = list(prompt[:cached]) if prompt is not None else []
        self.reused_tokens += cached
        return cached

    def reserve(self, seq_id, new_tokens):
        """Take the blocks seq_id needs to hold ``new_tokens`` more slots (``OutOfBlocks`` if the pool has none)."""
        table = self._sequence(seq_id)
        for _ in range(self.blocks_needed(seq_id, new_tokens)):
            table.append(self._take_block(seq_id))

    def slots(self, seq_id, start, stop):
        """Where slots start..stop-1 of seq_id live, as indices into a pool laid flat ([num_blocks * block_size])."""
        table = torch.tensor(self._sequence(seq_id), dtype=torch.long)
        positions = torch.arange(start, stop)
        return table[positions // self.block_size] * self.block_size + positions % self.block_size

    def append(self, seq_id, layer, keys, values):
        """Write t new slots of one layer: keys and values [H_kv, t, d]; blocks are taken as they are needed."""
        self._sequence(seq_id)
        _validate.paged_append(self, layer, keys, values)
        start, t = self._lengths[seq_id][layer], keys.shape[1]
        self.reserve(seq_id, start + t - self._lengths[seq_id][0])  # layer 0 may have taken them already
        self.write(layer, self.slots(seq_id, start, start + t), keys, values)
        self._lengths[seq_id][layer] = start + t

    def write(self, layer, slot_ids, keys, values):
        """Put keys and values [H_kv, N, d] at slot_ids [N] (from ``slots``) of one layer's pool, in one copy."""
        self.keys[layer].view(-1, *self.keys[layer].shape[2:])[slot_ids] = keys.transpose(0, 1)
        self.values[layer].view(-1, *self.values[layer].shape[2:])[slot_ids] = values.transpose(0, 1)

    def advance(self, seq_id, new_tokens):
        """Count ``new_tokens`` more slots as written in every layer (after ``write`` has filled them)."""
        self._lengths[seq_id] = [n + new_tokens for n in self._lengths[seq_id]]

    def gather(self, seq_id, layer):
        """Every slot of seq_id in ``layer``: (keys, values), each [H_kv, n, d]."""
        table = self._sequence(seq_id)
        layer = _validate.cache_layer(self, layer)
        n = self._lengths[seq_id][layer]
        return gather_blocks(self.keys[layer], table, n), gather_blocks(self.values[layer], table, n)

    def register_tokens(self, seq_id, token_ids):
        """Say which tokens the newest slots hold; blocks they fill become findable by ``allocate(.., prompt)``."""
        table, key = self._sequence(seq_id), None
        tokens, written = self._tokens[seq_id], min(self._lengths[seq_id])  # slots complete in every layer
        token_ids = _validate.token_list(token_ids, "token_ids")
        if len(tokens) + len(token_ids) > written:
            raise ValueError(
                f"sequence {seq_id!r} has {written} slots written in every layer and {len(tokens)} of them registered: "
                f"register at most {written - len(tokens)} more tokens (append their keys and values first)"
            )
        tokens.extend(token_ids)
        for index in range(len(tokens) // self.block_size):
            key = (key, tuple(tokens[index * self.block_size : (index + 1) * self.block_size]))
            block = table[index]
            if self._key_of.get(block) is None and key not in self._block_of:
                self._key_of[block], self._block_of[key] = key, block

    def blocks_needed(self, seq_id, new_tokens):
        """Blocks seq_id must take to hold ``new_tokens`` more slots."""
        table = self._sequence(seq_id)
        total = self._lengths[seq_id][0] + new_tokens
        return max(0, -(-total // self.block_size) - len(table))

    def free(self, seq_id):
        """End a sequence: each of its blocks loses one reference, and goes back to the pool at none."""
        for block in self._sequence(seq_id):
            self._refs[block] -= 1
            if self._refs[block] == 0:
                self._free.append(block)
        del self._tables[seq_id], self._lengths[seq_id], self._tokens[seq_id]

    def used_slots(self):
        """Slots of the blocks now held by some sequence, and tokens written in them (the last layer's)."""
        held = sum(1 for refs in self._refs if refs > 0)
        return held * self.block_size, sum(lengths[-1] for lengths in self._lengths.values())


def dense_cache_slots(lengths, max_length):
    """Slots a dense [B, max_length] cache reserves for sequences of these lengths."""
    return len(lengths) * max_length


# ---------------------------------------------------------------- the model, reading through the cache


def _read_mask(num_cached, chunk_lengths):
    """[B, 1, t_max, n_max]: each sequence's chunk_mask, padded (padding rows may read the sequence's own slots)."""
    t_max, n_max = max(chunk_lengths), max(c + t for c, t in zip(num_cached, chunk_lengths, strict=True))
    mask = torch.zeros(len(chunk_lengths), 1, t_max, n_max, dtype=torch.bool)
    for b, (cached, t) in enumerate(zip(num_cached, chunk_lengths, strict=True)):
        mask[b, 0, :t, : cached + t] = chunk_mask(cached, t)
        mask[b, 0, t:, : cached + t] = True  # rows of no token: any row without -inf everywhere; dropped after
    return mask


@torch.no_grad()
def paged_forward(model, cache, batch):
    """One forward of lesson 10's model over several sequences' new tokens: [len(batch), vocab].

    batch: (seq_id, new token ids) pairs; each sequence's earlier tokens are in the cache. The
    new tokens of all sequences are stacked into one [N, d_model] matrix, so every weight is
    read once for all of them. Attention reads each sequence's slots through its block table,
    padded to the longest so that one call serves the batch, with each sequence's ``chunk_mask``.
    Returns the logits after each sequence's last new token.
    """
    seq_ids, lengths = [seq_id for seq_id, _ in batch], [len(tokens) for _, tokens in batch]
    cached = [cache.length(seq_id, 0) for seq_id in seq_ids]
    for seq_id, t in zip(seq_ids, lengths, strict=True):
        cache.reserve(seq_id, t)
    # where the new tokens go, and where each sequence's slots are read from: the same in every layer
    write_ids = torch.cat([cache.slots(s, c, c + t) for s, c, t in zip(seq_ids, cached, lengths, strict=True)])
    read_ids = torch.nn.utils.rnn.pad_sequence(
        [cache.slots(s, 0, c + t) for s, c, t in zip(seq_ids, cached, lengths, strict=True)], batch_first=True
    )  # [B, n_max], padded with slot 0 (masked out)
    positions = torch.cat([torch.arange(c, c + t) for c, t in zip(cached, lengths, strict=True)])  # RoPE: the slots
    mask = _read_mask(cached, lengths)
    is_token = torch.arange(max(lengths))[None] < torch.tensor(lengths)[:, None]  # [B, t_max]
    x = model.token_embedding(torch.tensor([t for _, tokens in batch for t in tokens], dtype=torch.long))
    for layer, block in enumerate(model.blocks):
        attention, h = block.attention, block.norm1(x)
        heads, kv_heads = attention.num_heads, attention.num_kv_heads
        query = split_heads(attention.query_linear(h)[None], heads)[0]  # [H, N, d]
        cache.write(layer, write_ids, split_heads(attention.key_linear(h)[None], kv_heads)[0],
                    split_heads(attention.value_linear(h)[None], kv_heads)[0])  # fmt: skip
        keys = cache.keys[layer].view(-1, kv_heads, query.shape[-1])[read_ids].transpose(1, 2)  # [B, H_kv, n_max, d]
        values = cache.values[layer].view(-1, kv_heads, query.shape[-1])[read_ids].transpose(1, 2)
        keys = apply_rope(keys, torch.arange(keys.shape[2]), attention.rope_base)  # slot = position
        query = apply_rope(query, positions, attention.rope_base)
        padded = torch.zeros(len(batch), max(lengths), heads, query.shape[-1])
        padded[is_token] = query.transpose(0, 1)  # [B, t_max, H, d]
        n_rep = heads // kv_heads
        context, _ = scaled_dot_product_attention(
            padded.transpose(1, 2), repeat_kv(keys, n_rep), repeat_kv(values, n_rep), mask
        )  # [B, H, t_max, d]
        x = x + attention.output_linear(context.transpose(1, 2)[is_token].flatten(1))  # the tokens' rows: [N, H * d]
        x = x + block.feed_forward(block.norm2(x))
    for seq_id, t in zip(seq_ids, lengths, strict=True):
        cache.advance(seq_id, t)
    last = torch.tensor(lengths).cumsum(0) - 1
    return model.output_linear(model.final_norm(x[last]))


# ---------------------------------------------------------------- the scheduler


@dataclass
class _Request:
    index: int
    prompt: list
    max_new_tokens: int
    tokens: list = field(default_factory=list)  # prompt + what it generated so far
    computed: int = 0  # tokens whose keys and values are in the cache
    first_token_s: float = None
    first_token_step: int = None
    finished_s: float = None


@dataclass
class ServeResult:
    """What ``serve`` produced and measured (times in seconds from the start; all requests arrive at 0)."""

    outputs: list  # per request: prompt + new tokens
    steps: int  # forward passes
    tokens_per_step: list  # tokens each forward pass computed
    prefill_tokens: int  # prompt tokens computed (not found in the prefix cache)
    reused_tokens: int  # prompt tokens found in the prefix cache
    preempted: list  # (step, request index) of each preemption
    peak_blocks: int  # most blocks held at once
    time_to_first_token: list
    first_token_steps: list  # the forward pass (counted from 1) that gave each request its first token
    finish_times: list
    total_s: float

    @property
    def new_tokens(self):
        return sum(len(out) for out in self.outputs) - sum(self._prompt_lengths)

    _prompt_lengths: list = field(default_factory=list, repr=False)

    @property
    def tokens_per_second(self):
        return self.new_tokens / self.total_s


def _step_work(running, prefill_chunk):
    """What each running request computes in this step: decodes first (one token each), then prefill chunks
    within the token budget ``prefill_chunk`` (None: whole prompts)."""
    work = [(r, r.tokens[r.computed :]) for r in running if len(r.tokens) - r.computed == 1]
    budget = None if prefill_chunk is None else max(prefill_chunk - len(work), 0)
    for r in running:
        left = len(r.tokens) - r.computed
        if left > 1:
            take = left if budget is None else min(left, budget)
            if take:
                work.append((r, r.tokens[r.computed : r.computed + take]))
                budget = None if budget is None else budget - take
    return work


@torch.no_grad()
def serve(
    model,
    prompts,
    max_new_tokens,
    scheduler="continuous",
    block_size=16,
    max_batch=8,
    num_blocks=None,
    prefill_chunk=None,
    prefix_caching=False,
):
    """Serve every prompt greedily through one ``PagedKVCache``; a ``ServeResult``.

    scheduler="static": a batch of up to max_batch requests starts together and the next waits
    until all of them are done. "continuous": every step, finished requests leave and waiting
    ones join (``admit``). prefill_chunk: the most tokens one step computes (prompts are cut
    into chunks that share steps with other requests' decoding; at least max_batch, since every running
    request decodes its token within the budget, or at least the number of prompts if fewer); None: a
    prompt in one step.
    num_blocks: the pool's size (None: enough for max_batch requests of the model's context).
    When the pool runs out mid-step, the request admitted last is preempted: its blocks are
    freed and it goes back to the front of the queue, to be recomputed (its text so far as prompt).
    """
    prompts, max_new = _validate.serve_inputs(model, prompts, max_new_tokens, scheduler, max_batch, prefill_chunk)
    block_size = _validate.positive_int(block_size, "block_size")
    attention = model.blocks[0].attention
    if num_blocks is None:
        num_blocks = max_batch * -(-model.context // block_size)
    cache = PagedKVCache(
        len(model.blocks),
        num_blocks,
        block_size,
        attention.num_kv_heads,
        attention.query_linear.out_features // attention.num_heads,
    )
    _validate.requests_fit(prompts, max_new, cache)
    model.eval()
    requests = [_Request(i, list(p), n, list(p)) for i, (p, n) in enumerate(zip(prompts, max_new, strict=True))]
    waiting, running = deque(requests), []
    result = dict(steps=0, tokens_per_step=[], prefill_tokens=0, preempted=[], peak_blocks=0)
    start = time.perf_counter()
    while waiting or running:
        if scheduler == "continuous" or not running:
            lengths = [len(r.tokens) for r in waiting]
            count = admit(lengths, len(running), cache.num_free_blocks, block_size, max_batch) if lengths else 0
            if count == 0 and not running:
                count = 1  # an empty pool fits any one request (requests_fit): never wait for nothing
            for _ in range(count):
                r = waiting.popleft()
                r.computed = cache.allocate(r.index, r.tokens if prefix_caching else None)
                running.append(r)
        work = _step_work(running, prefill_chunk)
        while sum(cache.blocks_needed(r.index, len(t)) for r, t in work) > cache.num_free_blocks:
            victim = running.pop()  # the request admitted last gives its blocks back
            cache.free(victim.index)
            victim.computed = 0
            waiting.appendleft(victim)
            result["preempted"].append((result["steps"], victim.index))
            work = _step_work(running, prefill_chunk)
        logits = paged_forward(model, cache, [(r.index, t) for r, t in work])
        result["steps"] += 1
        result["tokens_per_step"].append(sum(len(t) for _, t in work))
        result["peak_blocks"] = max(result["peak_blocks"], num_blocks - cache.num_free_blocks)
        now = time.perf_counter() - start
        for (r, new), row in zip(work, logits, strict=True):
            if r.computed < len(r.prompt):
                result["prefill_tokens"] += min(len(new), len(r.prompt) - r.computed)
            r.computed += len(new)
            if prefix_caching:
                cache.register_tokens(r.index, new)
            if r.computed < len(r.tokens):
                continue  # a chunk of the prompt: no token yet
            r.tokens.append(int(row.argmax()))
            if r.first_token_s is None:
                r.first_token_s, r.first_token_step = now, result["steps"]
            if len(r.tokens) == len(r.prompt) + r.max_new_tokens:
                r.finished_s = now
                cache.free(r.index)
                running.remove(r)
    return ServeResult(
        outputs=[r.tokens for r in requests],
        reused_tokens=cache.reused_tokens,
        time_to_first_token=[r.first_token_s for r in requests],
        first_token_steps=[r.first_token_step for r in requests],
        finish_times=[r.finished_s for r in requests],
        total_s=time.perf_counter() - start,
        _prompt_lengths=[len(r.prompt) for r in requests],
        **result,
    )


def generate_batch(model, prompts, max_new_tokens, scheduler="continuous", block_size=16, max_batch=8):
    """Greedy continuations of many prompts (lists of token ids) served together: one list per prompt.

    Each is the prompt followed by its new tokens, as ``language_model.generate`` gives for that
    prompt alone. max_new_tokens: one int for all, or one per prompt.
    """
    return serve(model, prompts, max_new_tokens, scheduler, block_size, max_batch).outputs
