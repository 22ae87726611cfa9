"""data/ is exactly what scripts/write_data.py writes, and its views agree with the package's own data."""

import csv
import hashlib
import json
import subprocess
import sys
from pathlib import Path

from course_utils import language_model as lm
from course_utils.data import data_path
from course_utils.stories import story_corpus

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data"
sys.path.insert(0, str(ROOT / "scripts"))

import write_data  # noqa: E402


def test_data_is_exactly_what_the_script_writes(tmp_path):
    assert write_data.main(["--out", str(tmp_path)]) == 0
    written = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    committed = {p.name: p.read_bytes() for p in DATA.iterdir() if not p.match(write_data.NOT_WRITTEN)}
    assert sorted(committed) == sorted(written), "data/ has other files than the script writes"
    stale = sorted(name for name in written if committed[name] != written[name])
    assert not stale, f"stale in data/: {stale}; run python scripts/write_data.py"
    assert write_data.main(["--check"]) == 0


def test_every_file_has_its_readme_line_and_its_source():
    readme = (DATA / "README.md").read_text()
    assert "Do not edit: regenerate with `python scripts/write_data.py`" in readme
    for name, (_, _, sources, _) in write_data.FILES.items():
        assert f"- `{name}`: " in readme, f"data/README.md has no line for {name}"
        assert all((ROOT / source).is_file() for source in sources.split(", ")), (name, sources)


def test_the_stories_are_the_corpus_the_lessons_and_the_stored_models_read():
    text = (DATA / "stories.txt").read_bytes()
    assert text.decode() == story_corpus(lm.NUM_STORIES)  # what corpus_splits cuts into train and validation
    settings = json.loads(data_path(lm.SETTINGS_FILE).read_text())
    assert hashlib.sha256(text).hexdigest() == settings["corpus_sha256"]
    assert text.count(b"\n") == settings["settings"]["num_stories"] and b"\r" not in text


def row(name, **key):
    """The one row of data/name with these values in these columns."""
    with open(DATA / name, newline="") as f:
        (found,) = [r for r in csv.DictReader(f) if all(r[column] == str(value) for column, value in key.items())]
    return found


def test_a_csv_row_is_the_jsons_number():
    # the JSON read here, not through the script: one measure of one run in four of the files
    vision = json.loads(data_path("vision_seeds.json").read_text())["runs"]["3"]
    occluded = "the patches that hold the shape"
    assert row("vision_seeds.csv", seed=3)[f"occluded: {occluded}"] == repr(vision["occlusion"][occluded])
    assert row("vision_seeds.csv", seed=3)["share layer 1 head 0"] == repr(vision["share_by_layer"][1][0])

    yarn = json.loads(data_path("long_context_runs.json").read_text())["runs"]["2"]["yarn"]
    found = row("long_context.csv", method="yarn", seed=2, step=yarn["eval_steps"][-1], measure="copy 768")
    assert float(found["value"]) == yarn["curves"]["copy 768"][-1]

    recall = json.loads(data_path("recall_results.json").read_text())["runs"]
    (run,) = [r for r in recall if (r["mixer"], r["seed"]) == ("delta", 1)]
    found = row("recall_by_pairs.csv", mixer="delta", seed=1, pairs=64)
    assert float(found["accuracy"]) == run["accuracy_by_pairs"]["64"]

    sweep = json.loads(data_path("head_ablation_minilm.json").read_text())
    found = row("head_ablation.csv", layer=5, head=9)
    assert float(found["drop when zeroed"]) == sweep["zero"][5][9]
    assert float(found["drop when mean-ablated"]) == sweep["mean"][5][9]


def test_check_names_what_is_stale_and_leaves_the_gpu_tables_alone(tmp_path, capsys):
    assert write_data.main(["--out", str(tmp_path)]) == 0
    assert write_data.main(["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "07_efficient_attention_benchmark.csv").write_text("n,ms\n512,0.1\n")  # committed by hand
    assert write_data.main(["--check", "--out", str(tmp_path)]) == 0

    stories = tmp_path / "stories.txt"
    stories.write_bytes(stories.read_bytes().replace(b"Once", b"Twice", 1))
    (tmp_path / "vision_seeds.csv").unlink()
    (tmp_path / "notes.txt").write_text("mine\n")
    capsys.readouterr()
    assert write_data.main(["--check", "--out", str(tmp_path)]) == 1
    message = capsys.readouterr().err
    assert "notes.txt, stories.txt, vision_seeds.csv;" in message and "benchmark" not in message


def test_the_command_line_check_fails_on_a_tampered_copy(tmp_path):
    assert write_data.main(["--out", str(tmp_path)]) == 0
    table = tmp_path / "recall_by_pairs.csv"
    table.write_text(table.read_text().replace("\n", "\r\n"))  # the same numbers, other line endings
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "write_data.py"), "--check", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and "recall_by_pairs.csv" in done.stderr
