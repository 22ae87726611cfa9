"""Lesson 10 checkers: the solutions pass, each planted mistake is named by its own message."""

import pytest
import torch
import torch.nn.functional as F

from course_utils import language_model as lm
from course_utils.exercises import check, checking, solution
from course_utils.exercises import language_model as ex
from course_utils.language_model import LayerCache, filter_logits
from tests.exercises.asserts import assert_caught, assert_each_message_names_only_its_mistake, assert_passes

IDS = ["next_token_loss", "decoder_block", "filter_logits", "sample_next_token", "decode_with_cache"]


@pytest.mark.parametrize("exercise_id", IDS)
def test_stub_is_not_attempted(exercise_id):
    def stub(*args, **kwargs):
        raise NotImplementedError

    assert check(exercise_id, stub, quiet=True).status == "not attempted"


@pytest.mark.parametrize("exercise_id", IDS)
def test_reference_passes(exercise_id):
    assert_passes(exercise_id, solution(exercise_id))


# --------------------------------------------------------------------------- next_token_loss


def _flat(logits, targets, reduction="mean"):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction=reduction)


def _per_token(logits, tokens):
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")  # [B, T-1]


LOSS_MISTAKES = {
    "no shift": (lambda logits, tokens: _flat(logits, tokens), ex.LOSS_NO_SHIFT),
    "wrong way": (lambda logits, tokens: _flat(logits[:, 1:], tokens[:, :-1]), ex.LOSS_WRONG_WAY),
    "both shifted (from 1)": (lambda logits, tokens: _flat(logits[:, 1:], tokens[:, 1:]), ex.LOSS_BOTH_SHIFTED),
    "both shifted (to -1)": (lambda logits, tokens: _flat(logits[:, :-1], tokens[:, :-1]), ex.LOSS_BOTH_SHIFTED),
    "softmax first": (lambda logits, tokens: _flat(logits.softmax(-1)[:, :-1], tokens[:, 1:]), ex.LOSS_SOFTMAX_FIRST),
    "summed over positions": (lambda logits, tokens: _per_token(logits, tokens).sum(1).mean(), ex.LOSS_SUMMED),
    "mean over batch only": (lambda logits, tokens: _per_token(logits, tokens).mean(0), ex.LOSS_NOT_SCALAR),
    "mean over the vocabulary": (
        lambda logits, tokens: -(logits[:, :-1].log_softmax(-1) * F.one_hot(tokens[:, 1:], logits.shape[-1])).mean(),
        ex.LOSS_OVER_VOCAB,
    ),
    "item()": (lambda logits, tokens: _flat(logits[:, :-1], tokens[:, 1:]).item(), ex.LOSS_FLOAT),
    "numpy": (lambda logits, tokens: _flat(logits[:, :-1], tokens[:, 1:]).detach().numpy(), ex.LOSS_FLOAT),
    "numpy float32": (
        lambda logits, tokens: _per_token(logits, tokens).detach().numpy().mean(dtype="float32"),
        ex.LOSS_FLOAT,
    ),
    "nll_loss on probabilities": (
        lambda logits, tokens: F.nll_loss(logits[:, :-1].softmax(-1).transpose(1, 2), tokens[:, 1:]),
        ex.LOSS_NLL_NOT_LOG,
    ),
    "nll_loss on logits": (
        lambda logits, tokens: F.nll_loss(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1)),
        ex.LOSS_NLL_NOT_LOG,
    ),
    "detached": (lambda logits, tokens: _flat(logits[:, :-1], tokens[:, 1:]).detach(), ex.LOSS_DETACHED),
    "classes on dim 2": (lambda logits, tokens: F.cross_entropy(logits[:, :-1], tokens[:, 1:]), ex.LOSS_CLASSES_AXIS),
    "log of softmax by hand": (
        lambda logits, tokens: -logits[:, :-1].softmax(-1).log().gather(-1, tokens[:, 1:, None]).mean(),
        ex.LOSS_UNSTABLE_LOG,
    ),
    "reduction='sum'": (
        lambda logits, tokens: _flat(logits[:, :-1], tokens[:, 1:], reduction="sum"),
        ex.LOSS_SUM_REDUCTION,
    ),
    "divided by B * T": (
        lambda logits, tokens: _flat(logits[:, :-1], tokens[:, 1:], reduction="sum") / tokens.numel(),
        ex.LOSS_DIVIDED_BY_BT,
    ),
    "float32 arithmetic": (
        lambda logits, tokens: _flat(logits[:, :-1].float(), tokens[:, 1:]).to(logits.dtype),
        checking.FLOAT32_PRECISION,
    ),
    "float32 result": (lambda logits, tokens: _flat(logits[:, :-1].float(), tokens[:, 1:]), checking.KEEP_DTYPE),
}


