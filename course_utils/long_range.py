"""Long-range dependencies, measured: a recurrent network against attention (lesson 05b).

The task is a DNA *hairpin*. A strand of ``stem_length`` random bases is followed by
``stem_length`` query tokens ``?``; at query position ``stem_length + k`` the model must
write the complement of base ``stem_length - 1 - k`` (A<->T, C<->G). Read together, the
answers are the strand's reverse complement, the sequence that folds back and pairs with it.
Answer ``k`` depends on one base ``2k + 1`` positions back, so one sequence holds every
distance 1, 3, ..., 2 * stem_length - 1, and the bases are uniform random: no local
statistic helps (chance is 1 in 4).

    inputs, targets = hairpins(64, stem_length=16)
    history = train_on_hairpins(RecurrentModel(), 16, held_out, steps=200)
    distances, accuracy = accuracy_by_distance(model, *held_out)

In the hairpin task a long distance comes with a full memory: at query ``k`` the recurrent
network must still hold the ``stem_length - k`` bases it has not answered yet. Two controls
separate the two (``marked_bases``): one marked base at a distance of 1 to 31 (the distance
alone), and ``k`` marked bases all at the same distance (the memory load alone).

``recurrent_forward`` is the loop of a plain recurrent network (the lesson's first exercise);
``gradient_by_distance`` measures how strongly token 0 still moves the output at position t
(the second).
"""

import torch
import torch.nn as nn

from course_utils import _validate
from course_utils.toy_task import sequence_ids
from course_utils.training import fit
from course_utils.transformer import TinyTransformer

__all__ = [
    "BASES",
    "QUERY",
    "VOCAB",
    "CONTROL_VOCAB",
    "recurrent_forward",
    "gradient_by_distance",
    "complement",
    "hairpins",
    "partner_distances",
    "one_marked_base",
    "marked_bases",
    "to_text",
    "RecurrentModel",
    "attention_model",
    "count_parameters",
    "train_on_hairpins",
    "train_on_task",
    "accuracy_on_queries",
    "accuracy_by_distance",
    "attention_on_partner",
    "plot_accuracy_by_distance",
]

BASES = "ACGT"
QUERY = "?"  # "write the paired base here"
VOCAB = BASES + QUERY  # token ids 0..4
_HAIRPIN_VOCAB_SIZE = len(VOCAB)
MARKED = BASES.lower()  # a base to remember in the controls: "a" is a marked "A"
CONTROL_VOCAB = VOCAB + MARKED  # the controls' token ids 0..8 (marked base = 5 + its base id)


def recurrent_forward(x, W_xh, W_hh, b, h0):
    """A plain (Elman) recurrent network, one time step after the other.

    x: [B, T, d_in]; W_xh: [d_in, d_h]; W_hh: [d_h, d_h]; b: [d_h]; h0: [B, d_h].
    h_t = tanh(x_t W_xh + h_{t-1} W_hh + b). Returns (outputs [B, T, d_h], h_T [B, d_h]).
    """
    _validate.recurrent_inputs(x, W_xh, W_hh, b, h0)
    h = h0
    outputs = []
    for t in range(x.shape[1]):  # sequential: step t needs the state of step t - 1
        h = torch.tanh(x[:, t] @ W_xh + h @ W_hh + b)
        outputs.append(h)
    return torch.stack(outputs, dim=1), h


def gradient_by_distance(layer, inputs, distances, probe):
    """How strongly input 0 moves the output at position t: |d (layer(x)[0, t] . probe) / d x[0, 0]|, per t.

    layer: x [B, T, d] -> outputs [B, T, d_out]; inputs: [B, T, d] (sequence 0 is used); distances:
    positions t; probe: [d_out], the fixed direction along which each output is read.
    Returns a tensor [len(distances)] of gradient norms in the inputs' dtype (lesson 05b's exercise).
    """
    _validate.gradient_inputs(layer, inputs, distances, probe)
    norms = []
    for t in distances:
        x = inputs.detach().clone().requires_grad_(True)  # a fresh leaf: gradients of earlier t do not add up
        (layer(x)[0, t] @ probe).backward()
        norms.append(x.grad[0, 0].norm())  # the gradient with respect to token 0 only
    return torch.stack(norms)


