"""Lesson 05's exercises: the forward pass of one encoder layer, and one training step.

``encoder_layer_forward``: the candidate is ``fn(layer, x, mask=None) -> Tensor`` for an
``EncoderLayer``: it must use ``layer.self_attention``, ``layer.norm1``, ``layer.feed_forward``,
``layer.norm2`` and ``layer.dropout`` in post-norm order, or in pre-norm order
when ``layer.norm_first`` is True.

``training_step``: the candidate is ``fn(model, optimizer, inputs, targets) -> float``: one
step of gradient descent on a batch of the toy task (forward, cross-entropy at every position,
zero_grad, backward, step), returning the loss as a float. The checker runs it on a tiny
model whose parameters still hold gradients from an "earlier batch", so a forgotten
zero_grad shows, and compares the parameters after the step and the returned loss
with the reference ``course_utils.toy_task.training_step``.
"""

import copy

import torch
import torch.nn.functional as F

from course_utils.attention import padding_mask
from course_utils.exercises import exercise
from course_utils.exercises.checking import Mistake, call, close, diagnose, expect_plain, expect_tensor, generator
from course_utils.toy_task import training_step
from course_utils.transformer import EncoderLayer, TinyTransformer, encoder_layer_forward

D_MODEL, NUM_HEADS, D_FF = 8, 2, 16

# Distinctive phrases, one per mistake (the tests look for them).
LAYER_CALLED = "you called the layer itself"
WANTS_PRE_NORM = "this layer has norm_first=True: use the pre-norm order"
WANTS_POST_NORM = "this layer has norm_first=False: use the post-norm order"
NO_ATTENTION_RESIDUAL = "the residual connection around self-attention is missing"
NO_FFN_RESIDUAL = "the residual connection around the feed-forward network is missing"
PRE_NORM_STREAM = "in pre-norm the residual carries the un-normalised x"
PRE_FINAL_NORM = "a pre-norm layer's output is not normalised"
NORM_BEFORE_ADD = "you normalised the sublayer's output and then added x"
NORMS_SWAPPED = "norm1 and norm2 are swapped"
MASK_UNUSED = "the mask was not used"
OWN_DROPOUT = "your output changes from one call to the next although the layer is in eval mode"
NO_LAYER_DROPOUT = "in training mode (layer.train()) each sublayer's output goes through layer.dropout"
DROPOUT_ON_SUM = "you applied layer.dropout to the sum x + Sublayer(x)"

STALE_GRADIENTS = "your step also used the gradients of the earlier batch"
NO_GRADIENTS = "the parameters did not move and no gradients are left"
NO_STEP = "the parameters did not move although gradients were computed"
STEP_BEFORE_BACKWARD = "optimizer.step() came before loss.backward()"
CLASSES_ON_AXIS_1 = "reads axis 1 (the positions) as the classes"
ROWS_DIFFER = "the scores and the targets have different numbers of rows"
LOSS_SUMMED = "your loss is the SUM over all positions"
SOFTMAX_FIRST = "you applied softmax before F.cross_entropy"
NLL_ON_LOGITS = "you used F.nll_loss on the raw scores"
PAIRED_WRONGLY = "scores and targets are paired up wrongly"
RETURN_FLOAT = "return the loss as a Python float"
LOSS_AFTER_UPDATE = "you returned the loss of the model AFTER the update"
LEFT_IN_EVAL = "the model is still in eval mode after your step"


class _LayerUnderTest(EncoderLayer):
    """An EncoderLayer that refuses to run its own forward: the exercise is to write it."""

    def forward(self, x, mask=None):
        raise Mistake(
            f"{LAYER_CALLED} (`layer(x)`), which runs the course's forward pass. "
            "Build it from the sublayers: layer.self_attention, layer.norm1, layer.feed_forward, layer.norm2."
        )


def _make_layer(norm_first, seed, dropout=0.1):
    with torch.random.fork_rng(devices=[]):  # leave the learner's random numbers alone
        torch.manual_seed(seed)
        layer = _LayerUnderTest(D_MODEL, NUM_HEADS, D_FF, dropout=dropout, norm_first=norm_first)
        with torch.no_grad():
            # LayerNorm starts as weight 1, bias 0; make the two norms differ so their order shows
            for norm in (layer.norm1, layer.norm2):
                norm.weight.copy_(1 + 0.5 * torch.randn(D_MODEL))
                norm.bias.copy_(0.5 * torch.randn(D_MODEL))
    return layer


