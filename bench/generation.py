"""Generation benchmark on the built-in gemma-3-270m (Q4_K_M GGUF). Prints a table and ratios
measured in one run (not a test; numbers depend on the machine and its load):

1. single stream, 128-token prompt, greedy: inferd over HTTP (streaming) vs llama-cpp-python's
   high-level `Llama` in-process, same file, same threads (target >= 0.95x);
2. 1, 4, 8 and 16 concurrent streams (distinct 128-token prompts, 128 new tokens each): aggregate
   tokens/s, time to first token and inter-token latency p50/p95, inferd vs llama.cpp's C++
   `llama-server` built from the llama.cpp tree vendored by the llama-cpp-python sdist we run
   (same llama.cpp commit: the difference is the serving layer), both with 16 slots of 512
   tokens, the same threads, no prompt-cache hits (every prompt is new; llama-server also gets
   cache_prompt: false); target >= 1.0x at every count;
3. speculation, single stream (/ai/v1/generate, greedy): default settings (no speculation field:
   the auto policy's n-gram drafting) vs `speculation_policy: "off"` on a rewrite-the-passage
   prompt (target >= 1.5x), a short open-ended prompt (target >= 0.97x: no slower than 3%) and a
   repeated short prompt (the shared n-gram pool), plus `draft_model: "ngram"` k=8 on the
   passage; `--only-spec` runs this part alone;
4. the raw ceiling: the same 8 prompts through a bare low-level loop (ONE llama_decode per step
   for all sequences, numpy argmax), so the table shows how close the server gets to it.

llama-server: `--build-peer` builds it once (~15 min on 2 cores) under ~/.cache/inferd-bench from
`pip download --no-binary :all: --no-deps llama-cpp-python==<installed version>`
(cmake -DLLAMA_CURL=OFF -DGGML_NATIVE=ON and scripts/install_llama.sh's -mno-amx-* flags, so both
sides run the same kernels; target llama-server); or pass --peer-bin PATH.

5. `--prefill` (alone): a 4,000-token prompt (`--prefill-tokens`), prefill tok/s (prompt
   tokens / time to first token) and the cold TTFT of a freshly started server, inferd vs
   llama-server with the same n_batch = n_ubatch = 512 and threads, `--prefill-slots` slots
   (default 1) of prompt + 256 tokens, interleaved rounds, best of each side.

usage: python bench/generation.py [--threads N] [--new-tokens 128] [--no-peer] [--build-peer] [--only-spec]
       python bench/generation.py --prefill [--prefill-tokens 4000] [--peer-args=--swa-full]
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
                        for k in range(max(40, length // 8)))  # about 13 tokens a sentence
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
    def __init__(self, argv: list[str], port: int, name: str, warm: bool = True):
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
        if warm:
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


async def one_stream(client: httpx.AsyncClient, url: str, prompt: str, new: int,
                     gaps: list[float] | None = None) -> tuple[float, int, float]:
    """(time to first token, tokens, end time) of one streamed completion; the gaps between
    its token chunks go to `gaps` (inter-token latency)."""
    t0 = time.perf_counter()
    ttft, n, last = None, 0, 0.0
    body = {"model": MODEL, "prompt": prompt, "max_tokens": new, "temperature": 0, "stream": True,
            "logit_bias": EOG, "stream_options": {"include_usage": True},
            "cache_prompt": False}  # llama-server's prompt cache off (inferd: every prompt is new anyway)
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
                    now = time.perf_counter()
                    if ttft is None:
                        ttft = now - t0
                    elif gaps is not None:
                        gaps.append(now - last)
                    last = now
    tokens = usage["completion_tokens"] if usage else n  # the peer streams one chunk per token
    return ttft or float("nan"), tokens, time.perf_counter()


def concurrent(url: str, texts: list[str], new: int) -> dict[str, float]:
    gaps: list[float] = []

    async def run():
        async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=64)) as client:
            t0 = time.perf_counter()
            res = await asyncio.gather(*(one_stream(client, url, p, new, gaps) for p in texts))
            return t0, res

    t0, res = asyncio.run(run())
    ttfts = [r[0] for r in res]
    total = sum(r[1] for r in res)
    wall = max(r[2] for r in res) - t0
    return {"tps": total / wall, "p50": pct(ttfts, 0.5), "p95": pct(ttfts, 0.95), "tokens": total, "wall": wall,
            "itl50": pct(gaps, 0.5) if gaps else float("nan"), "itl95": pct(gaps, 0.95) if gaps else float("nan")}


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of each thread of `pid` so far, by "tid name" (Linux
    /proc; Python 3.11 threads are all named python): where a server's time goes."""
    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        out[f"{task.name} {stat[stat.index('(') + 1:stat.rindex(')')]}"] = (int(fields[11]) + int(fields[12])) / tick
    return out


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> str:
    """Total CPU seconds, then the busiest threads (the decode's two compute threads first)."""
    d = sorted(((after[k] - before.get(k, 0.0), k) for k in after), reverse=True)
    return f"total {sum(v for v, _k in d):.2f}s: " + ", ".join(f"{v:.2f}" for v, _k in d[:6] if v >= 0.01)


