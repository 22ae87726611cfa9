"""Lesson 10's exercises: next_token_loss, decoder_block, filter_logits, sample_next_token and decode_with_cache.

The solutions are the course's reference code in ``course_utils.language_model``. The
expected answers come from oracles written here another way (a loop over positions with
log_softmax, a filter over Python lists, frequencies counted over thousands of draws, a
decoder that reruns the model on the whole text), so a bug in the reference cannot hide
in the checker. Each known mistake is recomputed on the same inputs and named when the
learner's output matches it.
"""

import math

import torch
import torch.nn.functional as F

from course_utils import language_model as lm
from course_utils.exercises import exercise
from course_utils.exercises.checking import (
    ONE_TENSOR_HINT,
    KnownMistake,
    Mistake,
    call,
    close,
    comparable,
    describe,
    diagnose,
    expect_ids,
    expect_plain,
    expect_same_dtype,
    expect_tensor,
    generator,
    randn,
)

# Distinctive phrases, one per mistake (the tests look for them).
LOSS_NO_SHIFT = "you compared each position with its own token"
LOSS_WRONG_WAY = "you shifted the wrong way"
LOSS_BOTH_SHIFTED = "you shifted the logits and the tokens the same way"
LOSS_SOFTMAX_FIRST = "you applied softmax before cross_entropy"
LOSS_SUMMED = "you summed over the positions"
LOSS_OVER_VOCAB = "you averaged over the vocabulary too"
LOSS_NOT_SCALAR = "one number for the whole batch"
LOSS_FLOAT = "return the loss as a tensor"
LOSS_DETACHED = "your loss is cut off from the logits"
LOSS_CLASSES_AXIS = "cross_entropy reads the classes from dim 1"
LOSS_SUM_REDUCTION = "you summed over every prediction"
LOSS_DIVIDED_BY_BT = "you divided by B * T"
LOSS_UNSTABLE_LOG = "Use log_softmax"
LOSS_NLL_NOT_LOG = "F.nll_loss wants log-probabilities"

BLOCK_POST_NORM = "you normalised after adding (post-norm)"
BLOCK_RESIDUAL_NORMED = "you added the sublayer's output to the normalised x"
BLOCK_NO_ATTENTION_RESIDUAL = "the attention's output replaced x"
BLOCK_NO_FF_RESIDUAL = "the feed-forward's output replaced x"
BLOCK_NORMS_SWAPPED = "you swapped norm1 and norm2"
BLOCK_FF_UNNORMED = "the feed-forward read x without norm2"
BLOCK_ATTENTION_UNNORMED = "the attention read x without norm1"
BLOCK_ONE_NORM = "both sublayers read one normalised copy of the block's input"
BLOCK_NOT_CAUSAL = "an earlier position's output changed when a later token did"
BLOCK_TUPLE = "causal_self_attention returns a pair"

FILTER_TEMPERATURE_MULTIPLIED = "you multiplied by the temperature"
FILTER_TOP_P_BEFORE_TEMPERATURE = "you chose the top-p tokens before applying the temperature"
FILTER_CROSSING_DROPPED = "you dropped the token that crosses p"
FILTER_RENORMALISED = "you changed the kept logits"
FILTER_PROBABILITIES = "you returned probabilities"
FILTER_TIES = "you broke a tie"
FILTER_TOP_K_TOO_LARGE = "top_k larger than the vocabulary"
FILTER_NOT_MINUS_INF = "excluded tokens must be -inf"
FILTER_SMALLEST = "you kept the k smallest"
FILTER_TOP_P_BEFORE_TOP_K = "you applied top-p before top-k"
FILTER_NO_TEMPERATURE = "the temperature was ignored"
FILTER_BOUNDARY = "the tokens before it already reach p"
FILTER_TOP_P_TIES = "tokens of equal probability count in vocabulary order"
FILTER_NOT_ASSIGNED = "masked_fill returns a new tensor"
FILTER_TOP_P_ONE = "top_p=1.0 keeps every token"
FILTER_KEPT_TOO_MANY = "you kept tokens that should be excluded"
FILTER_WRONG_AXIS = "you filtered along an axis that is not the vocabulary"

SAMPLE_GREEDY = "you took the most probable token"
SAMPLE_GENERATOR = "your draws do not follow the generator"
SAMPLE_NOT_SQUEEZED = "one id per row"
SAMPLE_UNFILTERED = "you sampled without filter_logits"
SAMPLE_EXCLUDED = "you sampled a token that filter_logits excludes"
SAMPLE_LOGITS_AS_PROBS = "torch.multinomial takes probabilities"
SAMPLE_WRONG_FREQUENCIES = "the frequencies of your draws do not match"

CACHE_NOT_USED = "you did not use the cache"
CACHE_FRESH_EACH_STEP = "you made new caches at every step"
CACHE_WHOLE_TEXT_AGAIN = "you fed the whole text again"
CACHE_SHARED = "every layer shares one cache"
CACHE_FIRST_POSITION = "you read the prediction of the first position"
CACHE_SAME_TOKEN = "you fed the same token at every step"
CACHE_PREFILL_MISSED = "the prompt never went into the caches"
CACHE_ONLY_NEW = "return the prompt and the new tokens"


# --------------------------------------------------------------------------- next_token_loss


def _loss_oracle(logits, tokens):
    """Mean of -log p(token t+1 | position t), one position at a time, in float64."""
    log_probs = logits.double().log_softmax(dim=-1)
    terms = [-log_probs[b, t, tokens[b, t + 1]] for b in range(tokens.shape[0]) for t in range(tokens.shape[1] - 1)]
    return torch.stack(terms).mean()


def _ce(logits, tokens):
    return F.cross_entropy(logits.double().reshape(-1, logits.shape[-1]), tokens.reshape(-1))