def _variants(layer, x, mask):
    """(message, output) for the typical mistakes on this layer and input (eval mode: no dropout)."""
    ffn, n1, n2 = layer.feed_forward, layer.norm1, layer.norm2

    def attn(h, m=mask):
        return layer.self_attention(h, h, h, m)

    def post(h, a=attn, first=n1, second=n2):
        h = first(h + a(h))
        return second(h + ffn(h))

    def pre(h, a=attn, first=n1, second=n2):
        h = h + a(first(h))
        return h + ffn(second(h))

    if layer.norm_first:
        no_attention_residual = attn(n1(x))
        no_attention_residual = no_attention_residual + ffn(n2(no_attention_residual))
        no_ffn_residual = ffn(n2(x + attn(n1(x))))
        normalised_stream = n1(x)  # x = norm1(x) overwrote the residual stream
        normalised_stream = n2(normalised_stream + attn(normalised_stream))
        normalised_stream = normalised_stream + ffn(normalised_stream)
        mistakes = [
            (
                f"{WANTS_PRE_NORM} x + Sublayer(LayerNorm(x)), not LayerNorm(x + Sublayer(x)). "
                "Branch on layer.norm_first.",
                post(x),
            ),
            (
                f"{NO_ATTENTION_RESIDUAL}: add the layer's input x "
                "to the attention output (x = x + attention(norm1(x))).",
                no_attention_residual,
            ),
            (
                f"{NO_FFN_RESIDUAL}: return x + feed_forward(norm2(x)), not feed_forward(norm2(x)).",
                no_ffn_residual,
            ),
            (
                f"{PRE_NORM_STREAM}: x = x + attention(norm1(x)), not x = norm1(x); x = x + attention(x).",
                normalised_stream,
            ),
            (
                f"{PRE_FINAL_NORM} (the Encoder normalises once, after the last layer): drop the final LayerNorm.",
                n2(pre(x)),
            ),
            (
                f"{NORMS_SWAPPED}: norm1 belongs to self-attention, norm2 to the feed-forward network.",
                pre(x, first=n2, second=n1),
            ),
        ]
    else:
        no_attention_residual = n1(attn(x))
        no_attention_residual = n2(no_attention_residual + ffn(no_attention_residual))
        norm_before_add = x + n1(attn(x))
        norm_before_add = norm_before_add + n2(ffn(norm_before_add))
        mistakes = [
            (
                f"{WANTS_POST_NORM} LayerNorm(x + Sublayer(x)) (as in BERT), not x + Sublayer(LayerNorm(x)). "
                "Branch on layer.norm_first.",
                pre(x),
            ),
            (
                f"{NO_ATTENTION_RESIDUAL}: normalise x + attention(x), not attention(x) alone.",
                no_attention_residual,
            ),
            (
                f"{NO_FFN_RESIDUAL}: normalise x + feed_forward(x), not feed_forward(x) alone.",
                n2(ffn(n1(x + attn(x)))),
            ),
            (
                f"{NORM_BEFORE_ADD}: post-norm normalises the sum, LayerNorm(x + Sublayer(x)).",
                norm_before_add,
            ),
            (
                f"{NORMS_SWAPPED}: norm1 belongs to self-attention, norm2 to the feed-forward network.",
                post(x, first=n2, second=n1),
            ),
        ]
    if mask is not None:

        def unmasked(h):
            return attn(h, None)

        forgot_mask = pre(x, a=unmasked) if layer.norm_first else post(x, a=unmasked)
        mistakes.append(
            (
                f"{MASK_UNUSED}: pass it on to layer.self_attention(x, x, x, mask), "
                "so no query attends to a masked (padding) key.",
                forgot_mask,
            )
        )
    return mistakes


def _eval_case(candidate, norm_first, with_mask, seed):
    layer = _make_layer(norm_first, seed).eval()  # eval(): dropout must be off
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 5, D_MODEL, generator=generator)
    mask = padding_mask(torch.tensor([[3, 1, 4, 0, 0], [2, 7, 1, 8, 2]])) if with_mask else None
    order = "pre-norm" if norm_first else "post-norm"
    context = f"{order} layer, {'with' if with_mask else 'without'} a padding mask"
    with torch.no_grad():
        got = call(candidate, layer, x, mask)
        again = call(candidate, layer, x, mask)
        expected = encoder_layer_forward(layer, x, mask)
        expect_tensor(got, expected.shape, what=f"output ({context})")
        expect_plain(got, x.device, f"output ({context})")
        if isinstance(again, torch.Tensor) and again.shape == got.shape and not close(got, again, atol=0, rtol=0):
            raise Mistake(
                f"{OWN_DROPOUT} ({context}): "
                "you applied dropout yourself (F.dropout's training=True by default?). Use layer.dropout, "
                "an nn.Dropout that switches off after layer.eval()."
            )
        diagnose(got, expected, known_mistakes=_variants(layer, x, mask), context=context)


