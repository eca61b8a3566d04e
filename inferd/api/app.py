"""create_app(settings, service): the FastAPI app, its middleware and its error handlers."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware

from inferd import __version__
from inferd.api import admin_requests, console, control, gen_control, observe, openapi_doc, slots
from inferd.api.anthropic import messages as anthropic_messages
from inferd.api.antfly import gen as antfly_gen
from inferd.api.antfly import embed as antfly_embed
from inferd.api.antfly import extract as antfly_extract
from inferd.api.antfly import ml as antfly_ml
from inferd.api.antfly import rewrite as antfly_rewrite
from inferd.api.antfly import read as antfly_read
from inferd.api.antfly import routes as antfly_routes
from inferd.api.antfly import transcribe as antfly_transcribe
from inferd.api.errors import error_response, family_of
from inferd.api.llamacpp import completion as llamacpp_completion
from inferd.api.middleware import (ApiKeyAuth, BodyLimit, JsonByDefault, JsonTextGuard, RequestContext,
                                   upload_limits)
from inferd.api.origins import BrowserGuard, OriginPolicy
from inferd.api.ollama import embed as ollama_embed
from inferd.api.ollama import gen as ollama_gen
from inferd.api.ollama import routes as ollama_routes
from inferd.api.openai import embed as openai_embed
from inferd.api.fast_lane import FastLane, embedding_lanes
from inferd.api.openai import audio as openai_audio
from inferd.api.openai import files as openai_files
from inferd.api import infill, llama_helpers, models_routes
from inferd.api.ollama import manage as ollama_manage
from inferd.api.openai import gen as openai_gen
from inferd.api.openai import realtime as openai_realtime
from inferd.api.openai import responses as openai_responses
from inferd.api.openai import routes as openai_routes
from inferd.config import Settings
from inferd.observability.active import ErrorLogHandler
from inferd.errors import InferdError, InvalidInput, NotFound, echo
from inferd.kinds import KINDS
from inferd.service import InferenceService
from inferd.storage.responses import ResponseStore

# The embedding routes come first: the router tries routes in order, and each one tried costs
# a few microseconds, a measurable share of a one-sentence embedding request. Their paths are
# fixed POST paths, so no route below can be shadowed by them.
ROUTERS = [openai_embed.router, ollama_embed.router, antfly_embed.router,
           console.router, observe.router, admin_requests.router, control.router, openai_routes.router, ollama_routes.router,
           antfly_routes.router, antfly_ml.router, antfly_extract.router,
           openai_gen.router, ollama_gen.router, antfly_gen.router, gen_control.router, antfly_read.router,
           openai_audio.router, antfly_transcribe.router,
           antfly_rewrite.router]
ROUTERS.append(openai_files.router)
ROUTERS.append(openai_responses.router)
ROUTERS.append(ollama_manage.router)
ROUTERS.append(models_routes.router)
ROUTERS.append(anthropic_messages.router)
ROUTERS.append(llamacpp_completion.router)  # llama-server's native /completion, /completions
ROUTERS += [infill.router, llama_helpers.router]  # llama-server's /infill, /props, /apply-template, /lora-adapters
ROUTERS.append(slots.router)
ROUTERS.append(openai_realtime.router)  # /v1/realtime: WebSocket transcription sessions


def kind_routers() -> list[Any]:
    """The routers the kinds table names (KindSpec.routes, "module:attribute"): a kind that
    brings its own route modules is served with no edit here."""
    out = []
    for spec in KINDS.values():
        for ref in spec.routes:
            module, _, attr = ref.partition(":")
            out.append(getattr(importlib.import_module(module), attr))
    return out


def validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    """One readable sentence from pydantic's error list, plus the offending parameter."""
    errs = exc.errors()
    if not errs:
        return "invalid request body", None
    e = errs[0]
    if e.get("type") == "json_invalid":
        detail = (e.get("ctx") or {}).get("error", "")
        return f"malformed JSON body{': ' + str(detail) if detail else ''}", None
    loc = [str(p) for p in e.get("loc", ()) if p != "body"]
    param = ".".join(loc) or None
    msg = e.get("msg", "invalid value")
    if e.get("type") == "missing":
        if param is None:  # the body itself
            return "the request body is missing: send a JSON object", None
        return f"'{param}' is required", param
    more = f" (and {len(errs) - 1} more problem{'s' if len(errs) > 2 else ''})" if len(errs) > 1 else ""
    return (f"{param}: {msg}" if param else msg) + more, param


