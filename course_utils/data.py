"""Where the small files the lessons load live (the repository's data/ folder)."""

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent.parent / "data"


def data_path(name):
    path = DATA_DIR / name
    if not path.exists():
        raise FileNotFoundError(f"course data file {name!r} not found in {DATA_DIR}; is your checkout complete?")
    return path