def _dropout_on_the_sum(layer, x):
    """The mistake of dropping out the residual sum x + Sublayer(x) instead of the sublayer's output.

    It draws the same random numbers in the same order as the right forward pass, so with the
    same seed it gives exactly what a learner's code with this mistake gives."""
    drop, norm1, norm2, ffn = layer.dropout, layer.norm1, layer.norm2, layer.feed_forward

    def attn(h):
        return layer.self_attention(h, h, h)

    if layer.norm_first:
        x = drop(x + attn(norm1(x)))
        return drop(x + ffn(norm2(x)))
    x = norm1(drop(x + attn(x)))
    return norm2(drop(x + ffn(x)))


def _train_case(candidate, norm_first, seed):
    """In training mode the sublayer outputs go through layer.dropout before the residual add."""
    layer = _make_layer(norm_first, seed, dropout=0.3).train()
    x = torch.randn(2, 5, D_MODEL, generator=torch.Generator().manual_seed(seed))
    order = "pre-norm" if norm_first else "post-norm"
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        got = call(candidate, layer, x, None)
        torch.manual_seed(seed)
        expected = encoder_layer_forward(layer, x)
        torch.manual_seed(seed)
        layer.dropout.eval()  # the same computation without the layer's own dropout
        no_layer_dropout = encoder_layer_forward(layer, x)
        layer.dropout.train()
        torch.manual_seed(seed)
        dropout_on_sum = _dropout_on_the_sum(layer, x)
    diagnose(
        got,
        expected,
        known_mistakes=[
            (
                f"{NO_LAYER_DROPOUT} before it is added to x: x + layer.dropout(attention(...)), and the same for the feed-forward output.",
                no_layer_dropout,
            ),
            (
                f"{DROPOUT_ON_SUM}; it belongs on the sublayer's output only, "
                "before the residual addition: x + layer.dropout(Sublayer(x)). Dropping out the sum would also "
                "zero parts of the residual stream x, the path that carries the input through the layers.",
                dropout_on_sum,
            ),
        ],
        context=f"{order} layer in training mode with dropout 0.3, random numbers seeded the same for you and the reference",
    )


@exercise(
    "encoder_layer_forward",
    solution=encoder_layer_forward,
    hints=[
        "Two sublayers, each wrapped in a residual connection and a LayerNorm: self-attention "
        "(layer.self_attention(q, k, v, mask), with q = k = v) then the feed-forward network (layer.feed_forward).",
        "Post-norm (layer.norm_first is False): x = norm1(x + attention(x)), then norm2(x + feed_forward(x)). "
        "Pre-norm: x = x + attention(norm1(x)), then x + feed_forward(norm2(x)).",
        "Wrap each sublayer's output in layer.dropout(...) before adding it, and pass the mask on: "
        "`a = layer.dropout(layer.self_attention(h, h, h, mask))`.",
    ],
)
def check_encoder_layer_forward(candidate):
    for norm_first in (False, True):
        for with_mask in (False, True):
            _eval_case(candidate, norm_first, with_mask, seed=11 + 2 * norm_first + with_mask)
    for norm_first in (False, True):
        _train_case(candidate, norm_first, seed=21 + norm_first)


# ----------------------------------------------------------------------------------------------
# training_step

# batch, positions and digits all differ, so a loss over the wrong axis cannot line up by chance
BATCH, SEQ, VOCAB = 3, 5, 7
# (Adam's first step is nearly sign(gradient): too sensitive to rounding for a comparison)
_OPTIMIZERS = {
    "SGD (lr=0.1)": lambda params: torch.optim.SGD(params, lr=0.1),
    "SGD with momentum and weight decay": lambda params: torch.optim.SGD(
        params, lr=0.05, momentum=0.9, weight_decay=0.01
    ),
}


def _bench(seed):
    """A tiny sorter, a batch, and gradients left over from an 'earlier batch' (one per parameter)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = TinyTransformer(VOCAB, d_model=8, num_heads=2, num_layers=1, max_len=SEQ)
    g = generator(seed)
    inputs = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    stale = [0.5 * torch.randn(p.shape, generator=g) for p in model.parameters()]
    return model, inputs, inputs.sort(dim=-1).values, stale


def _fresh(bench, make_optimizer):
    """A copy of the bench's model in eval mode (as after an accuracy check), with stale gradients."""
    model, _, _, stale = bench
    model = copy.deepcopy(model).eval()
    for p, g in zip(model.parameters(), stale, strict=True):
        p.grad = g.clone()
    return model, make_optimizer(model.parameters())