def complement(bases):
    """Paired bases: A<->T, C<->G. With the ids A=0, C=1, G=2, T=3 that is 3 - id."""
    return 3 - bases


def hairpins(batch_size, stem_length, generator=None):
    """``batch_size`` random strands, each followed by query tokens, and the paired bases as targets.

    Returns inputs [B, 2 * stem_length] (ids into VOCAB) and targets of the same shape:
    -100 (ignored by the loss) on the strand, the complement of the mirror base on the queries.
    """
    batch_size, stem_length = (
        _validate.positive_int(batch_size, "batch_size"),
        _validate.positive_int(stem_length, "stem_length"),
    )
    strand = torch.randint(0, len(BASES), (batch_size, stem_length), generator=generator)
    queries = torch.full((batch_size, stem_length), VOCAB.index(QUERY))
    targets = torch.full((batch_size, 2 * stem_length), -100)
    # query k pairs with base stem_length - 1 - k: the strand read backwards
    targets[:, stem_length:] = complement(strand.flip(1))
    return torch.cat([strand, queries], dim=1), targets


def partner_distances(stem_length):
    """How far back each query's partner base lies: 1, 3, ..., 2 * stem_length - 1."""
    stem_length = _validate.positive_int(stem_length, "stem_length")
    return 2 * torch.arange(stem_length) + 1


def one_marked_base(batch_size, length=32, generator=None):
    """Control 1, the distance alone: one marked base somewhere in a random strand, asked for at the end.

    Each sequence is ``length - 1`` random bases, one of them marked (lower case, ids 5..8 of
    CONTROL_VOCAB), then one query ``?``, whose target is the complement of the marked base.
    Whatever the distance, the model has one base to hold. Returns (inputs [B, length],
    targets [B, length], -100 except at the query, distances [B] from 1 to length - 1).
    """
    batch_size, length = _validate.positive_int(batch_size, "batch_size"), _validate.positive_int(length, "length")
    if length < 2:
        raise ValueError(f"length must be at least 2 (one base and the query), got {length}")
    inputs = torch.randint(0, len(BASES), (batch_size, length), generator=generator)
    where = torch.randint(0, length - 1, (batch_size,), generator=generator)
    rows = torch.arange(batch_size)
    marked = inputs[rows, where]
    inputs[rows, where] = len(VOCAB) + marked  # the marked form of the same base
    inputs[:, -1] = VOCAB.index(QUERY)
    targets = torch.full((batch_size, length), -100)
    targets[:, -1] = complement(marked)
    return inputs, targets, length - 1 - where


def marked_bases(batch_size, num_marked, max_distance=31, generator=None, min_distance=None):
    """Control 2, the memory load: ``num_marked`` = k marked bases, all asked for at the same distance.

    A sequence is k marked bases (a block starting at a random place), random plain bases around
    them, and k queries at the end; query j asks for the complement of marked base j. All k answers
    lie the same distance d back, drawn per sequence from k..max_distance (d >= k: k bases held at
    once need at least k positions; ``min_distance`` raises the lower end). The sequence has
    max_distance + k tokens. With k = 1 this is the distance alone, like ``one_marked_base``.
    Returns (inputs, targets, distances [B]).
    """
    batch_size, k = _validate.positive_int(batch_size, "batch_size"), _validate.positive_int(num_marked, "num_marked")
    max_distance = _validate.positive_int(max_distance, "max_distance")
    if k > max_distance:
        raise ValueError(
            f"num_marked ({k}) must be at most max_distance ({max_distance}): k bases held need k positions"
        )
    low = k if min_distance is None else _validate.positive_int(min_distance, "min_distance")
    if not k <= low <= max_distance:
        raise ValueError(f"min_distance must lie between num_marked ({k}) and max_distance ({max_distance}), got {low}")
    length = max_distance + k
    inputs = torch.randint(0, len(BASES), (batch_size, length), generator=generator)
    distances = torch.randint(low, max_distance + 1, (batch_size,), generator=generator)
    start = max_distance - distances  # marked base j at start + j, its query at max_distance + j
    columns = start[:, None] + torch.arange(k)  # [B, k]
    marked = inputs.gather(1, columns)
    inputs.scatter_(1, columns, len(VOCAB) + marked)
    inputs[:, max_distance:] = VOCAB.index(QUERY)
    targets = torch.full_like(inputs, -100)
    targets[:, max_distance:] = complement(marked)
    return inputs, targets, distances