def _loss_mistakes(logits, tokens, case):
    b, t, v = logits.shape
    probs = logits.double().softmax(dim=-1)
    classes_axis = []
    if t - 1 == v:  # then cross_entropy accepts [B, T - 1, V] and reads dim 1 (the positions) as the classes
        classes_axis.append((_classes_axis_message(case), F.cross_entropy(logits.double()[:, :-1], tokens[:, 1:])))
    return classes_axis + [
        (
            f"{LOSS_NO_SHIFT} (no shift): position t must predict token t + 1, so compare logits[:, :-1] with "
            f"tokens[:, 1:]. {case}",
            _ce(logits, tokens),
        ),
        (
            f"{LOSS_WRONG_WAY}: logits[:, 1:] against tokens[:, :-1] asks each position to predict the token "
            f"before it. Use logits[:, :-1] (every position but the last) against tokens[:, 1:]. {case}",
            _ce(logits[:, 1:], tokens[:, :-1]),
        ),
        (
            f"{LOSS_BOTH_SHIFTED}: logits[:, 1:] with tokens[:, 1:] still compares each position with its own "
            f"token. Shift only one side: logits[:, :-1] against tokens[:, 1:]. {case}",
            _ce(logits[:, 1:], tokens[:, 1:]),
        ),
        (
            f"{LOSS_BOTH_SHIFTED}: logits[:, :-1] with tokens[:, :-1] still compares each position with its own "
            f"token. Shift only one side: logits[:, :-1] against tokens[:, 1:]. {case}",
            _ce(logits[:, :-1], tokens[:, :-1]),
        ),
        (
            f"{LOSS_SOFTMAX_FIRST}: F.cross_entropy takes raw logits and applies log_softmax itself, so softmax "
            f"first squashes the scores twice. Pass the logits as they are. {case}",
            _ce(probs[:, :-1], tokens[:, 1:]),
        ),
        (
            f"{LOSS_NLL_NOT_LOG}: F.nll_loss(x, target) is just -x[target] averaged, so on probabilities it gives "
            f"-mean(p), a negative loss. Give it log-probabilities (.log_softmax(-1)), or use F.cross_entropy on "
            f"the raw logits, which does both. {case}",
            -_target_entries(probs, tokens).mean(),
        ),
        (
            f"{LOSS_NLL_NOT_LOG}: F.nll_loss(x, target) is just -x[target] averaged; on raw logits that is not a "
            f"log-probability. Use F.cross_entropy on the logits (it applies log_softmax first). {case}",
            -_target_entries(logits.double(), tokens).mean(),
        ),
        (
            f"{LOSS_SUMMED} instead of averaging: the loss should be the mean over all B * (T - 1) predictions, "
            f"so it does not grow with the length. {case}",
            _loss_oracle(logits, tokens) * (t - 1),
        ),
        (
            f"{LOSS_SUM_REDUCTION} (reduction='sum'): the loss is their mean, so it does not grow with the batch "
            f"or the length; leave cross_entropy's default, reduction='mean'. {case}",
            _loss_oracle(logits, tokens) * (b * (t - 1)),
        ),
        (
            f"{LOSS_DIVIDED_BY_BT}: there are B * (T - 1) predictions, not B * T (the last position has no next "
            f"token). Take the mean over the predictions, cross_entropy's default reduction. {case}",
            _loss_oracle(logits, tokens) * (t - 1) / t,
        ),
        (
            f"{LOSS_OVER_VOCAB} (the mean of log-probabilities times one-hot targets divides by V = {v}): take "
            f"-log p of the target token only, then the mean over predictions. {case}",
            _loss_oracle(logits, tokens) / v,
        ),
    ]


def _target_entries(scores, tokens):
    """scores[b, t, tokens[b, t + 1]] for every prediction: what F.nll_loss averages (with a minus sign)."""
    return scores[:, :-1].gather(-1, tokens[:, 1:, None])


def _classes_axis_message(case, error=""):
    return (
        f"{LOSS_CLASSES_AXIS}: given [B, T - 1, V] logits it takes dim 1 (the positions) for the classes. Reshape "
        f"to [B * (T - 1), V] and [B * (T - 1)] first (or transpose(1, 2)). {case}" + (f"\n{error}" if error else "")
    )


def _loss_cases():
    g = generator(10)
    cases = []
    for description, shape, scale, dtype in [
        ("logits [2, 6, 5]", (2, 6, 5), 2.0, torch.float32),
        ("logits [1, 9, 11], float64", (1, 9, 11), 1.0, torch.float64),
        ("logits [3, 4, 7], large scores (x 40)", (3, 4, 7), 40.0, torch.float32),
        ("logits [4, 2, 3], the shortest text: one prediction per row", (4, 2, 3), 1.0, torch.float32),
    ]:
        tokens = torch.randint(0, shape[-1], shape[:2], generator=g)
        cases.append((description, randn(g, *shape, scale=scale, dtype=dtype), tokens))
    return cases


