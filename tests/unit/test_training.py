"""course_utils.training.fit: the loop every lesson's model trains with."""

import pytest
import torch
import torch.nn as nn

from course_utils.training import fit, learning_rate
from tests.kernels import unix_sockets_config


def _linear_task(generator, batch=32):
    # class = which of the 3 inputs is largest: a linear model can learn it
    x = torch.randn(batch, 3, generator=generator)
    return x, x.argmax(-1)


def test_fit_learns_and_records_each_measure():
    torch.manual_seed(0)
    model = nn.Linear(3, 3)
    test_x = torch.randn(500, 3, generator=torch.Generator().manual_seed(9))

    def evaluate():
        with torch.no_grad():
            return {"accuracy": (model(test_x).argmax(-1) == test_x.argmax(-1)).float().mean().item()}

    history = fit(model, _linear_task, steps=200, lr=5e-2, warmup=10, evaluate=evaluate, eval_every=50, progress=False)
    assert len(history["loss"]) == 200
    assert history["eval_steps"] == [50, 100, 150, 200]
    assert len(history["accuracy"]) == 4
    assert history["accuracy"][-1] > 0.9
    assert sum(history["loss"][-20:]) < sum(history["loss"][:20])
    assert not model.training, "fit leaves the model in eval mode"


def test_fit_is_reproducible_and_leaves_global_state_alone():
    def run():
        torch.manual_seed(1)
        model = nn.Linear(3, 3)
        return fit(model, _linear_task, steps=20, seed=3, progress=False)["loss"]

    threads = torch.get_num_threads()
    state = torch.get_rng_state()
    first = run()
    torch.set_rng_state(state)
    assert run() == first
    assert torch.get_num_threads() == threads


def test_fit_passes_tuples_to_the_model_and_ignores_padding_targets():
    class TwoInputs(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(3, 4)

        def forward(self, pair):
            a, b = pair
            return self.linear(a + b)

    def sample(generator):
        a, b = torch.randn(8, 5, 3, generator=generator), torch.randn(8, 5, 3, generator=generator)
        targets = (a + b).argmax(-1)
        targets[:, -1] = -100  # padding: cross_entropy skips it
        return (a, b), targets

    history = fit(TwoInputs(), sample, steps=5, progress=False)
    assert all(torch.isfinite(torch.tensor(history["loss"])))


def test_a_step_that_returns_a_tensor_is_named():
    def bad_step(model, optimizer, inputs, targets):
        return nn.functional.cross_entropy(model(inputs), targets)

    with pytest.raises(TypeError, match=r"loss\.item\(\)"):
        fit(nn.Linear(3, 3), _linear_task, steps=1, step=bad_step, progress=False)


def test_learning_rate_warms_up_then_decays_to_zero():
    rates = [learning_rate(s, 100, 1.0, 10) for s in range(100)]
    assert rates[0] == pytest.approx(0.1) and rates[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(rates[9:-1], rates[10:], strict=True))
    assert rates[-1] < 0.01


@pytest.mark.parametrize("steps", [0, 2.5])
def test_steps_must_be_a_positive_int(steps):
    with pytest.raises(ValueError, match="positive int"):
        fit(nn.Linear(3, 3), _linear_task, steps=steps, progress=False)


def test_a_batch_whose_targets_are_all_padding_stops_with_a_clear_error():
    def all_padding(generator):
        x, _ = _linear_task(generator)
        return x, torch.full((x.shape[0],), -100)

    model = nn.Linear(3, 3)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=r"batch 0 has no target to learn from: every target is -100"):
        fit(model, all_padding, steps=3, progress=False)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True)), "no step on NaN"


def _run_in_a_kernel(code):
    """The outputs a notebook cell running ``code`` saves, as papermill and JupyterLab store them."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    client = NotebookClient(
        nb, timeout=120, kernel_name="python3", config=unix_sockets_config(), shutdown_kernel="immediate"
    )
    client.execute()
    return nb.cells[0].outputs


def test_in_a_notebook_the_progress_is_not_stderr_and_its_saved_output_is_fixed():
    code = (
        "import torch, torch.nn as nn\nfrom course_utils.training import fit\n"
        "def task(g):\n    x = torch.randn(32, 3, generator=g)\n    return x, x.argmax(-1)\n"
        "h = fit(nn.Linear(3, 3), task, steps=40, desc='training the probe')\nprint(len(h['loss']))"
    )
    outputs = _run_in_a_kernel(code)
    assert [o.get("name") for o in outputs if o.output_type == "stream"] == ["stdout"], outputs  # no stderr (pink)
    (line,) = [o for o in outputs if o.output_type == "display_data"]
    # what nbval compares with: the first display (nbval ignores updates), and what papermill saves
    assert line.data["text/plain"] == "training the probe: 40 steps"
    assert "training the probe: 40 steps" in line.data["text/html"]


def test_progress_updates_say_how_far_training_got():
    from course_utils.training import _Progress

    bar = _Progress(10, "training", enabled=False)
    assert bar._data(4, ", loss 0.5000")["text/plain"] == "training: step 4 of 10, loss 0.5000"
    assert '<progress value="4" max="10"' in bar._data(4)["text/html"]