def test_log_of_softmax_is_not_told_to_subtract_the_maximum():
    message = check("next_token_loss", LOSS_MISTAKES["log of softmax by hand"][0], quiet=True).message
    assert "row maximum" not in message, message


@pytest.mark.parametrize("name", LOSS_MISTAKES)
def test_next_token_loss_mistake_is_named(name):
    candidate, phrase = LOSS_MISTAKES[name]
    assert_caught("next_token_loss", candidate, phrase)


def test_next_token_loss_messages_name_only_their_mistake():
    assert_each_message_names_only_its_mistake(LOSS_MISTAKES, lambda c: check("next_token_loss", c, quiet=True))


@pytest.mark.parametrize(
    "candidate",
    [
        lambda logits, tokens: F.nll_loss(
            logits[:, :-1].log_softmax(-1).reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1)
        ),
        lambda logits, tokens: F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:]),
        lambda logits, tokens: -logits[:, :-1].log_softmax(-1).gather(-1, tokens[:, 1:, None]).mean(),
    ],
    ids=["log_softmax + nll_loss", "transpose(1, 2)", "gather"],
)
def test_next_token_loss_correct_alternatives_pass(candidate):
    assert_passes("next_token_loss", candidate)


# --------------------------------------------------------------------------- filter_logits


def _top_p(logits, top_p, crossing=True):
    probs = logits.softmax(-1)
    sorted_probs, order = probs.sort(-1, descending=True)
    cumulative = sorted_probs.cumsum(-1)
    drop_sorted = (cumulative - sorted_probs >= top_p) if crossing else (cumulative >= top_p)
    return logits.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))


def _top_k(logits, top_k, by_index=False, fill=float("-inf")):
    if by_index:
        indices = logits.topk(top_k, dim=-1).indices
        keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, indices, True)
        return logits.masked_fill(~keep, fill)
    kth = logits.topk(top_k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, fill)


def _filter(
    logits,
    temperature=1.0,
    top_k=None,
    top_p=None,
    *,
    multiply=False,
    p_first=False,
    crossing=True,
    by_index=False,
    clamp_k=True,
    renormalise=False,
    probabilities=False,
    fill=float("-inf"),
):
    """A learner's filter_logits with switches for the planted mistakes."""
    if p_first and top_p is not None and top_p < 1:
        logits = _top_p(logits, top_p, crossing)
    logits = logits * temperature if multiply else logits / temperature
    if top_k is not None and (top_k < logits.shape[-1] or not clamp_k):
        logits = _top_k(logits, top_k, by_index, fill)
    if top_p is not None and top_p < 1 and not p_first:
        logits = _top_p(logits, top_p, crossing)
        if fill != float("-inf"):
            logits = logits.masked_fill(torch.isinf(logits), fill)
    if renormalise:
        logits = logits.log_softmax(-1)
    if probabilities:
        return logits.softmax(-1)
    return logits


def _smallest(logits, top_k):
    if top_k >= logits.shape[-1]:
        return logits
    kth = logits.topk(top_k, dim=-1, largest=False).values[..., -1:]
    return logits.masked_fill(logits > kth, float("-inf"))


def _variant(**switches):
    return lambda logits, temperature=1.0, top_k=None, top_p=None: _filter(
        logits, temperature, top_k, top_p, **switches
    )


