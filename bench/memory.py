"""Memory (issue 31): resident size of `inferd serve` with its built-in models, idle and at its peak
under 16 concurrent chat streams plus embedding requests, against what a user would run instead:
llama.cpp's `llama-server` on the same GGUF (gemma-3-270m Q4_K_M) plus Infinity
(infinity-emb 0.0.78, optimum's ONNX engine) serving the same int8 all-MiniLM-L6-v2 file. Not a
test; numbers depend on the machine.

RSS is VmRSS from /proc/<pid>/status, summed over the process and its children (inferd's
llama.cpp self-check probe is a child; pages shared between processes, such as a mapped GGUF,
count once per process that maps them, as `ps` shows them). Phases, each side in its own fresh
processes (one side at a time, so neither's load shows in the other's peak):

  started  healthy, nothing asked yet (inferd loads on first use; the peers load at start)
  loaded   after one chat and one embedding request, idle again
  peak     the highest sample (every 20 ms) while 16 chat streams (--new-tokens each) and
           16 embedding requests of --batch sentences run at once
  after    idle again, 2 s after the load

Both generators get the same slots and context (16 x 512 tokens, unified KV cache) and threads.

    python bench/memory.py [--threads N] [--parallel 16] [--ctx 512] [--new-tokens 64]
                           [--infinity /work/infinity-venv/bin/infinity_emb] [--peer-bin PATH]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench.common import free_port  # noqa: E402
from bench.startup import MODEL, gemma_path, inferd_argv, inferd_env, peer_argv, peer_binary  # noqa: E402

EMBEDDER = "all-MiniLM-L6-v2"
SENTENCE = "The quick brown fox jumps over the lazy dog near the river bank at dawn."


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(d.name))
    return kids


def rss_tree(pids: list[int]) -> float:
    """MiB resident of these processes and all their descendants (VmRSS)."""
    kids = _children()
    todo, total = list(pids), 0
    while todo:
        pid = todo.pop()
        todo.extend(kids.get(pid, ()))
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
                    break
        except OSError:
            pass
    return total / 1024


class Proc:
    def __init__(self, argv: list[str], env: dict[str, str] | None, url: str, name: str, health: str = "/health"):
        self.url, self.name = url, name
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.time() + 300
        while True:
            try:
                if httpx.get(url + health, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                self.log.seek(0)
                raise RuntimeError(f"{name} did not start: {self.log.read().decode(errors='replace')[-2000:]}")
            time.sleep(0.1)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def chat(url: str, new: int, i: int) -> int:
    body = {"model": MODEL, "messages": [{"role": "user", "content": f"Tell story {i} about a lighthouse keeper."}],
            "max_tokens": new, "temperature": 0, "stream": True}
    n = 0
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            n += line.startswith("data: ") and line != "data: [DONE]"
    return n


def embed(url: str, model: str, batch: int, i: int) -> int:
    r = httpx.post(url, json={"model": model, "input": [f"{i}-{k}: {SENTENCE}" for k in range(batch)]}, timeout=600)
    r.raise_for_status()
    return len(r.json()["data"])


def measure(pids: Callable[[], list[int]], gen_url: str, emb_url: str | None, emb_model: str, new: int,
            streams: int, batch: int) -> dict[str, float]:
    out = {"started": rss_tree(pids())}
    chat(gen_url, 4, -1)
    if emb_url:
        embed(emb_url, emb_model, 1, -1)
    time.sleep(1)
    out["loaded"] = rss_tree(pids())
    peak, stop = [out["loaded"]], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak.append(rss_tree(pids()))
            time.sleep(0.02)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    with ThreadPoolExecutor(2 * streams) as pool:
        jobs = [pool.submit(chat, gen_url, new, i) for i in range(streams)]
        jobs += [pool.submit(embed, emb_url, emb_model, batch, i) for i in range(streams) if emb_url]
        for j in jobs:
            j.result()
    stop.set()
    t.join()
    out["peak"] = max(peak)
    time.sleep(2)
    out["after"] = rss_tree(pids())
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32, help="sentences per embedding request")
    ap.add_argument("--infinity", default="/work/infinity-venv/bin/infinity_emb",
                    help="Infinity's infinity_emb executable ('' to skip)")
    ap.add_argument("--peer-bin", type=Path)
    a = ap.parse_args()
    gguf = gemma_path()
    rows: dict[str, dict[str, float]] = {}
    print(f"gemma-3-270m Q4_K_M + all-MiniLM-L6-v2 int8, {a.threads} threads, {a.parallel} slots of {a.ctx} "
          f"tokens, {a.parallel} streams x {a.new_tokens} tokens + {a.parallel} embedding requests x {a.batch}, "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    srv = Proc(inferd_argv(port, a.threads, a.parallel, a.ctx), inferd_env(), url, "inferd")
    try:
        rows["inferd"] = measure(lambda: [srv.proc.pid], url, url + "/v1/embeddings", EMBEDDER, a.new_tokens,
                                 a.parallel, a.batch)
    finally:
        srv.close()
    print("  inferd", rows["inferd"], flush=True)

    binary = peer_binary(a.peer_bin)
    if binary is not None:
        pport, iport = free_port(), free_port()
        purl = f"http://127.0.0.1:{pport}"
        peer = Proc(peer_argv(binary, gguf, pport, a.threads, a.parallel, a.ctx), None, purl, "llama-server")
        inf = None
        try:
            if not a.infinity:  # the generator alone
                rows["llama-server"] = measure(lambda: [peer.proc.pid], purl, None, "", a.new_tokens, a.parallel,
                                               a.batch)
            else:
                from embeddings import _infinity_folder  # type: ignore[import-not-found]

                folder = _infinity_folder()
                iurl = f"http://127.0.0.1:{iport}"
                env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(a.threads),
                       "INFINITY_ANONYMOUS_USAGE_STATS": "0", "DO_NOT_TRACK": "1"}
                try:
                    inf = Proc([a.infinity, "v2", "--model-id", str(folder), "--engine", "optimum", "--device", "cpu",
                               "--pooling-method", "mean", "--onnx-disable-optimize", "--port", str(iport),
                               "--batch-size", "32", "--log-level", "warning"], env, iurl, "infinity")
                except RuntimeError as e:  # say why, and still measure llama-server alone
                    print(f"Infinity did not start: {e}", file=sys.stderr)
                    rows["llama-server"] = measure(lambda: [peer.proc.pid], purl, None, "", a.new_tokens,
                                                   a.parallel, a.batch)
                    raise SystemExit(report(rows)) from None
                infp = inf
                rows["llama-server + Infinity"] = measure(lambda: [peer.proc.pid, infp.proc.pid], purl,
                                                          iurl + "/embeddings", str(folder), a.new_tokens,
                                                          a.parallel, a.batch)
                rows["  of which llama-server"] = {"after": rss_tree([peer.proc.pid])}
                rows["  of which Infinity"] = {"after": rss_tree([inf.proc.pid])}
        finally:
            peer.close()
            if inf is not None:
                inf.close()
    report(rows)


def report(rows: dict[str, dict[str, float]]) -> int:
    print(f"\n## memory (MiB resident, VmRSS incl. children), load average {os.getloadavg()[0]:.2f}")
    print("| server | started | loaded, idle | peak under load | after |")
    print("|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | " + " | ".join(f"{r[k]:.0f}" if k in r else "-" for k in ("started", "loaded", "peak",
                                                                                     "after")) + " |")
    peer_row = rows.get("llama-server + Infinity")
    if peer_row:
        o = rows["inferd"]
        print(f"| ratio inferd / peers | {o['started'] / peer_row['started']:.2f}x | "
              f"{o['loaded'] / peer_row['loaded']:.2f}x | {o['peak'] / peer_row['peak']:.2f}x | "
              f"{o['after'] / peer_row['after']:.2f}x |")

    return 0


if __name__ == "__main__":
    main()