def _flat(tensors):
    return torch.cat([t.detach().flatten() for t in tensors])


def _grads(model):
    """The gradients the step left behind, or None if there are none (or all are zero)."""
    grads = [p.grad for p in model.parameters()]
    if any(g is None for g in grads) or all(not g.any() for g in grads):
        return None
    return _flat(grads)


def _logits_loss(model, inputs, targets):
    logits = model(inputs)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _without_zero_grad(model, optimizer, inputs, targets):
    loss = _logits_loss(model, inputs, targets)
    loss.backward()  # adds to the earlier batch's gradients
    optimizer.step()
    return loss.item()


def _loss_variants(model, inputs, targets, loss):
    """(message, loss value) for the usual ways of getting the loss itself wrong."""
    with torch.no_grad():
        logits = model(inputs)
        flat, flat_targets = logits.reshape(-1, VOCAB), targets.reshape(-1)
        per_position = F.cross_entropy(flat, flat_targets, reduction="none")
        return [
            (
                f"{LOSS_SUMMED} of the batch (reduction='sum'), not the mean: "
                "F.cross_entropy averages by default; keep that, so the step size does not grow with the batch.",
                per_position.sum().item(),
            ),
            (
                "your loss is summed over the positions of each sequence and averaged over the batch: "
                "average over every position (F.cross_entropy's default on the [B*S, V] scores).",
                per_position.reshape(BATCH, SEQ).sum(-1).mean().item(),
            ),
            (
                f"{SOFTMAX_FIRST}: it takes the raw scores (logits) and applies "
                "log_softmax itself, so a softmax in front squashes the scores twice. Pass the logits.",
                F.cross_entropy(logits.softmax(-1).reshape(-1, VOCAB), flat_targets).item(),
            ),
            (
                f"{NLL_ON_LOGITS}: nll_loss expects log-probabilities. Use F.cross_entropy "
                "on the logits (it is log_softmax + nll_loss in one).",
                F.nll_loss(flat, flat_targets).item(),
            ),
            (
                f"{PAIRED_WRONGLY}: you flattened the logits after moving an axis "
                "(e.g. logits.transpose(1, 2).reshape(-1, V)), so row n of the scores is not position n's. "
                "Flatten [B, S, V] -> [B*S, V] with logits.reshape(-1, V) and the targets with targets.reshape(-1) "
                "(or keep the shapes and pass logits.permute(0, 2, 1): cross_entropy wants the classes on axis 1).",
                F.cross_entropy(logits.transpose(1, 2).reshape(-1, VOCAB), flat_targets).item(),
            ),
            (
                f"{PAIRED_WRONGLY}: the targets were flattened in another order "
                "(targets.T or targets.transpose(0, 1)) than the logits. Flatten both the same way: "
                "logits.reshape(-1, V) and targets.reshape(-1).",
                F.cross_entropy(flat, targets.T.reshape(-1)).item(),
            ),
            (
                f"{LOSS_AFTER_UPDATE} (a second forward pass); return the loss "
                "of this step's forward pass, the one you called backward() on.",
                loss,
            ),
        ]


