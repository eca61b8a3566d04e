"""Shared by the observability, drain and console tests: a models folder with the tiny GGUF
generator (4096-token context), the tiny ONNX embedder and reranker, and a Prometheus text
parser that checks every line it reads."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

from tests.chat_fixtures import generator_dir

ONNX = Path(__file__).parent / "fixtures" / "onnx"
IRIS = Path(__file__).parent.parent / "inferd" / "runtimes" / "tabular" / "builtin" / "iris-classifier"

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? '
                    r'(-?[0-9.e+-]+|\+Inf|-Inf|NaN)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def models_dir(root: Path, *, embedder: bool = True, reranker: bool = False, iris: bool = False) -> Path:
    d = root / "models"
    generator_dir(d, "tiny")
    if embedder:
        shutil.copytree(ONNX / "tiny-bert-embed", d / "embedders" / "tiny-embed")
    if reranker:
        shutil.copytree(ONNX / "tiny-bert-rerank", d / "rerankers" / "tiny-rerank")
    if iris:
        shutil.copytree(IRIS, root / "ml" / "iris-classifier")
    return d


def parse_metrics(text: str) -> dict[tuple[str, frozenset], float]:
    """{(name, frozenset(labels)): value}; fails on any line that is not valid exposition text."""
    out: dict[tuple[str, frozenset], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        m = SAMPLE.match(line)
        assert m, f"not Prometheus text: {line!r}"
        key = (m.group(1), frozenset(LABEL.findall(m.group(2) or "")))
        assert key not in out, f"duplicate sample {line!r}"
        out[key] = float(m.group(3))
    return out


def metric(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def wait_for(cond, timeout: float = 10.0, what: str = "condition"):
    t = time.time()
    while True:
        v = cond()
        if v:
            return v
        assert time.time() - t < timeout, f"{what} not reached in {timeout}s"
        time.sleep(0.02)
