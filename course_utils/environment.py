"""The first cell of every lesson: seeds, device, print options, plot defaults."""

import os
import random

import numpy as np
import torch

__all__ = ["setup", "pick_device", "seed_everything"]


def pick_device(requested=None):
    """``requested``, else the COURSE_DEVICE environment variable, else CUDA if available, else CPU."""
    name = requested or os.environ.get("COURSE_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {name!r} was asked for (COURSE_DEVICE?) but PyTorch sees no CUDA GPU")
    return device


def seed_everything(seed=0):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def setup(seed=0, device=None, quiet=False):
    """Seed everything, pick the device, set print options and plot defaults.

    Returns the torch.device the lesson should use.
    """
    seed_everything(seed)
    # few decimals, so CPU and GPU print the same numbers
    torch.set_printoptions(precision=3, sci_mode=False)
    np.set_printoptions(precision=3, suppress=True)
    _plot_defaults()
    device = pick_device(device)
    if not quiet:
        print(f"Seed: {seed} | Device: {device}")
    return device


def _plot_defaults():
    import matplotlib as mpl
    import seaborn as sns

    # colour-blind-safe palette for lines and bars; viridis for heatmaps
    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")
    mpl.rcParams.update({"figure.dpi": 100, "image.cmap": "viridis", "figure.figsize": (6.4, 4.0)})
