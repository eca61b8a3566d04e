"""/metrics, /load, /slots and the timing headers on a real server with the tiny GGUF
generator and the tiny ONNX embedder, under concurrent load: the numbers must match what
the responses themselves report."""

import concurrent.futures
import json
import threading

import httpx
import pytest

from tests.obs_helpers import metric, models_dir, parse_metrics, wait_for
from tests.server import serve

N_TOKENS = 24


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = models_dir(tmp_path_factory.mktemp("obs"))
    with serve(models_dir=str(d), parallel=4, threads=1) as s:
        yield s


def scrape(s) -> dict:
    r = httpx.get(s.url + "/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return parse_metrics(r.text)


def complete(url: str, prompt: str = "hello world", n: int = N_TOKENS, **extra) -> httpx.Response:
    return httpx.post(url + "/v1/completions", timeout=60, json={
        "model": "tiny", "prompt": prompt, "max_tokens": n, "ignore_eos": True, "temperature": 0, **extra})


def test_concurrent_generation_counts_match_the_responses(srv):
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        # speculation off: the decode-entry counts below are one per token (a draft verifies several)
        rs = list(pool.map(lambda i: complete(srv.url, speculation_policy="off"), range(12)))
    assert all(r.status_code == 200 for r in rs), [r.text for r in rs if r.status_code != 200]
    usages = [r.json()["usage"] for r in rs]
    assert all(u["completion_tokens"] == N_TOKENS for u in usages)
    m = scrape(srv)
    assert metric(m, "inferd_model_requests_total", model="tiny", family="openai", status="200") == 12
    assert metric(m, "inferd_generation_tokens_total", model="tiny") == 12 * N_TOKENS
    assert metric(m, "inferd_prompt_tokens_total", model="tiny") == sum(u["prompt_tokens"] for u in usages)
    cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages)
    assert cached > 0  # the same prompt twelve times: later ones reuse the KV cells
    assert metric(m, "inferd_prompt_cache_hit_tokens_total", model="tiny") == cached
    assert metric(m, "inferd_time_to_first_token_seconds_count", model="tiny") == 12
    assert metric(m, "inferd_e2e_request_latency_seconds_count", model="tiny") == 12
    assert metric(m, "inferd_inter_token_latency_seconds_count", model="tiny") == 12 * (N_TOKENS - 1)
    assert metric(m, "inferd_sequences_finished_total", model="tiny", reason="length") == 12
    assert metric(m, "inferd_request_duration_seconds_count", model="tiny", family="openai") == 12
    # One decode entry per sequence per step: one prefill chunk, then N-1 decodes of a sampled token.
    steps = metric(m, "inferd_decode_batch_size_count", model="tiny")
    assert metric(m, "inferd_decode_batch_size_sum", model="tiny") == 12 * N_TOKENS
    assert metric(m, "inferd_decode_batch_size_bucket", model="tiny", le="4") == steps  # never above --parallel 4
    assert metric(m, "inferd_decode_batch_size_bucket", model="tiny", le="1") < steps  # and batched for real
    assert steps < 12 * N_TOKENS
    # Histograms are cumulative and end with +Inf == count.
    buckets = sorted((float(dict(k[1])["le"]), v) for k, v in m.items()
                     if k[0] == "inferd_time_to_first_token_seconds_bucket" and dict(k[1])["le"] != "+Inf")
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)
    assert metric(m, "inferd_time_to_first_token_seconds_bucket", model="tiny", le="+Inf") == 12
    # The legacy counters keep counting too, POST routes by their path.
    assert metric(m, "inferd_requests_total", method="POST", route="/v1/completions", status="200") == 12
    assert metric(m, "inferd_tokens_total", model="tiny", type="completion") == 12 * N_TOKENS
    # Load: the model loaded once, took some time, the process grew.
    assert metric(m, "inferd_model_loads_total", model="tiny") == 1
    assert metric(m, "inferd_model_load_seconds", model="tiny") > 0
    assert metric(m, "inferd_model_resident_bytes", model="tiny") >= 4 * 4096  # weights + KV cache estimate
    assert metric(m, "inferd_model_load_rss_bytes", model="tiny") >= 0
    assert metric(m, "inferd_model_loaded", model="tiny") == 1
    assert metric(m, "inferd_slots", model="tiny") == 4
    assert metric(m, "inferd_kv_cache_cells_total", model="tiny") == 4 * 4096
    assert metric(m, "inferd_kv_cache_cells_used", model="tiny") > 0  # finished sequences stay as prompt cache
    state = {x["name"]: x for x in httpx.get(srv.url + "/admin/models").json()["models"]}
    tiny = state["tiny"]
    assert tiny["loaded"] and tiny["kind"] == "generator" and tiny["format"] == "gguf" and tiny["in_use"] == 0
    assert 0 < tiny["expires_in"] <= 300 and tiny["load_seconds"] > 0
    assert tiny["resident_bytes"] == metric(m, "inferd_model_resident_bytes", model="tiny")


