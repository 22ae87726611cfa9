"""course_utils.serving: the paged cache against a dense one, the schedulers against decoding alone, bad input."""

import numpy as np
import pytest
import torch

from course_utils import serving
from course_utils.language_model import LanguageModel, LayerCache, generate, load_trained_model
from course_utils.serving import OutOfBlocks, PagedKVCache, generate_batch


@pytest.fixture(scope="module")
def trained():
    return load_trained_model(0)[0]


def _prompts(model, lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, model.vocab_size, (n,), generator=g).tolist() for n in lengths]


def test_append_then_gather_is_the_concatenation_of_what_was_written():
    g = torch.Generator().manual_seed(0)
    cache = PagedKVCache(num_layers=2, num_blocks=12, block_size=3, num_kv_heads=2, head_dim=4)
    written = {"a": [], "b": []}
    for seq in written:
        cache.allocate(seq)
    for t in (4, 1, 5, 2):  # two sequences growing in turns, so their blocks interleave in the pool
        for seq in written:
            k, v = torch.randn(2, 2, t, 4, generator=g)
            for layer in range(2):
                cache.append(seq, layer, k + layer, v - layer)
            written[seq].append((k, v))
    for seq, parts in written.items():
        for layer in range(2):
            keys, values = cache.gather(seq, layer)
            assert torch.equal(keys, torch.cat([k for k, _ in parts], dim=1) + layer)
            assert torch.equal(values, torch.cat([v for _, v in parts], dim=1) - layer)
    assert len(cache.block_table("a")) == 4 and cache.num_free_blocks == 12 - 8  # 12 slots each: 4 blocks of 3
    assert set(cache.block_table("a")).isdisjoint(cache.block_table("b"))
    cache.free("a")
    assert cache.num_free_blocks == 8
    with pytest.raises(KeyError, match="unknown seq_id 'a'"):
        cache.gather("a", 0)


def test_a_full_pool_says_so_and_names_the_sequence():
    cache = PagedKVCache(1, 2, 2, 1, 2)
    cache.allocate(7)
    with pytest.raises(OutOfBlocks, match="no block left for sequence 7.*num_blocks"):
        cache.append(7, 0, torch.zeros(1, 5, 2), torch.zeros(1, 5, 2))


@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_paged_decoding_gives_the_dense_caches_logits(trained, block_size):
    prompts = _prompts(trained, [3, 17, 40, 9])  # ragged
    cache = PagedKVCache(len(trained.blocks), 128, block_size, 4, 16)
    dense = [[LayerCache() for _ in trained.blocks] for _ in prompts]
    batch = [(i, p) for i, p in enumerate(prompts)]
    for cache_id in range(len(prompts)):
        cache.allocate(cache_id)
    for _ in range(6):
        paged = serving.paged_forward(trained, cache, batch)
        with torch.no_grad():
            alone = torch.cat([trained(torch.tensor([t]), dense[i])[:, -1] for i, t in batch])
        assert (paged - alone).abs().max() <= 1e-5
        batch = [(i, [int(row.argmax())]) for (i, _), row in zip(batch, alone, strict=True)]
        assert [t for _, t in batch] == [[int(row.argmax())] for row in paged]


@pytest.mark.parametrize("scheduler", ["continuous", "static"])
def test_generate_batch_equals_decoding_each_prompt_alone(trained, scheduler):
    prompts = _prompts(trained, [5, 30, 12, 60, 2, 20], seed=1)
    counts = [9, 3, 20, 6, 12, 1]
    outputs = generate_batch(trained, prompts, counts, scheduler=scheduler, block_size=4, max_batch=3)
    for prompt, n, out in zip(prompts, counts, outputs, strict=True):
        assert out == generate(trained, torch.tensor([prompt]), n)[0].tolist()


