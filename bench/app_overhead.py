"""The app's own cost of one embedding request (issue 31): microseconds per POST /v1/embeddings
through inferd's ASGI app (every middleware, the route, the JSON answer), with the model call
replaced by a result it returned before, so the forward pass, uvicorn and the client do not
count. Run in this tree and, with --baseline-src DIR (say `git archive` of an older commit),
in that tree, in separate processes, alternating; the best of --rounds batches of --n
requests each. Not a test; numbers depend on the machine and its load.

    python bench/app_overhead.py [--baseline-src DIR] [--rounds 7] [--n 500]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

BODY = b'{"model": "all-MiniLM-L6-v2", "input": "A short sentence about the weather."}'


def scope() -> dict:
    return {"type": "http", "method": "POST", "path": "/v1/embeddings", "raw_path": b"/v1/embeddings",
            "headers": [(b"host", b"127.0.0.1:8080"), (b"content-type", b"application/json"),
                        (b"content-length", str(len(BODY)).encode())],
            "query_string": b"", "root_path": "", "scheme": "http", "server": ("127.0.0.1", 8080),
            "client": ("127.0.0.1", 5555), "http_version": "1.1", "asgi": {"version": "3.0"}, "state": {}}


async def one(app) -> int:
    sent: list[dict] = []
    first = [True]

    async def receive() -> dict:
        if first[0]:
            first[0] = False
            return {"type": "http.request", "body": BODY, "more_body": False}
        await asyncio.sleep(3600)  # the client stays connected
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    await app(scope(), receive, send)
    return sent[0]["status"]


async def measure(rounds: int, n: int) -> float:
    from inferd.api.app import create_app
    from inferd.config import Settings

    app = create_app(Settings(models_dir="/nonexistent", ml_dir="/nonexistent"))
    async with app.router.lifespan_context(app):
        assert await one(app) == 200  # loads the model; the answer below is its own
        svc = app.state.service
        result = await svc.embed("all-MiniLM-L6-v2", ["A short sentence about the weather."])

        async def answered(*_a, **_k):
            return result
        svc.embed = lambda *a, **k: answered()
        assert await one(app) == 200
        best = float("inf")
        for _ in range(rounds):
            t = time.perf_counter()
            for _ in range(n):
                await one(app)
            best = min(best, (time.perf_counter() - t) / n)
    return best * 1e6


def child(src: str | None, rounds: int, n: int) -> float:
    env = {**os.environ, "INFERD_PRELOAD": "none"}
    if src:
        env["PYTHONPATH"] = src
    out = subprocess.run([sys.executable, __file__, "--child", "--rounds", str(rounds), "--n", str(n)],
                         env=env, capture_output=True, text=True, check=True, cwd="/")
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline-src")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=2, help="processes per side, alternating")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(asyncio.run(measure(a.rounds, a.n)))
        return
    here = str(Path(__file__).resolve().parent.parent)
    sides = {"inferd": here, **({"baseline": a.baseline_src} if a.baseline_src else {})}
    best: dict[str, float] = {}
    for r in range(a.repeat):
        for name, src in sides.items():
            us = child(src, a.rounds, a.n)
            best[name] = min(best.get(name, us), us)
            print(f"  round {r + 1} {name:>8}: {us:.1f} us per request", flush=True)
    print(f"\n## app cost of one POST /v1/embeddings (model call replaced), best, load average {os.getloadavg()[0]:.2f}")
    for name, us in best.items():
        print(f"| {name} | {us:.1f} us |")
    if "baseline" in best:
        print(f"| inferd / baseline | {best['inferd'] / best['baseline']:.2f}x |")


if __name__ == "__main__":
    main()