@exercise(
    "next_token_loss",
    solution=lm.next_token_loss,
    hints=[
        "Position t has read tokens 0..t, so its logits predict token t + 1. The last position has nothing to "
        "predict and the first token is never predicted: use logits[:, :-1] and tokens[:, 1:].",
        "F.cross_entropy wants scores [N, V] and targets [N]: reshape the [B, T - 1, V] logits to "
        "[-1, V] and the [B, T - 1] targets to [-1]. Give it the raw logits (it applies log_softmax itself).",
        "`return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))`",
    ],
)
def check_next_token_loss(candidate):
    for description, logits, tokens in _loss_cases():
        case = f"(case: {description})"
        logits = logits.clone().requires_grad_(True)
        try:
            got = call(candidate, logits, tokens)
        except Mistake as error:
            if "Expected target size" in str(error):
                raise Mistake(_classes_axis_message(case, error)) from None
            raise
        if not isinstance(got, torch.Tensor) and hasattr(got, "__float__"):  # a float, or numpy's from .numpy()
            raise Mistake(
                f"{LOSS_FLOAT} (you returned a {type(got).__name__}, from .item() or numpy?): training calls "
                f"loss.backward(), which needs the tensor. {case}"
            )
        expect_tensor(got, what="loss", tuple_hint=ONE_TENSOR_HINT)
        if got.dim() != 0:
            raise Mistake(
                f"the loss should be {LOSS_NOT_SCALAR} (a 0-d tensor), but it has shape "
                f"{tuple(got.shape)}: your mean kept an axis; average over every prediction at once "
                f"(.mean() without dim=, or cross_entropy on [N, V] and [N]). {case}"
            )
        if not got.requires_grad:
            raise Mistake(
                f"{LOSS_DETACHED} (no gradient flows back): keep it in PyTorch, no .item(), .detach() "
                f"or numpy on the way. {case}"
            )
        expected = _loss_oracle(logits.detach(), tokens).to(logits.dtype)
        expect_same_dtype(got, logits.dtype, "loss", description)
        diagnose(
            got.detach(),
            expected,
            _loss_mistakes(logits.detach(), tokens, case),
            what="loss",
            context=description,
            nonfinite_advice=_LOSS_NONFINITE,
            dtype=logits.dtype,
        )


_LOSS_NONFINITE = (
    f"log(softmax(x)) is log(0) = -inf where a probability rounds to 0, and exp() of large scores overflows. "
    f"{LOSS_UNSTABLE_LOG} (or F.cross_entropy on the raw logits), which computes log-probabilities as "
    f"x - logsumexp(x) and never takes the log of a rounded 0."
)


# --------------------------------------------------------------------------- decoder_block


def _block_cases():
    """(description, block, x): seeded blocks whose two LayerNorms differ, so swapping them shows."""
    cases = []
    for description, (d_model, heads, kv_heads), shape in [
        ("d_model 16, 4 heads, x [2, 6, 16]", (16, 4, 4), (2, 6, 16)),
        ("d_model 16, 4 heads sharing 2 key/value heads, x [1, 9, 16]", (16, 4, 2), (1, 9, 16)),
        ("one token, x [3, 1, 16]", (16, 2, 2), (3, 1, 16)),
    ]:
        torch.manual_seed(len(cases))
        block = lm.DecoderBlock(d_model, heads, kv_heads, 2 * d_model).eval()
        with torch.no_grad():
            for norm in (block.norm1, block.norm2):
                norm.weight.uniform_(0.5, 2.0)
                norm.bias.normal_(0.0, 0.5)
        cases.append((description, block, 2 * torch.randn(shape)))
    return cases


def _block_mistakes(block, x):
    """(message, output) of each known mistake, on the same block and x."""

    def attend(h):
        return lm.causal_self_attention(block.attention, h)[0]

    ff, n1, n2 = block.feed_forward, block.norm1, block.norm2
    hint = "Pre-norm: x = x + attention(norm1(x)), then x + feed_forward(norm2(x)): the sum keeps the unnormalised x."
    with torch.no_grad():
        after_attention = x + attend(n1(x))
        post = n1(x + attend(x))
        normed = n1(x)
        normed_sum = normed + attend(normed)
        swapped = x + attend(n2(x))
        return [
            (
                f"{BLOCK_POST_NORM}: that is the original Transformer's order, not this block's. {hint}",
                n2(post + ff(post)),
            ),
            (f"{BLOCK_RESIDUAL_NORMED}, so the residual stream lost x itself. {hint}", normed_sum + ff(n2(normed_sum))),
            (f"{BLOCK_NO_ATTENTION_RESIDUAL}: add it to x. {hint}", attend(n1(x)) + ff(n2(attend(n1(x))))),
            (f"{BLOCK_NO_FF_RESIDUAL}: add it to x. {hint}", ff(n2(after_attention))),
            (
                f"{BLOCK_NORMS_SWAPPED}: norm1 belongs to the attention, norm2 to the feed-forward.",
                swapped + ff(n1(swapped)),
            ),
            (f"{BLOCK_FF_UNNORMED}. {hint}", after_attention + ff(after_attention)),
            (f"{BLOCK_ATTENTION_UNNORMED}. {hint}", x + attend(x) + ff(n2(x + attend(x)))),
            (
                f"{BLOCK_ONE_NORM}: the feed-forward must read norm2 of x after the attention was added. {hint}",
                after_attention + ff(normed),
            ),
        ]


@exercise(
    "decoder_block",
    solution=lm.decoder_block,
    hints=[
        "Two sublayers, each in the same pattern: normalise a copy of x, run the sublayer on the copy, add its "
        "output to x itself. First block.norm1 and the attention, then block.norm2 and block.feed_forward.",
        "The attention is `lm.causal_self_attention(block.attention, h)`: it returns (output, weights); keep the "
        "output. It applies the causal mask and RoPE for you.",
        "`x = x + lm.causal_self_attention(block.attention, block.norm1(x))[0]`, then "
        "`return x + block.feed_forward(block.norm2(x))`",
    ],
)
def check_decoder_block(candidate):
    for description, block, x in _block_cases():
        case = f"(case: {description})"
        with torch.no_grad():
            expected = block(x)  # the module's own forward: another path to the same numbers
            try:
                got = call(candidate, block, x.clone())
            except Mistake as error:
                if "'tuple'" not in str(error):
                    raise
                raise Mistake(
                    f"{BLOCK_TUPLE} (output, weights): keep the output only, e.g. "
                    f"`attended, _ = lm.causal_self_attention(...)`. {case}\n{error}"
                ) from None
        if isinstance(got, tuple):
            raise Mistake(
                f"your block returned a tuple: {BLOCK_TUPLE} (output, weights); add only the output to x, "
                f"e.g. `attended, _ = lm.causal_self_attention(...)`. {case}"
            )
        expect_tensor(got, x.shape, what="block output")
        expect_plain(got, x.device, f"block output ({description})")  # a dense tensor, before comparing parts of it
        if x.shape[1] > 1:
            changed = x.clone()
            changed[:, -1] = torch.randn(changed[:, -1].shape, generator=generator(7))
            with torch.no_grad():
                again = call(candidate, block, changed)
            if not close(again[:, :-1], got[:, :-1], 1e-5, 1e-4):
                raise Mistake(
                    f"{BLOCK_NOT_CAUSAL}: the attention is not causal. Use lm.causal_self_attention(block.attention, "
                    f"h), which masks the future, rather than block.attention(h). {case}"
                )
        diagnose(got, expected, _block_mistakes(block, x), what="block output", context=description, dtype=x.dtype)


