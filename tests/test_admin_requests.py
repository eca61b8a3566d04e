"""The operator's active requests and recent errors over real HTTP, with the tiny llama: a
slow streamed generation is listed (route, model, client, tokens so far), Cancel ends its
stream early with its normal cancelled finish and it leaves the list; a request waiting for
admission is listed as queued and Cancel answers it with the cancelled error; unknown ids
are 404; error responses and the server's ERROR log records show in /admin/errors; the
API key guards all three."""

from __future__ import annotations

import json
import logging
import threading

import httpx
import pytest

from tests.lora_helpers import slow_decode
from tests.obs_helpers import wait_for
from tests.server import serve
from tests.test_http_foundation import assert_envelope

TINY = "tests/fixtures/gguf/tiny-llama.gguf"
BODY = {"model": "tiny", "messages": [{"role": "user", "content": "tell a story"}], "max_tokens": 200,
        "ignore_eos": True}  # (the tiny llama's context is 256 tokens)


@pytest.fixture(scope="module")
def srv():
    with serve(models=[f"tiny={TINY}"], parallel=2, max_concurrent_requests=1, threads=1) as s:
        assert httpx.post(s.url + "/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 1}).status_code == 200
        yield s


def listed(srv, rid: str) -> dict | None:
    r = httpx.get(srv.url + "/admin/requests")
    assert r.status_code == 200
    return next((x for x in r.json()["requests"] if x["id"] == rid), None)


def test_a_running_stream_is_listed_and_cancel_ends_it_early(srv):
    frames: list[dict] = []
    done = []

    def stream():
        with httpx.stream("POST", srv.url + "/v1/chat/completions", timeout=60, headers={"x-request-id": "op-stream"},
                          json={**BODY, "stream": True}) as r:
            for line in r.iter_lines():
                if line == "data: [DONE]":
                    done.append(True)
                elif line.startswith("data: "):
                    frames.append(json.loads(line[6:]))

    undo = slow_decode(srv.service.registry.loaded["tiny"].model, 0.02)
    t = threading.Thread(target=stream, daemon=True)
    try:
        t.start()
        row = wait_for(lambda: (x := listed(srv, "op-stream")) and x["tokens"] and x["tokens"] > 3 and x, timeout=30,
                       what="the stream in the list with tokens")
        assert row["route"] == "/v1/chat/completions" and row["method"] == "POST" and row["model"] == "tiny"
        assert row["state"] == "running" and row["cancellable"] and row["family"] == "openai"
        assert row["client"].startswith("127.0.0.1:") and row["age_s"] >= 0
        later = wait_for(lambda: (x := listed(srv, "op-stream")) and x["tokens"] > row["tokens"] and x, what="more tokens")
        assert later["started"] == row["started"]
        r = httpx.post(srv.url + "/admin/requests/op-stream/cancel")
        assert r.status_code == 200 and r.json() == {"id": "op-stream", "cancelled": True}
        t.join(15)
        assert not t.is_alive()
    finally:
        undo()
    # The client got its stream's normal end: the cancelled finish, then [DONE].
    finishes = [c["finish_reason"] for f in frames for c in f.get("choices", []) if c.get("finish_reason")]
    assert finishes == ["cancelled"] and done == [True]
    generated = sum(1 for f in frames for c in f.get("choices", []) if c.get("delta", {}).get("content"))
    assert 3 < generated < 150
    wait_for(lambda: listed(srv, "op-stream") is None, what="gone from the list")
    assert httpx.get(srv.url + "/load").json()["models"]["tiny"]["running"] == 0


def test_a_queued_request_is_listed_as_queued_and_cancel_answers_it(srv):
    """One admission slot: a second request waits; Cancel takes it out of the queue with the
    cancelled error (499), while the first goes on."""
    out: dict[str, httpx.Response] = {}

    def call(rid: str, body: dict):
        out[rid] = httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=60, headers={"x-request-id": rid})

    undo = slow_decode(srv.service.registry.loaded["tiny"].model, 0.02)
    first = threading.Thread(target=call, args=("op-first", {**BODY, "max_tokens": 120}), daemon=True)
    second = threading.Thread(target=call, args=("op-second", {**BODY, "max_tokens": 5}), daemon=True)
    try:
        first.start()
        wait_for(lambda: (x := listed(srv, "op-first")) and x["state"] == "running", timeout=30, what="first running")
        second.start()
        row = wait_for(lambda: (x := listed(srv, "op-second")) and x["state"] == "queued" and x, timeout=30,
                       what="second queued")
        assert row["tokens"] is None and row["cancellable"]
        assert httpx.post(srv.url + "/admin/requests/op-second/cancel").status_code == 200
        second.join(15)
        assert_envelope("openai", out["op-second"], 499)
        assert "cancelled by the operator" in out["op-second"].json()["error"]["message"]
        assert listed(srv, "op-first")["state"] == "running"  # untouched
        first.join(60)
    finally:
        undo()
    assert out["op-first"].status_code == 200 and out["op-first"].json()["choices"][0]["finish_reason"] == "length"
    wait_for(lambda: listed(srv, "op-first") is None, what="first gone")


def test_unknown_ids_are_404_and_errors_are_logged(srv):
    r = httpx.post(srv.url + "/admin/requests/no-such-id/cancel", headers={"x-request-id": "op-404"})
    assert_envelope("openai", r, 404)
    assert "no active request 'no-such-id'" in r.json()["error"]["message"]
    assert httpx.get(srv.url + "/v1/no/such/route").status_code == 404
    logging.getLogger("inferd.test").error("disk on fire", exc_info=RuntimeError("smoke"))
    body = httpx.get(srv.url + "/admin/errors").json()
    errs = body["errors"]
    assert body["total"] >= 3 and body["kept"] == 200
    assert errs[0]["source"] == "log" and errs[0]["message"] == "disk on fire: RuntimeError: smoke"
    assert errs[0]["logger"] == "inferd.test" and errs[0]["level"] == "error"
    hit = next(e for e in errs if e.get("request_id") == "op-404")
    assert hit["route"] == "/admin/requests/{rid}/cancel" and hit["status"] == 404 and hit["method"] == "POST"
    assert hit["message"].startswith("no active request 'no-such-id'") and hit["time"] > 0
    route = next(e for e in errs if e.get("path") == "/v1/no/such/route")
    assert route["status"] == 404 and route["message"] == "no route GET /v1/no/such/route"
    # Newest first; the operator's own polls are not listed as active requests.
    assert [e["time"] for e in errs] == sorted((e["time"] for e in errs), reverse=True)
    assert httpx.get(srv.url + "/admin/requests").json() == {"requests": []}


def test_the_api_key_guards_the_operator_routes(tmp_path):
    with serve(api_key="k3y", threads=1) as s:
        for method, path in (("GET", "/admin/requests"), ("GET", "/admin/errors"), ("POST", "/admin/requests/x/cancel")):
            assert httpx.request(method, s.url + path).status_code == 401
        ok = httpx.get(s.url + "/admin/errors", headers={"authorization": "Bearer k3y"}).json()["errors"]
        assert {e["status"] for e in ok} == {401} and len(ok) == 3  # the refusals are logged too
