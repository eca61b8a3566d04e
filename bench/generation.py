"""Generation benchmark on the built-in gemma-3-270m (Q4_K_M GGUF). Prints a table and ratios
measured in one run (not a test; numbers depend on the machine and its load):

1. single stream, 128-token prompt, greedy: inferd over HTTP (streaming) vs llama-cpp-python's
   high-level `Llama` in-process, same file, same threads (target >= 0.95x);
2. 1, 4 and 8 concurrent streams (distinct 128-token prompts, 128 new tokens each): aggregate
   tokens/s and p50/p95 time to first token, inferd (--parallel 8) vs `python -m llama_cpp.server`
   on the same file (target at 8: >= 2.0x its throughput, TTFT p95 under 3 s);
3. the raw ceiling: the same 8 prompts through a bare low-level loop (ONE llama_decode per step
   for all sequences, numpy argmax), so the table shows how close the server gets to it.

The peer server needs llama-cpp-python's server extras: pip install -e '.[bench]'.

usage: python bench/generation.py [--threads N] [--new-tokens 128] [--no-peer]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inferd.registry.builtins import gemma_270m_path  # noqa: E402

MODEL = "gemma-3-270m"
EOG = {"1": -100, "106": -100, "212": -100}  # gemma's end tokens: every stream makes exactly N tokens
TOPICS = ["the river", "a small bakery", "the night train", "an old lighthouse", "the chess club", "a mountain pass",
          "the city library", "a summer storm", "the harbour market", "a forgotten garden"]


def prompts(model, n: int, salt: str = "", length: int = 128) -> list[str]:
    """n texts of `length` tokens that share no prefix with each other, nor with another
    `salt`'s texts: no server may answer from its prompt cache."""
    out = []
    for i in range(n):
        body = " ".join(f"This is a long story about {TOPICS[(i + k) % len(TOPICS)]}, told slowly and with care."
                        for k in range(40))
        text = f"{salt}Story {i + 1}: {body}"
        toks = model.tokenize(text, add_special=False)[: length - 1]
        out.append(model.detokenize(toks))
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


# ---- in-process peers ----------------------------------------------------------------------------
class HighLevel:
    """llama-cpp-python's own `Llama`, in this process: the single-stream reference."""

    def __init__(self, path: Path, threads: int):
        from llama_cpp import Llama

        self.llm = Llama(model_path=str(path), n_ctx=4096, n_batch=512, n_threads=threads,
                         n_threads_batch=threads, verbose=False)
        self.llm.create_completion("warm up", max_tokens=4, temperature=0)

    def run(self, prompt: str, new: int) -> float:
        """Tokens/s of one completion, end to end; the prompt is new to it (no cache hit)."""
        t = time.perf_counter()
        r = self.llm.create_completion(prompt, max_tokens=new, temperature=0,
                                       logit_bias={int(k): v for k, v in EOG.items()})
        return r["usage"]["completion_tokens"] / (time.perf_counter() - t)

    def close(self) -> None:
        self.llm.close()


