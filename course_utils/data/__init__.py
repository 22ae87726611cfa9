"""The small files the lessons load: stored results of the training scripts, weights, the toy.

They live in this folder, inside the package, so they are found wherever course_utils is: in the
checkout (`make install`), in an editable install, or installed from its wheel (`pip install .`).
"""

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent


def data_path(name):
    path = DATA_DIR / name
    if not path.exists():
        raise FileNotFoundError(
            f"course data file {name!r} not found in {DATA_DIR}; is your checkout, or your install, complete?"
        )
    return path


def assert_matches_stored(live, stored, atol, what="the stored run"):
    """Assert a live rerun matches a stored one: the same keys and shape, every number within atol.

    A trained result is a measurement, not a constant: another CPU's kernels, a GPU or the next PyTorch
    move its last digits, so a rerun is compared within the tolerance measured across such changes
    (CONTRIBUTING.md, "Compared outputs"), and everything that is not a number exactly.
    """
    if not (isinstance(atol, (int, float)) and atol >= 0):
        raise ValueError(f"atol must be a number >= 0, got {atol!r}")
    differences = list(_differences(live, stored, "", atol))
    if differences:
        shown = "; ".join(differences[:5]) + (f"; and {len(differences) - 5} more" if len(differences) > 5 else "")
        raise AssertionError(f"this run differs from {what} by more than {atol:g}: {shown}")


def _differences(live, stored, where, atol):
    """Each place where live and stored differ, as 'where: live vs stored'."""
    if getattr(live, "ndim", 0) > 0 and hasattr(live, "tolist"):  # a tensor or array, read as the list JSON stores
        live = live.tolist()
    if isinstance(stored, dict) and isinstance(live, dict):
        if set(map(str, live)) != set(map(str, stored)):
            yield f"{where or 'top'}: keys {sorted(map(str, live))} vs {sorted(map(str, stored))}"
            return
        by_name = {str(k): v for k, v in live.items()}
        for key, value in stored.items():
            yield from _differences(by_name[str(key)], value, f"{where}[{key!r}]", atol)
    elif isinstance(stored, (list, tuple)) and isinstance(live, (list, tuple)):
        if len(live) != len(stored):
            yield f"{where or 'top'}: {len(live)} items vs {len(stored)}"
            return
        for i, (a, b) in enumerate(zip(live, stored, strict=True)):
            yield from _differences(a, b, f"{where}[{i}]", atol)
    elif _is_number(live) and _is_number(stored) and not isinstance(stored, bool):
        if not abs(float(live) - float(stored)) <= atol:
            yield f"{where or 'top'}: {float(live):.6g} vs {float(stored):.6g}"
    elif live != stored:
        yield f"{where or 'top'}: {live!r} vs {stored!r}"


def _is_number(x):
    return isinstance(x, (int, float)) or (hasattr(x, "item") and getattr(x, "ndim", 1) == 0)
