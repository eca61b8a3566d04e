"""What the benchmarks share: waiting for a server they started to answer /health."""

from __future__ import annotations

import subprocess
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
