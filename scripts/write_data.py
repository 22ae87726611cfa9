"""Write data/: the course's stories as text and its stored results as CSV tables, from the package.

    python scripts/write_data.py           # (re)write data/
    python scripts/write_data.py --check   # exit 1, naming the stale files, if data/ is not what it would write

The lessons load course_utils/data/ (it ships inside the wheel); data/ holds views of it to open in an
editor or a spreadsheet. Each view is made from the package here, never edited by hand, so nothing is
stored twice: tests/scripts/test_data_folder.py checks that data/ is exactly what this script writes.
The CSVs have one row per observation (a seed, a step, a distance...), the lessons' names for the columns
and every number exactly as the JSON holds it (Python's repr); with "\\n" line endings, the same bytes
on every run.
"""

import argparse
import csv
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from course_utils.data import data_path  # noqa: E402
from course_utils.stories import story_corpus  # noqa: E402

OUT = ROOT / "data"
# The GPU benchmark tables (`make gpu-benchmark` writes them to artifacts/gpu/) are copied into data/ by
# hand once they have run on a GPU: measurements, not views, so --check leaves them alone.
NOT_WRITTEN = "*_benchmark.csv"


def stored(name):
    return json.loads(data_path(name).read_text())


def stories():
    # The stories lessons 10-14 train and measure on: as many as the stored models read (10,000), not
    # story_corpus's default of 1,500, which is only the start of them.
    return story_corpus(stored("language_model_settings.json")["settings"]["num_stories"])


def language_model_curves():
    model, levers = stored("language_model_settings.json"), stored("copying_levers.json")
    runs = [("stored model", seed, model["settings"], model["runs"][str(seed)]["curves"]) for seed in model["seeds"]]
    # copying_levers.py trains seed 0 of each lever (the JSON does not repeat it)
    runs += [(lever, 0, run["settings"], run["curves"]) for lever, run in levers.items()]
    names = [name for name in runs[0][3] if name != "eval_steps"]
    rows = [
        [run, seed, settings["repeats"], settings["steps"], step, *(curves[name][i] for name in names)]
        for run, seed, settings, curves in runs
        for i, step in enumerate(curves["eval_steps"])
    ]
    return ["run", "seed", "repeats", "budget", "step", *names], rows


def head_ablation():
    effects = stored("head_ablation_minilm.json")
    rows = [
        [layer, head, zeroed, effects["mean"][layer][head]]
        for layer, heads in enumerate(effects["zero"])
        for head, zeroed in enumerate(heads)
    ]
    return ["layer", "head", "drop when zeroed", "drop when mean-ablated"], rows


def induction_curves():
    runs = stored("induction_runs.json")["runs"]
    rows = [
        [int(seed), step, run["first_half"][i], run["second_half"][i]]
        for seed, run in runs.items()
        for i, step in enumerate(run["eval_steps"])
    ]
    return ["seed", "step", "first half loss", "second half loss"], rows


def induction_heads():
    runs = stored("induction_runs.json")["runs"]
    rows = [
        [int(seed), layer, head, score, run["induction"][layer][head]]
        for seed, run in runs.items()
        for layer, heads in enumerate(run["previous_token"])
        for head, score in enumerate(heads)
    ]
    return ["seed", "layer", "head", "previous-token score", "induction score"], rows


def long_context():
    # step 0 is the model before the fine-tune ("untrained"); dynamic NTK is measured there only
    stored_runs = stored("long_context_runs.json")
    rows = []
    for seed, methods in stored_runs["runs"].items():
        for method, run in methods.items():
            rows += [[method, int(seed), 0, measure, value] for measure, value in run["untrained"].items()]
            for i, step in enumerate(run.get("eval_steps", [])):
                rows += [[method, int(seed), step, measure, values[i]] for measure, values in run["curves"].items()]
    return ["method", "seed", "step", "measure", "value"], rows


def hairpins_200_steps():
    seeds = stored("long_range_seeds.json")
    runs = [(kind, seeds["settings"]["hidden_size"] if kind == "GRU" else "", by_seed)
            for kind, by_seed in seeds["hairpins"].items()]  # fmt: skip
    runs += [("GRU", int(width), by_seed) for width, by_seed in seeds["widths"].items()]
    rows = [
        [kind, hidden, int(seed), distance, accuracy]
        for kind, hidden, by_seed in runs
        for seed, run in by_seed.items()
        for distance, accuracy in zip(run["distances"], run["accuracy"], strict=True)
    ]
    return ["model", "hidden size", "seed", "distance", "accuracy"], rows


def marked_bases_200_steps():
    seeds = stored("long_range_seeds.json")
    far, last = seeds["settings"]["far"], seeds["settings"]["max_distance"]
    runs = [(int(k), f"{k}-{last}", by_seed) for k, by_seed in seeds["loads"].items()]
    runs.append((1, f"{far}-{last}", seeds["long_only"]))  # one base, trained only where it lies far back
    rows = [
        [k, trained, int(seed), int(distance), accuracy]
        for k, trained, by_seed in runs
        for seed, run in by_seed.items()
        for distance, accuracy in run["by_distance"].items()
    ]
    return ["marked bases", "trained on distances", "seed", "distance", "accuracy"], rows