def to_text(tokens):
    """[T] token ids -> a readable string such as 'ACGT????' (marked bases in lower case)."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 1:
        raise ValueError(f"expected one sequence of token ids [T], got {getattr(tokens, 'shape', type(tokens))}")
    return "".join(CONTROL_VOCAB[i] for i in tokens.tolist())


class RecurrentModel(nn.Module):
    """Embedding -> GRU (left to right) -> a linear read-out per position: logits [B, T, 4].

    ``vocab_size``: len(VOCAB) for hairpins, len(CONTROL_VOCAB) for the controls' marked bases.
    """

    def __init__(self, hidden_size=80, embed_dim=16, vocab_size=_HAIRPIN_VOCAB_SIZE):
        super().__init__()
        self.embedding = nn.Embedding(
            _validate.positive_int(vocab_size, "vocab_size"), _validate.positive_int(embed_dim, "embed_dim")
        )
        self.gru = nn.GRU(embed_dim, _validate.positive_int(hidden_size, "hidden_size"), batch_first=True)
        self.output_linear = nn.Linear(hidden_size, len(BASES))

    def forward(self, tokens):
        states, _ = self.gru(self.embedding(tokens))  # [B, T, hidden]: state t has read tokens 0..t
        return self.output_linear(states)


def attention_model(stem_length, d_model=32, num_heads=2, num_layers=2):
    """Lesson 05's TinyTransformer sized for hairpins (its read-out scores all 5 tokens; ``?`` is never a target)."""
    stem_length = _validate.positive_int(stem_length, "stem_length")
    return TinyTransformer(len(VOCAB), d_model, num_heads, num_layers, max_len=2 * stem_length)


def count_parameters(model):
    return sum(p.numel() for p in model.parameters())


def _check_pair(inputs, targets):
    if not isinstance(inputs, torch.Tensor) or inputs.dim() != 2 or inputs.shape[1] % 2:
        raise ValueError(f"inputs must be hairpins [B, 2 * stem_length], got {getattr(inputs, 'shape', inputs)}")
    if not isinstance(targets, torch.Tensor) or targets.shape != inputs.shape:
        raise ValueError(f"targets must have the inputs' shape {tuple(inputs.shape)}")


def train_on_hairpins(
    model, stem_length, held_out, steps=200, batch_size=64, lr=1e-2, seed=0, eval_every=50, progress=True,
    evaluate=None,
):  # fmt: skip
    """Train on fresh random hairpins with the course's loop (``training.fit``); return its history.

    Hairpins that are in ``held_out`` (inputs, targets) are dropped from every batch, so the
    accuracy measured on them is on strands the model never saw. Every ``eval_every`` steps the
    history records ``accuracy``, the held-out accuracy averaged over all distances, or what
    ``evaluate() -> {name: float}`` measures instead (e.g. the accuracy at each distance).
    """
    _check_pair(*held_out)
    if held_out[0].shape[1] != 2 * stem_length:
        raise ValueError(f"held_out hairpins have length {held_out[0].shape[1]}, expected {2 * stem_length}")
    held_out_ids = sequence_ids(held_out[0][:, :stem_length], len(BASES))

    def sample_batch(generator):
        inputs, targets = hairpins(batch_size, stem_length, generator)
        keep = ~torch.isin(sequence_ids(inputs[:, :stem_length], len(BASES)), held_out_ids)
        if not keep.any():  # an empty batch would give a NaN loss
            raise ValueError(
                f"every hairpin of a training batch is held out: train_on_hairpins(seed={seed}) draws the "
                f"held-out strands again; use another seed than the held-out set's (or a longer stem_length)"
            )
        return inputs[keep], targets[keep]

    def mean_accuracy():
        return {"accuracy": accuracy_by_distance(model, *held_out)[1].mean().item()}

    return fit(
        model, sample_batch, steps=steps, lr=lr, seed=seed, evaluate=evaluate or mean_accuracy, eval_every=eval_every,
        progress=progress, desc=f"training {type(model).__name__}",
    )  # fmt: skip


