"""Cold start (issue 31): `inferd serve` from process spawn to a healthy server, and to the first
streamed token of the built-in chat model, against llama.cpp's `llama-server` loading the same
GGUF (gemma-3-270m Q4_K_M). Not a test; numbers depend on the machine and its load.

Each round starts a fresh process of each server (inferd first, then llama-server: interleaved,
so a change in the machine's load hits both alike), polls its /health every 5 ms until it
answers 200 (time to healthy), then sends one streamed /v1/chat/completions request and times
the first content delta (time to first token, counted from the spawn). Both get the same slots,
context per slot and threads (`-np`, `-c` = slots x ctx with `--kv-unified`, `-t`); llama-server
gets `--chat-template gemma`, the template inferd applies to this GGUF (it ships none). The
best of --rounds per side; one unmeasured start of each first, so that both read the GGUF from
the page cache and inferd's llama.cpp self-check verdict (selfcheck.py) is cached, as on any
start after the first.

inferd serves all its built-ins (no models_dir): every built-in model is found at start; the
built-in generators begin loading in the background (`--preload auto`, the default) while the
web stack is imported, the others load on first use. `--lazy` adds inferd with `--preload
none`, where the request loads the generator.

llama-server: the binary bench/generation.py's `--build-peer` caches under ~/.cache/inferd-bench
(or --peer-bin PATH).

    python bench/startup.py [--rounds 3] [--threads N] [--parallel 4] [--ctx 2048] [--peer-bin PATH]
                            [--src DIR] [--lazy]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import free_port  # noqa: E402

MODEL = "gemma-3-270m"
MESSAGES = [{"role": "user", "content": "Name the capital of France."}]


def gemma_path() -> Path:
    from inferd.registry.builtins import gemma_270m_path

    return gemma_270m_path()


def peer_binary(given: Path | None) -> Path | None:
    if given is not None:
        return given
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from generation import peer_bin  # type: ignore[import-not-found]

    return peer_bin(False)


def inferd_argv(port: int, threads: int, parallel: int, ctx: int) -> list[str]:
    return [sys.executable, "-m", "inferd", "serve", "--port", str(port), "--threads", str(threads),
            "--parallel", str(parallel), "--ctx-size", str(ctx), "--log-level", "warning"]


def inferd_env(src: str | None = None) -> dict[str, str]:
    """Built-ins only; bytecode caches written and read as an installed package has them (a
    PYTHONDONTWRITEBYTECODE environment would make every start compile inferd's sources again)."""
    env = {**os.environ, "INFERD_MODELS_DIR": "/nonexistent", "INFERD_ML_DIR": "/nonexistent"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if src:
        env["PYTHONPATH"] = src
    return env


def peer_argv(binary: Path, gguf: Path, port: int, threads: int, parallel: int, ctx: int) -> list[str]:
    return [str(binary), "-m", str(gguf), "--alias", MODEL, "--host", "127.0.0.1", "--port", str(port),
            "-t", str(threads), "-tb", str(threads), "-np", str(parallel), "-c", str(parallel * ctx),
            "-b", "512", "--kv-unified", "--chat-template", "gemma", "--no-webui"]


def first_token(url: str, model: str, timeout: float = 300) -> float:
    """perf_counter() when the first content delta of one streamed chat completion arrived."""
    body = {"model": model, "messages": MESSAGES, "max_tokens": 8, "temperature": 0, "stream": True}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=timeout) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for c in chunk.get("choices") or ():
                if (c.get("delta") or {}).get("content"):
                    return time.perf_counter()
    raise RuntimeError(f"{url}: the stream ended without a token")


def cold_start(argv: list[str], env: dict[str, str] | None, port: int, name: str,
               timeout: float = 300) -> dict[str, float]:
    """Spawn, poll /health until 200, then one streamed chat request: seconds from the spawn."""
    url = f"http://127.0.0.1:{port}"
    log = tempfile.TemporaryFile()  # not a pipe: llama.cpp's chatter would fill it and block
    t0 = time.perf_counter()
    # `python -m inferd` imports from the working directory first: run another tree in itself
    cwd = (env or {}).get("PYTHONPATH") or str(Path(__file__).resolve().parent.parent)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log, cwd=cwd)
    try:
        with httpx.Client(timeout=1) as client:
            while True:
                try:
                    if client.get(url + "/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if proc.poll() is not None or time.perf_counter() - t0 > timeout:
                    log.seek(0)
                    raise RuntimeError(f"{name} did not start: {log.read().decode(errors='replace')[-2000:]}")
                time.sleep(0.005)
        healthy = time.perf_counter() - t0
        token = first_token(url, MODEL) - t0
        return {"healthy": healthy, "token": token}
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--parallel", type=int, default=4, help="slots on each side (inferd's default)")
    ap.add_argument("--ctx", type=int, default=2048, help="tokens per slot on each side")
    ap.add_argument("--peer-bin", type=Path, help="a llama-server binary (default: the cached build)")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--src", help="another inferd source tree (say `git archive main`) measured as `inferd before`")
    ap.add_argument("--lazy", action="store_true", help="also inferd with --preload none (every load on first use)")
    a = ap.parse_args()
    gguf = gemma_path()
    binary = None if a.no_peer else peer_binary(a.peer_bin)
    if binary is None and not a.no_peer:
        print("llama-server is not built: run bench/generation.py --build-peer", file=sys.stderr)
    sides = {"inferd": lambda port: (inferd_argv(port, a.threads, a.parallel, a.ctx), inferd_env())}
    if a.src:
        sides["inferd before"] = lambda port: (inferd_argv(port, a.threads, a.parallel, a.ctx), inferd_env(a.src))
    if a.lazy:
        sides["inferd lazy"] = lambda port: ([*inferd_argv(port, a.threads, a.parallel, a.ctx), "--preload", "none"],
                                             inferd_env())
    if binary is not None:
        sides["llama-server"] = lambda port: (peer_argv(binary, gguf, port, a.threads, a.parallel, a.ctx), None)
    print(f"gemma-3-270m Q4_K_M, {a.threads} threads, {a.parallel} slots of {a.ctx} tokens, "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    for name, make in sides.items():  # unmeasured: page cache, inferd's self-check verdict
        port = free_port()
        cold_start(*make(port), port, name)
    best: dict[str, dict[str, float]] = {}
    for r in range(a.rounds):
        for name, make in sides.items():
            port = free_port()
            got = cold_start(*make(port), port, name)
            print(f"  round {r + 1} {name:>12}: healthy {got['healthy']:.3f} s, first token {got['token']:.3f} s",
                  flush=True)
            b = best.setdefault(name, dict(got))
            b["healthy"], b["token"] = min(b["healthy"], got["healthy"]), min(b["token"], got["token"])
    print(f"\n## cold start, best of {a.rounds} (seconds from spawn), load average {os.getloadavg()[0]:.2f}")
    print("| server | healthy | first token |")
    print("|---|---|---|")
    for name, b in best.items():
        print(f"| {name} | {b['healthy']:.2f} | {b['token']:.2f} |")
    if "llama-server" in best:
        o, p = best["inferd"], best["llama-server"]
        print(f"| ratio inferd / llama-server | {o['healthy'] / p['healthy']:.2f}x | {o['token'] / p['token']:.2f}x "
              f"(target <= 1.2x) |")
    print(f"inferd healthy in {best['inferd']['healthy']:.2f} s (target < 2 s)")


if __name__ == "__main__":
    main()