def hairpins_2000_steps():
    curves = stored("long_range_curves.json")
    rows = [
        [kind, int(seed), step, int(distance), accuracies[i]]
        for kind, by_seed in curves["hairpins"].items()
        for seed, run in by_seed.items()
        for distance, accuracies in run.items()
        if distance not in ("eval_steps", "first_losses")
        for i, step in enumerate(run["eval_steps"])
    ]
    return ["model", "seed", "step", "distance", "accuracy"], rows


def marked_bases_2000_steps():
    curves = stored("long_range_curves.json")
    far, last = curves["settings"]["far"], curves["settings"]["max_distance"]
    runs = [
        (kind, int(k), f"{k}-{last}", by_seed)
        for kind, loads in curves["loads"].items()
        for k, by_seed in loads.items()
    ]
    runs += [(kind, 1, f"{far}-{last}", by_seed) for kind, by_seed in curves["long_only"].items()]
    rows = [
        [kind, k, trained, int(seed), step, run["near"][i], run["far"][i]]
        for kind, k, trained, by_seed in runs
        for seed, run in by_seed.items()
        for i, step in enumerate(run["eval_steps"])
    ]
    return ["model", "marked bases", "trained on distances", "seed", "step", "near accuracy", "far accuracy"], rows


def recall_by_pairs():
    rows = [
        [run["mixer"], run["seed"], int(pairs), accuracy]
        for run in stored("recall_results.json")["runs"]
        for pairs, accuracy in run["accuracy_by_pairs"].items()
    ]
    return ["mixer", "seed", "pairs", "accuracy"], rows


def recall_by_distance():
    rows = [
        [run["mixer"], run["seed"], run["distance_pairs"], distance, accuracy]
        for run in stored("recall_results.json")["runs"]
        for distance, accuracy in zip(run["distances"], run["accuracy_by_distance"], strict=True)
    ]
    return ["mixer", "seed", "pairs", "distance", "accuracy"], rows


def translation_seeds():
    # the swaps: of the 168 phrases, in how many the article (the adjective) takes the gender of the donor
    # phrase, whose noun has the other gender, when the encoder's vector of 'the' (of the noun) is the donor's
    swaps = {
        "article_follows_when_the_swapped": "article follows donor ('the' swapped)",
        "article_follows_when_noun_swapped": "article follows donor (noun swapped)",
        "adjective_follows_when_the_swapped": "adjective follows donor ('the' swapped)",
        "adjective_follows_when_noun_swapped": "adjective follows donor (noun swapped)",
    }
    rows = [
        [int(seed), run["exact_match"], *run["reads"], run["alignment_accuracy"], *map(run.get, swaps), run["route"]]
        for seed, run in stored("translation_seeds.json")["runs"].items()
    ]
    header = ["seed", "exact match", "la reads", "voiture reads", "bleue reads", "alignment accuracy"]
    return [*header, *swaps.values(), "gender read from"], rows


def vision_seeds():
    runs = stored("vision_seeds.json")["runs"]
    first = next(iter(runs.values()))
    layers = first["share_by_layer"]  # [layer][head]: the share of [CLS] attention on the shape's patches
    shares = [f"share layer {layer} head {head}" for layer in range(len(layers)) for head in range(len(layers[0]))]
    tests = [f"occluded: {name}" for name in first["occlusion"]]
    rows = [
        [int(seed), run["accuracy"], *(s for heads in run["share_by_layer"] for s in heads), run["rollout_share"],
         run["even_share"], *(run["occlusion"][name] for name in first["occlusion"]), run["most_attended_holds_shape"]]
        for seed, run in runs.items()
    ]  # fmt: skip
    header = ["seed", "held-out accuracy", *shares, "rollout share", "even share", *tests]
    return header + ["most attended patch holds the shape"], rows


