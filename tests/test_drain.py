"""Graceful drain on a real `inferd serve` process: SIGTERM (or POST /admin/drain) stops
admitting (503 + Retry-After, health "draining"), lets the running streams finish, then
the process exits 0."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from inferd.observability.drain import GRACE, Drain
from tests.obs_helpers import models_dir, wait_for
from tests.server import free_port


def start(tmp_path, *extra: str) -> tuple[subprocess.Popen, str]:
    d = models_dir(tmp_path, embedder=False)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERD_")}
    proc = subprocess.Popen([sys.executable, "-m", "inferd", "serve", "--models-dir", str(d), "--ml-dir",
                             str(tmp_path / "ml"), "--no-builtins", "--port", str(port), "--threads", "1",
                             "--parallel", "8", *extra], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert proc.poll() is None, proc.stdout.read()
        try:
            return httpx.get(url + "/health", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    wait_for(up, 30, "server start")
    return proc, url


def test_sigterm_lets_eight_running_streams_finish_and_refuses_new_requests(tmp_path):
    proc, url = start(tmp_path, "--drain-timeout", "60")
    try:
        results: list[dict] = [{} for _ in range(8)]
        first = threading.Barrier(9, timeout=30)

        def stream(i: int) -> None:
            body = {"model": "tiny", "prompt": f"stream {i}", "max_tokens": 1200, "ignore_eos": True,
                    "stream": True, "stream_options": {"include_usage": True}}
            tokens, reason, done, usage = 0, None, False, None
            with httpx.stream("POST", url + "/v1/completions", json=body, timeout=120) as r:
                results[i]["status"] = r.status_code
                lines = r.iter_lines()
                for line in lines:
                    if not line.startswith("data: "):
                        continue
                    if line == "data: [DONE]":
                        done = True
                        continue
                    chunk = json.loads(line[6:])
                    if chunk.get("usage"):
                        usage = chunk["usage"]
                    for ch in chunk.get("choices", []):
                        tokens += 1 if ch.get("text") is not None and ch.get("finish_reason") is None else 0
                        reason = ch.get("finish_reason") or reason
                    if tokens == 1:
                        first.wait()
            results[i].update(reason=reason, done=done, usage=usage)

        threads = [threading.Thread(target=stream, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        first.wait()  # every stream has its first token
        load = httpx.get(url + "/load").json()
        assert load["models"]["tiny"]["running"] == 8, load
        proc.send_signal(signal.SIGTERM)
        # Draining: new work is refused in each family's envelope, with Retry-After.
        r = wait_for(lambda: (lambda r: r if r.status_code == 503 else None)(
            httpx.post(url + "/v1/completions", json={"model": "tiny", "prompt": "late", "max_tokens": 2})),
            10, "503 while draining")
        assert int(r.headers["retry-after"]) >= 1 and "draining" in r.json()["error"]["message"]
        o = httpx.post(url + "/api/generate", json={"model": "tiny", "prompt": "late"})
        assert o.status_code == 503 and "draining" in o.json()["error"]
        a = httpx.get(url + "/ai/v1/models")
        assert a.status_code == 503 and a.json()["error"] == "SERVICE_UNAVAILABLE"
        h = httpx.get(url + "/health")
        assert h.status_code == 503 and h.json() == {"status": "draining"}
        assert httpx.get(url + "/load").json()["draining"] is True
        text = httpx.get(url + "/metrics").text
        assert "inferd_draining 1" in text
        refused = [line for line in text.splitlines() if line.startswith('inferd_admission_rejections_total{reason="draining"}')]
        assert refused and float(refused[0].split()[-1]) >= 3
        assert proc.poll() is None
        assert httpx.get(url + "/load").json()["models"]["tiny"]["running"] > 0  # the streams still run
        t0 = time.time()
        for t in threads:
            t.join(120)
        print("streams ended", time.time() - t0, "s after the checks")
        for res in results:  # every stream ran to its end, [DONE] included
            assert res["status"] == 200 and res["reason"] == "length" and res["done"], res
            assert res["usage"]["completion_tokens"] == 1200
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_admin_drain_needs_the_api_key_then_exits_0(tmp_path):
    proc, url = start(tmp_path, "--api-key", "k3y")
    try:
        assert httpx.post(url + "/admin/drain").status_code == 401
        assert httpx.get(url + "/health").json() == {"status": "ok"}
        r = httpx.post(url + "/admin/drain", headers={"Authorization": "Bearer k3y"})
        assert r.status_code == 202 and r.json()["status"] == "draining"
        assert proc.wait(30) == 0  # nothing was in flight: it exits at once
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_drain_gives_up_after_its_timeout():
    d = Drain(timeout=0.3)
    done = asyncio.Event()
    d.on_done.append(done.set)
    d.enter()  # a request that never ends
    t0 = time.monotonic()
    assert d.begin() and not d.begin()
    await asyncio.wait_for(done.wait(), 5)
    # the timeout, then up to GRACE for streams to end with the abort's error frame
    assert 0.25 < time.monotonic() - t0 < 0.3 + GRACE + 1.5 and d.active == 1 and d.draining


def test_a_stream_still_running_at_the_drain_timeout_ends_with_an_error_frame(tmp_path):
    """Not a connection cut mid-answer: the model is closed, the stream's last event says
    why (a retryable 503 in OpenAI's error shape), and the process still exits 0."""
    proc, url = start(tmp_path, "--drain-timeout", "1")
    try:
        # context shift lets it run far past its 4096-token window: it outlives the 1 s drain
        body = {"model": "tiny", "prompt": "forever", "max_tokens": 60000, "ignore_eos": True, "stream": True,
                "cache_compaction_ratio": 0.5}
        events: list[str] = []
        started = threading.Event()

        def stream() -> None:
            with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        events.append(line[6:])
                        started.set()

        t = threading.Thread(target=stream)
        t.start()
        assert started.wait(30)
        proc.send_signal(signal.SIGTERM)
        t.join(30)
        assert not t.is_alive()
        assert proc.wait(30) == 0
        last = json.loads(events[-1])
        assert "error" in last, events[-3:]
        assert last["error"]["code"] == "service_unavailable" and last["error"]["retry_after_ms"] > 0, last
        assert "unloaded" in last["error"]["message"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
