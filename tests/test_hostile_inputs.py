"""Hostile and odd requests on the routes of the console, observability and extraction
issues: each gets its family's error (never a 500) and bounded work (the server stays
responsive). Found by the independent review of those issues."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from inferd.runtimes.extract import gliner
from tests.extract_fixtures import TINY_GGUF, extract_srv, post  # noqa: F401
from tests.server import serve


@pytest.fixture(scope="module")
def bare_srv():
    with serve() as s:
        yield s


@pytest.mark.parametrize("path", ["/ui/%00", "/ui/a%00b.js", "/ui/" + "a" * 5000, "/ui/js/" + "b" * 300 + ".js"])
def test_console_paths_the_os_refuses_are_404_not_500(bare_srv, path):
    r = httpx.get(bare_srv.url + path)
    assert r.status_code == 404, r.text
    assert r.json()["error"]["code"] == "not_found"
    assert len(r.json()["error"]["message"]) < 400  # the path is not echoed whole


def test_console_page_is_public_with_an_api_key_but_the_api_is_not():
    with serve(api_key="sekret") as s:
        for path in ("/ui", "/ui/", "/ui/index.html"):
            r = httpx.get(s.url + path)
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/html"), (path, r.status_code)
        for path in ("/metrics", "/load", "/slots", "/admin/models"):
            assert httpx.get(s.url + path).status_code == 401, path
        assert httpx.post(s.url + "/admin/drain").status_code == 401


@pytest.mark.parametrize("path,family", [("/v1/embeddings", "openai"), ("/api/embed", "ollama"),
                                         ("/ai/v1/extract", "antfly")])
def test_a_missing_body_says_so(bare_srv, path, family):
    r = httpx.post(bare_srv.url + path)
    assert r.status_code == 400
    b = r.json()
    msg = {"openai": lambda: b["error"]["message"], "ollama": lambda: b["error"], "antfly": lambda: b["message"]}[family]()
    assert msg == "the request body is missing: send a JSON object"


def test_unknown_model_is_openais_404_shape(bare_srv):
    r = httpx.post(bare_srv.url + "/v1/chat/completions", json={"model": "ghost", "messages": [{"role": "user",
                                                                                                "content": "hi"}]})
    assert r.status_code == 404
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["code"] == "model_not_found"
    r = httpx.get(bare_srv.url + "/slots", params={"model": "ghost"})
    assert r.status_code == 404 and r.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("schema,param", [
    ({"entities": ["x" * 201]}, "schema.entities.0"),
    ({"classifications": [{"name": "t", "labels": ["a", "y" * 201]}]}, "schema.classifications.0.labels.1"),
])
def test_extract_labels_are_bounded(extract_srv, schema, param):  # noqa: F811
    r = post(extract_srv, {"model": "tiny-gliner", "inputs": [{"content": "Bob"}], "schema": schema})
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "INVALID_REQUEST" and param in r.json()["message"]


def test_a_long_text_keeps_the_server_responsive(extract_srv):  # noqa: F811
    """The span search of a long text ran on the event loop in time quadratic in the spans
    kept: one 50,000-character input stalled every other request for tens of seconds."""
    text = "Bob Smith works at Acme in Paris. " * 1500
    box: dict = {}

    def run() -> None:
        box["r"] = post(extract_srv, {"model": "tiny-gliner", "inputs": [{"content": text}],
                                      "schema": {"entities": ["person", "org"]}, "options": {"threshold": 0.0}},
                        timeout=180)

    t = threading.Thread(target=run)
    t.start()
    worst = 0.0
    while t.is_alive():
        t0 = time.perf_counter()
        assert httpx.get(extract_srv.url + "/healthz", timeout=60).status_code == 200
        worst = max(worst, time.perf_counter() - t0)
        time.sleep(0.2)
    t.join()
    r = box["r"]
    assert r.status_code == 200, r.text
    ents = r.json()["data"][0]["entities"]
    assert len(ents) > 1000  # threshold 0, flat: spans tile the text
    assert all(a["end"] <= b["start"] for a, b in zip(ents, ents[1:]))
    assert worst < 5.0, f"/healthz took {worst:.1f}s while the extraction ran"


def test_too_many_span_candidates_is_a_per_item_413(extract_srv, monkeypatch):  # noqa: F811
    monkeypatch.setattr(gliner, "MAX_SPAN_CANDIDATES", 40)
    r = post(extract_srv, {"model": "tiny-gliner", "error_policy": "per_item",
                           "inputs": [{"content": "Bob"}, {"content": "Bob Smith works at Acme in Paris. " * 4}],
                           "schema": {"entities": ["person", "org"]}, "options": {"threshold": 0.0}})
    assert r.status_code == 200, r.text
    b = r.json()
    assert [d["index"] for d in b["data"]] == [0] and b["data"][0]["entities"]
    assert [(e["index"], e["code"]) for e in b["errors"]] == [(1, "PAYLOAD_TOO_LARGE")]
    assert "threshold" in b["errors"][0]["message"]
    r = post(extract_srv, {"model": "tiny-gliner", "inputs": [{"content": "Bob Smith works at Acme. " * 4}],
                           "schema": {"entities": ["person", "org"]}, "options": {"threshold": 0.0}})
    assert r.status_code == 413 and r.json()["error"] == "PAYLOAD_TOO_LARGE"


def test_memory_budget_message_gives_small_sizes_truly(tmp_path):
    g = tmp_path / "generators" / "tiny"
    g.mkdir(parents=True)
    (g / "model.gguf").symlink_to(TINY_GGUF.resolve())
    with serve(models_dir=str(tmp_path), max_memory=300 * 1024) as s:
        r = httpx.post(s.url + "/ai/v1/chat/completions", json={"model": "tiny", "messages": [
            {"role": "user", "content": "hi"}]})
        assert r.status_code == 507 and r.json()["error"] == "MEMORY_BUDGET_EXCEEDED"
        assert "is 0.3 MiB" in r.json()["message"]


def test_zero_shot_classification_passes_are_bounded(extract_srv):  # noqa: F811
    """A zero-shot classifier scores each (text, label) pair in its own pass: 256 inputs x 16
    classifications x 64 labels was 262,144 passes from a 100 KB request."""
    labels = [f"topic {i}" for i in range(64)]
    body = {"model": "tiny-nli", "inputs": [{"content": f"text {i}"} for i in range(65)],
            "schema": {"classifications": [{"name": "a", "labels": labels}]}}
    r = post(extract_srv, body)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "INVALID_REQUEST" and "4096" in r.json()["message"]
    body["inputs"] = body["inputs"][:2]
    r = post(extract_srv, body)
    assert r.status_code == 200 and len(r.json()["data"][0]["classifications"]) == 1


def test_slots_fail_on_no_slot_is_503_only_when_every_slot_is_busy(extract_srv):  # noqa: F811
    """llama-server's GET /slots?fail_on_no_slot=1; a bad value is a 400, never ignored."""
    u = extract_srv.url
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert httpx.post(u + "/v1/chat/completions", json=chat, timeout=60).status_code == 200
    r = httpx.get(u + "/slots", params={"model": "tiny", "fail_on_no_slot": 1})
    assert r.status_code == 200 and any(not s["is_processing"] for s in r.json())
    assert httpx.get(u + "/slots", params={"fail_on_no_slot": "maybe"}).status_code == 400
    box: list = []
    long = {**chat, "max_tokens": 1000, "ignore_eos": True, "stream": True}
    n = len(r.json())

    def run() -> None:
        with httpx.stream("POST", u + "/v1/chat/completions", json=long, timeout=120) as s:
            box.append(sum(1 for _ in s.iter_lines()))

    ts = [threading.Thread(target=run) for _ in range(n)]
    for t in ts:
        t.start()
    seen = set()
    deadline = time.time() + 60
    while any(t.is_alive() for t in ts) and time.time() < deadline:
        r = httpx.get(u + "/slots", params={"model": "tiny", "fail_on_no_slot": 1})
        seen.add(r.status_code)
        if r.status_code == 503:
            assert r.json()["error"]["message"] == "no slot available" and r.headers["retry-after"]
            break
        time.sleep(0.02)
    for t in ts:
        t.join()
    assert 503 in seen