def test_continuous_batching_takes_fewer_steps_than_static(trained):
    prompts = _prompts(trained, [4] * 8, seed=2)
    counts = [2, 30, 2, 30, 2, 30, 2, 30]
    static = serving.serve(trained, prompts, counts, "static", max_batch=2)
    continuous = serving.serve(trained, prompts, counts, "continuous", max_batch=2)
    assert static.outputs == continuous.outputs
    # static: 4 batches of (2, 30) tokens, 30 steps each; continuous refills the short request's slot
    assert static.steps == 4 * 30 and continuous.steps < static.steps
    # static: the second group's prefill waits for the first group's 30th pass; continuous: a seat frees after pass 2
    assert static.first_token_steps[:4] == [1, 1, 31, 31]
    assert continuous.first_token_steps[:3] == [1, 1, 3]


def test_chunked_prefill_and_prefix_caching_keep_the_outputs(trained):
    system = _prompts(trained, [40], seed=3)[0]
    prompts = [system + tail for tail in _prompts(trained, [3, 7, 12, 5], seed=4)]
    plain = serving.serve(trained, prompts, 5)
    chunked = serving.serve(trained, prompts, 5, prefill_chunk=8, max_batch=2)
    cached = serving.serve(trained, prompts, 5, prefix_caching=True, block_size=8, max_batch=1)
    assert plain.outputs == chunked.outputs == cached.outputs
    assert max(chunked.tokens_per_step) == 8 < max(plain.tokens_per_step)
    # one request at a time: the first computes its prompt, the other three find the 5 full blocks of the prefix
    assert cached.reused_tokens == 3 * 40 and cached.prefill_tokens == sum(map(len, prompts)) - 120


def test_shared_blocks_are_counted_and_outlive_the_first_owner():
    cache = PagedKVCache(1, 6, 2, 1, 1)
    cache.allocate("a")
    cache.append("a", 0, torch.arange(5.0).view(1, 5, 1), torch.zeros(1, 5, 1))
    cache.register_tokens("a", [1, 2, 3, 4, 5])
    assert cache.allocate("b", [1, 2, 3, 4, 9]) == 4  # two full blocks shared
    assert cache.block_table("b") == cache.block_table("a")[:2]
    cache.free("a")
    assert cache.num_free_blocks == 6 - 2  # a's third block is free, the shared two are still b's
    assert cache.gather("b", 0)[0].flatten().tolist() == [0.0, 1.0, 2.0, 3.0]
    assert cache.allocate("c", [1, 2, 3, 4]) == 2  # at least one token is left to compute


def test_a_small_pool_preempts_and_still_gives_every_output(trained):
    prompts = _prompts(trained, [30, 30, 30], seed=5)
    result = serving.serve(trained, prompts, 30, block_size=4, num_blocks=20, max_batch=3)
    assert result.preempted, "20 blocks of 4 cannot hold three sequences of 60 tokens: someone is preempted"
    assert result.peak_blocks <= 20
    assert result.outputs == [generate(trained, torch.tensor([p]), 30)[0].tolist() for p in prompts]


