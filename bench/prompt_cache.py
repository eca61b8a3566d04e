"""Time to first token of a long prompt: cold, warm (the same slot, and restored from the
host-RAM cache), and after a restart from the disk cache (`--cache-dir`).

    python bench/prompt_cache.py --threads 2 [--tokens 4096] [--models gemma,q8]

Per model, one server with `--parallel 1 --cache-ram 1024 --cache-dir D`:
  cold     the prompt, nothing cached
  slot     the same prompt again (its slot still holds it)
  ram      another prompt takes the one slot (the first goes to host RAM), then the first again
  restart  the server is stopped (the disk writer flushes), a new one starts on D, the prompt again
Each request asks for 1 token (greedy), so its cached state is exactly the prompt; TTFT is the
client's time to the first streamed chunk, the model loaded beforehand (/admin/models/load, its
time reported apart: a restart pays it with or without a prompt cache). Disk use: the cache folder's bytes per 1k tokens.

Models: `gemma` (the built-in gemma-3-270m Q4_K_M: sliding window 512) and `q8` (the tiny
fixture quantized to Q8_0 with llama_model_quantize into a temporary folder, unless
tests/fixtures/gguf/quant/ has a Q8_0 file)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import InferdServer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "fixtures" / "gguf" / "tiny-llama.gguf"


def q8_fixture(tmp: Path) -> Path:
    for p in sorted((ROOT / "tests" / "fixtures" / "gguf" / "quant").glob("*[Qq]8_0*.gguf")):
        return p
    import llama_cpp as L

    out = tmp / "tiny-q8_0.gguf"
    params = L.llama_model_quantize_default_params()
    params.ftype = L.LLAMA_FTYPE_MOSTLY_Q8_0
    rc = L.llama_model_quantize(str(TINY).encode(), str(out).encode(), params)
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize failed ({rc})")
    return out


def ttft(url: str, model: str, prompt: str) -> tuple[float, int, int]:
    """(seconds to the first streamed chunk, prompt tokens, cached prompt tokens); the server's
    own admission-to-first-token time goes to PROMPT_MS."""
    body = {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    first, usage = None, {}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if first is None and chunk.get("choices"):
                first = time.perf_counter() - t0
            usage = chunk.get("usage") or usage
            if chunk.get("timings"):
                PROMPT_MS.append(chunk["timings"]["prompt_ms"])
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return first or 0.0, usage.get("prompt_tokens", 0), cached


def prompt_of(url: str, model: str, n: int) -> str:
    """Text of about `n` tokens for `model` (measured with /tokenize, trimmed by words)."""
    words = ("the keeper climbed the stairs at dusk and lit the great lamp while the sea rose "
             "against the rocks below and the gulls cried over the harbour ").split()
    text = " ".join(words[i % len(words)] for i in range(n))
    while True:
        k = len(httpx.post(url + "/tokenize", json={"model": model, "content": text}).json()["tokens"])
        if k <= n:
            return text
        w = text.split()
        text = " ".join(w[:min(len(w) - 1, int(len(w) * n / k))])


PROMPT_MS: list[float] = []


def preload(url: str, model: str) -> float:
    """Load the model before timing (a first request would otherwise include the load)."""
    t0 = time.perf_counter()
    httpx.post(url + "/admin/models/load", json={"model": model}, timeout=300).raise_for_status()
    return time.perf_counter() - t0


def bench(name: str, path: Path, threads: int, tokens: int, tmp: Path) -> dict:
    models = tmp / f"models-{name}"
    d = models / "generators" / name
    d.mkdir(parents=True)
    os.symlink(path, d / "model.gguf")
    (d / "model_manifest.json").write_text(json.dumps({"n_ctx": tokens + 512}))
    cache = tmp / f"cache-{name}"
    args = ("--parallel", "1", "--cache-ram", "1024", "--cache-dir", str(cache), "--cache-disk-size", "4GiB")
    srv = InferdServer(threads, *args, models_dir=models, builtins=False)
    try:
        row = {"model": name, "load": preload(srv.url, name)}
        prompt = prompt_of(srv.url, name, tokens)
        row["cold"], row["tokens"], c0 = ttft(srv.url, name, prompt)
        row["slot"], _n, row["slot_cached"] = ttft(srv.url, name, prompt)
        ttft(srv.url, name, "a different prompt about mountains and rivers " * 8)
        row["ram"], _n, row["ram_cached"] = ttft(srv.url, name, prompt)
        row["ms"] = PROMPT_MS[-4:]
    finally:
        srv.close()
    files = [p for p in cache.iterdir() if p.suffix == ".kv"]
    sizes = sorted(p.stat().st_size for p in files)
    row["disk_per_1k"] = sizes[-1] / (row["tokens"] / 1000) if sizes else 0
    srv = InferdServer(threads, *args, models_dir=models, builtins=False)
    try:
        row["load2"] = preload(srv.url, name)
        row["restart"], _n, row["restart_cached"] = ttft(srv.url, name, prompt)
        row["ms"] = row["ms"][:2] + row["ms"][3:] + PROMPT_MS[-1:]
    finally:
        srv.close()
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--models", default="gemma,q8")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pcache-bench-"))
    try:
        rows = []
        for m in a.models.split(","):
            if m == "gemma":
                from inferd.registry.builtins import gemma_270m_path

                rows.append(bench("gemma-3-270m", gemma_270m_path(), a.threads, a.tokens, tmp))
            elif m == "q8":
                rows.append(bench("tiny-q8_0", q8_fixture(tmp), a.threads, a.tokens, tmp))
            else:
                raise SystemExit(f"unknown model {m!r}")
        print(f"load average {os.getloadavg()[0]:.1f} at the end; {a.threads} threads")
        print("| model | prompt tokens | cold TTFT | slot (cached) | host RAM (cached) | after restart, disk (cached) "
              "| restart / cold | disk per 1k tokens | model load (1st, 2nd server) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['model']} | {r['tokens']} | {r['cold']:.2f} s | {r['slot']:.3f} s ({r['slot_cached']}) "
                  f"| {r['ram']:.3f} s ({r['ram_cached']}) | {r['restart']:.3f} s ({r['restart_cached']}) "
                  f"| {100 * r['restart'] / r['cold']:.1f}% | {r['disk_per_1k'] / 2**20:.2f} MiB "
                  f"| {r['load']:.2f} s, {r['load2']:.2f} s |")
        print("server-side prompt_ms (admission to first token) cold, slot, ram, restart:",
              {r["model"]: [round(x) for x in r["ms"]] for r in rows})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