# --------------------------------------------------------------------------- filter_logits


def _filter_row(
    row,
    temperature,
    top_k,
    top_p,
    *,
    multiply=False,
    p_first=False,
    crossing=True,
    smallest=False,
    p_before_k=False,
    strict=False,
    ties="lower id first",
):
    """One row of filter_logits over Python floats; the keywords plant the mistakes.

    Tokens of equal probability count in vocabulary order; ties="higher id first" or "all kept" plant the
    other rules, strict=True keeps a token whose mass before it equals p."""
    z = [x * temperature if multiply else x / temperature for x in row]
    v = len(z)
    keep = [True] * v

    def apply_top_k():
        if top_k is None or top_k >= v:
            return
        kth = sorted(z, reverse=not smallest)[top_k - 1]
        for i in range(v):
            keep[i] = keep[i] and (z[i] <= kth if smallest else z[i] >= kth)

    def apply_top_p():
        if top_p is None or top_p >= 1:
            return
        scores = row if p_first else z  # p_first: the nucleus chosen from the logits before the temperature
        kept = [i for i in range(v) if keep[i]]
        top = max(scores[i] for i in kept)
        weights = {i: math.exp(scores[i] - top) for i in kept}
        total = sum(weights.values())
        mass, group_mass, previous = 0.0, 0.0, None
        order = -1 if ties == "higher id first" else 1
        for i in sorted(kept, key=lambda i: (-weights[i], order * i)):
            p = weights[i] / total
            if weights[i] != previous:  # the first token of a group of equal probability
                group_mass, previous = mass, weights[i]
            before = group_mass if ties == "all kept" else mass
            if not crossing:
                keep[i] = before + p < top_p
            else:
                keep[i] = before <= top_p if strict else before < top_p
            mass += p

    if p_before_k:
        apply_top_p()
        apply_top_k()
    else:
        apply_top_k()
        apply_top_p()
    return [zi if k else -math.inf for zi, k in zip(z, keep, strict=True)]


def _filter_oracle(logits, temperature=1.0, top_k=None, top_p=None, **mistake):
    rows = logits.double().reshape(-1, logits.shape[-1]).tolist()
    out = [_filter_row(r, temperature, top_k, top_p, **mistake) for r in rows]
    return torch.tensor(out, dtype=torch.float64).reshape(logits.shape).to(logits.dtype)


def _filter_cases():
    g = generator(11)
    ties = torch.tensor([[1.0, 3.0, 0.5, 3.0, 2.0, 3.0], [0.2, 0.1, 2.5, 2.5, -1.0, 0.0]])
    # probabilities (about) 0.46, 0.25, 0.15, 0.09, 0.05: with p = 0.7 the second crosses 0.7 only at
    # temperature 1, the third at temperature 2; all cumulative sums stay clear of p
    nucleus = torch.tensor([[2.0, 1.4, 0.9, 0.4, -0.2], [-0.2, 0.4, 2.0, 0.9, 1.4]])
    half, quarter, eighth = 0.0, -math.log(2), -2 * math.log(2)  # logits of probabilities 1/2, 1/4, 1/8
    dyadic = torch.tensor([[eighth, half, quarter, eighth], [quarter, eighth, eighth, half]], dtype=torch.float64)
    # probabilities (about) 0.31, 0.31, 0.11, 0.11, 0.11, 0.04 and 0.25 (four times), 0.01: p = 0.65 is crossed
    # inside a group of equal probability, so the tie rule decides which of them stay
    tied_at_p = torch.tensor([[1.0, 2.0, 1.0, 2.0, 0.0, 1.0], [3.0, 0.0, 3.0, 3.0, 3.0, 0.0]])
    return [
        ("temperature 0.5 only, logits [2, 6]", randn(g, 2, 6, scale=2.0), dict(temperature=0.5)),
        ("temperature 3.0 only, logits [7], float64", randn(g, 7, dtype=torch.float64), dict(temperature=3.0)),
        ("top_k=3, logits [3, 8]", randn(g, 3, 8), dict(top_k=3)),
        ("top_k=2 with ties for the largest", ties, dict(top_k=2)),
        ("top_k=10 with only 6 tokens", randn(g, 2, 6), dict(top_k=10)),
        ("top_p=0.7", nucleus, dict(top_p=0.7)),
        ("top_p=0.7, temperature 2.0", nucleus, dict(temperature=2.0, top_p=0.7)),
        ("top_p=0.01: only the most probable token reaches it", randn(g, 3, 9), dict(top_p=0.01)),
        ("top_p=1.0: every token kept", randn(g, 2, 5), dict(top_p=1.0)),
        (
            "top_p=1.0 on a vocabulary of 32,000, float32 (its cumulative sum rounds to 1 before the end)",
            randn(g, 4, 32_000, scale=3.0),
            dict(top_p=1.0),
        ),
        (
            "top_p=0.5 where the most probable token has probability exactly 0.5, float64",
            dyadic,
            dict(top_p=0.5),
        ),
        ("top_p=0.75, probabilities exactly 0.5, 0.25, 0.125, 0.125, float64", dyadic, dict(top_p=0.75)),
        ("top_p=0.5 on 8 equal logits: 4 tokens reach it exactly", torch.zeros(2, 8), dict(top_p=0.5)),
        ("top_p=0.65 crossed inside a group of equal probability", tied_at_p, dict(top_p=0.65)),
        (
            "top_p=0.8 on logits [2, 3, 10] (a batch of texts), temperature 0.7",
            randn(g, 2, 3, 10, scale=2.0),
            dict(temperature=0.7, top_p=0.8),
        ),
        (
            "top_k=4 then top_p=0.5, temperature 1.5",
            randn(g, 4, 12, scale=2.0),
            dict(temperature=1.5, top_k=4, top_p=0.5),
        ),
        ("top_k=3 on logits [2, 4, 7] (a batch of texts)", randn(g, 2, 4, 7, scale=2.0), dict(top_k=3)),
    ]


