"""The first cell of every lesson: seeds, device, print options, plot defaults."""

import os
import random
import re

import numpy as np
import torch

__all__ = ["setup", "pick_device", "seed_everything", "reproducible_on"]


def pick_device(requested=None):
    """``requested``, else the COURSE_DEVICE environment variable, else CUDA if available, else CPU.

    ``requested`` and COURSE_DEVICE may be 'cpu', 'cuda', 'cuda:N' or 'mps', and must name a
    device this machine has; case and surrounding spaces are ignored ('CPU ' is 'cpu').
    An empty COURSE_DEVICE counts as unset.
    """
    if requested is not None:
        return _checked_device(requested, "device")
    name = os.environ.get("COURSE_DEVICE", "")
    if name.strip():
        return _checked_device(name, "COURSE_DEVICE")
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _available_devices():
    names = ["cpu"]
    if torch.cuda.is_available():
        names += ["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if torch.backends.mps.is_available():
        names.append("mps")
    return names


def _checked_device(value, source):
    """torch.device(value) if this machine has it; else an error that names ``source`` and lists what it has."""
    if isinstance(value, torch.device):
        value = str(value)
    if not isinstance(value, str):
        raise TypeError(f"{source} must be a device name such as 'cpu' or 'cuda', got {type(value).__name__}")
    name = value.strip().lower()
    available = _available_devices()
    if name in available:
        return torch.device(name)
    accepted = ", ".join(repr(n) for n in available)
    if re.fullmatch(r"cuda(:\d+)?|mps", name):  # a real device type, but not on this machine
        why = "this machine has no such device"
    else:
        why = "it is not a device name"
    raise ValueError(
        f"{source}={value!r}: {why}. Accepted here: {accepted} ('cuda', 'cuda:N' need an NVIDIA GPU that PyTorch "
        f"sees, 'mps' an Apple GPU; case and surrounding spaces are ignored)"
    )


def seed_everything(seed=0):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def reproducible_on(device):
    """On a CUDA GPU: deterministic algorithms and full float32 matmuls, so a GPU run differs from the
    CPU's by rounding only (the cells' NBVAL_TOLERANCE covers that), not by TF32's 10-bit mantissa or by
    atomics that add in a different order on every run. Nothing changes on a CPU, which is deterministic."""
    if torch.device(device).type != "cuda":
        return
    # cuBLAS needs a fixed workspace to be deterministic; read when its first handle is made
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # warn_only: an operation with no deterministic CUDA version warns (stderr) instead of stopping the lesson
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def setup(seed=0, device=None, quiet=False):
    """Seed everything, pick the device, set print options and plot defaults.

    Returns the torch.device the lesson should use. A device this machine does not
    have (``device`` or COURSE_DEVICE) fails here, before anything else is changed.
    """
    device = pick_device(device)
    seed_everything(seed)
    reproducible_on(device)
    # few decimals, so CPU and GPU print the same numbers
    torch.set_printoptions(precision=3, sci_mode=False)
    np.set_printoptions(precision=3, suppress=True)
    _plot_defaults()
    if not quiet:
        print(f"Seed: {seed} | Device: {device}")
    return device


def _plot_defaults():
    import matplotlib as mpl
    import seaborn as sns

    # colour-blind-safe palette for lines and bars; viridis for heatmaps
    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")
    mpl.rcParams.update({"figure.dpi": 100, "image.cmap": "viridis", "figure.figsize": (6.4, 4.0)})
