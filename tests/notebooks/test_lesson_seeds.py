"""Lessons run with other values of their parameters cell (`make test-seeds`, apart from `make test`).

Lesson 11 is committed with SEED = 0, but its parameters cell lets papermill dissect the stored model of
any seed, and its asserts state claims about "every stored seed": it runs, top to bottom, with each other
stored seed. Lessons 05b, 10 and 12 run with other values of the parameters they list. The runs took 120 s
with 2 workers on a shared 2-core machine, more than a `make test` can spare."""

from pathlib import Path

import nbformat
import pytest

from course_utils import induction

ROOT = Path(__file__).resolve().parents[2]
OTHER_SEEDS = [seed for seed in induction.load_runs()["seeds"] if seed != 0]


def run_lesson(name, parameters, tmp_path, monkeypatch):
    """Run notebooks/<name> top to bottom with papermill's ``parameters``; return (notebook, printed text).

    Raises PapermillExecutionError, naming the cell, if any cell fails (e.g. an assert that holds for one value only).
    """
    import papermill

    lesson = ROOT / "notebooks" / name
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the kernel imports this checkout's course_utils
    monkeypatch.setenv("MPLBACKEND", "Agg")
    out = tmp_path / name
    papermill.execute_notebook(
        str(lesson), str(out), parameters=parameters, kernel_name="python3", cwd=str(lesson.parent), progress_bar=False
    )
    nb = nbformat.read(out, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), "some cells of the lesson did not run"
    return nb, "".join(o.get("text", "") for c in code for o in c.get("outputs", []))


@pytest.mark.seeds
@pytest.mark.parametrize("seed", OTHER_SEEDS, ids=lambda s: f"seed{s}")
def test_lesson_11_runs_with_every_stored_seed(seed, tmp_path, monkeypatch):
    nb, _ = run_lesson("11_induction_heads.ipynb", {"SEED": seed}, tmp_path, monkeypatch)
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and f"SEED = {seed}" in injected[0].source, "papermill did not set SEED"


@pytest.mark.seeds
def test_lesson_12_runs_with_another_live_steps(tmp_path, monkeypatch):
    """LIVE_STEPS is listed as changeable: a shorter re-run compares the losses it has with the stored ones."""
    _, printed = run_lesson("12_beyond_softmax.ipynb", {"LIVE_STEPS": 100, "DECODE_LENGTH": 256}, tmp_path, monkeypatch)
    assert "100 losses compared, largest difference from the stored ones below 1e-4: True" in printed


@pytest.mark.seeds
def test_lesson_05b_runs_with_the_longer_training_it_suggests(tmp_path, monkeypatch):
    """05b invites STEPS = 1000: every cell runs, and the live GRU does better than at the committed 200 steps."""
    _, printed = run_lesson("05b_why_attention_replaced_recurrence.ipynb", {"STEPS": 1000}, tmp_path, monkeypatch)
    assert "1000 steps of 64 hairpins" in printed
    mean_far = float(printed.split("mean over distances >= 15: ")[1][:4])
    assert mean_far > 0.6, "with 5x the budget the GRU should hold far bases much better than at 200 steps (0.45)"


@pytest.mark.seeds
def test_lesson_10_runs_with_other_live_and_streaming_settings(tmp_path, monkeypatch):
    """Lesson 10's parameters cell lists the live model's size and budget and section 7's window: all can change."""
    changed = {"LIVE_D_MODEL": 16, "LIVE_LAYERS": 1, "LIVE_STEPS": 40, "SHOW_PROGRESS": False,
               "STREAM_LENGTH": 150, "WINDOW": 16, "SINKS": 2}  # fmt: skip
    _, printed = run_lesson("10_language_model.ipynb", changed, tmp_path, monkeypatch)
    assert "after 40 steps" in printed and "150 tokens, window 16 (+ 2), sinks 2" in printed
