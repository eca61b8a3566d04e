"""Just enough of the Prometheus text format: histograms and label rendering.

Our own small implementation instead of prometheus_client: the engine records from its
worker thread, families are keyed by model name, and rendering happens per scrape from
live objects, which a global client registry does not fit."""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterable, Sequence

# Seconds: from sub-millisecond tokens of tiny models to minute-long requests.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
TOKEN_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.15, 0.3, 0.6, 1.2, 2.5)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class Histogram:
    """Cumulative-on-render histogram; observe() from any thread."""

    def __init__(self, buckets: Sequence[float]):
        self.bounds = tuple(buckets)
        self.counts = [0] * (len(self.bounds) + 1)  # last: above every bound (+Inf only)
        self.sum = 0.0
        self.count = 0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        i = bisect.bisect_left(self.bounds, value)
        with self._lock:
            self.counts[i] += 1
            self.sum += value
            self.count += 1

    def snapshot(self) -> tuple[list[tuple[str, int]], float, int]:
        """([(le, cumulative count)], sum, count), consistent with each other."""
        with self._lock:
            counts, total, n = list(self.counts), self.sum, self.count
        out, acc = [], 0
        for bound, c in zip(self.bounds, counts):
            acc += c
            out.append((fmt(bound), acc))
        out.append(("+Inf", n))
        return out, total, n


def esc(v: object) -> str:
    return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def labels(**kv: object) -> str:
    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in kv.items()) + "}" if kv else ""


def fmt(v: float) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


class Family:
    """One metric name: its TYPE/HELP header and its samples, added in any order."""

    def __init__(self, name: str, kind: str, help_: str):
        self.name, self.kind, self.help = name, kind, help_
        self.lines: list[str] = []

    def add(self, value: float, **kv: object) -> "Family":
        self.lines.append(f"{self.name}{labels(**kv)} {fmt(value)}")
        return self

    def add_histogram(self, h: Histogram, **kv: object) -> "Family":
        buckets, total, n = h.snapshot()
        for le, c in buckets:
            self.lines.append(f"{self.name}_bucket{labels(**kv, le=le)} {c}")
        self.lines.append(f"{self.name}_sum{labels(**kv)} {fmt(total)}")
        self.lines.append(f"{self.name}_count{labels(**kv)} {n}")
        return self

    def render(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}", *self.lines]


def render(families: Iterable[Family]) -> str:
    out: list[str] = []
    for f in families:
        out += f.render()
    return "\n".join(out) + "\n"
