"""Observability routes and middleware: /load, /slots, /admin/drain, /admin/models,
and `Observe`, which gives every request its RequestInfo (observability/context.py; left in
the scope, where RequestContext counts the request once, with its model), adds the timing
headers, writes its trace, and refuses new work with 503 + Retry-After while the server drains."""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from inferd.api.deps import get_service
from inferd.api.errors import LLAMACPP_PATHS, error_response, family_of
from inferd.errors import Overloaded
from inferd.logs import request_id
from inferd.models import ModelKind
from inferd.observability.context import SCOPE_KEY, RequestInfo, begin, end
from inferd.observability.observer import Observer
from inferd.service import InferenceService

router = APIRouter()

# Never refused while draining (health must say so, scrapers keep scraping) and not waited for.
EXEMPT = frozenset({"/", "/health", "/v1/health", "/healthz", "/readyz", "/metrics", "/load", "/slots",
                    "/admin/drain", "/favicon.ico"})
STREAMED = (b"text/event-stream", b"application/x-ndjson")
OWN = ("/admin/requests", "/admin/errors")  # not listed among the active requests
OPENAI_BARE = ("/chat/completions", "/embeddings", "/rerank")


def route_family(path: str) -> str:
    if path.startswith("/v1/messages"):
        return "anthropic"
    if path.startswith("/v1/") or path in OPENAI_BARE:
        return "openai"
    if path.startswith("/api/"):
        return "ollama"
    if path.startswith("/ai/"):
        return "antfly"
    if path.startswith("/ml/"):
        return "ml"
    if path in LLAMACPP_PATHS:
        return "llamacpp"
    return "control"


def _ms(seconds: float) -> bytes:
    return f"{seconds * 1000:.3f}".encode()


class Observe:
    """Innermost middleware, so auth and CORS apply to its refusals too."""

    def __init__(self, app: ASGIApp, observer: Observer):
        self.app, self.observer = app, observer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, drain, obs = scope["path"], self.observer.drain, self.observer
        exempt = path in EXEMPT or path.startswith("/ui/")
        if drain.draining and not exempt:
            obs.reject("draining")
            err = Overloaded("server is draining (shutting down); retry later or on another instance",
                             drain.retry_after_s() * 1000)
            return await error_response(err, family_of(path))(scope, receive, send)
        info = RequestInfo(family=route_family(path))
        scope[SCOPE_KEY] = info  # in place: RequestContext counts the request with its model
        token = begin(info)
        # The operator's list of active requests; not its own polls (the console's Operator page).
        listed = None if exempt or path.startswith(OWN) else obs.active.add(request_id.get(), scope, info)
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                ctype = dict(headers).get(b"content-type", b"")
                # Timing headers only where admission ran (inference routes) and the work is
                # over when headers go out (not streams: theirs would describe nothing yet).
                if info.admitted_at is not None and not ctype.startswith(STREAMED):
                    headers += [(b"x-queue-time", _ms(info.queue_seconds)),
                                (b"x-inference-time", _ms(time.perf_counter() - info.admitted_at)),
                                (b"x-compute-tokens", str(info.compute_tokens).encode())]
                    message = {**message, "headers": headers}
            await send(message)

        if not exempt:
            drain.enter()
        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            if not exempt:
                drain.leave()
            end(token)
            if listed is not None:
                obs.active.remove(listed)
            tracer = getattr(obs, "tracer", None)
            if tracer is not None and not exempt:
                route = getattr(scope.get("route"), "path", None) or path
                hdrs = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]
                        if k in (b"traceparent", b"tracestate")}
                tracer.record(info, scope["method"], path, route, status, time.time_ns(), hdrs)


def observer_of(svc: InferenceService) -> Observer:
    return svc.observer  # type: ignore[attr-defined]


@router.get("/load")
async def load(svc: InferenceService = Depends(get_service)) -> dict:
    return observer_of(svc).load_view()


@router.get("/slots")
async def slots(model: str | None = Query(None), fail_on_no_slot: bool = Query(False),
                svc: InferenceService = Depends(get_service)) -> list:
    if model is not None:
        model = svc.resolve(model, ModelKind.GENERATOR).name  # 404 unknown, 400 not a generator
    view = observer_of(svc).slots_view(model)
    # llama-server's ?fail_on_no_slot=1: 503 when every slot is busy (a router's cheap probe).
    if fail_on_no_slot and view and all(s["is_processing"] for s in view):
        raise Overloaded("no slot available", 1000)
    return view


@router.post("/admin/drain", status_code=202)
async def drain(svc: InferenceService = Depends(get_service)) -> dict:
    d = observer_of(svc).drain
    started = d.begin()
    return {"status": "draining", "started": started, "in_flight": d.active, "timeout_s": d.timeout}


async def health_response(request: Request, body: dict) -> JSONResponse | dict:
    """Health and readiness answer 503 {"status": "draining"} once a drain has begun."""
    if observer_of(request.app.state.service).drain.draining:
        return JSONResponse({"status": "draining"}, status_code=503)
    return body


@router.get("/admin/models")
async def models_state(svc: InferenceService = Depends(get_service)) -> dict:
    """Every served model with its load state (the console's Models page): kind, format, size
    on disk, loaded, users, seconds until keep-alive unloads it (null: never, or not loaded)."""
    obs = observer_of(svc)
    now = time.time()
    live = {e["spec"].name: e for e in svc.loaded()}
    out = []
    for spec in svc.models():
        e = live.get(spec.name)
        exp = e["expires_at"] if e else None
        out.append({"name": spec.name, "kind": spec.kind.value, "format": spec.format, "source": spec.source,
                    "size_bytes": spec.size_bytes, "capabilities": sorted(spec.capabilities),
                    "loaded": e is not None, "in_use": e["in_use"] if e else 0,
                    "expires_in": None if exp is None else max(0.0, round(exp - now, 1)),
                    "load_seconds": round(obs.load_seconds[spec.name], 3) if spec.name in obs.load_seconds else None,
                    "resident_bytes": e.get("size_bytes") if e else None,
                    "load_rss_bytes": obs.resident.get(spec.name) if e else None})
    return {"models": out}