def keep_best(best: dict[int, dict[str, float]], new: dict[int, dict[str, float]]) -> None:
    for n, m in new.items():
        if n not in best or m["tps"] > best[n]["tps"]:
            best[n] = m


def measure_server(server: Server, sets: dict[int, list[str]], new: int) -> dict[int, dict[str, float]]:
    out = {}
    for n, texts in sets.items():
        before = thread_cpu(server.proc.pid) if PROFILE else {}
        out[n] = concurrent(server.url, texts, new)
        if PROFILE:
            print(f"  {server.name:>12} {n:2d} stream(s) thread CPU: "
                  f"{cpu_delta(before, thread_cpu(server.proc.pid))}", flush=True)
        print(f"  {server.name:>12} {n:2d} stream(s): {out[n]['tps']:6.1f} tok/s, ttft p50 {out[n]['p50']:.2f}s "
              f"p95 {out[n]['p95']:.2f}s, itl p50 {out[n]['itl50'] * 1e3:.0f}ms p95 {out[n]['itl95'] * 1e3:.0f}ms "
              f"({out[n]['tokens']} tokens in {out[n]['wall']:.1f}s)", flush=True)
    return out


# ---- llama-server (the C++ peer) ------------------------------------------------------------------
PROFILE = False  # --thread-cpu
CACHE = Path.home() / ".cache" / "inferd-bench"
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"  # as scripts/install_llama.sh


def peer_bin(build: bool) -> Path | None:
    """llama-server built from the llama.cpp tree of the installed llama-cpp-python's sdist."""
    import llama_cpp

    ver = llama_cpp.__version__
    src = CACHE / f"llama.cpp-{ver}"
    binary = src / "build-noamx" / "bin" / "llama-server"
    if binary.exists() or not build:
        return binary if binary.exists() else None
    CACHE.mkdir(parents=True, exist_ok=True)
    if not src.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-d",
                        str(CACHE), f"llama-cpp-python=={ver}"], check=True)
        import tarfile

        with tarfile.open(CACHE / f"llama_cpp_python-{ver}.tar.gz") as tf:
            tf.extractall(CACHE, filter="data")
        (CACHE / f"llama_cpp_python-{ver}" / "vendor" / "llama.cpp").rename(src)
    # The flags scripts/install_llama.sh builds inferd's llama.cpp with: native, without AMX.
    subprocess.run(["cmake", "-B", "build-noamx", "-DLLAMA_CURL=OFF", "-DGGML_NATIVE=ON",
                    f"-DCMAKE_C_FLAGS={NO_AMX}", f"-DCMAKE_CXX_FLAGS={NO_AMX}"], cwd=src, check=True)
    subprocess.run(["cmake", "--build", "build-noamx", "--target", "llama-server", f"-j{os.cpu_count() or 1}"],
                   cwd=src, check=True)
    return binary


def peer_argv(binary: Path, path: Path, port: int, threads: int, slots: int, ctx: int, extra: str = "") -> list[str]:
    """llama-server with inferd's shape: `slots` sequences of `ctx` tokens in one unified KV
    cache, n_batch = n_ubatch = 512 (inferd's), the same threads for decode and prefill, no
    prompt cache. `extra`: more flags (e.g. "--swa-full", to isolate that difference)."""
    return [str(binary), "-m", str(path), "--alias", MODEL, "--host", "127.0.0.1", "--port", str(port),
            "-t", str(threads), "-tb", str(threads), "-np", str(slots), "-c", str(slots * ctx), "-b", "512",
            "-ub", "512", "--kv-unified", "--cache-reuse", "0", "--no-cache-prompt", "--cache-ram", "0",
            "--no-webui", *extra.split()]


INFERD_EXTRA: list[str] = []  # --inferd-args