def _filter_mistakes(logits, kwargs, expected, case):
    """(message, what the mistake returns) pairs, made one at a time: diagnose asks only when the answer is wrong."""

    def planted(message, **mistake):
        return f"{message} {case}", _filter_oracle(logits, **kwargs, **mistake)

    yield planted(
        f"{FILTER_TEMPERATURE_MULTIPLIED}: divide the logits by it, so a temperature below 1 sharpens "
        f"the distribution and one above 1 flattens it.",
        multiply=True,
    )
    yield planted(
        f"{FILTER_TOP_P_BEFORE_TEMPERATURE}: divide by the temperature first, then pick the nucleus from "
        f"the softmax of the divided logits (the temperature changes which tokens reach p).",
        p_first=True,
    )
    yield planted(
        f"{FILTER_CROSSING_DROPPED}: keep a token while the probability of the tokens before it is still below "
        f"p (the token that makes the sum reach p is kept), so at least one token always stays.",
        crossing=False,
    )
    yield planted(f"{FILTER_SMALLEST}: top-k keeps the k largest logits (topk's default, largest=True).", smallest=True)
    yield planted(
        f"you kept a token although {FILTER_BOUNDARY} (its mass before equals p): drop a token when "
        f"mass_before >= p, not only when mass_before > p.",
        strict=True,
    )
    for rule, advice in (
        ("higher id first", "you kept the higher ids (a flipped ascending sort?)"),
        ("all kept", "you kept every token tied with the one that crosses p"),
    ):
        yield planted(
            f"{advice}: in top-p {FILTER_TOP_P_TIES} (the lower id first), so a tie at p keeps the lower ids: "
            f"probs.sort(dim=-1, descending=True, stable=True).",
            ties=rule,
        )
    yield planted(
        f"{FILTER_TOP_P_BEFORE_TOP_K}: apply the temperature, then top-k, then top-p on the tokens top-k kept.",
        p_before_k=True,
    )
    for axis in range(logits.dim() - 1):  # dim=1 is the vocabulary of [B, V] logits, not of [B, T, V]
        yield (
            f"{FILTER_WRONG_AXIS} (dim {axis} of logits {list(logits.shape)}): the vocabulary is the last axis, "
            f"so sort, topk and softmax along dim=-1, which holds for any number of axes before it. {case}",
            _filter_oracle(logits.movedim(axis, -1), **kwargs).movedim(-1, axis),
        )
    unassigned = (
        f"Note that {FILTER_NOT_ASSIGNED} and leaves `logits` as it was: write logits = logits.masked_fill(...) "
        f"(masked_fill_ is the in-place one). {case}"
    )
    divided = logits / kwargs.get("temperature", 1.0)
    yield f"no token was excluded. {unassigned}", divided
    if kwargs.get("top_k") is not None and kwargs.get("top_p") is not None:
        yield f"your top-k excluded no token. {unassigned}", _filter_oracle(logits, **{**kwargs, "top_k": None})
        yield f"your top-p excluded no token. {unassigned}", _filter_oracle(logits, **{**kwargs, "top_p": None})
    if kwargs.get("temperature", 1.0) != 1.0:
        no_temperature = {**kwargs, "temperature": 1.0}
        yield (
            f"{FILTER_NO_TEMPERATURE}: divide the logits by it first. {case}",
            _filter_oracle(logits, **no_temperature),
        )
    finite = torch.isfinite(expected)
    renormalised = expected.double().log_softmax(dim=-1).to(expected.dtype)
    if not close(renormalised, expected):
        yield (
            f"{FILTER_RENORMALISED} (log_softmax after the filter): return the divided logits "
            f"unchanged, with -inf where a token is excluded; softmax renormalises over the kept "
            f"tokens by itself when you sample. {case}",
            renormalised,
        )
    probs = expected.double().softmax(dim=-1).to(expected.dtype)
    as_probabilities = (
        f"{FILTER_PROBABILITIES}: filter_logits returns logits (kept ones divided by the "
        f"temperature, excluded ones -inf); the softmax comes later, in sample_next_token. {case}"
    )
    yield as_probabilities, probs
    yield as_probabilities, torch.where(finite, probs, torch.zeros_like(probs))


