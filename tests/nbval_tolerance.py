"""nbval, with a measured tolerance for the cells whose printed numbers depend on floating-point order.

nbval compares every output exactly. That holds for seeded arithmetic whose result does not depend on the
order of a sum (the Orange row, shapes, counts, token ids), but not for a trained model or a chaotic
quantity: another CPU's vector kernels, MKL's code path, the thread count, a GPU or the next PyTorch sum
in another order, and training carries the last bit into the printed digits. Such a cell says so on a
line of its own, visible to the reader:

    # NBVAL_TOLERANCE abs=0.02            (|fresh - stored| <= 0.02 for every number)
    # NBVAL_TOLERANCE rel=0.3             (|fresh - stored| <= 0.3 * |stored|)
    # NBVAL_TOLERANCE abs=0.01 rel=0.05   (the two added)

Its outputs are then compared as text with the numbers taken out (runs of spaces count as one, so a
table may re-align), and number by number within the tolerance; everything else stays exact. Each
tolerance is backed by the spread measured across perturbations of floating-point order
(`make test-perturbed`, tests/nbval_spread.json, CONTRIBUTING.md).
"""

import copy
import json
import math
import re
from dataclasses import dataclass

MARKER = re.compile(r"^[ \t]*#[ \t]*NBVAL_TOLERANCE\b(.*)$", re.MULTILINE)
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
# the outputs that are text: a stream's text and these kinds of display data (images are not compared)
TEXT_KINDS = ("text/plain", "text/html", "text/markdown", "text/latex")


@dataclass(frozen=True)
class Tolerance:
    abs: float = 0.0
    rel: float = 0.0

    def allows(self, fresh, stored):
        return abs(fresh - stored) <= self.abs + self.rel * abs(stored) + 1e-12 * abs(stored)

    def __str__(self):
        return " ".join(f"{k}={v:g}" for k, v in (("abs", self.abs), ("rel", self.rel)) if v)


def parse(source):
    """The cell's Tolerance, or None for an exact cell; a malformed marker raises ValueError."""
    found = MARKER.findall(source)
    if not found:
        return None
    if len(found) > 1:
        raise ValueError("a cell declares NBVAL_TOLERANCE once")
    values = {}
    for part in found[0].split("#")[0].split():
        key, _, value = part.partition("=")
        if key not in ("abs", "rel") or key in values:
            raise ValueError(f"NBVAL_TOLERANCE takes abs=<number> and/or rel=<number>, got {part!r}")
        try:
            values[key] = float(value)
        except ValueError:
            raise ValueError(f"NBVAL_TOLERANCE {key}= needs a number, got {value!r}") from None
        if not (values[key] > 0 and math.isfinite(values[key])):
            raise ValueError(f"NBVAL_TOLERANCE {key}= must be a positive number, got {value!r}")
    if not values:
        raise ValueError("NBVAL_TOLERANCE needs abs=<number> and/or rel=<number>")
    return Tolerance(**values)


def _skeleton(text):
    return " ".join(NUMBER.sub("\x00", text).split())


def number_pairs(fresh, stored):
    """[(fresh number, stored number), ...] when the two texts differ only in their numbers, else None."""
    if _skeleton(fresh) != _skeleton(stored):
        return None
    return [(float(f), float(s)) for f, s in zip(NUMBER.findall(fresh), NUMBER.findall(stored), strict=True)]


def _texts(output):
    """(key, text) for each text an output carries, in a fixed order."""
    if output.get("output_type") == "stream":
        yield ("text", output.get("text", ""))
    for kind in TEXT_KINDS:
        value = output.get("data", {}).get(kind)
        if isinstance(value, str):
            yield (kind, value)


def sanitized(outputs, sanitize):
    """A copy of outputs with sanitize (nbval's --nbval-sanitize-with patterns) applied to every text."""
    outputs = copy.deepcopy(outputs)
    for output in outputs:
        for key, text in list(_texts(output)):
            (output if key == "text" else output["data"])[key] = sanitize(text)
    return outputs


def text_pairs(test, ref):
    """(fresh text, stored text, setter) for outputs that line up (same position, type and kinds)."""
    if len(test) != len(ref):
        return
    for t, r in zip(test, ref, strict=True):
        t_texts, r_texts = dict(_texts(t)), dict(_texts(r))
        if t.get("output_type") != r.get("output_type") or t_texts.keys() != r_texts.keys():
            continue
        for key in t_texts:
            target = t if key == "text" else t["data"]
            yield t_texts[key], r_texts[key], (target, key)


def within(test, ref, tolerance):
    """test with each text replaced by the stored one where it differs only by numbers within tolerance.

    Returns (outputs to compare, [(fresh, stored), ...] that exceed the tolerance). A text whose words
    differ, or whose numbers do not all fit, is left as it came, so nbval shows the difference.
    """
    test = copy.deepcopy(test)
    too_far = []
    for fresh, stored, (target, key) in list(text_pairs(test, ref)):
        pairs = number_pairs(fresh, stored)
        if pairs is None:
            continue
        beyond = [(f, s) for f, s in pairs if not tolerance.allows(f, s)]
        if beyond:
            too_far += beyond
        else:
            target[key] = stored
    return test, too_far


def spread(test, ref):
    """How far the fresh numbers are from the stored ones.

    {max_abs, max_rel, numbers, same_words, pairs}: pairs are the (fresh, stored) numbers that differ,
    the largest deviations first (at most 20).
    """
    numbers, same_words, moved = 0, len(test) == len(ref), []
    for fresh, stored, _ in text_pairs(test, ref):
        pairs = number_pairs(fresh, stored)
        if pairs is None:
            same_words = False
            continue
        numbers += len(pairs)
        moved += [(f, s) for f, s in pairs if f != s]
    moved.sort(key=lambda p: -abs(p[0] - p[1]))
    return {
        "max_abs": max((abs(f - s) for f, s in moved), default=0.0),
        "max_rel": max((abs(f - s) / abs(s) if s else math.inf for f, s in moved), default=0.0),
        "numbers": numbers,
        "same_words": same_words,
        "pairs": moved[:20],
    }


def first_line(source):
    """The cell's first line that is not an nbval marker: how tests/nbval_spread.json names a cell."""
    lines = [line for line in source.strip().splitlines() if not re.match(r"\s*#\s*NBVAL_", line)]
    return lines[0][:80] if lines else ""


def record(path, notebook, cell_num, source, tolerance, test, ref):
    """Append one cell's spread as a JSON line (several pytest workers append to the same file)."""
    line = {
        "notebook": notebook,
        "cell": cell_num,
        "first_line": first_line(source),
        "tolerance": str(tolerance) if tolerance else None,
        **spread(test, ref),
    }
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