def test_load_and_slots_while_streams_hold_every_slot(srv):
    """Six long streams on four slots: four run, two wait; /load, /slots and the gauges agree."""
    stop = threading.Event()
    clients: list[httpx.Client] = []

    def stream(i: int) -> None:
        c = httpx.Client(timeout=60)
        clients.append(c)
        body = {"model": "tiny", "prompt": f"story {i}", "max_tokens": 3000, "ignore_eos": True, "stream": True}
        try:
            with c.stream("POST", srv.url + "/v1/completions", json=body) as r:
                for _ in r.iter_lines():
                    if stop.is_set():
                        return
        except httpx.HTTPError:  # closed under it by the test: that is the point
            pass

    threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(6)]
    for t in threads:
        t.start()
    try:
        # Both counts: a stream just submitted waits a moment before the engine gives it a slot.
        load = wait_for(lambda: (lambda b: b if (b["models"].get("tiny", {}).get("waiting"),
                                                 b["models"].get("tiny", {}).get("running")) == (2, 4) else None)(
            httpx.get(srv.url + "/load").json()), what="4 running + 2 waiting")
        tiny = load["models"]["tiny"]
        assert tiny == {**tiny, "kind": "generator", "running": 4, "waiting": 2, "slots": 4, "slots_free": 0}
        assert load["totals"]["running"] >= 4 and load["totals"]["waiting"] >= 2 and load["draining"] is False
        assert load["totals"]["requests_in_flight"] == 6
        assert all(load[k] == load["totals"][k] for k in ("running", "waiting", "slots", "slots_free"))
        slots = httpx.get(srv.url + "/slots", params={"model": "tiny"}).json()
        assert [s["id"] for s in slots] == [0, 1, 2, 3]
        assert all(s["is_processing"] and s["n_ctx"] == 4096 and s["tokens_cached"] > 0 for s in slots)
        assert all("prompt" not in s for s in slots)  # no prompt text without --slots-show-prompts
        m = scrape(srv)
        assert metric(m, "inferd_sequences_running", model="tiny") == 4
        assert metric(m, "inferd_sequences_waiting", model="tiny") == 2
        assert metric(m, "inferd_slots_in_use", model="tiny") == 4
    finally:
        stop.set()
        for c in clients:
            c.close()
    for t in threads:
        t.join(30)
    # The streams were cut by their clients: the sequences stop and the slots free up.
    wait_for(lambda: httpx.get(srv.url + "/load").json()["models"]["tiny"]["running"] == 0, what="slots freed")
    assert httpx.get(srv.url + "/load").json()["models"]["tiny"]["slots_free"] == 4


def test_slots_errors(srv):
    assert httpx.get(srv.url + "/slots", params={"model": "ghost"}).status_code == 404
    httpx.post(srv.url + "/v1/embeddings", json={"model": "tiny-embed", "input": "x"})
    r = httpx.get(srv.url + "/slots", params={"model": "tiny-embed"})
    assert r.status_code == 400 and "generator" in r.json()["error"]["message"]


