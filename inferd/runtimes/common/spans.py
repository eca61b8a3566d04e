"""Helpers shared by the extraction runtimes (extract/, spacy/): label matching, span overlap
search, activations. Here, not in extract/, so that spacy/ does not import the extract package
(which loads spacy/ for a spaCy folder)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferd.errors import InvalidInput


@dataclass
class Piece:
    """One unit of batched work: what `run_batch` consumes. `cost` is its padded size for the
    batcher (tokens); `tokens` counts toward usage."""

    data: Any
    cost: int
    tokens: int


def match_labels(requested: Sequence[str], model_labels: Sequence[str], what: str, name: str,
                 param: str) -> list[str]:
    """The model's spelling of each requested label, matched case-insensitively. A label the
    model lacks is a 400 that names it and lists what the model has (never silently dropped)."""
    by_lower = {m.lower(): m for m in model_labels}
    out: list[str] = []
    missing: list[str] = []
    for r in requested:
        m = by_lower.get(r.lower())
        (out if m is not None else missing).append(m if m is not None else r)
    if missing:
        raise InvalidInput(f"model '{name}' has no {what} label{'s' if len(missing) > 1 else ''} "
                           f"{', '.join(repr(x) for x in missing)} (its labels: {', '.join(model_labels)})", param)
    return out


def _overlaps(a: tuple[int, int], b: tuple[int, int], flat: bool, multi_label: bool) -> bool:
    """GLiNER's rule: the same span twice only with multi_label; flat: no overlap at all;
    nested: overlap allowed when one span holds the other."""
    if a == b:
        return not multi_label
    disjoint = a[0] > b[1] or b[0] > a[1]
    if flat:
        return not disjoint
    nested = (a[0] <= b[0] and a[1] >= b[1]) or (b[0] <= a[0] and b[1] >= a[1])
    return not (disjoint or nested)


def greedy_spans(spans: list[tuple[int, int, int, float]], flat: bool, multi_label: bool) -> list[tuple[int, int, int, float]]:
    """(start, end inclusive, label, score) candidates -> the kept ones, best first, then in
    text order (GLiNER's greedy search: a stable sort by descending score)."""
    # Only kept spans starting in [start - W, end] can touch a candidate (W: the widest
    # candidate), so each check reads a few start buckets, not every kept span: a long text
    # has hundreds of thousands of candidates, and a scan of all kept ones is quadratic.
    width = max((s[1] - s[0] for s in spans), default=0)
    kept: list[tuple[int, int, int, float]] = []
    by_start: dict[int, list[tuple[int, int, int, float]]] = {}
    for s in sorted(spans, key=lambda x: -x[3]):
        a = (s[0], s[1])
        if not any(_overlaps(a, (k[0], k[1]), flat, multi_label)
                   for st in range(s[0] - width, s[1] + 1) for k in by_start.get(st, ())):
            kept.append(s)
            by_start.setdefault(s[0], []).append(s)
    kept.sort(key=lambda x: x[0])
    return kept


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    z = np.exp(x - x.max(axis=axis, keepdims=True))
    return z / z.sum(axis=axis, keepdims=True)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))
