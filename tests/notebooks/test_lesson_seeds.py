"""Lessons run with other values of their parameters cell (`make test-seeds`, apart from `make test`).

Lesson 11 is committed with SEED = 0, but its parameters cell lets papermill dissect the stored model of
any seed, and its asserts state claims about "every stored seed": it runs, top to bottom, with each other
stored seed. Lesson 12 runs with a shorter LIVE_STEPS. The runs took 136 s (lesson 11) with 2 workers on a
shared 2-core machine, more than a `make test` can spare."""

from pathlib import Path

import nbformat
import pytest

from course_utils import induction

ROOT = Path(__file__).resolve().parents[2]
LESSON = ROOT / "notebooks" / "11_induction_heads.ipynb"
OTHER_SEEDS = [seed for seed in induction.load_runs()["seeds"] if seed != 0]


@pytest.mark.seeds
@pytest.mark.parametrize("seed", OTHER_SEEDS, ids=lambda s: f"seed{s}")
def test_lesson_11_runs_with_every_stored_seed(seed, tmp_path, monkeypatch):
    import papermill

    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the kernel imports this checkout's course_utils
    monkeypatch.setenv("MPLBACKEND", "Agg")
    out = tmp_path / LESSON.name
    # raises PapermillExecutionError, naming the cell, if any cell fails (an assert that holds for seed 0 only)
    papermill.execute_notebook(
        str(LESSON),
        str(out),
        parameters={"SEED": seed},
        kernel_name="python3",
        cwd=str(LESSON.parent),
        progress_bar=False,
    )
    nb = nbformat.read(out, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    injected = [c for c in code if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and f"SEED = {seed}" in injected[0].source, "papermill did not set SEED"
    assert all(c.execution_count is not None for c in code), "some cells of the lesson did not run"


@pytest.mark.seeds
def test_lesson_12_runs_with_another_live_steps(tmp_path, monkeypatch):
    """LIVE_STEPS is listed as changeable: a shorter re-run compares the losses it has with the stored ones."""
    import papermill

    lesson = ROOT / "notebooks" / "12_beyond_softmax.ipynb"
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    out = tmp_path / lesson.name
    papermill.execute_notebook(
        str(lesson),
        str(out),
        parameters={"LIVE_STEPS": 100, "DECODE_LENGTH": 256},
        kernel_name="python3",
        cwd=str(lesson.parent),
        progress_bar=False,
    )
    printed = "".join(o.get("text", "") for c in nbformat.read(out, as_version=4).cells for o in c.get("outputs", []))
    assert "100 losses compared, largest difference from the stored ones below 1e-4: True" in printed


@pytest.mark.seeds
def test_lesson_05b_runs_with_the_longer_training_it_suggests(tmp_path, monkeypatch):
    """05b invites STEPS = 1000: every cell runs, and the live GRU does better than at the committed 200 steps."""
    import papermill

    lesson = ROOT / "notebooks" / "05b_why_attention_replaced_recurrence.ipynb"
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    out = tmp_path / lesson.name
    papermill.execute_notebook(
        str(lesson), str(out), parameters={"STEPS": 1000}, kernel_name="python3", cwd=str(lesson.parent),
        progress_bar=False,
    )  # fmt: skip
    printed = "".join(o.get("text", "") for c in nbformat.read(out, as_version=4).cells for o in c.get("outputs", []))
    assert "1000 steps of 64 hairpins" in printed
    mean_far = float(printed.split("mean over distances >= 15: ")[1][:4])
    assert mean_far > 0.6, "with 5x the budget the GRU should hold far bases much better than at 200 steps (0.45)"