def _ties_broken(got, expected, top_k, case):
    """Exactly k tokens kept, all of them rightly, where more tie with the k-th largest."""
    if top_k is None or not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        return
    kept, right = torch.isfinite(got), torch.isfinite(expected)
    k = min(top_k, expected.shape[-1])
    if (kept & ~right).any() or not (kept.sum(-1) == k).all() or torch.equal(kept, right):
        return
    if close(torch.where(kept, got, 0.0), torch.where(kept, expected, 0.0)):
        raise Mistake(
            f"{FILTER_TIES} by position: you kept exactly {k} tokens, but more are tied with the k-th largest logit. "
            f"Keep every token at least as large as the k-th largest (mask `logits < kth_largest`, not the "
            f"indices topk returns), so the result does not depend on the order of the vocabulary. {case}"
        )


def _not_minus_inf(got, expected, logits, temperature, case):
    """Excluded tokens filled with 0, -1e9 or another finite number instead of -inf."""
    if not comparable(got, expected):
        return
    excluded = ~torch.isfinite(expected)
    if not excluded.any() or not close(got[~excluded], expected[~excluded]):
        return
    filled, divided = got[excluded], (logits / temperature)[excluded]
    # one finite value everywhere, and not the tokens' own logits (that would be keeping them)
    if torch.isfinite(filled).all() and (filled == filled[0]).all() and not close(filled, divided):
        raise Mistake(
            f"{FILTER_NOT_MINUS_INF}, so that softmax gives them probability exactly 0; you filled them "
            f"with {filled[0].item():.4g}. Use masked_fill(..., float('-inf')). {case}"
        )


def _top_p_one(got, expected, top_p, case):
    """top_p >= 1 keeps everything; a cumulative sum that rounds to 1 early drops the tail."""
    if top_p is None or top_p < 1 or not comparable(got, expected):
        return
    dropped = int((torch.isinf(got) & torch.isfinite(expected)).sum())
    if dropped:
        raise Mistake(
            f"{FILTER_TOP_P_ONE}, but yours excluded {dropped} of {expected.numel()}: in float32 the cumulative sum "
            f"of many small probabilities rounds to 1.0 before the last token, so mass_before >= 1.0 drops the "
            f"tail. Skip top-p when top_p >= 1 (as top-k is skipped when k >= V). {case}"
        )


def _kept_too_many(got, expected, case):
    """Name a result that keeps tokens the reference excludes (with the others right)."""
    if not comparable(got, expected):
        return
    kept, right = torch.isfinite(got), torch.isfinite(expected)
    extra = kept & ~right
    if extra.any() and (kept | ~right).all() and close(got[right], expected[right]):
        index = [int(i) for i in extra.nonzero()[0]]
        raise Mistake(
            f"{FILTER_KEPT_TOO_MANY}: {int(extra.sum())} in all, the first at index {index} (value "
            f"{got[tuple(index)].item():.4g}); the tokens you kept otherwise are right. {case}"
        )


@exercise(
    "filter_logits",
    solution=lm.filter_logits,
    hints=[
        "Three steps in this order: logits = logits / temperature; top-k keeps every token at least as large as "
        "the k-th largest; top-p keeps the most probable tokens until their probability reaches p (tokens of "
        "equal probability count in vocabulary order, the lower id first). Excluded tokens get float('-inf'); "
        "a kept token keeps its logit divided by the temperature (no renormalising).",
        "top-k: `kth = logits.topk(k, dim=-1).values[..., -1:]`, then `logits = logits.masked_fill(logits < kth, "
        "float('-inf'))` (skip it when k >= V). top-p (skip it when p >= 1: in float32 a long cumulative sum "
        "rounds to 1 before its end): sort the probabilities in descending order, "
        "`mass_before = sorted_probs.cumsum(-1) - sorted_probs`, drop where mass_before >= p.",
        "The drop mask is in sorted order: put it back with `drop = drop_sorted.scatter(-1, order, drop_sorted)` "
        "(order from `probs.sort(dim=-1, descending=True, stable=True)`: stable keeps tied tokens in vocabulary "
        "order), then `logits = logits.masked_fill(drop, float('-inf'))`.",
    ],
)
def check_filter_logits(candidate):
    for description, logits, kwargs in _filter_cases():
        case = f"(case: {description})"
        expected = _filter_oracle(logits, **kwargs)
        try:
            got = call(candidate, logits, **kwargs)
        except Mistake as error:
            if kwargs.get("top_k", 0) > logits.shape[-1]:
                raise Mistake(
                    f"{FILTER_TOP_K_TOO_LARGE} ({kwargs['top_k']} of {logits.shape[-1]}) keeps every token: "
                    f"logits.topk(k) fails when k > V, so skip top-k then (or use min(k, V)). {case}\n{error}"
                ) from None
            raise
        _top_p_one(got, expected, kwargs.get("top_p"), case)
        _not_minus_inf(got, expected, logits, kwargs.get("temperature", 1.0), case)
        _ties_broken(got, expected, kwargs.get("top_k"), case)
        mistakes = _filter_mistakes(logits, kwargs, expected, case)
        try:
            diagnose(
                got,
                expected,
                mistakes,
                what="filtered logits",
                context=description,
                dtype=logits.dtype,
                tuple_hint=ONE_TENSOR_HINT,
            )
        except KnownMistake:
            raise
        except Mistake:
            _kept_too_many(got, expected, case)
            raise


# --------------------------------------------------------------------------- sample_next_token


def _draw(candidate, logits, kwargs, seed):
    return call(candidate, logits, **kwargs, generator=torch.Generator().manual_seed(seed))


def _expect_ids(got, logits, case):
    batch = len(logits)
    expect_ids(got, logits.device, "sampled ids", case, tuple_hint=ONE_TENSOR_HINT)
    if tuple(got.shape) == (batch, 1):
        raise Mistake(
            f"your ids have shape [{batch}, 1]; the function returns {SAMPLE_NOT_SQUEEZED}, shape "
            f"[{batch}]: torch.multinomial(probs, 1) gives [B, 1], so add .squeeze(-1). {case}"
        )
    expect_tensor(got, shape=(batch,), what="sampled ids")


