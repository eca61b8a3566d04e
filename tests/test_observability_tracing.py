"""OpenTelemetry traces (--otlp-endpoint) sent to a local collector stand-in: a tiny HTTP
server that receives OTLP/HTTP protobuf exports and decodes them with the OTLP protos."""

import gzip
import http.server
import threading
import time

import httpx
import pytest

from inferd.config import load_settings
from inferd.errors import ConfigError
from inferd.observability.tracing import traces_url
from tests.obs_helpers import models_dir, wait_for
from tests.server import free_port, serve

trace_pb = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")


class Collector:
    """POST /v1/traces -> the spans, decoded; answers like a real collector (200, empty body)."""

    def __init__(self):
        self.spans: list = []
        self.paths: list[str] = []
        self.port = free_port()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                req = trace_pb.ExportTraceServiceRequest()
                req.ParseFromString(body)
                outer.paths.append(self.path)
                for rs in req.resource_spans:
                    service = {a.key: a.value.string_value for a in rs.resource.attributes}["service.name"]
                    for ss in rs.scope_spans:
                        outer.spans += [(service, s) for s in ss.spans]
                out = trace_pb.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def attrs(span) -> dict:
    out = {}
    for a in span.attributes:
        v = a.value
        out[a.key] = v.string_value if v.HasField("string_value") else v.int_value
    return out


def test_one_span_per_request_with_queue_load_prefill_decode_children(tmp_path):
    col = Collector()
    try:
        d = models_dir(tmp_path, embedder=True)
        with serve(models_dir=str(d), parallel=2, threads=1, otlp_endpoint=f"http://127.0.0.1:{col.port}") as s:
            trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
            r = httpx.post(s.url + "/v1/chat/completions", timeout=60, headers={
                "traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}, json={
                "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
                "ignore_eos": True})
            assert r.status_code == 200
            with httpx.stream("POST", s.url + "/v1/completions", json={
                    "model": "tiny", "prompt": "streamed", "max_tokens": 6, "ignore_eos": True, "stream": True}) as st:
                st.read()
            assert httpx.post(s.url + "/v1/embeddings", json={"model": "tiny-embed", "input": "x"}).status_code == 200
            assert httpx.get(s.url + "/health").status_code == 200  # health is not traced
            wait_for(lambda: len([sp for _, sp in col.spans if sp.kind == sp.SPAN_KIND_SERVER]) >= 3, 15,
                     "three server spans exported")
    finally:
        col.close()
    assert set(col.paths) == {"/v1/traces"}
    assert {svc for svc, _ in col.spans} == {"inferd"}
    spans = [sp for _, sp in col.spans]
    servers = {sp.name: sp for sp in spans if sp.kind == sp.SPAN_KIND_SERVER}
    assert set(servers) == {"POST /v1/chat/completions", "POST /v1/completions", "POST /v1/embeddings"}

    def children(parent) -> dict:
        return {sp.name: sp for sp in spans if sp.parent_span_id == parent.span_id and sp.trace_id == parent.trace_id}

    chat = servers["POST /v1/chat/completions"]
    assert chat.trace_id.hex() == trace_id  # joined the caller's trace (W3C traceparent)
    assert chat.parent_span_id.hex() == "00f067aa0ba902b7"
    a = attrs(chat)
    assert a["inferd.model"] == "tiny" and a["http.response.status_code"] == 200 and a["inferd.family"] == "openai"
    kids = children(chat)
    assert set(kids) == {"queue", "load", "prefill", "decode"}  # the first request loaded the model
    for k in kids.values():  # children sit inside their parent, in order
        assert chat.start_time_unix_nano <= k.start_time_unix_nano <= k.end_time_unix_nano <= chat.end_time_unix_nano + 1_000_000
    assert kids["load"].end_time_unix_nano <= kids["prefill"].start_time_unix_nano + 1_000_000
    assert kids["prefill"].end_time_unix_nano <= kids["decode"].start_time_unix_nano + 1_000_000
    streamed = children(servers["POST /v1/completions"])
    assert {"queue", "prefill", "decode"} <= set(streamed) and "load" not in streamed  # loaded already
    assert servers["POST /v1/completions"].trace_id != chat.trace_id
    emb = servers["POST /v1/embeddings"]
    assert attrs(emb)["inferd.model"] == "tiny-embed" and "queue" in children(emb)


def test_traces_url_and_missing_sdk_is_an_error(monkeypatch):
    assert traces_url("http://c:4318") == "http://c:4318/v1/traces"
    assert traces_url("http://c:4318/v1/traces") == "http://c:4318/v1/traces"
    import builtins

    real = builtins.__import__

    def no_otel(name, *a, **kw):
        if name.startswith("opentelemetry"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_otel)
    from inferd.service import InferenceService

    settings = load_settings({"otlp_endpoint": "http://127.0.0.1:1", "builtins": False,
                              "models_dir": "/nonexistent", "ml_dir": "/nonexistent"})
    with pytest.raises(ConfigError, match="inferd\\[otel\\]"):
        InferenceService.from_settings(settings)
