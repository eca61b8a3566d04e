"""Work nobody waits for (issue 9): a streamed request whose client left leaves the admission
queue at once, and request preparation runs inside the admission slot on its own pool and
stops when the client is gone (on d5904cf it ran on for as long as it took, the slot already
free and /metrics idle)."""

import asyncio
import json
import socket
import time

import pytest

from tests.chat_fixtures import HI, generator_dir
from tests.server import serve

# ~2*10^8 loop steps: tens of seconds of CPU if nobody stops it.
SLOW_TEMPLATE = ("{% for i in range(100000) %}{% for j in range(2000) %}{% endfor %}{% endfor %}"
                 "{{ messages[0]['content'] }}")


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    generator_dir(d, "tiny")
    with serve(models_dir=str(d), threads=1, parallel=2, max_concurrent_requests=1) as s:
        yield s


def _open(srv, body: bytes) -> socket.socket:
    host, port = srv.url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    return s


def _wait(pred, timeout: float) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def test_a_queued_streamed_request_leaves_the_queue_when_its_client_goes(srv):
    adm = srv.service.admission
    release = asyncio.Event()

    async def hold():
        async with adm.slot():
            await release.wait()

    held = asyncio.run_coroutine_threadsafe(hold(), srv.loop)
    try:
        assert _wait(lambda: adm.in_flight == 1, 5)
        body = b'{"model": "tiny", "stream": true, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}'
        s = _open(srv, body)
        assert _wait(lambda: adm.queued == 1, 10), "the streamed request never queued"
        s.close()
        # d5904cf: it stayed queued until granted or until --queue-timeout (60 s).
        assert _wait(lambda: adm.queued == 0, 3), "the gone client is still queued"
    finally:
        srv.loop.call_soon_threadsafe(release.set)
        held.result(5)
    assert _wait(lambda: adm.in_flight == 0, 5)


def test_preparation_stops_when_the_client_goes(srv):
    adm = srv.service.admission

    body = json.dumps({"model": "tiny", "stream": True, "max_tokens": 4, "messages": HI,
                       "chat_template": SLOW_TEMPLATE}).encode()
    s = _open(srv, body)
    assert _wait(lambda: adm.in_flight == 1, 10)
    time.sleep(0.5)  # rendering is under way, inside the admission slot
    assert adm.in_flight == 1
    s.close()
    assert _wait(lambda: adm.in_flight == 0, 5), "the slot is still held long after the client left"
    time.sleep(0.3)
    cpu0, t0 = time.process_time(), time.perf_counter()
    time.sleep(1.5)
    busy = (time.process_time() - cpu0) / (time.perf_counter() - t0)
    assert busy < 0.4, f"the abandoned template still burns {busy:.0%} of a core"
    # The next request is served at once.
    t = time.perf_counter()
    out = _open(srv, b'{"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}')
    data = out.recv(65536)
    out.close()
    assert data.startswith(b"HTTP/1.1 200") and time.perf_counter() - t < 10