def _frequencies(ids, rows, vocab):
    """Share of each token among the draws of each kind of row: [kinds, vocab]."""
    kinds = int(rows.max()) + 1
    counts = torch.zeros(kinds, vocab, dtype=torch.float64)
    counts.index_put_((rows, ids.long()), torch.ones(len(ids), dtype=torch.float64), accumulate=True)
    return counts / counts.sum(dim=1, keepdim=True), counts.sum(dim=1, keepdim=True)


def _sample_cases():
    base = torch.tensor([[2.0, 1.0, 0.5, 0.0, -0.5, -1.0], [-1.0, 0.0, 2.5, 0.3, 1.5, -0.4]])
    return [
        ("temperature 1, no filter", base, dict(temperature=1.0)),
        ("temperature 0.5", base, dict(temperature=0.5)),
        ("temperature 1.5, top_k=3", base, dict(temperature=1.5, top_k=3)),
        ("top_p=0.8", base, dict(temperature=1.0, top_p=0.8)),
    ]


@exercise(
    "sample_next_token",
    solution=lm.sample_next_token,
    hints=[
        "Filter, turn into probabilities, draw: filter_logits(logits, temperature, top_k, top_p), then "
        ".softmax(dim=-1) (an excluded token's -inf becomes probability 0), then torch.multinomial.",
        "`torch.multinomial(probs, num_samples=1, generator=generator)` draws one id per row, shape [B, 1]; "
        "passing the generator makes the draw repeatable (the same seed gives the same ids).",
        "`return torch.multinomial(filter_logits(logits, temperature, top_k, top_p).softmax(dim=-1), 1, "
        "generator=generator).squeeze(-1)`",
    ],
)
def check_sample_next_token(candidate):
    draws = 3000  # per kind of row: a frequency is then known to about +-0.01
    for description, base, kwargs in _sample_cases():
        case = f"(case: {description}; logits [{2 * draws}, 6], two kinds of rows taking turns)"
        rows = torch.arange(2 * draws) % 2
        logits = base[rows]
        try:
            got = _draw(candidate, logits, kwargs, seed=0)
        except Mistake as error:
            if "probability tensor contains" in str(error):
                raise Mistake(
                    f"{SAMPLE_LOGITS_AS_PROBS} (non-negative weights), not logits: apply "
                    f".softmax(dim=-1) to the filtered logits first. {case}\n{error}"
                ) from None
            raise
        _expect_ids(got, logits, case)
        again = _draw(candidate, logits, kwargs, seed=0)
        if not torch.equal(got, again):
            raise Mistake(
                f"{SAMPLE_GENERATOR}: two calls with generators seeded alike gave different ids. Pass "
                f"generator=generator to torch.multinomial, so a seed makes the sample repeatable. {case}"
            )
        if torch.equal(got.long(), logits.argmax(dim=-1)):
            raise Mistake(
                f"{SAMPLE_GREEDY} (argmax) at every row: that is greedy decoding. Draw from the "
                f"probabilities with torch.multinomial instead. {case}"
            )
        if got.min() < 0 or got.max() >= logits.shape[-1]:
            raise Mistake(f"your ids should lie in 0..{logits.shape[-1] - 1}, got {describe(got)}. {case}")
        other_seed = _draw(candidate, logits, kwargs, seed=1)
        if isinstance(other_seed, torch.Tensor) and torch.equal(got, other_seed):  # by chance: never
            raise Mistake(
                f"{SAMPLE_GENERATOR}: generators seeded 0 and 1 gave the same {2 * draws} ids, so your draws ignore "
                f"the generator they are given (a torch.manual_seed, or a generator of your own, inside the "
                f"function?). Pass generator=generator to torch.multinomial and seed nothing yourself. {case}"
            )
        expected_probs = _filter_oracle(base, **kwargs).double().softmax(dim=-1)
        frequencies, n = _frequencies(got, rows, logits.shape[-1])
        if (frequencies[expected_probs == 0] > 0).any():
            raise Mistake(
                f"{SAMPLE_EXCLUDED} (probability 0 after top-k/top-p): sample from "
                f"softmax(filter_logits(...)) with every argument passed on. {case}"
            )
        off = _standard_errors_off(frequencies, expected_probs, n)  # [kinds]
        if (off > 5).any():
            if (_standard_errors_off(frequencies, base.double().softmax(dim=-1), n) <= 5).all():
                raise Mistake(
                    f"{SAMPLE_UNFILTERED}: these draws follow softmax(logits), ignoring the temperature "
                    f"(and top-k/top-p). Sample from softmax(filter_logits(logits, temperature, top_k, "
                    f"top_p)). {case}"
                )
            kind = int(off.argmax())
            raise Mistake(
                f"{SAMPLE_WRONG_FREQUENCIES} the probabilities: for the {('first', 'second')[kind]} kind of row "
                f"(logits {[round(x, 2) for x in base[kind].tolist()]}) expected about "
                f"{[round(p, 3) for p in expected_probs[kind].tolist()]}, got "
                f"{[round(f, 3) for f in frequencies[kind].tolist()]} over {draws} draws. {case}"
            )


def _standard_errors_off(frequencies, probs, n):
    """For each kind of row, its largest gap between frequency and probability, in standard errors; the
    2e-4 added to each (a gap of 1e-3 at five of them) keeps a probability of 0 from making any gap count."""
    return ((frequencies - probs).abs() / ((probs * (1 - probs) / n).sqrt() + 2e-4)).amax(dim=1)


# --------------------------------------------------------------------------- decode_with_cache


