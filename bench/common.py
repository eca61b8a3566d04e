"""What the benchmarks share: a free loopback port, waiting for a server they started to
answer /health, and an `inferd serve` subprocess."""

from __future__ import annotations

import os
from pathlib import Path
import socket
import subprocess
import sys
import time

import httpx


def wait_healthy(url: str, proc: subprocess.Popen, name: str = "inferd", timeout: float = 60.0) -> None:
    """Return once `url`/health answers 200; raise if `proc` died or `timeout` passed."""
    deadline = time.time() + timeout
    while True:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.time() > deadline or proc.poll() is not None:
            raise RuntimeError(f"{name} did not start")
        time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class InferdServer:
    """`inferd serve` on a free loopback port, `--threads` N, warnings only, serving the
    built-in models (unless `builtins=False`) and those of `models_dir` and `ml_dir` (none by
    default); `src`: another inferd source tree (say `git archive main`) for before/after runs."""

    def __init__(self, threads: int, *extra: str, models_dir: str | os.PathLike | None = None,
                 builtins: bool = True, src: str | None = None, ml_dir: str | os.PathLike | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # no generator loads unless asked for (`--preload` in `extra` overrides): a benchmark of
        # another kind should not share its first seconds with the built-in generators' loads
        env = {**os.environ, "INFERD_MODELS_DIR": str(models_dir or "/nonexistent"),
               "INFERD_ML_DIR": str(ml_dir or "/nonexistent"), "INFERD_PRELOAD": "none"}
        if src:
            env["PYTHONPATH"] = src
        argv = [sys.executable, "-m", "inferd", "serve", "--port", str(self.port), "--threads", str(threads),
                "--log-level", "warning", *extra]
        if not builtins:
            argv.append("--no-builtins")
        # `python -m` puts the working directory first on sys.path: run in `src` (or in this
        # tree), else a checkout in the caller's directory is what runs, whatever PYTHONPATH says
        self.proc = subprocess.Popen(argv, env=env, cwd=src or Path(__file__).resolve().parent.parent)
        wait_healthy(self.url, self.proc)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(20)
