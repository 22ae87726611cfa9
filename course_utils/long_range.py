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

``recurrent_forward`` is the loop of a plain recurrent network (the lesson's exercise).
"""

import torch
import torch.nn as nn

from course_utils.attention import _positive_int
from course_utils.toy_task import sequence_ids
from course_utils.training import fit
from course_utils.transformer import TinyTransformer

__all__ = [
    "BASES",
    "QUERY",
    "VOCAB",
    "recurrent_forward",
    "complement",
    "hairpins",
    "partner_distances",
    "to_text",
    "RecurrentModel",
    "attention_model",
    "count_parameters",
    "train_on_hairpins",
    "accuracy_by_distance",
    "attention_on_partner",
    "plot_accuracy_by_distance",
]

BASES = "ACGT"
QUERY = "?"  # "write the paired base here"
VOCAB = BASES + QUERY  # token ids 0..4


def recurrent_forward(x, W_xh, W_hh, b, h0):
    """A plain (Elman) recurrent network, one time step after the other.

    x: [B, T, d_in]; W_xh: [d_in, d_h]; W_hh: [d_h, d_h]; b: [d_h]; h0: [B, d_h].
    h_t = tanh(x_t W_xh + h_{t-1} W_hh + b). Returns (outputs [B, T, d_h], h_T [B, d_h]).
    """
    h = h0
    outputs = []
    for t in range(x.shape[1]):  # sequential: step t needs the state of step t - 1
        h = torch.tanh(x[:, t] @ W_xh + h @ W_hh + b)
        outputs.append(h)
    return torch.stack(outputs, dim=1), h


def complement(bases):
    """Paired bases: A<->T, C<->G. With the ids A=0, C=1, G=2, T=3 that is 3 - id."""
    return 3 - bases


def hairpins(batch_size, stem_length, generator=None):
    """``batch_size`` random strands, each followed by query tokens, and the paired bases as targets.

    Returns inputs [B, 2 * stem_length] (ids into VOCAB) and targets of the same shape:
    -100 (ignored by the loss) on the strand, the complement of the mirror base on the queries.
    """
    batch_size, stem_length = _positive_int(batch_size, "batch_size"), _positive_int(stem_length, "stem_length")
    strand = torch.randint(0, len(BASES), (batch_size, stem_length), generator=generator)
    queries = torch.full((batch_size, stem_length), VOCAB.index(QUERY))
    targets = torch.full((batch_size, 2 * stem_length), -100)
    # query k pairs with base stem_length - 1 - k: the strand read backwards
    targets[:, stem_length:] = complement(strand.flip(1))
    return torch.cat([strand, queries], dim=1), targets


def partner_distances(stem_length):
    """How far back each query's partner base lies: 1, 3, ..., 2 * stem_length - 1."""
    stem_length = _positive_int(stem_length, "stem_length")
    return 2 * torch.arange(stem_length) + 1


def to_text(tokens):
    """[T] token ids -> a readable string such as 'ACGT????'."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 1:
        raise ValueError(f"expected one sequence of token ids [T], got {getattr(tokens, 'shape', type(tokens))}")
    return "".join(VOCAB[i] for i in tokens.tolist())


class RecurrentModel(nn.Module):
    """Embedding -> GRU (left to right) -> a linear read-out per position: logits [B, T, 4]."""

    def __init__(self, hidden_size=80, embed_dim=16):
        super().__init__()
        self.embedding = nn.Embedding(len(VOCAB), _positive_int(embed_dim, "embed_dim"))
        self.gru = nn.GRU(embed_dim, _positive_int(hidden_size, "hidden_size"), batch_first=True)
        self.output_linear = nn.Linear(hidden_size, len(BASES))

    def forward(self, tokens):
        states, _ = self.gru(self.embedding(tokens))  # [B, T, hidden]: state t has read tokens 0..t
        return self.output_linear(states)


def attention_model(stem_length, d_model=32, num_heads=2, num_layers=2):
    """Lesson 05's TinyTransformer sized for hairpins (its read-out scores all 5 tokens; ``?`` is never a target)."""
    stem_length = _positive_int(stem_length, "stem_length")
    return TinyTransformer(len(VOCAB), d_model, num_heads, num_layers, max_len=2 * stem_length)


def count_parameters(model):
    return sum(p.numel() for p in model.parameters())


def _check_pair(inputs, targets):
    if not isinstance(inputs, torch.Tensor) or inputs.dim() != 2 or inputs.shape[1] % 2:
        raise ValueError(f"inputs must be hairpins [B, 2 * stem_length], got {getattr(inputs, 'shape', inputs)}")
    if not isinstance(targets, torch.Tensor) or targets.shape != inputs.shape:
        raise ValueError(f"targets must have the inputs' shape {tuple(inputs.shape)}")


def train_on_hairpins(
    model, stem_length, held_out, steps=200, batch_size=64, lr=1e-2, seed=0, eval_every=50, progress=True
):
    """Train on fresh random hairpins with the course's loop (``training.fit``); return its history.

    Hairpins that are in ``held_out`` (inputs, targets) are dropped from every batch, so the
    accuracy measured on them is on strands the model never saw. Every ``eval_every`` steps the
    history records ``accuracy``, the held-out accuracy averaged over all distances.
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

    def evaluate():
        return {"accuracy": accuracy_by_distance(model, *held_out)[1].mean().item()}

    return fit(
        model, sample_batch, steps=steps, lr=lr, seed=seed, evaluate=evaluate, eval_every=eval_every,
        progress=progress, desc=f"training {type(model).__name__}",
    )  # fmt: skip


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
    stem_length = _positive_int(stem_length, "stem_length")
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