def test_timing_headers_on_non_streamed_responses(srv):
    r = complete(srv.url, "timing", 5)
    u = r.json()["usage"]
    assert int(r.headers["x-compute-tokens"]) == u["prompt_tokens"] + u["completion_tokens"]
    assert float(r.headers["x-queue-time"]) >= 0
    assert 0 < float(r.headers["x-inference-time"]) < 60_000  # milliseconds
    e = httpx.post(srv.url + "/v1/embeddings", json={"model": "tiny-embed", "input": ["one two", "three"]})
    assert e.status_code == 200
    assert int(e.headers["x-compute-tokens"]) == e.json()["usage"]["prompt_tokens"]
    m = scrape(srv)
    assert metric(m, "inferd_encoder_batch_size_count", model="tiny-embed") >= 1
    assert metric(m, "inferd_encoder_padded_tokens_total", model="tiny-embed") >= \
        metric(m, "inferd_encoder_tokens_total", model="tiny-embed") > 0
    with httpx.stream("POST", srv.url + "/v1/completions", json={
            "model": "tiny", "prompt": "x", "max_tokens": 3, "stream": True}) as s:
        assert "x-queue-time" not in s.headers and "x-compute-tokens" not in s.headers
        s.read()
    assert "x-queue-time" not in httpx.get(srv.url + "/v1/models").headers  # not an inference route
    o = httpx.post(srv.url + "/api/generate", json={"model": "tiny", "prompt": "x", "stream": False,
                                                    "options": {"num_predict": 2}})
    assert o.status_code == 200 and int(o.headers["x-compute-tokens"]) > 2
    m = scrape(srv)
    assert metric(m, "inferd_model_requests_total", model="tiny", family="ollama", status="200") == 1


def test_admission_rejections_and_load_failures_by_reason(tmp_path):
    d = models_dir(tmp_path, embedder=False)
    (d / "generators" / "broken.gguf").write_bytes(b"GGUF" + b"\0" * 64)
    with serve(models_dir=str(d), parallel=1, threads=1, max_concurrent_requests=1, max_queued_requests=0) as s:
        with httpx.stream("POST", s.url + "/v1/completions", timeout=60, json={
                "model": "tiny", "prompt": "hold", "max_tokens": 3000, "ignore_eos": True, "stream": True}) as held:
            lines = held.iter_lines()  # keep a reference: a collected iterator closes the stream
            next(lines)
            r = complete(s.url, "refused", 2)
            assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
        m = scrape(s)
        assert metric(m, "inferd_admission_rejections_total", reason="queue_full") == 1
        bad = httpx.post(s.url + "/v1/completions", json={"model": "broken", "prompt": "x", "max_tokens": 1})
        assert bad.status_code == 500 and "failed to load" in bad.json()["error"]["message"]
        m = scrape(s)
        assert metric(m, "inferd_model_load_failures_total", model="broken") == 1
        assert metric(m, "inferd_model_requests_total", model="broken", family="openai", status="500") == 1
        assert ("inferd_model_loaded", frozenset({("model", "broken")})) not in m


def test_slots_show_prompts(tmp_path):
    d = models_dir(tmp_path, embedder=False)
    with serve(models_dir=str(d), parallel=2, threads=1, slots_show_prompts=True) as s:
        complete(s.url, "The quick brown fox", 3)
        slots = httpx.get(s.url + "/slots").json()
        assert len(slots) == 2 and all(x["model"] == "tiny" for x in slots)
        used = [x for x in slots if x["tokens_cached"]]
        assert len(used) == 1 and "The quick brown fox" in used[0]["prompt"]
        assert json.loads(json.dumps(slots))[1 - slots.index(used[0])]["prompt"] == ""


def test_a_request_is_counted_once_and_both_request_families_are_views_of_it():
    """Issue 28: inferd_requests_total (per route) and inferd_model_requests_total (per model)
    come from one record per request (Metrics.observe_request); the Observer keeps no count."""
    from inferd.metrics import Metrics
    from inferd.observability.observer import Observer
    from inferd.scheduling.admission import Admission

    m = Metrics()
    obs = Observer(registry=type("R", (), {"loaded": {}, "specs": {}})(), admission=Admission(4, 4, 1.0), metrics=m)
    m.observe_request("POST", "/v1/embeddings", 200, 0.25, "tiny-embed", "openai")
    m.observe_request("GET", "/v1/models", 200, 0.01)  # no model: per route only
    text = m.render({}) + obs.render()
    route = parse_metrics(text)
    assert metric(route, "inferd_requests_total", method="POST", route="/v1/embeddings", status="200") == 1
    assert metric(route, "inferd_requests_total", method="GET", route="/v1/models", status="200") == 1
    assert metric(route, "inferd_model_requests_total", model="tiny-embed", family="openai", status="200") == 1
    assert metric(route, "inferd_request_duration_seconds_count", model="tiny-embed", family="openai") == 1
    assert not hasattr(obs, "requests") and not hasattr(obs, "request")