def _decode_oracle(model, prompt, steps):
    """Greedy decoding without a cache: the model reads the whole text at every step."""
    tokens = prompt
    with torch.no_grad():
        for _ in range(steps):
            tokens = torch.cat([tokens, model(tokens)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return tokens


def _decode_wrong(model, prompt, steps, mistake):
    """Greedy decoding with a cache, done wrong in one known way.

    (One cache shared by every layer needs no recomputing: the model refuses it with an error
    that names CACHE_SHARED, which call() reports.)
    """
    layers = len(model.blocks)
    caches = [lm.LayerCache() for _ in range(layers)]
    tokens, new_tokens = prompt, prompt
    with torch.no_grad():
        for step in range(steps):
            if mistake == "fresh":
                caches = [lm.LayerCache() for _ in range(layers)]
            position = 0 if mistake == "first" else -1
            uncached = mistake == "prefill uncached" and step == 0
            logits = model(new_tokens) if uncached else model(new_tokens, caches)
            next_token = logits[:, position].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, next_token], dim=1)
            new_tokens = {"whole": tokens, "same": prompt[:, -1:]}.get(mistake, next_token)
    return tokens


def _decode_cases():
    torch_state = torch.random.get_rng_state()
    torch.manual_seed(12)
    small = lm.LanguageModel(vocab_size=11, d_model=16, num_heads=2, num_layers=2).eval()
    torch.random.set_rng_state(torch_state)
    trained, tokenizer = lm.load_trained_model()
    g = generator(12)
    return [
        (
            "the trained model, prompt 'Once upon a time' [1, 16]",
            trained,
            tokenizer.encode("Once upon a time")[None],
            12,
        ),
        ("a small untrained model, prompt [2, 5]", small, torch.randint(0, 11, (2, 5), generator=g), 6),
        ("a small untrained model, a one-token prompt [1, 1]", small, torch.tensor([[3]]), 4),
    ]


def _record_calls(model):
    """Watch the model's forward calls: (number of tokens, were caches given) for each."""
    calls = []

    def hook(module, args, kwargs):
        caches = args[1] if len(args) > 1 else kwargs.get("caches")
        calls.append((args[0].shape[1] if args else kwargs["tokens"].shape[1], caches is not None))

    return calls, model.register_forward_pre_hook(hook, with_kwargs=True)


@exercise(
    "decode_with_cache",
    solution=lm.decode_with_cache,
    hints=[
        "Make one cache per block before the loop, `caches = [LayerCache() for _ in model.blocks]`. The first "
        "call reads the whole prompt, `model(prompt, caches)`; every later call reads only the token added last.",
        "The next token is the most probable one after the last position: `logits[:, -1].argmax(dim=-1, "
        "keepdim=True)`, shape [B, 1]. Append it to the text with torch.cat along dim 1.",
        "In the loop: `logits = model(new_tokens, caches)`, `next_token = logits[:, -1].argmax(-1, keepdim=True)`, "
        "`tokens = torch.cat([tokens, next_token], dim=1)`, `new_tokens = next_token`; return tokens.",
    ],
)
def check_decode_with_cache(candidate):
    for description, model, prompt, steps in _decode_cases():
        case = f"(case: {description}, {steps} steps)"
        expected = _decode_oracle(model, prompt, steps)
        calls, handle = _record_calls(model)
        try:
            got = call(candidate, model, prompt, steps)
        finally:
            handle.remove()
        expect_tensor(got, what="tokens", tuple_hint=ONE_TENSOR_HINT)
        if tuple(got.shape) == (prompt.shape[0], steps) and torch.equal(got, expected[:, prompt.shape[1] :]):
            raise Mistake(f"{CACHE_ONLY_NEW}: the result is [B, P + steps], the prompt first. {case}")
        wrong = [
            (
                f"{CACHE_FRESH_EACH_STEP}: then each step sees only the tokens it is given. Make the caches once, "
                f"before the loop; they fill up as the text grows. {case}",
                "fresh",
            ),
            (
                f"{CACHE_FIRST_POSITION} (logits[:, 0]): the prediction of the next token is at the last position, "
                f"logits[:, -1]. {case}",
                "first",
            ),
            (
                f"{CACHE_SAME_TOKEN}: after each step feed the token just chosen (new_tokens = next_token). {case}",
                "same",
            ),
            (
                f"{CACHE_PREFILL_MISSED}: the first step called the model without the caches, so they never held "
                f"the prompt and every later step saw only the tokens generated since. Pass them from the first "
                f"call on: model(prompt, caches). {case}",
                "prefill uncached",
            ),
        ]
        lengths = [n for n, with_cache in calls if with_cache]
        if len(lengths) > 1 and max(lengths[1:]) > 1 and not torch.equal(got, expected):
            raise Mistake(
                f"{CACHE_WHOLE_TEXT_AGAIN} ({max(lengths[1:])} tokens in a later step) to a model whose caches "
                f"already hold it, so those tokens are stored twice. After the first step give the model only the "
                f"new token, tokens[:, -1:]. {case}"
            )
        diagnose(
            got,
            expected,
            [(m, _decode_wrong(model, prompt, steps, w)) for m, w in wrong],
            what="tokens",
            atol=0,
            rtol=0,
            context=description,
            tuple_hint=ONE_TENSOR_HINT,
        )
        if any(not with_cache for _, with_cache in calls):
            raise Mistake(
                f"the tokens are right, but {CACHE_NOT_USED}: the model was called without caches, "
                f"so it read the whole text again at each step. Pass caches to model(new_tokens, "
                f"caches) and give it only the new tokens. {case}"
            )
        lengths = [n for n, _ in calls]
        if len(lengths) > 1 and max(lengths[1:]) > 1:
            raise Mistake(
                f"the tokens are right, but the model was given {max(lengths[1:])} tokens in a "
                f"later step: with the cache each step after the first reads only the new token. {case}"
            )
