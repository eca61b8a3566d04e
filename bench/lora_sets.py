"""Aggregate decode throughput with per-request LoRA sets: 8 concurrent streams on one adapter
(one decode per step) against 2 adapters x 4 streams (two decodes per step, one per set,
adapters switched between them), and 8 streams on the base weights, all in the same run on
the same server. Prints tok/s per case and the ratio of the two adapter cases.

    python bench/lora_sets.py [--tokens 64] [--threads 2] [--rounds 3] [--model PATH --lora A.gguf --lora B.gguf]

Defaults: the tiny fixture and its adapter (tests/fixtures/gguf), copied as two adapters; a
random 64-wide model mostly measures per-decode overhead, so pass a real model and adapters
for numbers that reflect weights-bound decoding."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import InferdServer  # noqa: E402

FIX = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "gguf"


def stream(url: str, lora: list[dict] | None, n: int, out: list[int]) -> None:
    body = {"model": "m", "prompt": "hello world", "max_tokens": n, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    if lora is not None:
        body["lora"] = lora
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=600) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                u = json.loads(line[6:]).get("usage")
                if u:
                    out.append(u["completion_tokens"])


def run(url: str, sets: list[list[dict] | None], n: int) -> float:
    counts: list[int] = []
    threads = [threading.Thread(target=stream, args=(url, s, n, counts)) for s in sets]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    assert len(counts) == len(sets), "a stream failed"
    return sum(counts) / dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", default=str(FIX / "tiny-llama.gguf"))
    ap.add_argument("--lora", action="append")
    a = ap.parse_args()
    loras = a.lora or [str(FIX / "tiny-lora.gguf")] * 2
    with tempfile.TemporaryDirectory() as d:
        g = Path(d) / "generators" / "m"
        (g / "loras").mkdir(parents=True)
        shutil.copy(a.model, g / "model.gguf")
        for i, p in enumerate(loras[:2]):
            shutil.copy(p, g / "loras" / f"a{i}.gguf")
        (g / "model_manifest.json").write_text(json.dumps({"n_ctx": 256, "parallel": 8}))
        srv = InferdServer(a.threads, "--parallel", "8", models_dir=d, builtins=False)
        try:
            one, two = [{"id": 0, "scale": 1.0}], [{"id": 1, "scale": 1.0}]
            run(srv.url, [None] * 2, 8)  # load and warm up
            cases = {"8 streams, base weights": [None] * 8, "8 streams, 1 adapter": [one] * 8,
                     "2 adapters x 4 streams": [one] * 4 + [two] * 4}
            got = {k: 0.0 for k in cases}
            for _ in range(a.rounds):  # interleaved rounds, best of each: a shared machine is noisy
                for k, v in cases.items():
                    got[k] = max(got[k], run(srv.url, v, a.tokens))
        finally:
            srv.close()
    for k, v in got.items():
        print(f"{k:28s} {v:8.1f} tok/s")
    print(f"ratio 2x4 / 1x8: {got['2 adapters x 4 streams'] / got['8 streams, 1 adapter']:.2f}")


if __name__ == "__main__":
    main()
