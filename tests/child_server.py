"""A real `inferd serve` in a child process (so a request that would abort the process fails
the test instead of killing pytest), and raw sockets."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.server import free_port


@contextlib.contextmanager
def child_server(models_dir: Path | None, *flags: str, env: dict[str, str] | None = None,
                 wait: bool = True, builtins: bool = False) -> Iterator[tuple[str, subprocess.Popen]]:
    # The child binds the port itself, so another process may take it between free_port() and
    # the bind: a start that fails with "address already in use" is retried on a new port.
    for attempt in range(3):
        port = free_port()
        cmd = [sys.executable, "-m", "inferd", "serve", "--port", str(port), *([] if builtins else ["--no-builtins"]),
               "--threads", "1", "--models-dir", str(models_dir or "/nonexistent/models"), "--ml-dir",
               "/nonexistent/ml", *flags]
        # The log goes to a file: a pipe nobody reads fills up and blocks the server.
        log = tempfile.NamedTemporaryFile("w+b", prefix="inferd-child-", suffix=".log")
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, env={**os.environ, **(env or {})})
        if not wait or not _lost_port_race(proc, log, port) or attempt == 2:
            break
        log.close()
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while wait:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"inferd exited with {proc.returncode}: {log.read().decode()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            if time.time() > deadline:
                raise RuntimeError("inferd did not start")
            time.sleep(0.1)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _lost_port_race(proc: subprocess.Popen, log: Any, port: int) -> bool:
    """Wait until the child listens on `port` or exits; True when it exited because the port
    was taken (then the caller starts another on a new port)."""
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            return b"address already in use" in log.read().lower()
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return False
        time.sleep(0.05)
    return False


def alive(url: str, proc: subprocess.Popen) -> bool:
    if proc.poll() is not None:
        return False
    try:
        return httpx.get(url + "/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def raw_request(url: str, data: bytes, timeout: float = 10) -> bytes:
    """Send raw bytes to the server and return everything it answers until it closes."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        with contextlib.suppress(socket.timeout):
            while chunk := s.recv(65536):
                out += chunk
                if b"\r\n\r\n" in out and _complete(out):
                    break
        return out


def _complete(resp: bytes) -> bool:
    head, _, body = resp.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False