def train_on_task(model, sample_batch, steps=200, lr=1e-2, seed=0, progress=False, evaluate=None, eval_every=50):
    """Train on the batches ``sample_batch(generator) -> (inputs, targets)`` of a control task with ``fit``.

    ``evaluate() -> {name: float}``, if given, is recorded every ``eval_every`` steps (a learning curve).
    """
    return fit(
        model, sample_batch, steps=steps, lr=lr, seed=seed, evaluate=evaluate, eval_every=eval_every,
        progress=progress, desc=f"training {type(model).__name__}",
    )  # fmt: skip


@torch.no_grad()
def accuracy_on_queries(model, inputs, targets):
    """[B, T] inputs and targets (-100 where nothing is asked) -> [B, T] bool, right where asked (False elsewhere)."""
    if not isinstance(inputs, torch.Tensor) or inputs.dim() != 2:
        raise ValueError(f"inputs must be token ids [B, T], got {getattr(inputs, 'shape', type(inputs))}")
    if not isinstance(targets, torch.Tensor) or targets.shape != inputs.shape:
        raise ValueError(
            f"targets must have the inputs' shape {tuple(inputs.shape)}, got {getattr(targets, 'shape', targets)}"
        )
    was_training = model.training
    model.eval()
    predictions = model(inputs.to(next(model.parameters()).device)).argmax(-1).cpu()
    model.train(was_training)
    return (predictions == targets) & (targets != -100)


@torch.no_grad()
def accuracy_by_distance(model, inputs, targets):
    """(distances [stem_length], accuracy [stem_length]): the share of right answers per distance."""
    _check_pair(inputs, targets)
    stem_length = inputs.shape[1] // 2
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    predictions = model(inputs.to(device)).argmax(-1).cpu()
    model.train(was_training)
    right = predictions[:, stem_length:] == targets[:, stem_length:]
    return partner_distances(stem_length), right.float().mean(dim=0)


def attention_on_partner(attentions, stem_length):
    """The weight each query puts on its partner base, averaged over the batch.

    attentions: [layers, B, heads, T, T] (``model.attentions()``), T = 2 * stem_length.
    Returns [layers, heads, stem_length]: entry k is query stem_length + k's weight on key
    stem_length - 1 - k (partner distance 2k + 1).
    """
    stem_length = _validate.positive_int(stem_length, "stem_length")
    if attentions.dim() != 5 or attentions.shape[-2:] != (2 * stem_length, 2 * stem_length):
        raise ValueError(
            f"expected attentions [layers, B, heads, {2 * stem_length}, {2 * stem_length}], "
            f"got {tuple(attentions.shape)}"
        )
    k = torch.arange(stem_length, device=attentions.device)
    return attentions[..., stem_length + k, stem_length - 1 - k].mean(dim=1)


def plot_accuracy_by_distance(distances, curves, title=None):
    """Accuracy against distance, one labelled line per model; ``curves``: {label: accuracy}."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    for (label, accuracy), marker in zip(curves.items(), "osd^v", strict=False):
        ax.plot(distances.tolist(), accuracy.tolist(), marker=marker, label=label)
    ax.axhline(1 / len(BASES), color="grey", linestyle=":", label=f"chance (1/{len(BASES)})")
    ax.set(xlabel="distance to the partner base (positions)", ylabel="held-out accuracy", ylim=(0, 1.05))
    ax.legend(loc="center left")  # clear of the chance line and of both curves at short distances
    if title:
        ax.set_title(title)
    return fig