def raw_ceiling(path: Path, texts: list[str], new: int, threads: int) -> tuple[float, float]:
    """(end-to-end tok/s including prefill, decode-only tok/s) of a bare batched loop."""
    from inferd.runtimes.llama_cpp.context import ContextConfig, LlamaContext
    from inferd.runtimes.llama_cpp.model import LlamaModel

    m = LlamaModel(path)
    n = len(texts)
    ctx = LlamaContext(m, ContextConfig(n_seq=n, n_ctx_seq=512, n_batch=512, n_threads=threads))
    ctx.decode([(0, [m.bos], 0, True)])
    ctx.clear()
    toks = [m.tokenize(t) for t in texts]
    banned = [int(k) for k in EOG]

    def pick(row: int) -> int:
        x = ctx.logits(row).copy()
        x[banned] = -np.inf
        return int(x.argmax())

    t0 = time.perf_counter()
    cur: dict[int, int] = {}
    pending = {s: (p, 0) for s, p in enumerate(toks)}
    while pending:  # prefill in 512-token decodes, as a server would
        entries, budget = [], 512
        for s, (p, done) in list(pending.items()):
            if budget <= 0:
                break
            chunk = p[done:done + budget]
            last = done + len(chunk) == len(p)
            entries.append((s, chunk, done, last))
            budget -= len(chunk)
            pending[s] = (p, done + len(chunk))
            if last:
                del pending[s]
        rows = ctx.decode(entries)
        for (s, _c, _p, last), row in zip(entries, rows):
            if last:
                cur[s] = pick(row)
    t1 = time.perf_counter()
    pos = {s: len(p) for s, p in enumerate(toks)}
    for _ in range(new - 1):
        rows = ctx.decode([(s, [cur[s]], pos[s], True) for s in range(n)])
        for s, row in zip(range(n), rows):
            cur[s] = pick(row)
            pos[s] += 1
    t2 = time.perf_counter()
    ctx.close()
    m.close()
    return n * new / (t2 - t0), n * (new - 1) / (t2 - t1)