def inferd_argv(port: int, threads: int, slots: int, ctx: int) -> list[str]:
    return [sys.executable, "-m", "inferd", "serve", "--port", str(port), "--threads", str(threads),
            "--parallel", str(slots), "--ctx-size", str(ctx), "--log-level", "warning",
            "--preload", "gemma-3-270m", *INFERD_EXTRA]  # loaded at start, as llama-server's model; not smollm2 too


# ---- long-prompt prefill ---------------------------------------------------------------------------
def prefill_once(url: str, prompt: str) -> tuple[float, int]:
    """(time to first token, prompt tokens) of one streamed completion of one token."""
    async def run():
        async with httpx.AsyncClient(timeout=600) as client:
            t0 = time.perf_counter()
            body = {"model": MODEL, "prompt": prompt, "max_tokens": 1, "temperature": 0, "stream": True,
                    "stream_options": {"include_usage": True}, "cache_prompt": False}
            ttft, usage = None, None
            async with client.stream("POST", url + "/v1/completions", json=body) as r:
                r.raise_for_status()
                async for line in r.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[6:])
                    usage = chunk.get("usage") or usage
                    if ttft is None and any(ch.get("text") for ch in chunk.get("choices") or []):
                        ttft = time.perf_counter() - t0
            return ttft or time.perf_counter() - t0, usage["prompt_tokens"] if usage else -1
    return asyncio.run(run())


def prefill_bench(a, path: Path, binary: Path | None) -> None:
    """A `--prefill-tokens` prompt (new to the server) on each side, `--rounds` interleaved
    rounds; each round starts both servers afresh and sends nothing before it, so the first
    prompt is a cold start (compute buffers, page cache of the weights warm after round 1),
    then `--prefill-repeat` more distinct prompts: prefill tok/s = prompt tokens / TTFT."""
    from inferd.runtimes.llama_cpp.model import LlamaModel

    m = LlamaModel(path)
    n_tok = a.prefill_tokens
    texts = {(side, r, k): prompts(m, 1, f"{side} prefill {r}.{k}. ", length=n_tok)[0]
             for side in ("inferd", "peer") for r in range(a.rounds) for k in range(1 + a.prefill_repeat)}
    m.close()
    slots, ctx = a.prefill_slots, n_tok + 256
    res: dict[str, dict[str, list[float]]] = {s: {"cold": [], "tps": []} for s in ("inferd", "peer")}
    print(f"prefill: {n_tok}-token prompts, {slots} slot(s) of {ctx} tokens, n_batch = n_ubatch = 512, "
          f"{a.threads} threads; llama-server extra flags: {a.peer_args or '-'}", flush=True)
    for r in range(a.rounds):
        for side in ("inferd", "peer"):
            if side == "peer" and binary is None:
                continue
            port = free_port()
            argv = (inferd_argv(port, a.threads, slots, ctx) if side == "inferd"
                    else peer_argv(binary, path, port, a.threads, slots, ctx, a.peer_args))  # type: ignore[arg-type]
            srv = Server(argv, port, "inferd" if side == "inferd" else "llama-server", warm=False)
            try:
                cold, n = prefill_once(srv.url, texts[(side, r, 0)])
                warm = []
                for k in range(1, 1 + a.prefill_repeat):
                    t, n = prefill_once(srv.url, texts[(side, r, k)])
                    warm.append(n / t)
            except Exception:
                print(srv.tail(), file=sys.stderr)
                raise
            finally:
                srv.close()
            res[side]["cold"].append(cold)
            res[side]["tps"].append(max(warm))
            print(f"  round {r} {srv.name:>12}: cold TTFT {cold:.2f}s ({n / cold:.0f} tok/s), then "
                  f"{', '.join(f'{x:.0f}' for x in warm)} tok/s ({n} prompt tokens)", flush=True)
    o, p = res["inferd"], res["peer"]
    print(f"\n## prefill of a {n_tok}-token prompt (best of {a.rounds} rounds)")
    print("| | inferd | llama-server | ratio |\n|---|---|---|---|")
    if p["tps"]:
        print(f"| prefill tok/s | {max(o['tps']):.0f} | {max(p['tps']):.0f} | {max(o['tps']) / max(p['tps']):.2f}x |")
        print(f"| cold TTFT | {min(o['cold']):.2f} s | {min(p['cold']):.2f} s | {min(o['cold']) / min(p['cold']):.2f}x |")
        print("per round, tok/s ratio: " + ", ".join(f"{x / y:.2f}" for x, y in zip(o["tps"], p["tps"])))
    else:
        print(f"| prefill tok/s | {max(o['tps']):.0f} | - | - |\n| cold TTFT | {min(o['cold']):.2f} s | - | - |")


