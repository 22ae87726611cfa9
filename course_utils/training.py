"""The course's training loop: one step of gradient descent, repeated on fresh batches.

Lesson 05 trains a tiny Transformer with it (``toy_task.train``), lesson 05b/05c/05d a
recurrent network, a translator and a Vision Transformer. Every model here takes one
argument (a tensor, or a tuple that its ``forward`` unpacks) and returns class scores
``[..., classes]`` for targets ``[...]``; targets equal to -100 are ignored (padding).

    history = fit(model, sample_batch, steps=300, evaluate=lambda: {"accuracy": ...})
"""

import html
import math
import time

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


class _Progress:
    """A progress line: in a notebook, one output updated in place (not stderr, which JupyterLab
    shows in pink, like an error); elsewhere tqdm's text bar on stderr.

    The notebook's output ends as it began ("training: 300 steps"), so a saved notebook's output
    does not depend on timings or on how far the bar had got when it was saved."""

    def __init__(self, steps, desc, enabled):
        self.steps, self.desc, self.handle, self.bar, self.last = steps, desc, None, None, 0.0
        if not enabled:
            return
        if _in_notebook():
            from IPython.display import display

            self.handle = display(self._data(), raw=True, display_id=True)
        else:
            from tqdm import tqdm

            self.bar = tqdm(total=steps, desc=desc, mininterval=0.5)

    def _data(self, done=None, details=""):
        if done is None:
            text = f"{self.desc}: {self.steps} steps"
            return {"text/plain": text, "text/html": f"<span>{html.escape(text)}</span>"}
        text = f"{self.desc}: step {done} of {self.steps}{details}"
        bar = f'<progress value="{done}" max="{self.steps}" style="width:240px;vertical-align:middle"></progress>'
        return {"text/plain": text, "text/html": f"{bar} <span>{html.escape(text)}</span>"}

    def update(self, done, **measures):
        details = "".join(f", {name} {value}" for name, value in measures.items())
        if self.bar is not None:
            self.bar.update(1)
            if measures:
                self.bar.set_postfix(measures, refresh=False)
        elif self.handle is not None and (time.monotonic() - self.last > 0.5 or done == self.steps):
            self.last = time.monotonic()
            self.handle.update(self._data(done, details), raw=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()
        elif self.handle is not None:
            self.handle.update(self._data(), raw=True)  # as it began: see the class docstring


def _in_notebook():
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")


def _check_targets(targets, step_index):
    if isinstance(targets, torch.Tensor) and targets.numel() and bool((targets == -100).all()):
        raise ValueError(
            f"batch {step_index} has no target to learn from: every target is -100 (padding, which the loss "
            f"ignores), so the loss would be the mean of nothing (NaN) and training would go on with NaN. "
            f"Check that sample_batch puts real token ids (or classes) where the model should predict them."
        )


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
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    history = {"loss": [], "eval_steps": []}
    threads = torch.get_num_threads()
    if single_thread and device.type == "cpu":
        torch.set_num_threads(1)
    bar = _Progress(steps, desc, progress)
    try:
        model.train()
        for step_index in range(steps):
            inputs, targets = sample_batch(generator)
            _check_targets(targets, step_index)
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step_index, steps, lr, warmup)
            loss = step(model, optimizer, _to(inputs, device), targets.to(device))
            if not isinstance(loss, float):
                raise TypeError(
                    f"step(...) must return the loss as a Python float (loss.item()), got {type(loss).__name__}"
                )
            history["loss"].append(loss)
            shown = {"loss": f"{loss:.4f}"}
            if evaluate is not None and ((step_index + 1) % eval_every == 0 or step_index + 1 == steps):
                measures = evaluate()
                history["eval_steps"].append(step_index + 1)
                for name, value in measures.items():
                    history.setdefault(name, []).append(value)
                shown.update({name: f"{value:.3f}" for name, value in measures.items()})
            bar.update(step_index + 1, **shown)
    finally:
        bar.close()
        torch.set_num_threads(threads)
    model.eval()
    return history
