"""Draft-model speculation benchmark. Prints tokens/s and ratios measured in one run (not a
test; numbers depend on the machine and its load).

No smaller model shares gemma-3-270m's vocabulary (it is the smallest Gemma 3, and its
262,144-token output head is most of its cost, so any same-vocabulary draft would cost about as
much as the target). So this script makes a pair the way the test fixtures are made
(scripts/make_tiny_gguf.py, F32, seed 0): a target of 16 layers x 512 wide and a draft that is
the same code and seed with 1 layer, so the draft's embeddings, head and first layer are the
target's and its greedy tokens often agree. Then, single stream and 4 streams, greedy, 128 new
tokens after a chat prompt:

1. inferd plain vs inferd with `draft_model` (request field, `speculation_policy: "on"`,
   `speculative_k` K): tokens/s, drafted/accepted, and whether the text is the same;
2. the same pair on llama.cpp's C++ llama-server (`-md`, `--spec-type draft-simple`,
   `--spec-draft-n-max K`), built by bench/generation.py --build-peer, when it is cached.

usage: python bench/speculation.py [--threads N] [--k 4] [--new-tokens 128] [--repeat 3]
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
from common import wait_healthy  # noqa: E402  (bench/ is the script folder)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_tiny_gguf  # noqa: E402
from generation import peer_bin  # noqa: E402

TARGET, DRAFT = "spec-target", "spec-draft"
PROMPT = "hello world the other one is here there hello world"


def make_pair(d: Path, damp: float) -> tuple[Path, Path]:
    """The target (16 layers) and its draft (1 layer) of the same seed, as served model folders.
    The target's layers after the first write `damp` times their random output into the
    residual stream, the way a distilled draft's target differs from it by a little per token:
    with undamped random layers the two would never agree (a benchmark of pure overhead)."""
    import gguf

    add = gguf.GGUFWriter.add_tensor

    def damped(self, name, tensor, *args, **kw):
        parts = name.split(".")
        if parts[0] == "blk" and int(parts[1]) >= 1 and parts[2] in ("attn_output", "ffn_down"):
            tensor = tensor * damp
        return add(self, name, tensor, *args, **kw)

    paths = []
    gguf.GGUFWriter.add_tensor = damped
    try:
        for name, layers in [(TARGET, 16), (DRAFT, 1)]:
            m = d / "generators" / name
            m.mkdir(parents=True)
            make_tiny_gguf.N_EMBD, make_tiny_gguf.N_HEAD, make_tiny_gguf.N_HEAD_KV = 512, 8, 4
            make_tiny_gguf.N_FF, make_tiny_gguf.N_CTX, make_tiny_gguf.N_LAYER = 1536, 2048, layers
            make_tiny_gguf.main(str(m / "model.gguf"))
            (m / "model_manifest.json").write_text(json.dumps({"n_ctx": 1024}))
            paths.append(m / "model.gguf")
    finally:
        gguf.GGUFWriter.add_tensor = add
    return paths[0], paths[1]


class Proc:
    def __init__(self, argv: list[str], url: str, name: str):
        self.url, self.name = url, name
        self.log = tempfile.TemporaryFile()
        self.p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self.log)
        wait_healthy(url, self.p, name, timeout=300)

    def close(self) -> None:
        self.p.terminate()
        try:
            self.p.wait(20)
        except subprocess.TimeoutExpired:
            self.p.kill()


async def _one(client: httpx.AsyncClient, url: str, body: dict, path: str) -> dict:
    r = await client.post(url + path, json=body)
    r.raise_for_status()
    return r.json()


def run(url: str, path: str, bodies: list[dict]) -> tuple[float, list[dict]]:
    """Aggregate tokens/s of the bodies sent at once, and the responses."""
    async def go():
        async with httpx.AsyncClient(timeout=600) as c:
            return await asyncio.gather(*(_one(c, url, b, path) for b in bodies))
    t = time.perf_counter()
    out = asyncio.run(go())
    n = sum(o["usage"]["completion_tokens"] for o in out)
    return n / (time.perf_counter() - t), out


def inferd_bodies(n: int, new: int, draft: str | None, k: int) -> list[dict]:
    out = []
    for i in range(n):
        b = {"model": TARGET, "temperature": 0, "max_tokens": new, "ignore_eos": True, "prompt_cache": False,
             "messages": [{"role": "user", "content": f"{i} {PROMPT}"}]}
        if draft:
            b.update(draft_model=draft, speculation_policy="on", speculative_k=k)
        out.append(b)
    return out


def peer_bodies(n: int, new: int) -> list[dict]:
    return [{"model": TARGET, "temperature": 0, "max_tokens": new, "ignore_eos": True, "cache_prompt": False,
             "messages": [{"role": "user", "content": f"{i} {PROMPT}"}]} for i in range(n)]


def text(o: dict) -> str:
    return o["choices"][0]["message"]["content"]


def agree(a: list[dict], b: list[dict]) -> str:
    """'same' or where the first differing answer first differs (in characters): above the
    committed 64-wide fixture, F32 CPU matmuls are not batch-invariant (a verified row differs
    from the same row decoded alone by ~2e-4), so near-ties may flip, on either server."""
    for x, y in zip(a, b):
        tx, ty = text(x), text(y)
        if tx != ty:
            return f"differs from char {next((i for i, (c, d) in enumerate(zip(tx, ty)) if c != d), min(len(tx), len(ty)))}"
    return "same"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--streams", default="1,4")
    ap.add_argument("--damp", type=float, default=0.03, help="the target's layers 2-16 output scale")
    a = ap.parse_args()
    streams = [int(s) for s in a.streams.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        target, draft = make_pair(Path(tmp), a.damp)
        print(f"target {target.stat().st_size / 2**20:.0f} MiB (16 layers), draft {draft.stat().st_size / 2**20:.0f} "
              f"MiB (1 layer), F32, {a.threads} threads, k={a.k}, {a.new_tokens} greedy tokens", flush=True)
        rows: dict[tuple[str, int], float] = {}
        srv = Proc([sys.executable, "-m", "inferd", "serve", "--port", "18761", "--threads", str(a.threads),
                    "--parallel", "4", "--models-dir", tmp, "--no-builtins", "--log-level", "warning"],
                   "http://127.0.0.1:18761", "inferd")
        try:
            for n in streams:
                for _ in range(a.repeat):  # alternate, best of each: background load hits both alike
                    tp, plain = run(srv.url, "/ai/v1/generate", inferd_bodies(n, a.new_tokens, None, a.k))
                    ts, spec = run(srv.url, "/ai/v1/generate", inferd_bodies(n, a.new_tokens, DRAFT, a.k))
                    rows[("plain", n)] = max(rows.get(("plain", n), 0), tp)
                    rows[("spec", n)] = max(rows.get(("spec", n), 0), ts)
                    sp = spec[0]["speculation"]
                    print(f"  inferd {n} stream(s): plain {tp:.1f} tok/s, draft {ts:.1f} tok/s ({ts / tp:.2f}x), "
                          f"accepted {sp['accepted_tokens']}/{sp['drafted_tokens']}, text {agree(plain, spec)}", flush=True)
        finally:
            srv.close()
        binary = peer_bin(False)
        if binary is None:
            print("llama-server is not built (python bench/generation.py --build-peer): peer skipped")
        else:
            answers: dict[tuple[str, int], list[dict]] = {}
            for mode, extra in [("peer-plain", []), ("peer-spec", ["-md", str(draft), "--spec-type", "draft-simple",
                                                                   "--spec-draft-n-max", str(a.k), "-td", str(a.threads)])]:
                peer = Proc([str(binary), "-m", str(target), "--port", "18762", "-t", str(a.threads), "-np", "4",
                             "-c", "4096", "--kv-unified", "--no-cache-prompt", "--cache-ram", "0", "--alias", TARGET,
                             *extra], "http://127.0.0.1:18762", "llama-server")
                try:
                    for n in streams:
                        for _ in range(a.repeat):
                            t, answers[(mode, n)] = run(peer.url, "/v1/chat/completions", peer_bodies(n, a.new_tokens))
                            rows[(mode, n)] = max(rows.get((mode, n), 0), t)
                        same = agree(answers[("peer-plain", n)], answers[(mode, n)])
                        print(f"  llama-server {mode} {n} stream(s): {rows[(mode, n)]:.1f} tok/s, text {same}", flush=True)
                finally:
                    peer.close()
    print("\n| streams | inferd plain | inferd draft | speedup | llama-server plain | llama-server draft | speedup "
          "| inferd draft / llama-server draft |")
    print("|---|---|---|---|---|---|---|---|")
    for n in streams:
        p, s = rows[("plain", n)], rows[("spec", n)]
        lp, ls = rows.get(("peer-plain", n)), rows.get(("peer-spec", n))
        peer = (f"{lp:.1f} | {ls:.1f} | {ls / lp:.2f}x | {s / ls:.2f}x" if lp and ls else "- | - | - | -")
        print(f"| {n} | {p:.1f} | {s:.1f} | {s / p:.2f}x | {peer} |")


if __name__ == "__main__":
    main()
