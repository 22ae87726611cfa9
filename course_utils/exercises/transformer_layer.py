"""Lesson 05's exercise: the forward pass of one encoder layer, from its sublayers.

The candidate is ``fn(layer, x, mask=None) -> Tensor`` for an ``EncoderLayer``:
it must use ``layer.self_attention``, ``layer.norm1``, ``layer.feed_forward``,
``layer.norm2`` and ``layer.dropout`` in post-norm order, or in pre-norm order
when ``layer.norm_first`` is True.
"""

import torch

from course_utils.attention import padding_mask
from course_utils.exercises import exercise
from course_utils.exercises.checking import Mistake, call, diagnose
from course_utils.transformer import EncoderLayer, encoder_layer_forward

D_MODEL, NUM_HEADS, D_FF = 8, 2, 16


class _LayerUnderTest(EncoderLayer):
    """An EncoderLayer that refuses to run its own forward: the exercise is to write it."""

    def forward(self, x, mask=None):
        raise Mistake(
            "you called the layer itself (`layer(x)`), which runs the course's forward pass. "
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
                "this layer has norm_first=True: use the pre-norm order x + Sublayer(LayerNorm(x)), "
                "not LayerNorm(x + Sublayer(x)). Branch on layer.norm_first.",
                post(x),
            ),
            (
                "the residual connection around self-attention is missing: add the layer's input x "
                "to the attention output (x = x + attention(norm1(x))).",
                no_attention_residual,
            ),
            (
                "the residual connection around the feed-forward network is missing: "
                "return x + feed_forward(norm2(x)), not feed_forward(norm2(x)).",
                no_ffn_residual,
            ),
            (
                "in pre-norm the residual carries the un-normalised x: x = x + attention(norm1(x)), "
                "not x = norm1(x); x = x + attention(x).",
                normalised_stream,
            ),
            (
                "a pre-norm layer's output is not normalised (the Encoder normalises once, after the last layer): "
                "drop the final LayerNorm.",
                n2(pre(x)),
            ),
            (
                "norm1 and norm2 are swapped: norm1 belongs to self-attention, norm2 to the feed-forward network.",
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
                "this layer has norm_first=False (post-norm, as in BERT): use LayerNorm(x + Sublayer(x)), "
                "not x + Sublayer(LayerNorm(x)). Branch on layer.norm_first.",
                pre(x),
            ),
            (
                "the residual connection around self-attention is missing: normalise x + attention(x), "
                "not attention(x) alone.",
                no_attention_residual,
            ),
            (
                "the residual connection around the feed-forward network is missing: "
                "normalise x + feed_forward(x), not feed_forward(x) alone.",
                n2(ffn(n1(x + attn(x)))),
            ),
            (
                "you normalised the sublayer's output and then added x: post-norm normalises the sum, "
                "LayerNorm(x + Sublayer(x)).",
                norm_before_add,
            ),
            (
                "norm1 and norm2 are swapped: norm1 belongs to self-attention, norm2 to the feed-forward network.",
                post(x, first=n2, second=n1),
            ),
        ]
    if mask is not None:

        def unmasked(h):
            return attn(h, None)

        forgot_mask = pre(x, a=unmasked) if layer.norm_first else post(x, a=unmasked)
        mistakes.append(
            (
                "the mask was not used: pass it on to layer.self_attention(x, x, x, mask), "
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
        if (
            isinstance(got, torch.Tensor)
            and isinstance(again, torch.Tensor)
            and got.shape == again.shape
            and not torch.equal(got, again)
        ):
            raise Mistake(
                f"your output changes from one call to the next although the layer is in eval mode ({context}): "
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
                "in training mode (layer.train()) each sublayer's output goes through layer.dropout before "
                "it is added to x: x + layer.dropout(attention(...)), and the same for the feed-forward output.",
                no_layer_dropout,
            ),
            (
                "you applied layer.dropout to the sum x + Sublayer(x); it belongs on the sublayer's output only, "
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
