"""Lesson 05d's tiny ViT trained from five seeds: what its [CLS] attention and the occlusion tests say in each.

Run from the course folder: ``python scripts/vision_seeds.py`` (about half a minute on one CPU core).
It writes ``course_utils/data/vision_seeds.json``: the settings and, for every seed, the held-out accuracy, the share
of [CLS] attention on the shape's patches per layer and head, attention rollout's share, the occlusion
accuracies, how often the last layer's most attended patch holds part of the shape, and the first
training losses. The lesson trains seed 0 live and prints the others from here;
``tests/scripts/test_vision_seeds.py`` checks that this script reproduces them.

Seed s seeds both the model's initial weights (torch.manual_seed(s)) and its training images.
"""

import json
import sys

import torch

from course_utils.data import DATA_DIR
from course_utils.training import fit
from course_utils.vision import (
    SHAPE_NAMES,
    TinyViT,
    accuracy,
    attention_on_shape,
    attention_rollout,
    make_shape_images,
    patchify,
    replace_patches,
    shape_batches,
)

OUT = DATA_DIR / "vision_seeds.json"
SETTINGS = {
    "image_size": 16, "patch_size": 4, "noise": 0.1, "d_model": 32, "num_heads": 2, "num_layers": 2,
    "steps": 300, "lr": 3e-3, "held_out": 2000, "held_out_seed": 1, "seeds": [0, 2, 3, 4, 5],
}  # fmt: skip
LOSSES_KEPT = 20
OCCLUSIONS = [
    "nothing replaced",
    "the patch the last layer's [CLS] attends to most",
    "one random patch",
    "the patches that hold the shape",
    "every patch except those that hold the shape",
]


def held_out_set():
    s = SETTINGS
    return make_shape_images(
        s["held_out"], torch.Generator().manual_seed(s["held_out_seed"]), s["image_size"], s["noise"]
    )


def trained(seed):
    s = SETTINGS
    torch.manual_seed(seed)
    vit = TinyViT(s["image_size"], s["patch_size"], 1, len(SHAPE_NAMES), s["d_model"], s["num_heads"], s["num_layers"])
    history = fit(vit, shape_batches(64, s["image_size"], s["noise"]), steps=s["steps"], lr=s["lr"], seed=seed,
                  progress=False)  # fmt: skip
    return vit, history


def occlusion_tests(vit, images, labels, masks, p):
    """The lesson's five occlusion tests, and how often the most attended patch holds part of the shape."""
    n = len(images)
    on_shape = patchify(masks[:, None].float(), p).amax(-1) > 0  # [N, patches]
    with torch.no_grad():
        vit(images)
    last_map = vit.cls_attention().mean(1).flatten(1).cpu()  # last layer, heads averaged
    rows = torch.arange(n)
    most_attended = torch.zeros_like(on_shape)
    most_attended[rows, last_map.argmax(-1)] = True
    random_patch = torch.zeros_like(on_shape)
    random_patch[rows, torch.randint(on_shape.shape[1], (n,), generator=torch.Generator().manual_seed(3))] = True
    which = dict(zip(OCCLUSIONS, [torch.zeros_like(on_shape), most_attended, random_patch, on_shape, ~on_shape],
                     strict=True))  # fmt: skip
    accuracies = {}
    for name, covered in which.items():
        occluded = replace_patches(images, covered, p, torch.Generator().manual_seed(4), SETTINGS["noise"])
        accuracies[name] = round(accuracy(vit, occluded, labels), 4)
    return accuracies, round(on_shape[most_attended].float().mean().item(), 4)


def measure(vit, images, labels, masks):
    p, layers = SETTINGS["patch_size"], SETTINGS["num_layers"]
    with torch.no_grad():
        vit(images)
    shares = [attention_on_shape(vit.cls_attention(layer), masks, p)[0].mean(0).tolist() for layer in range(layers)]
    even = attention_on_shape(vit.cls_attention(0), masks, p)[1].mean().item()
    grid = SETTINGS["image_size"] // p
    rollout = attention_rollout(vit.attentions())[:, 0, 1:].reshape(len(images), 1, grid, grid)
    occluded, most_attended_on_shape = occlusion_tests(vit, images, labels, masks, p)
    return {
        "accuracy": round(accuracy(vit, images, labels), 4),
        "share_by_layer": [[round(v, 4) for v in layer] for layer in shares],
        "even_share": round(even, 4),
        "rollout_share": round(attention_on_shape(rollout, masks, p)[0].mean().item(), 4),
        "occlusion": occluded,
        "most_attended_holds_shape": most_attended_on_shape,
    }


def main():
    torch.set_num_threads(1)
    images, labels, masks = held_out_set()
    runs = {}
    for seed in SETTINGS["seeds"]:
        vit, history = trained(seed)
        runs[str(seed)] = {
            **measure(vit, images, labels, masks),
            "loss": [round(v, 5) for v in history["loss"][:LOSSES_KEPT]],
        }
        print(seed, runs[str(seed)]["most_attended_holds_shape"], file=sys.stderr)
    OUT.write_text(json.dumps({"settings": SETTINGS, "runs": runs}, indent=1) + "\n")
    print(f"wrote {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