def test_bad_input_gets_a_clear_error(trained):
    with pytest.raises(ValueError, match="block_size must be a positive int, got 0"):
        PagedKVCache(1, 4, 0, 1, 2)
    with pytest.raises(ValueError, match="longer than the model's context of 128"):
        generate_batch(trained, [[1] * 120], 10)
    with pytest.raises(ValueError, match="request 0 needs 8 blocks.*refused"):
        serving.serve(trained, [[1] * 20], 10, block_size=4, num_blocks=6)
    with pytest.raises(ValueError, match='scheduler must be "continuous" or "static"'):
        generate_batch(trained, [[1]], 1, scheduler="fifo")
    with pytest.raises(ValueError, match="one int, or one each"):
        generate_batch(trained, [[1], [2]], [3])
    with pytest.raises(ValueError, match="tolist"):
        generate_batch(trained, [torch.tensor([1, 2])], 1)
    cache = PagedKVCache(1, 4, 2, 2, 3)
    cache.allocate("x")
    with pytest.raises(ValueError, match=r"keys must be \[H_kv, t, d\] = \[2, t, 3\]"):
        cache.append("x", 0, torch.zeros(3, 1, 2), torch.zeros(3, 1, 2))
    with pytest.raises(ValueError, match="already allocated"):
        cache.allocate("x")
    for layer in (1, -2, "0"):
        with pytest.raises(ValueError, match="layer must be an int from 0 to 0"):
            cache.gather("x", layer)
        with pytest.raises(ValueError, match="layer must be an int from 0 to 0"):
            cache.length("x", layer)
    with pytest.raises(TypeError, match=r"the cache torch.float32: convert them with \.to\(torch.float32\)"):
        cache.append("x", 0, torch.zeros(2, 1, 3, dtype=torch.float64), torch.zeros(2, 1, 3, dtype=torch.float64))
    assert cache.block_table("x") == []  # the refused append took no block
    with pytest.raises(ValueError, match="token ids as ints"):
        cache.allocate("y", [1.7, 2.2])
    with pytest.raises(ValueError, match="must be at least 8, the requests that can run at once"):
        serving.serve(trained, [[5]] * 8, 3, prefill_chunk=2)
    assert serving.serve(trained, [[1, 2, 3]], 3, prefill_chunk=1).tokens_per_step == [1, 1, 1, 1, 1]
    assert cache.length("x", np.int64(0)) == 0 and cache.gather("x", torch.tensor(0))[0].shape == (2, 0, 3)
    with pytest.raises(ValueError, match="one int, or a list of one int per prompt"):
        generate_batch(trained, [[1], [2]], torch.tensor([2, 3]))
    with pytest.raises(ValueError, match=r"prompt 1 must hold token ids as ints .*found 2.5"):
        generate_batch(trained, [[1], [2.5]], 1)
    with pytest.raises(ValueError, match="prompt 0 must hold token ids from 0 to"):
        generate_batch(trained, [[1, trained.vocab_size]], 1)


def test_registering_more_tokens_than_were_written_is_refused():
    cache = PagedKVCache(1, 4, 4, 1, 2)
    cache.allocate("a")
    cache.append("a", 0, torch.ones(1, 2, 2), torch.ones(1, 2, 2))
    with pytest.raises(ValueError, match="2 slots written .* register at most 2 more"):
        cache.register_tokens("a", [1, 2, 3, 4])
    cache.register_tokens("a", [1, 2])
    assert cache.allocate("b", [1, 2, 3, 4, 5]) == 0  # no full block was published


def test_numpy_token_ids_are_served_and_come_back_as_ints(trained):
    prompt = _prompts(trained, [6], seed=6)[0]
    served = generate_batch(trained, [np.array(prompt).tolist(), list(np.array(prompt))], 4)
    assert served[0] == served[1] == generate(trained, torch.tensor([prompt]), 4)[0].tolist()
    assert all(type(t) is int for t in served[1])


def test_exercise_references_on_small_cases():
    pool = torch.arange(4 * 2 * 1 * 1.0).view(4, 2, 1, 1)  # slot value = 2 * block + offset
    assert serving.gather_blocks(pool, [3, 0], 3).flatten().tolist() == [6.0, 7.0, 0.0]
    assert serving.chunk_mask(2, 2).tolist() == [[True, True, True, False], [True, True, True, True]]
    assert serving.admit([4, 5, 1], num_running=0, num_free_blocks=3, block_size=4, max_batch=8) == 2
    assert serving.admit([4, 5, 1], num_running=7, num_free_blocks=9, block_size=4, max_batch=8) == 1
    assert serving.dense_cache_slots([3, 5], 128) == 256


def test_a_model_with_grouped_query_attention_serves_too():
    torch.manual_seed(0)
    model = LanguageModel(50, d_model=32, num_heads=4, num_kv_heads=2, num_layers=2, context=64).eval()
    prompts = _prompts(model, [7, 3, 11], seed=6)
    outputs = generate_batch(model, prompts, 6, block_size=2)
    assert outputs == [generate(model, torch.tensor([p]), 6)[0].tolist() for p in prompts]