# ---- n-gram speculation ----------------------------------------------------------------------------
PASSAGE = ("The old lighthouse stood at the end of the harbour for two hundred years. Every night the keeper "
           "climbed the narrow stairs, trimmed the wick and watched the ships pass safely between the rocks. When "
           "the keeper grew old, his daughter took over the work, and she kept the light burning through storms, "
           "fog and the long winter nights, until the harbour itself was closed and the last ship sailed away.")


OPEN = ["Write a short story about {}.", "Describe a day at {} in your own words.",
        "What might happen next at {}? Imagine it.", "Write a poem about {}."]


def ask(url: str, new: int, content: str, **extra) -> tuple[float, str, dict]:
    """(tokens/s end to end, text, the speculation report) of one /ai/v1/generate request."""
    body: dict = {"model": MODEL, "temperature": 0, "max_tokens": new,
                  "messages": [{"role": "user", "content": content}], **extra}
    t = time.perf_counter()
    r = httpx.post(url + "/ai/v1/generate", json=body, timeout=600)
    r.raise_for_status()
    out = r.json()
    n = out["usage"]["completion_tokens"]
    return n / (time.perf_counter() - t), out["choices"][0]["message"]["content"], out.get("speculation") or {}


COPY = "Rewrite this passage word for word, changing only 'lighthouse' to 'tower':\n\n"
# what each side adds to the request: "default" sends no speculation field at all
SIDES = {"default": {}, "off": {"speculation_policy": "off"},
         "ngram k=8": {"draft_model": "ngram", "speculation_policy": "on", "speculative_k": 8}}


WORKLOADS = ("copy", "open", "open+context", "repeat")


def speculation_bench(url: str, new: int, repeat: int) -> dict:
    """Four workloads, each side in turn per round (the order alternating), best of `repeat`:
    copy (a passage to rewrite: input-grounded), open (a short open-ended prompt, a new one
    each round), open+context (the same after the passage as background: long enough for
    prompt lookup, with nothing to copy), repeat (a short prompt asked before: the shared
    pool's case; both sides then reuse the prompt's cached cells). copy and the open ones send
    prompt_cache: false, so neither side gets the other's prefix; the default side's tokens/s
    over the off side's is the ratio."""
    best: dict[tuple[str, str], float] = {}
    same: dict[str, bool] = {}
    reports: dict[tuple[str, str], dict] = {}
    now: dict[tuple[str, str], float] = {}

    def one(work: str, side: str, content: str, **extra) -> str:
        tps, text, sp = ask(url, new, content, **SIDES[side], **extra)
        best[(work, side)] = max(best.get((work, side), 0.0), tps)
        now[(work, side)], reports[(work, side)] = tps, sp
        return text

    for r in range(repeat):
        order = ["default", "off"] if r % 2 == 0 else ["off", "default"]
        texts = {side: one("copy", side, COPY + PASSAGE, prompt_cache=False) for side in order + ["ngram k=8"]}
        same["copy"] = same.get("copy", True) and texts["default"] == texts["off"]
        topic = TOPICS[r % len(TOPICS)]
        q = OPEN[r % len(OPEN)].format(topic)
        texts = {side: one("open", side, q, prompt_cache=False, logit_bias=EOG) for side in order}
        same["open"] = same.get("open", True) and texts["default"] == texts["off"]
        # open-ended after a long context it should not copy: grounded by length, so prompt
        # lookup runs, and what it drafts is mostly rejected (the back-off's case)
        q = f"Background, not to be repeated: {PASSAGE}\n\n{OPEN[(r + 1) % len(OPEN)].format(topic)}"
        texts = {side: one("open+context", side, q, prompt_cache=False, logit_bias=EOG) for side in order}
        same["open+context"] = same.get("open+context", True) and texts["default"] == texts["off"]
        q = f"Tell me about {topic}, round {r}."
        ask(url, new, q, logit_bias=EOG)  # the first time: its answer enters the pool
        texts = {side: one("repeat", side, q, logit_bias=EOG) for side in order}
        same["repeat"] = same.get("repeat", True) and texts["default"] == texts["off"]
        for work in WORKLOADS:
            sp, d, o = reports[(work, "default")], now[(work, "default")], now[(work, "off")]
            print(f"  round {r + 1} {work}: default {d:.1f} / off {o:.1f} tok/s ({d / o:.2f}x); default drafted "
                  f"{sp.get('drafted_tokens')}, accepted {sp.get('accepted_tokens')} (pool "
                  f"{sp.get('pool_accepted_tokens')}), {sp.get('disabled_reason') or 'enabled'}", flush=True)
    return {"best": best, "same": same, "reports": reports}