def _top_p_as_in_the_hint(logits, top_p, strict=False, flip=False, shift=0, skip_one=True, assign=True):
    """Hint 2's top-p; the keywords plant the mistakes (flip: ties sorted the other way, shift: the mask moved on)."""
    if top_p is None or (skip_one and top_p >= 1):
        return logits
    probs = logits.softmax(-1)
    if flip:
        sorted_probs, order = probs.sort(dim=-1)
        sorted_probs, order = sorted_probs.flip(-1), order.flip(-1)
    else:
        sorted_probs, order = probs.sort(dim=-1, descending=True, stable=True)
    mass_before = sorted_probs.cumsum(-1) - sorted_probs
    drop_sorted = mass_before > top_p if strict else mass_before >= top_p
    if shift:
        drop_sorted = torch.cat([torch.zeros_like(drop_sorted[..., :shift]), drop_sorted[..., :-shift]], dim=-1)
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    if not assign:
        logits.masked_fill(drop, float("-inf"))
        return logits
    return logits.masked_fill(drop, float("-inf"))


def _top_p_keeping_ties(logits, top_p):
    """Keep every token at least as probable as the one that crosses p."""
    if top_p is None or top_p >= 1:
        return logits
    probs = logits.softmax(-1)
    sorted_probs = probs.sort(dim=-1, descending=True).values
    kept = ((sorted_probs.cumsum(-1) - sorted_probs) < top_p).sum(-1, keepdim=True)
    return logits.masked_fill(probs < sorted_probs.gather(-1, kept - 1), float("-inf"))


def _hint_variant(top_p_step=_top_p_as_in_the_hint, **switches):
    def filter_logits_(logits, temperature=1.0, top_k=None, top_p=None):
        logits = _filter(logits, temperature, top_k)
        return top_p_step(logits, top_p, **switches)

    return filter_logits_