@pytest.mark.parametrize("path", ["/admin/models/load", "/models/load"])
def test_load_of_the_builtin_chunker_is_a_400(bare_srv, path):
    r = httpx.post(bare_srv.url + path, json={"model": "fixed"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "model_not_supported", r.text
    r = httpx.post(bare_srv.url + path, json={"model": "ghost"})
    assert r.status_code == 404


@pytest.mark.parametrize("path", ["/admin/models/unload", "/models/unload"])
def test_unload_paths_answer_alike(bare_srv, path):
    assert httpx.post(bare_srv.url + path, json={"model": "ghost"}).status_code == 404
    r = httpx.post(bare_srv.url + path, json={"model": "fixed"})  # served, never loaded
    assert r.json() == {"success": True, "model": "fixed", "was_loaded": False, "unloaded": False}, r.text


def test_encoder_passes_of_one_request_are_bounded(extract_srv, monkeypatch):  # noqa: F811
    from inferd.service import extraction

    monkeypatch.setattr(extraction, "MAX_ENCODER_PASSES", 8)
    text = "Bob Smith works at Acme in Paris. " * 40  # ~280 words: more than 8 windows of the tiny GLiNER
    r = post(extract_srv, {"model": "tiny-gliner", "inputs": [{"content": text}], "schema": {"entities": ["person"]}})
    assert r.status_code == 413 and r.json()["error"] == "PAYLOAD_TOO_LARGE" and "encoder passes" in r.json()["message"]
    r = post(extract_srv, {"model": "tiny-gliner", "inputs": [{"content": "Bob Smith"}], "schema": {"entities": ["person"]}})
    assert r.status_code == 200


def test_a_structure_too_big_for_the_context_is_a_400(extract_srv):  # noqa: F811
    """Long field names fill the tiny generator's 4096-token context: the JSON cannot finish.
    That is the request's fault (a 400 saying so), not an INFERENCE_FAILED 500."""
    fields = {"f" * 1000 + str(i): "integer" for i in range(3)}
    r = post(extract_srv, {"model": "tiny", "inputs": [{"content": "Bob"}],
                           "schema": {"structures": {"p": {"fields": fields}}}}, timeout=120)
    assert r.status_code == 400, r.text[-300:]
    assert r.json()["error"] == "CONTEXT_LENGTH_EXCEEDED" and "structure 'p'" in r.json()["message"]