def print_speculation(spec: dict) -> None:
    best, same, rep = spec["best"], spec["same"], spec["reports"]
    print("\n## speculation, single stream (/ai/v1/generate, greedy): default settings vs speculation_policy off")
    print("| workload | off tok/s | default tok/s | default / off | target | drafted / accepted (last default run) "
          "| same text |")
    print("|---|---|---|---|---|---|---|")
    targets = {"copy": ">= 1.5x", "open": ">= 0.97x", "open+context": ">= 0.97x", "repeat": "-"}
    for work in WORKLOADS:
        off, dflt, sp = best[(work, "off")], best[(work, "default")], rep[(work, "default")]
        print(f"| {work} | {off:.1f} | {dflt:.1f} | **{dflt / off:.2f}x** | {targets[work]} | "
              f"{sp.get('drafted_tokens')} / {sp.get('accepted_tokens')} (pool {sp.get('pool_accepted_tokens')}) "
              f"| {same[work]} |")
    k8 = best[("copy", "ngram k=8")]
    print(f"| copy, draft_model ngram k=8 on | {best[('copy', 'off')]:.1f} | {k8:.1f} | {k8 / best[('copy', 'off')]:.2f}x "
          f"| | {rep[('copy', 'ngram k=8')].get('drafted_tokens')} / {rep[('copy', 'ngram k=8')].get('accepted_tokens')}"
          " | |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3, help="single-stream runs (best of)")
    ap.add_argument("--streams", default="1,4,8,16")
    ap.add_argument("--rounds", type=int, default=3, help="runs per stream count and side (best of)")
    ap.add_argument("--no-peer", action="store_true", help="skip llama-server")
    ap.add_argument("--build-peer", action="store_true", help="build llama-server if it is not cached")
    ap.add_argument("--peer-bin", type=Path, help="a llama-server binary (default: the cached build)")
    ap.add_argument("--no-raw", action="store_true", help="skip the raw-ceiling loop")
    ap.add_argument("--no-single", action="store_true", help="skip the in-process single-stream comparison")
    ap.add_argument("--no-spec", action="store_true", help="skip the speculation workloads")
    ap.add_argument("--only-spec", action="store_true", help="the speculation workloads alone")
    ap.add_argument("--inferd-args", default="", help="more inferd flags, e.g. --inferd-args=--no-spec-auto")
    ap.add_argument("--peer-args", default="", help="more llama-server flags, e.g. --peer-args=--swa-full (with '=')")
    ap.add_argument("--prefill", action="store_true", help="only the long-prompt prefill comparison")
    ap.add_argument("--prefill-tokens", type=int, default=4000)
    ap.add_argument("--prefill-repeat", type=int, default=2, help="warm prompts per round after the cold one")
    ap.add_argument("--prefill-slots", type=int, default=1)
    ap.add_argument("--thread-cpu", action="store_true", help="print each server's CPU seconds per thread and run")
    a = ap.parse_args()
    global PROFILE
    PROFILE = a.thread_cpu
    INFERD_EXTRA[:] = a.inferd_args.split()
    if a.only_spec:
        a.no_peer = a.no_raw = a.no_single = True
        a.streams, a.rounds = "1", 0
    path = gemma_270m_path()
    if a.prefill:
        prefill_bench(a, path, a.peer_bin or (None if a.no_peer else peer_bin(a.build_peer)))
        return
    from inferd.runtimes.llama_cpp.model import LlamaModel

    slots, ctx = 16, 512
    m = LlamaModel(path)
    counts = [int(x) for x in a.streams.split(",")]
    # fresh prompts for every count and round, on each side: no prompt-cache hit anywhere
    sets = {(n, r): prompts(m, n, f"Round {r} of {n}. ") for n in counts for r in range(a.rounds)}
    peer_sets = {(n, r): prompts(m, n, f"Peer round {r} of {n}. ") for n in counts for r in range(a.rounds)}
    singles = [prompts(m, 1, f"Single {r}. ")[0] for r in range(a.repeat)]
    print(f"gemma-3-270m Q4_K_M, {a.threads} threads, {slots} slots of {ctx} tokens, prompts of "
          f"{len(m.tokenize(prompts(m, 1, 'Round 0 of 1. ')[0]))} tokens, {a.new_tokens} new tokens per stream",
          flush=True)
    m.close()

    raw_e2e = raw_decode = None
    if not a.no_raw:
        print("raw ceiling ...", flush=True)
        raw_e2e, raw_decode = raw_ceiling(path, prompts(LlamaModel(path), 8, "Raw. "), a.new_tokens, a.threads)

    port = free_port()
    srv = Server(inferd_argv(port, a.threads, slots, ctx), port, "inferd")
    peer_srv = None
    try:
        # Single stream: alternate the in-process Llama and inferd (idle server meanwhile), best
        # of each, so a change in the machine's background load hits both alike.
        hl = single = 0.0
        if not a.no_single:
            llm = HighLevel(path, a.threads)
            for p in singles:
                hl = max(hl, llm.run(p, a.new_tokens))
                single = max(single, concurrent(srv.url, [p], a.new_tokens)["tps"])
                print(f"  single stream: Llama {hl:.1f} tok/s, inferd {single:.1f} tok/s (best so far)", flush=True)
            llm.close()
        spec = None if a.no_spec else speculation_bench(srv.url, a.new_tokens, a.repeat)
        binary = a.peer_bin or (None if a.no_peer else peer_bin(a.build_peer))
        if binary is None and not a.no_peer:
            print("llama-server is not built: run with --build-peer (about 15 minutes on 2 cores)", file=sys.stderr)
        if binary is not None:
            pport = free_port()
            peer_srv = Server(peer_argv(binary, path, pport, a.threads, slots, ctx, a.peer_args), pport,
                              "llama-server")
        # Both servers up, idle while the other runs; each stream count on inferd then on the
        # peer, so a change in the machine's load between counts hits both alike; the best of
        # --rounds such pairs per side (this VM has stalls of 0.5-2 s that hit one run of either
        # side now and then, which a single run cannot tell from the server's own speed).
        ours: dict[int, dict[str, float]] = {}
        peer: dict[int, dict[str, float]] | None = {} if peer_srv is not None else None
        for r in range(a.rounds):
            for n in counts:
                keep_best(ours, measure_server(srv, {n: sets[(n, r)]}, a.new_tokens))
                if peer_srv is not None and peer is not None:
                    keep_best(peer, measure_server(peer_srv, {n: peer_sets[(n, r)]}, a.new_tokens))
    except Exception:
        print(srv.tail(), file=sys.stderr)
        if peer_srv is not None:
            print(peer_srv.tail(), file=sys.stderr)
        raise
    finally:
        srv.close()
        if peer_srv is not None:
            peer_srv.close()

    if hl:
        print("\n## single stream (tokens/s, end to end incl. prefill)")
        print(f"| llama-cpp-python Llama, in-process | {hl:6.1f} |")
        print(f"| inferd, HTTP streaming             | {single:6.1f} | {single / hl:.2f}x (target >= 0.95x) |")
    if spec:
        print_speculation(spec)
    if not ours:
        return
    print("\n## concurrent streams (aggregate tok/s; ttft and inter-token latency p50/p95)")
    print("| streams | inferd tok/s | ttft p50/p95 | itl p50/p95 | llama-server tok/s | ttft p50/p95 | itl p50/p95 "
          "| tok/s ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for n in counts:
        o = ours[n]
        cells = f"| {n} | {o['tps']:.1f} | {o['p50']:.2f}/{o['p95']:.2f}s | {o['itl50'] * 1e3:.0f}/{o['itl95'] * 1e3:.0f}ms "
        if peer:
            p = peer[n]
            cells += (f"| {p['tps']:.1f} | {p['p50']:.2f}/{p['p95']:.2f}s | {p['itl50'] * 1e3:.0f}/"
                      f"{p['itl95'] * 1e3:.0f}ms | {o['tps'] / p['tps']:.2f}x |")
        else:
            cells += "| - | - | - | - |"
        print(cells)
    if raw_e2e is not None:
        print("\n## raw ceiling: 8 sequences, one llama_decode per step, numpy argmax")
        print(f"| end to end (prefill + decode) | {raw_e2e:.1f} tok/s |")
        print(f"| decode only                   | {raw_decode:.1f} tok/s |")


if __name__ == "__main__":
    main()
