"""The cost of the Ray hop: inferd through Ray Serve (ingress + replica, two nodes in a
loopback-only network namespace) vs the same model on a plain `inferd serve` in the same
namespace, same threads. Prints TTFT p50/p95, inter-token latency, and small-embedding
requests per second for both, and the ratio; plus resident memory of the Ray processes.

    sudo .venv/bin/python bench/cluster.py          (root: it makes a network namespace)
"""

from __future__ import annotations

import concurrent.futures
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.ray_ns import BIN, NS, URL, cleanup, in_ns, ns_pids, sh, start_cluster  # noqa: E402

FIX = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
DIRECT = "http://127.0.0.1:8090"
HI = [{"role": "user", "content": "Write a long story about the sea."}]


def stream_stats(base: str, n: int = 20, tokens: int = 64) -> tuple[list[float], list[float]]:
    ttft, itl = [], []
    with httpx.Client(timeout=120) as c:
        for i in range(n):
            t0 = time.perf_counter()
            stamps = []
            with c.stream("POST", base + "/v1/chat/completions", json={
                    "model": "tiny", "messages": HI + [{"role": "user", "content": str(i)}], "max_tokens": tokens,
                    "stream": True, "ignore_eos": True, "temperature": 0}) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {") and '"content"' in line:
                        stamps.append(time.perf_counter())
            ttft.append(stamps[0] - t0)
            itl += [b - a for a, b in zip(stamps, stamps[1:])]
    return ttft, itl


def embed_rps(base: str, n: int = 300, clients: int = 8) -> float:
    def one(i: int) -> int:
        return httpx.post(base + "/v1/embeddings", json={"model": "tiny-embed", "input": f"hello {i}"},
                          timeout=60).status_code

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as ex:
        codes = list(ex.map(one, range(n)))
    assert set(codes) == {200}, set(codes)
    return n / (time.perf_counter() - t0)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    cfg = tmp / "cluster.toml"
    cfg.write_text(f"""
[[models]]
name = "tiny"
kind = "generator"
path = "{FIX / 'gguf' / 'tiny-llama.gguf'}"
num_cpus = 0.5
parallel = 4
threads = 1

[[models]]
name = "tiny-embed"
kind = "embedder"
path = "{FIX / 'onnx' / 'tiny-bert-embed'}"
num_cpus = 0.25
threads = 1
""")
    direct = None
    try:
        start_cluster(tmp / "t")
        sh(str(BIN / "inferd"), "cluster", "deploy", "--ray", "127.0.0.1:6379", "--cluster-config", str(cfg),
           "--port", "8000", timeout=300)
        direct = subprocess.Popen(["ip", "netns", "exec", NS, str(BIN / "inferd"), "serve", "--port", "8090",
                                   "--no-builtins", "--threads", "1", "--parallel", "4",
                                   "--model", f"tiny={FIX / 'gguf' / 'tiny-llama.gguf'}",
                                   "--model", f"embedder:tiny-embed={FIX / 'onnx' / 'tiny-bert-embed'}"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def measure():
            deadline = time.time() + 60
            while time.time() < deadline:
                try:
                    if httpx.get(DIRECT + "/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
            for base in (URL, DIRECT):  # warm both
                stream_stats(base, 2, 8)
                embed_rps(base, 20, 2)
            return {name: (stream_stats(base), embed_rps(base)) for name, base in (("ray", URL), ("direct", DIRECT))}

        res = in_ns(measure)
        rss = 0
        for pid in ns_pids():
            try:
                rss += int(next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                                if line.startswith("VmRSS")).split()[1]) * 1024
            except (OSError, StopIteration):
                pass
        out = {}
        for name, ((ttft, itl), rps) in res.items():
            out[name] = {"ttft_p50_ms": round(pct(ttft, 0.5), 2), "ttft_p95_ms": round(pct(ttft, 0.95), 2),
                         "itl_p50_ms": round(pct(itl, 0.5), 3), "itl_mean_ms": round(statistics.mean(itl) * 1000, 3),
                         "embed_rps_8_clients": round(rps, 1)}
        r, d = out["ray"], out["direct"]
        out["ratio"] = {"ttft_p50_added_ms": round(r["ttft_p50_ms"] - d["ttft_p50_ms"], 2),
                        "itl_p50_ray_over_direct": round(r["itl_p50_ms"] / max(1e-9, d["itl_p50_ms"]), 2),
                        "embed_rps_ray_over_direct": round(r["embed_rps_8_clients"] / d["embed_rps_8_clients"], 2)}
        out["namespace_rss_mib_two_nodes_plus_direct"] = rss >> 20
        print(json.dumps(out, indent=2))
    finally:
        if direct is not None:
            direct.kill()
        cleanup()


if __name__ == "__main__":
    main()