def _check_step(candidate, bench, optimizer_name):
    make_optimizer = _OPTIMIZERS[optimizer_name]
    _, inputs, targets, _ = bench
    context = f"batch of {BATCH} sequences of {SEQ} digits 0..{VOCAB - 1}, optimizer {optimizer_name}"
    model, optimizer = _fresh(bench, make_optimizer)
    before = _flat(model.parameters())
    try:
        got = call(candidate, model, optimizer, inputs.clone(), targets.clone())
    except Mistake as m:
        if "modified by an inplace operation" in str(m):
            raise Mistake(
                f"{STEP_BEFORE_BACKWARD}: the step changed the parameters in place, and "
                "backward() needs the values the forward pass used (hence PyTorch's 'modified by an inplace "
                "operation' error). Order: optimizer.zero_grad(), loss.backward(), optimizer.step()."
            ) from None
        if "to match target batch_size" in str(m):
            raise Mistake(
                f"{ROWS_DIFFER}: flatten the logits [B, S, V] to "
                "[B*S, V] with logits.reshape(-1, logits.shape[-1]) (the last axis holds the V classes) and the "
                f"targets [B, S] to [B*S] with targets.reshape(-1) ({context})."
            ) from None
        if "Expected target size" in str(m) or "expected target size" in str(m).lower():
            raise Mistake(
                f"F.cross_entropy(logits, targets) with logits [B, S, V] {CLASSES_ON_AXIS_1}. Flatten to one row per position, F.cross_entropy(logits.reshape(-1, V), "
                f"targets.reshape(-1)), or move the classes to axis 1 with logits.permute(0, 2, 1) ({context})."
            ) from None
        raise

    reference, reference_optimizer = _fresh(bench, make_optimizer)
    expected_loss = training_step(reference, reference_optimizer, inputs, targets)
    expected = _flat(reference.parameters())
    after = _flat(model.parameters())

    if got is None:
        raise Mistake(f"your function returned None: {RETURN_FLOAT}, `return loss.item()`.")
    if isinstance(got, torch.Tensor):
        raise Mistake(
            f"{RETURN_FLOAT}, `loss.item()`, not the tensor: a loss tensor keeps the whole "
            "computation graph of the step alive, and a list of them (the loss history) holds every step's graph."
        )
    if not isinstance(got, float):
        raise Mistake(f"{RETURN_FLOAT} (`loss.item()`); you returned a {type(got).__name__}.")
    if not model.training:
        raise Mistake(
            f"{LEFT_IN_EVAL}: call model.train() first. The model may come "
            "from an evaluation (model.eval() switches dropout off); training needs it back on."
        )
    if torch.equal(after, before):
        if _grads(model) is None:
            raise Mistake(
                f"{NO_GRADIENTS}: call loss.backward() to compute them, "
                "and zero the old ones BEFORE backward (optimizer.zero_grad(); loss.backward(); optimizer.step()), "
                f"not between backward and step ({context})."
            )
        raise Mistake(
            f"{NO_STEP}: call optimizer.step() AFTER "
            f"loss.backward() (before it, there is nothing new to step with) ({context})."
        )
    if not close(after, expected):
        wrong_model, wrong_optimizer = _fresh(bench, make_optimizer)
        _without_zero_grad(wrong_model, wrong_optimizer, inputs, targets)
        if close(after, _flat(wrong_model.parameters())):
            raise Mistake(
                f"{STALE_GRADIENTS}: backward() ADDS to .grad, so call "
                f"optimizer.zero_grad() before loss.backward() in every step, or the gradients accumulate ({context})."
            )
        _name_loss_mistake(got, bench, make_optimizer, model, context)  # a wrong loss gives wrong gradients too
        diff = (after - expected).abs().max().item()
        raise Mistake(
            f"the parameters after your step differ from the reference's by up to {diff:.3g} ({context}): "
            "one step is model.train(); logits = model(inputs); loss = cross-entropy over every position; "
            "optimizer.zero_grad(); loss.backward(); optimizer.step()."
        )
    if abs(got - expected_loss) > 1e-5 * max(1.0, abs(expected_loss)):
        _name_loss_mistake(got, bench, make_optimizer, model, context)
        raise Mistake(f"the loss you returned is {got:.6g}, the reference's is {expected_loss:.6g} ({context}).")


def _name_loss_mistake(got, bench, make_optimizer, stepped_model, context):
    """Raise the named mistake if the returned loss is what a known wrong loss gives."""
    _, inputs, targets, _ = bench
    with torch.no_grad():
        after_update = _logits_loss(stepped_model, inputs, targets).item()
    start, _ = _fresh(bench, make_optimizer)
    for message, value in _loss_variants(start, inputs, targets, after_update):
        if abs(got - value) <= 1e-5 * max(1.0, abs(value)):
            raise Mistake(f"{message} ({context})")


@exercise(
    "training_step",
    solution=training_step,
    hints=[
        "Five lines: model.train(); logits = model(inputs); loss = ...; then the three optimizer/gradient "
        "calls; return the loss as a float.",
        "logits are [B, S, V] and targets [B, S]: F.cross_entropy wants [N, V] and [N], so "
        "F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)).",
        "The order matters: optimizer.zero_grad() (backward ADDS to .grad), loss.backward(), optimizer.step(); "
        "then `return loss.item()`.",
    ],
)
def check_training_step(candidate):
    for seed, optimizer_name in [(31, "SGD (lr=0.1)"), (32, "SGD with momentum and weight decay")]:
        with torch.random.fork_rng(devices=[]):  # the learner's random stream stays as it was
            _check_step(candidate, _bench(seed), optimizer_name)
