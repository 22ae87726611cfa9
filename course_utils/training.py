"""The course's training loop: one step of gradient descent, repeated on fresh batches.

Lesson 05 trains a tiny Transformer with it (``toy_task.train``), lesson 05b/05c/05d a
recurrent network, a translator and a Vision Transformer. Every model here takes one
argument (a tensor, or a tuple that its ``forward`` unpacks) and returns class scores
``[..., classes]`` for targets ``[...]``; targets equal to -100 are ignored (padding).

    history = fit(model, sample_batch, steps=300, evaluate=lambda: {"accuracy": ...})
"""

import math

import torch
import torch.nn.functional as F

__all__ = ["training_step", "learning_rate", "fit"]


def training_step(model, optimizer, inputs, targets):
    """One step of gradient descent on a batch; returns the batch's loss (before the update) as a float.

    inputs, targets: [B, S] token ids; the model gives logits [B, S, V].
    """
    model.train()  # dropout (if any) on: the model may come from an evaluation in eval mode
    logits = model(inputs)  # [B, S, V]: a score for every possible token at every position
    # one classification per position: cross_entropy wants [N, V] scores and [N] targets,
    # so every position of every sequence becomes one row (B * S rows)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    optimizer.zero_grad()  # backward() ADDS to .grad: clear the previous step's gradients first
    loss.backward()  # d loss / d parameter, into every parameter's .grad
    optimizer.step()  # move the parameters, using those gradients
    return loss.item()  # a float: keeping the tensor would keep its whole graph alive


def learning_rate(step, steps, peak, warmup):
    """Linear warm-up, then a cosine decay to zero: large steps early, fine ones at the end."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * 0.5 * (1 + math.cos(math.pi * progress))


def _to(batch, device):
    if isinstance(batch, (tuple, list)):
        return type(batch)(_to(part, device) for part in batch)
    return batch.to(device)


def fit(
    model,
    sample_batch,
    steps=400,
    lr=1e-2,
    warmup=30,
    seed=0,
    evaluate=None,
    eval_every=50,
    progress=True,
    single_thread=True,
    step=training_step,
    desc="training",
):
    """Train ``model`` with AdamW on ``steps`` batches from ``sample_batch(generator)``; return the history.

    ``sample_batch(generator) -> (inputs, targets)``: a fresh batch, drawn on the CPU with the
    ``torch.Generator`` it is given (seeded by ``seed``), so a run is the same on every machine.
    ``evaluate() -> {name: float}``: measured every ``eval_every`` steps and after the last.
    Returns ``{"loss": [one per step], "eval_steps": [...], name: [...] for each measure}``.
    ``step``: the function that does one training step (``training_step``, or a learner's own).
    ``single_thread``: on a CPU, a model this small trains faster on one thread
    (no cost of coordinating threads) and the result does not depend on the core count.
    """
    from tqdm import tqdm  # the plain (text) bar: it goes to stderr, which the notebook tests ignore

    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    history = {"loss": [], "eval_steps": []}
    threads = torch.get_num_threads()
    if single_thread and device.type == "cpu":
        torch.set_num_threads(1)
    try:
        model.train()
        bar = tqdm(range(steps), desc=desc, disable=not progress, mininterval=0.5)
        for step_index in bar:
            inputs, targets = sample_batch(generator)
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step_index, steps, lr, warmup)
            loss = step(model, optimizer, _to(inputs, device), targets.to(device))
            if not isinstance(loss, float):
                raise TypeError(
                    f"step(...) must return the loss as a Python float (loss.item()), got {type(loss).__name__}"
                )
            history["loss"].append(loss)
            if evaluate is not None and ((step_index + 1) % eval_every == 0 or step_index + 1 == steps):
                measures = evaluate()
                history["eval_steps"].append(step_index + 1)
                for name, value in measures.items():
                    history.setdefault(name, []).append(value)
                bar.set_postfix(loss=f"{loss:.4f}", **{name: f"{value:.3f}" for name, value in measures.items()})
    finally:
        torch.set_num_threads(threads)
    model.eval()
    return history