# ---- servers -------------------------------------------------------------------------------------
def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, argv: list[str], port: int, name: str):
        self.url, self.name = f"http://127.0.0.1:{port}", name
        self.log = tempfile.TemporaryFile()  # a pipe would fill up with llama.cpp's chatter and block it
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.time() + 300
        while True:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(f"{name} exited: {self.log.read().decode(errors='replace')[-2000:]}")
            try:
                if httpx.get(self.url + "/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline:
                raise RuntimeError(f"{name} did not start")
            time.sleep(0.3)
        httpx.post(self.url + "/v1/completions", json={"model": MODEL, "prompt": "warm up", "max_tokens": 4},
                   timeout=300).raise_for_status()

    def tail(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-3000:]

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


async def one_stream(client: httpx.AsyncClient, url: str, prompt: str, new: int) -> tuple[float, int, float]:
    """(time to first token, tokens, end time) of one streamed completion."""
    t0 = time.perf_counter()
    ttft, n = None, 0
    body = {"model": MODEL, "prompt": prompt, "max_tokens": new, "temperature": 0, "stream": True,
            "logit_bias": EOG, "stream_options": {"include_usage": True}}
    usage = None
    async with client.stream("POST", url + "/v1/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for ch in chunk.get("choices") or []:
                if ch.get("text"):
                    n += 1
                    if ttft is None:
                        ttft = time.perf_counter() - t0
    tokens = usage["completion_tokens"] if usage else n  # the peer streams one chunk per token
    return ttft or float("nan"), tokens, time.perf_counter()


def concurrent(url: str, texts: list[str], new: int) -> dict[str, float]:
    async def run():
        async with httpx.AsyncClient(timeout=600) as client:
            t0 = time.perf_counter()
            res = await asyncio.gather(*(one_stream(client, url, p, new) for p in texts))
            return t0, res

    t0, res = asyncio.run(run())
    ttfts = [r[0] for r in res]
    total = sum(r[1] for r in res)
    wall = max(r[2] for r in res) - t0
    return {"tps": total / wall, "p50": pct(ttfts, 0.5), "p95": pct(ttfts, 0.95), "tokens": total, "wall": wall}


def measure_server(server: Server, sets: dict[int, list[str]], new: int) -> dict[int, dict[str, float]]:
    out = {}
    for n, texts in sets.items():
        out[n] = concurrent(server.url, texts, new)
        print(f"  {server.name:>18} {n} stream(s): {out[n]['tps']:6.1f} tok/s, ttft p50 {out[n]['p50']:.2f}s "
              f"p95 {out[n]['p95']:.2f}s ({out[n]['tokens']} tokens in {out[n]['wall']:.1f}s)", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3, help="single-stream runs (best of)")
    ap.add_argument("--no-peer", action="store_true", help="skip python -m llama_cpp.server")
    a = ap.parse_args()
    path = gemma_270m_path()
    from inferd.runtimes.llama_cpp.model import LlamaModel

    m = LlamaModel(path)
    counts = [1, 4, 8]
    sets = {n: prompts(m, n, f"Round {n}. ") for n in counts}          # fresh prompts for every round
    singles = [prompts(m, 1, f"Single {r}. ")[0] for r in range(a.repeat)]
    print(f"gemma-3-270m Q4_K_M, {a.threads} threads, prompts of {len(m.tokenize(sets[8][0]))} tokens, "
          f"{a.new_tokens} new tokens per stream", flush=True)
    m.close()

    print("raw ceiling ...", flush=True)
    raw_e2e, raw_decode = raw_ceiling(path, sets[8], a.new_tokens, a.threads)

    port = free_port()
    srv = Server([sys.executable, "-m", "inferd", "serve", "--port", str(port), "--threads", str(a.threads),
                  "--parallel", "8", "--log-level", "warning"], port, "inferd")
    try:
        # Single stream: alternate the in-process Llama and inferd (idle server meanwhile), best
        # of each, so a change in the machine's background load hits both alike.
        llm = HighLevel(path, a.threads)
        hl = single = 0.0
        for p in singles:
            hl = max(hl, llm.run(p, a.new_tokens))
            single = max(single, concurrent(srv.url, [p], a.new_tokens)["tps"])
            print(f"  single stream: Llama {hl:.1f} tok/s, inferd {single:.1f} tok/s (best so far)", flush=True)
        llm.close()
        ours = measure_server(srv, sets, a.new_tokens)
    except Exception:
        print(srv.tail(), file=sys.stderr)
        raise
    finally:
        srv.close()
    peer = None
    if not a.no_peer:
        port = free_port()
        srv = Server([sys.executable, "-m", "llama_cpp.server", "--model", str(path), "--model_alias", MODEL,
                      "--host", "127.0.0.1", "--port", str(port), "--n_threads", str(a.threads),
                      "--n_threads_batch", str(a.threads), "--n_ctx", "4096", "--n_batch", "512",
                      # by default a new request cuts off the running stream; queue them instead
                      "--interrupt_requests", "False"], port,
                     "llama_cpp.server")
        try:
            peer = measure_server(srv, sets, a.new_tokens)
        except Exception:
            print(srv.tail(), file=sys.stderr)
            raise
        finally:
            srv.close()

    print("\n## single stream (tokens/s, end to end incl. prefill)")
    print(f"| llama-cpp-python Llama, in-process | {hl:6.1f} |")
    print(f"| inferd, HTTP streaming             | {single:6.1f} | {single / hl:.2f}x (target >= 0.95x) |")
    print("\n## concurrent streams")
    print("| streams | inferd tok/s | ttft p50 | ttft p95 | llama_cpp.server tok/s | ttft p50 | ttft p95 | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for n in counts:
        o = ours[n]
        if peer:
            p = peer[n]
            print(f"| {n} | {o['tps']:.1f} | {o['p50']:.2f}s | {o['p95']:.2f}s | {p['tps']:.1f} | {p['p50']:.2f}s | "
                  f"{p['p95']:.2f}s | {o['tps'] / p['tps']:.2f}x |")
        else:
            print(f"| {n} | {o['tps']:.1f} | {o['p50']:.2f}s | {o['p95']:.2f}s | - | - | - | - |")
    print("\n## raw ceiling: 8 sequences, one llama_decode per step, numpy argmax")
    print(f"| end to end (prefill + decode) | {raw_e2e:.1f} tok/s | inferd at 8 streams = "
          f"{ours[8]['tps'] / raw_e2e:.0%} of it |")
    print(f"| decode only                   | {raw_decode:.1f} tok/s | |")
    if peer:
        print(f"\ntargets: 8-stream throughput {ours[8]['tps'] / peer[8]['tps']:.2f}x llama_cpp.server (>= 2.0x); "
              f"inferd ttft p95 at 8 streams {ours[8]['p95']:.2f}s (< 3 s); single stream {single / hl:.2f}x Llama "
              f"(>= 0.95x)")


if __name__ == "__main__":
    main()