def top_k_along_dim_1(logits, temperature=1.0, top_k=None, top_p=None):
    """top-k along dim 1, right for [B, V] logits only; top-p from the course's function."""
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[1]:
        kth = logits.topk(top_k, dim=1).values.narrow(1, top_k - 1, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return filter_logits(logits, top_p=top_p)


FILTER_MISTAKES = {
    "top-k along dim 1": (top_k_along_dim_1, ex.FILTER_WRONG_AXIS),
    "temperature multiplied": (_variant(multiply=True), ex.FILTER_TEMPERATURE_MULTIPLIED),
    "top-p before temperature": (_variant(p_first=True), ex.FILTER_TOP_P_BEFORE_TEMPERATURE),
    "crossing token dropped": (_variant(crossing=False), ex.FILTER_CROSSING_DROPPED),
    "log_softmax after filtering": (_variant(renormalise=True), ex.FILTER_RENORMALISED),
    "probabilities returned": (_variant(probabilities=True), ex.FILTER_PROBABILITIES),
    "ties broken by index": (_variant(by_index=True), ex.FILTER_TIES),
    "top_k > V not handled": (_variant(clamp_k=False), ex.FILTER_TOP_K_TOO_LARGE),
    "filled with -1e9": (_variant(fill=-1e9), ex.FILTER_NOT_MINUS_INF),
    "temperature ignored": (
        lambda logits, temperature=1.0, top_k=None, top_p=None: _filter(logits, 1.0, top_k, top_p),
        ex.FILTER_NO_TEMPERATURE,
    ),
    "k smallest": (
        lambda logits, temperature=1.0, top_k=None, top_p=None: (
            _smallest(_filter(logits, temperature), top_k)
            if top_k is not None and top_p is None
            else _filter(logits, temperature, top_k, top_p)
        ),
        ex.FILTER_SMALLEST,
    ),
    "top-p before top-k": (
        lambda logits, temperature=1.0, top_k=None, top_p=None: _filter(
            _filter(logits, temperature, None, top_p), 1.0, top_k, None
        ),
        ex.FILTER_TOP_P_BEFORE_TOP_K,
    ),
    "> p instead of >= p": (_hint_variant(strict=True), ex.FILTER_BOUNDARY),
    "ties at p: higher ids kept": (_hint_variant(flip=True), ex.FILTER_TOP_P_TIES),
    "ties at p: all kept": (_hint_variant(_top_p_keeping_ties), ex.FILTER_TOP_P_TIES),
    "masked_fill not assigned": (_hint_variant(assign=False), ex.FILTER_NOT_ASSIGNED),
    "top_p=1.0 not skipped": (_hint_variant(skip_one=False), ex.FILTER_TOP_P_ONE),
    "one token too many": (_hint_variant(shift=1), ex.FILTER_KEPT_TOO_MANY),
}


def test_filter_logits_hint_passes():
    assert_passes("filter_logits", _hint_variant())


@pytest.mark.parametrize("name", ["one token too many", "> p instead of >= p", "masked_fill not assigned"])
def test_a_filter_that_keeps_too_many_is_not_told_it_filled_them(name):
    message = check("filter_logits", FILTER_MISTAKES[name][0], quiet=True).message
    assert "you filled them" not in message, message


def test_top_p_one_keeps_every_token_of_a_large_float32_vocabulary():
    logits = torch.randn(4, 32_000, generator=torch.Generator().manual_seed(0)) * 3
    assert torch.equal(filter_logits(logits, top_p=1.0), logits)


@pytest.mark.parametrize("name", FILTER_MISTAKES)
def test_filter_logits_mistake_is_named(name):
    candidate, phrase = FILTER_MISTAKES[name]
    assert_caught("filter_logits", candidate, phrase)


def test_filter_logits_messages_name_only_their_mistake():
    assert_each_message_names_only_its_mistake(FILTER_MISTAKES, lambda c: check("filter_logits", c, quiet=True))


def test_filter_logits_sorting_free_alternative_passes():
    def by_loops(logits, temperature=1.0, top_k=None, top_p=None):
        out = logits / temperature
        flat = out.reshape(-1, out.shape[-1]).clone()
        for row in flat:
            if top_k is not None and top_k < len(row):
                row[row < row.topk(top_k).values[-1]] = float("-inf")
            if top_p is not None and top_p < 1:
                probs, mass = row.softmax(-1), 0.0
                for i in probs.argsort(descending=True).tolist():
                    if mass >= top_p:
                        row[i] = float("-inf")
                    mass += probs[i].item()
        return flat.reshape(out.shape)

    assert_passes("filter_logits", by_loops)


# --------------------------------------------------------------------------- sample_next_token


def _sample(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    return torch.multinomial(filter_logits(logits, temperature, top_k, top_p).softmax(-1), 1, generator=generator)


SAMPLE_MISTAKES = {
    "argmax": (
        lambda logits, temperature=1.0, top_k=None, top_p=None, generator=None: filter_logits(
            logits, temperature, top_k, top_p
        ).argmax(-1),
        ex.SAMPLE_GREEDY,
    ),
    "no generator": (
        lambda logits, temperature=1.0, top_k=None, top_p=None, generator=None: _sample(
            logits, temperature, top_k, top_p
        ).squeeze(-1),
        ex.SAMPLE_GENERATOR,
    ),
    "not squeezed": (_sample, ex.SAMPLE_NOT_SQUEEZED),
    "unfiltered": (
        lambda logits, temperature=1.0, top_k=None, top_p=None, generator=None: torch.multinomial(
            logits.softmax(-1), 1, generator=generator
        ).squeeze(-1),
        ex.SAMPLE_UNFILTERED,
    ),
    "top_k not passed on": (
        lambda logits, temperature=1.0, top_k=None, top_p=None, generator=None: _sample(
            logits, temperature, None, top_p, generator
        ).squeeze(-1),
        ex.SAMPLE_EXCLUDED,
    ),
    "multinomial on logits": (
        lambda logits, temperature=1.0, top_k=None, top_p=None, generator=None: torch.multinomial(
            filter_logits(logits, temperature, top_k, top_p), 1, generator=generator
        ).squeeze(-1),
        ex.SAMPLE_LOGITS_AS_PROBS,
    ),
    "own seeded generator": (
        lambda logits, temperature=1.0, top_k=None, top_p=None, generator=None: _sample(
            logits, temperature, top_k, top_p, torch.Generator().manual_seed(0)
        ).squeeze(-1),
        ex.SAMPLE_GENERATOR,
    ),
    "torch.manual_seed inside": (
        lambda logits, temperature=1.0, top_k=None, top_p=None, generator=None: (
            torch.manual_seed(0),
            _sample(logits, temperature, top_k, top_p).squeeze(-1),
        )[1],
        ex.SAMPLE_GENERATOR,
    ),
    "temperature squared": (
        lambda logits, temperature=1.0, top_k=None, top_p=None, generator=None: _sample(
            logits / temperature, temperature, top_k, top_p, generator
        ).squeeze(-1),
        ex.SAMPLE_WRONG_FREQUENCIES,
    ),
}


@pytest.mark.parametrize("name", SAMPLE_MISTAKES)
def test_sample_next_token_mistake_is_named(name):
    candidate, phrase = SAMPLE_MISTAKES[name]
    assert_caught("sample_next_token", candidate, phrase)


def test_sample_next_token_messages_name_only_their_mistake():
    assert_each_message_names_only_its_mistake(SAMPLE_MISTAKES, lambda c: check("sample_next_token", c, quiet=True))


def test_wrong_frequencies_show_the_kind_of_row_that_is_wrong():
    def clamped(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
        return _sample(logits.clamp(max=2.0), temperature, top_k, top_p, generator).squeeze(-1)  # row 2 has 2.5

    message = check("sample_next_token", clamped, quiet=True).message
    assert ex.SAMPLE_WRONG_FREQUENCIES in message, message
    assert "second kind of row" in message and "2.5" in message, message
    assert "filter_logits pass" not in message, message


def test_gumbel_max_sampling_passes():
    def gumbel(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
        filtered = filter_logits(logits, temperature, top_k, top_p)
        uniform = torch.rand(filtered.shape, generator=generator).clamp_min(1e-12)
        return (filtered - (-uniform.log()).log()).argmax(-1)

    assert_passes("sample_next_token", gumbel)


# --------------------------------------------------------------------------- decode_with_cache


def _decode(model, prompt, steps, mistake=None):
    caches = [LayerCache()] * len(model.blocks) if mistake == "shared" else [LayerCache() for _ in model.blocks]
    tokens, new_tokens = prompt, prompt
    for _ in range(steps):
        if mistake == "fresh":
            caches = [LayerCache() for _ in model.blocks]
        if mistake == "no cache":
            logits = model(tokens)
        else:
            logits = model(new_tokens, caches)
        next_token = logits[:, 0 if mistake == "first" else -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, next_token], dim=1)
        new_tokens = {"whole": tokens, "same": prompt[:, -1:]}.get(mistake, next_token)
    return tokens[:, prompt.shape[1] :] if mistake == "only new" else tokens


def _decode_variant(mistake):
    return lambda model, prompt, steps: _decode(model, prompt, steps, mistake)


def prefill_without_caches(model, prompt, steps):
    """The prompt read before the loop, but without the caches: they start at the first new token."""
    caches = [LayerCache() for _ in model.blocks]
    tokens = torch.cat([prompt, model(prompt)[:, -1].argmax(-1, keepdim=True)], dim=1)
    for _ in range(steps - 1):
        tokens = torch.cat([tokens, model(tokens[:, -1:], caches)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return tokens


DECODE_MISTAKES = {
    "prefill without caches": (prefill_without_caches, ex.CACHE_PREFILL_MISSED),
    "no cache": (_decode_variant("no cache"), ex.CACHE_NOT_USED),
    "fresh caches": (_decode_variant("fresh"), ex.CACHE_FRESH_EACH_STEP),
    "whole text again": (_decode_variant("whole"), ex.CACHE_WHOLE_TEXT_AGAIN),
    "one shared cache": (_decode_variant("shared"), ex.CACHE_SHARED),
    "first position": (_decode_variant("first"), ex.CACHE_FIRST_POSITION),
    "same token": (_decode_variant("same"), ex.CACHE_SAME_TOKEN),
    "only new tokens": (_decode_variant("only new"), ex.CACHE_ONLY_NEW),
}


@pytest.mark.parametrize("name", DECODE_MISTAKES)
def test_decode_with_cache_mistake_is_named(name):
    candidate, phrase = DECODE_MISTAKES[name]
    assert_caught("decode_with_cache", candidate, phrase)


def test_decode_with_cache_prompt_fed_token_by_token_passes():
    def one_at_a_time(model, prompt, steps):
        caches = [LayerCache() for _ in model.blocks]
        for t in range(prompt.shape[1] - 1):
            model(prompt[:, t : t + 1], caches)
        tokens = prompt
        for _ in range(steps):
            logits = model(tokens[:, -1:], caches)
            tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return tokens

    assert_passes("decode_with_cache", torch.no_grad()(one_at_a_time))


# --------------------------------------------------------------------------- decoder_block


def _attend(block, h):
    return lm.causal_self_attention(block.attention, h)[0]


def _pre_norm_then(block, x, attention_input, ff_norm):
    x = x + _attend(block, attention_input(block, x))
    return x + block.feed_forward(ff_norm(block, x))


BLOCK_MISTAKES = {
    "post-norm": (
        lambda b, x: (lambda h: b.norm2(h + b.feed_forward(h)))(b.norm1(x + _attend(b, x))),
        ex.BLOCK_POST_NORM,
    ),
    "residual from the normalised x": (
        lambda b, x: (lambda h: h + b.feed_forward(b.norm2(h)))(b.norm1(x) + _attend(b, b.norm1(x))),
        ex.BLOCK_RESIDUAL_NORMED,
    ),
    "no residual around attention": (
        lambda b, x: (lambda h: h + b.feed_forward(b.norm2(h)))(_attend(b, b.norm1(x))),
        ex.BLOCK_NO_ATTENTION_RESIDUAL,
    ),
    "no residual around the feed-forward": (
        lambda b, x: b.feed_forward(b.norm2(x + _attend(b, b.norm1(x)))),
        ex.BLOCK_NO_FF_RESIDUAL,
    ),
    "norms swapped": (
        lambda b, x: _pre_norm_then(b, x, lambda b, h: b.norm2(h), lambda b, h: b.norm1(h)),
        ex.BLOCK_NORMS_SWAPPED,
    ),
    "feed-forward without norm2": (
        lambda b, x: _pre_norm_then(b, x, lambda b, h: b.norm1(h), lambda b, h: h),
        ex.BLOCK_FF_UNNORMED,
    ),
    "attention without norm1": (
        lambda b, x: _pre_norm_then(b, x, lambda b, h: h, lambda b, h: b.norm2(h)),
        ex.BLOCK_ATTENTION_UNNORMED,
    ),
    "one norm for both": (
        lambda b, x: x + _attend(b, b.norm1(x)) + b.feed_forward(b.norm1(x)),
        ex.BLOCK_ONE_NORM,
    ),
    "not causal": (
        lambda b, x: (lambda h: h + b.feed_forward(b.norm2(h)))(x + b.attention(b.norm1(x))),
        ex.BLOCK_NOT_CAUSAL,
    ),
    "the pair added": (lambda b, x: x + lm.causal_self_attention(b.attention, b.norm1(x)), ex.BLOCK_TUPLE),
    "the pair returned": (lambda b, x: lm.causal_self_attention(b.attention, b.norm1(x)), ex.BLOCK_TUPLE),
}


@pytest.mark.parametrize("name", BLOCK_MISTAKES)
def test_decoder_block_mistake_is_named(name):
    candidate, phrase = BLOCK_MISTAKES[name]
    assert_caught("decoder_block", candidate, phrase)


def test_decoder_block_messages_name_only_their_mistake():
    assert_each_message_names_only_its_mistake(BLOCK_MISTAKES, lambda c: check("decoder_block", c, quiet=True))


def test_decoder_block_written_with_the_modules_own_calls_passes():
    def by_hand(block, x):
        h = block.norm1(x)
        attended, _ = lm.causal_self_attention(block.attention, h)
        x = attended + x
        return block.feed_forward(block.norm2(x)) + x

    assert_passes("decoder_block", by_hand)


def test_the_reference_refuses_what_is_not_a_block():
    with pytest.raises(ValueError, match="block must be a DecoderBlock"):
        lm.decoder_block(torch.nn.Linear(4, 4), torch.zeros(1, 2, 4))


@pytest.mark.parametrize("name", ["next_token_loss", "filter_logits", "sample_next_token", "decode_with_cache"])
def test_a_returned_tuple_is_not_blamed_on_attention(name):
    # none of these calls scaled_dot_product_attention: a tuple comes from a comma or a second return value
    right = solution(name)
    message = check(name, lambda *args, **kwargs: (right(*args, **kwargs),), quiet=True).message
    assert checking.RETURNED_A_TUPLE in message and checking.ONE_TENSOR_HINT in message, message
    assert "scaled_dot_product_attention" not in message, message