# data/README.md's line for each file: which lesson uses it, where it comes from, what it holds
D = "course_utils/data/"
FILES = {
    "stories.txt": (stories, "10, 11, 13, 14", "course_utils/stories.py",
                    "the stories corpus the language model trains on, one story a line"),
    "language_model_curves.csv": (language_model_curves, "10", f"{D}language_model_settings.json, {D}copying_levers.json",
                                  "validation loss and the copying measurements during training, the stored model's "
                                  "three seeds and seed 0 of each lever (repeats: crops of the 32 in a batch that "
                                  "are random words said again and again; budget: the run's steps)"),
    "head_ablation.csv": (head_ablation, "06b", f"{D}head_ablation_minilm.json",
                          "drop of the paraphrase gap with each MiniLM head removed"),
    "induction_curves.csv": (induction_curves, "11", f"{D}induction_runs.json",
                             "held-out loss on each half of the repeated sequences during training"),
    "induction_heads.csv": (induction_heads, "11", f"{D}induction_runs.json",
                            "each head's previous-token and induction scores after training"),
    "long_context.csv": (long_context, "14", f"{D}long_context_runs.json",
                         "each RoPE scaling method's loss by position bucket and copy loss by distance, "
                         "before (step 0) and during the fine-tune"),
    "hairpins_200_steps.csv": (hairpins_200_steps, "05b", f"{D}long_range_seeds.json",
                               "held-out hairpin accuracy by distance after the lesson's 200 steps, the GRUs "
                               "(hidden size 80, and the wider ones) and the attention model"),
    "marked_bases_200_steps.csv": (marked_bases_200_steps, "05b", f"{D}long_range_seeds.json",
                                   "the memory-load control: the GRU's accuracy by distance with k marked bases "
                                   "after 200 steps, trained on distances k-31 (or 16-31 only)"),
    "hairpins_2000_steps.csv": (hairpins_2000_steps, "05b", f"{D}long_range_curves.json",
                                "hairpin accuracy by distance every 100 steps of 10 times the lesson's budget"),
    "marked_bases_2000_steps.csv": (marked_bases_2000_steps, "05b", f"{D}long_range_curves.json",
                                    "the memory-load control, GRU and attention model, every 100 steps of 10 "
                                    "times the budget (near: accuracy at distances up to 15, far: 16-31)"),
    "recall_by_pairs.csv": (recall_by_pairs, "12", f"{D}recall_results.json",
                            "held-out recall accuracy of each mixer against the number of key-value pairs"),
    "recall_by_distance.csv": (recall_by_distance, "12", f"{D}recall_results.json",
                               "recall accuracy by distance from query back to its pair, at 64 pairs"),
    "translation_seeds.csv": (translation_seeds, "05c", f"{D}translation_seeds.json",
                              "the translator from nine seeds: exact match, words read, swap counts, gender route"),
    "vision_seeds.csv": (vision_seeds, "05d", f"{D}vision_seeds.json",
                         "the tiny ViT from five seeds: accuracy, [CLS] attention on the shape, occlusion tests"),
}  # fmt: skip


def as_csv(header, rows):
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return text.getvalue()


def readme():
    lines = [
        "# data/",
        "",
        "Views of what the lessons load, to open in an editor or a spreadsheet.",
        "**Do not edit: regenerate with `python scripts/write_data.py`** (`--check` names the stale files).",
        "The sources stay in course_utils/data/, where the installed package finds them; every number in a",
        "CSV is its JSON's, one row per observation (a seed, a step, a distance...).",
        "",
    ]
    for name, (_, lessons, source, about) in FILES.items():
        lesson = "lessons" if "," in lessons else "lesson"
        lines.append(f"- `{name}`: {about} ({lesson} {lessons}; from {source}).")
    lines += [
        "",
        "stories.txt is a view: the lessons generate the same text themselves (course_utils/stories.py), so",
        "editing or replacing the file changes nothing they do. Its SHA-256 is the `corpus_sha256` of",
        "course_utils/data/language_model_settings.json, the corpus the stored models were trained on.",
        "",
        "The GPU benchmark tables of lessons 07 and 09 (`make gpu-benchmark`, written to artifacts/gpu/ by",
        "scripts/gpu_suite.py) will be committed here, as `*_benchmark.csv`, once they have run on a GPU;",
        "they are measurements, not views, so the script neither writes nor checks them.",
        "",
    ]
    return "\n".join(lines)


def contents():
    """{file name: bytes}: everything this script writes into data/."""
    files = {"README.md": readme().encode()}
    for name, (make, *_) in FILES.items():
        made = make()
        files[name] = (made if isinstance(made, str) else as_csv(*made)).encode()
    return files


def stale(folder, files):
    """The names in ``folder`` that differ from ``files``: missing, changed, or not written by this script."""
    present = {p.name for p in folder.iterdir() if not p.match(NOT_WRITTEN)} if folder.is_dir() else set()
    changed = [name for name, data in files.items() if name not in present or (folder / name).read_bytes() != data]
    return sorted(changed + list(present - set(files)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if data/ is stale")
    parser.add_argument("--out", type=Path, default=OUT, help="the folder (default: data/)")
    args = parser.parse_args(argv)
    files = contents()
    if args.check:
        names = stale(args.out, files)
        if names:
            print(f"{args.out} is stale: {', '.join(names)}; run python scripts/write_data.py", file=sys.stderr)
            return 1
        return 0
    args.out.mkdir(exist_ok=True)
    for name, data in files.items():
        (args.out / name).write_bytes(data)
    print(f"wrote {len(files)} files to {args.out}", file=sys.stderr)
    extra = [name for name in stale(args.out, files) if name not in files]
    if extra:  # left for whoever put them there to remove: this script deletes nothing
        print(f"not written by this script (--check fails until they are removed): {', '.join(extra)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
