"""A toy task that only attention can solve, and a small training loop (lesson 05).

The task: read a sequence of digits and write out, at every position, the digit
that belongs there in the answer: the sorted sequence (``"sort"``) or the
reversed one (``"reverse"``). A feed-forward layer sees one position at a time,
so it cannot do either: position i must fetch information from other positions,
which is exactly what attention does.

    task = ToyTask("sort", seq_len=8, vocab_size=10)
    held_out = task.held_out(2000, seed=1)
    history = train(model, task, held_out, steps=400)
    accuracy(model, *held_out)   # -> (token accuracy, sequence accuracy)

``training_step`` is one step of the loop (forward, loss, zero_grad, backward,
step); lesson 05 asks the learner to write it, and ``train(step=...)`` runs theirs.

The held-out sequences never appear in training: ``train`` drops them from
every batch, so the accuracy measures generalisation, not memory.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from course_utils.training import fit, training_step

__all__ = ["ToyTask", "sequence_ids", "accuracy", "training_step", "train", "attention_share", "attention_by_value"]

_SOLVERS = {
    "sort": lambda x: x.sort(dim=-1).values,
    "reverse": lambda x: x.flip(-1),
}


def sequence_ids(tokens, vocab_size):
    """One integer per sequence (its digits read as a base-``vocab_size`` number)."""
    seq_len = tokens.shape[-1]
    if vocab_size**seq_len >= 2**62:
        raise ValueError(f"{vocab_size}**{seq_len} sequences are too many to number with int64")
    place_values = vocab_size ** torch.arange(seq_len - 1, -1, -1, device=tokens.device)
    return (tokens.long() * place_values).sum(-1)


@dataclass(frozen=True)
class ToyTask:
    """Random digit sequences and their answers."""

    name: str = "sort"
    seq_len: int = 8
    vocab_size: int = 10

    def __post_init__(self):
        if self.name not in _SOLVERS:
            raise ValueError(f"unknown task {self.name!r}; choose one of {sorted(_SOLVERS)}")
        if not isinstance(self.seq_len, int) or self.seq_len < 2:
            raise ValueError(f"seq_len must be an int >= 2, got {self.seq_len!r}")
        if not isinstance(self.vocab_size, int) or self.vocab_size < 2:
            raise ValueError(f"vocab_size must be an int >= 2, got {self.vocab_size!r}")

    def solve(self, inputs):
        """The right answer for each sequence: [B, seq_len] -> [B, seq_len]."""
        return _SOLVERS[self.name](inputs)

    def sample(self, batch_size, generator=None):
        """``batch_size`` random sequences (on the CPU, so every device sees the same data)."""
        inputs = torch.randint(0, self.vocab_size, (batch_size, self.seq_len), generator=generator)
        return inputs, self.solve(inputs)

    def held_out(self, n, seed=1):
        """``n`` distinct sequences set aside for measuring accuracy."""
        generator = torch.Generator().manual_seed(seed)
        inputs = self.sample(4 * n, generator)[0]
        seen, distinct = set(), []
        for row, sequence_id in zip(inputs, sequence_ids(inputs, self.vocab_size).tolist(), strict=True):
            if sequence_id not in seen and len(distinct) < n:
                seen.add(sequence_id)
                distinct.append(row)
        if len(distinct) < n:
            raise ValueError(
                f"could not draw {n} distinct sequences of length {self.seq_len} over {self.vocab_size} digits"
            )
        inputs = torch.stack(distinct)
        return inputs, self.solve(inputs)


@torch.no_grad()
def accuracy(model, inputs, targets, batch_size=1000):
    """(token accuracy, sequence accuracy) of the model's most likely outputs.

    Token accuracy counts right digits; sequence accuracy counts sequences with
    every digit right, the honest measure for sorting (one wrong digit = wrong answer).
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    right = []
    for start in range(0, len(inputs), batch_size):
        logits = model(inputs[start : start + batch_size].to(device))
        right.append((logits.argmax(-1).cpu() == targets[start : start + batch_size]))
    model.train(was_training)
    right = torch.cat(right)
    return right.float().mean().item(), right.all(dim=-1).float().mean().item()


def train(
    model,
    task,
    held_out,
    steps=400,
    batch_size=64,
    lr=1e-2,
    warmup=30,
    seed=0,
    eval_every=50,
    progress=True,
    single_thread=True,
    step=training_step,
):
    """Train ``model`` on fresh random batches of ``task``; return the history.

    Returns a dict with ``loss`` (one value per step), ``eval_steps`` and the
    held-out ``token_accuracy`` / ``sequence_accuracy`` at those steps.
    ``step``: the function that does one training step (``training_step``, or a learner's own).
    The loop itself is ``course_utils.training.fit``.
    """
    held_out_ids = sequence_ids(held_out[0], task.vocab_size)
    batches = iter(range(steps))

    def sample_batch(generator):
        step_index = next(batches)
        inputs, targets = task.sample(batch_size, generator)
        keep = ~torch.isin(sequence_ids(inputs, task.vocab_size), held_out_ids)  # never train on held-out data
        if not keep.any():
            # usually the same seed for training and held-out data: it draws the held-out sequences
            # again, so every batch would be empty and its loss NaN
            raise ValueError(
                f"every sequence of training batch {step_index} is held out: if train(seed={seed}) uses the seed "
                f"of task.held_out, it draws the held-out sequences again; use another seed for training "
                f"(or hold out fewer of the task's {task.vocab_size}**{task.seq_len} sequences)"
            )
        return inputs[keep], targets[keep]

    def evaluate():
        token_acc, seq_acc = accuracy(model, *held_out)
        return {"token_accuracy": token_acc, "sequence_accuracy": seq_acc}

    return fit(
        model, sample_batch, steps=steps, lr=lr, warmup=warmup, seed=seed, evaluate=evaluate,
        eval_every=eval_every, progress=progress, single_thread=single_thread, step=step,
        desc=f"training on {task.name}",
    )  # fmt: skip


def attention_share(attentions, marked):
    """How much of its attention a query puts, on average, on the keys ``marked`` for it.

    attentions: [layers, B, heads, q, k] (``model.attentions()``); marked: [B, q, k] bool,
    e.g. "this key holds the digit query i must output". Returns [layers, heads].
    """
    if attentions.dim() != 5 or marked.shape != (attentions.shape[1], *attentions.shape[3:]):
        raise ValueError(
            f"expected attentions [layers, B, heads, q, k] and marked [B, q, k]; "
            f"got {tuple(attentions.shape)} and {tuple(marked.shape)}"
        )
    marked = marked.to(attentions.device)[None, :, None].float()
    return (attentions * marked).sum(-1).mean(dim=(1, 3))


def attention_by_value(attentions, inputs, vocab_size):
    """Average attention from each query position to each key *value* (digit).

    attentions: [layers, B, heads, q, k]; inputs: [B, k] token ids.
    Returns [layers, heads, q, vocab_size]; each row sums to 1 (all the query's
    attention, sorted by the digit it lands on). It shows what a head looks for
    when the positions of the digits change from sequence to sequence.
    """
    one_hot = F.one_hot(inputs.to(attentions.device), vocab_size).float()  # [B, k, vocab]
    by_value = attentions @ one_hot[None, :, None]  # [layers, B, heads, q, vocab]
    return by_value.mean(dim=1)