def create_app(settings: Settings, service: InferenceService | None = None,
               inner_middleware: list[tuple[Any, dict[str, Any]]] | None = None) -> FastAPI:
    """`inner_middleware`: (class, kwargs) pairs placed innermost, between the security and
    limit middleware and the router (the cluster ingress's forwarder goes there)."""
    service = service or InferenceService.from_settings(settings)
    # Opened now, not on first use: a corrupt responses database stops the start (StoreCorrupt,
    # naming the file) instead of failing requests later or being overwritten.
    responses = ResponseStore.for_data_dir(settings.data_dir, max_count=settings.responses_max_count,
                                           max_age=settings.responses_max_age)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        await service.start()
        errlog = ErrorLogHandler(service.observer.errors)  # the server's ERROR records, for GET /admin/errors
        logging.getLogger("inferd").addHandler(errlog)
        try:
            yield
        finally:
            logging.getLogger("inferd").removeHandler(errlog)
            await service.close()
            responses.close()
            if service.observer.tracer is not None:  # flush the last spans
                service.observer.tracer.close()

    # FastAPI's own OpenTelemetry hooks (0.150+) look up the global providers on every request
    # (environment reads); inferd traces requests itself (observability/), so they stay off.
    quiet: dict[str, Any] = ({"telemetry": {"tracing": False, "metrics": False, "logs": False}}
             if "telemetry" in inspect.signature(FastAPI.__init__).parameters else {})
    app = FastAPI(title="inferd", version=__version__, lifespan=lifespan, docs_url="/docs", redoc_url=None,
                  **quiet)
    app.state.service = service
    app.state.settings = settings
    app.state.responses = responses

    @app.exception_handler(InferdError)
    async def _domain(request: Request, exc: InferdError):
        return error_response(exc, family_of(request.url.path))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        msg, param = validation_message(exc)
        return error_response(InvalidInput(msg, param), family_of(request.url.path))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 404:
            err: InferdError = NotFound(f"no route {request.method} {echo(request.url.path)}")
        elif exc.status_code == 405:
            err = InvalidInput(f"method {echo(request.method)} not allowed on {echo(request.url.path)}")
        else:
            err = InvalidInput(str(exc.detail))
        return error_response(err, family_of(request.url.path), status=exc.status_code)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        return error_response(exc, family_of(request.url.path))

    for r in [*ROUTERS, *kind_routers()]:
        app.include_router(r)
    openapi_doc.install(app)  # the real statuses and envelopes, not FastAPI's 422

    # Outermost last: RequestContext sees every response, including auth and size refusals.
    # Innermost: the framework-free embeddings route (inside the cluster forwarder, which
    # passes on only what this process serves itself).
    app.add_middleware(FastLane, service=service, lanes=embedding_lanes())
    for cls, kwargs in inner_middleware or ():
        app.add_middleware(cls, **kwargs)
    # Inside auth and CORS (its 503s get both), outside the cluster forwarder (drain gates all).
    app.add_middleware(observe.Observe, observer=service.observer)
    app.add_middleware(JsonTextGuard)
    app.add_middleware(JsonByDefault)
    if settings.api_key is not None:
        app.add_middleware(ApiKeyAuth, api_key=settings.api_key.get_secret_value())
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes, routes=upload_limits(settings, service.media_limits))
    # BrowserGuard has refused every disallowed Origin before CORS runs, so CORS may echo any
    # origin that reaches it (a "*" would also answer pages we never allowed).
    app.add_middleware(CORSMiddleware, allow_origin_regex=".*", allow_methods=["*"],
                       allow_headers=["*"], expose_headers=["x-request-id", "retry-after", "x-queue-time",
                                                       "x-inference-time", "x-compute-tokens"])
    app.add_middleware(BrowserGuard, policy=OriginPolicy(settings.cors_origins, settings.allowed_hosts, settings.host))
    app.add_middleware(RequestContext, metrics=service.metrics, errors=service.observer.errors)
    return app
