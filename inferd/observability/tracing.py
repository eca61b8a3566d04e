"""Optional OpenTelemetry traces (--otlp-endpoint): one server span per request with child
spans for queue, load, prefill and decode, exported over OTLP/HTTP (protobuf).

The spans are written when the request ends, from the times its RequestInfo collected
(context.py), so nothing on the hot path talks to OpenTelemetry. The SDK is the optional
`otel` extra; asking for traces without it is a start-up error, never a silent no-op."""

from __future__ import annotations

import logging
from typing import Any

from inferd.errors import ConfigError
from inferd.observability.context import RequestInfo

log = logging.getLogger("inferd.tracing")


def traces_url(endpoint: str) -> str:
    """OTLP/HTTP convention: a base endpoint gets /v1/traces appended; a full URL is kept."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else endpoint + "/v1/traces"


class Tracer:
    def __init__(self, endpoint: str, service_name: str = "inferd", version: str = ""):
        try:
            from opentelemetry import trace
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
        except ImportError as e:
            raise ConfigError("--otlp-endpoint needs OpenTelemetry: pip install 'inferd[otel]' "
                              f"(opentelemetry-sdk, opentelemetry-exporter-otlp-proto-http): {e}") from e
        self._trace = trace
        self.url = traces_url(endpoint)
        # A provider of our own (not the global one): two servers in one process stay apart.
        self.provider = TracerProvider(resource=Resource.create({"service.name": service_name,
                                                                 "service.version": version}))
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=self.url, timeout=5),
                                                            schedule_delay_millis=500))
        self.tracer = self.provider.get_tracer("inferd", version)
        self.propagator = TraceContextTextMapPropagator()

    def record(self, info: RequestInfo, method: str, path: str, route: str, status: int, end_ns: int,
               headers: dict[str, str]) -> None:
        trace = self._trace
        parent = self.propagator.extract(headers) if "traceparent" in headers else None
        span = self.tracer.start_span(f"{method} {route}", context=parent, kind=trace.SpanKind.SERVER,
                                      start_time=info.start_ns)
        attrs: dict[str, Any] = {"http.request.method": method, "url.path": path, "http.route": route,
                                 "http.response.status_code": status, "inferd.family": info.family}
        if info.model:
            attrs["inferd.model"] = info.model
        if info.compute_tokens:
            attrs["inferd.compute_tokens"] = info.compute_tokens
        span.set_attributes(attrs)
        if status >= 500:
            span.set_status(trace.Status(trace.StatusCode.ERROR))
        ctx = trace.set_span_in_context(span)
        for name, start, end in info.spans:
            child = self.tracer.start_span(name, context=ctx, start_time=start)
            child.end(end_time=max(start, end))
        span.end(end_time=end_ns)

    def close(self) -> None:
        try:
            self.provider.shutdown()  # flushes what is batched
        except Exception:
            log.exception("shutting the trace exporter down failed")


def make_tracer(settings: Any) -> Tracer | None:
    endpoint = getattr(settings, "otlp_endpoint", None)
    if not endpoint:
        return None
    from inferd import __version__

    return Tracer(endpoint, version=__version__)
