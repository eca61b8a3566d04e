"""Pure ASGI middleware (streaming-safe): request ids + access log, API-key auth, body limit,
and the JSON body text check."""

from __future__ import annotations

import hmac
import json
import os
import re
import logging
import time
from typing import Any, Protocol

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from inferd.api.errors import error_response, family_of, refuse
from inferd.errors import InferdError, InvalidInput, PayloadTooLarge, Unauthorized
from inferd.logs import request_id
from inferd.metrics import Metrics
from inferd.observability.context import SCOPE_KEY
from inferd.observability.active import ErrorLog
from inferd.service.reading import MAX_IMAGES as MAX_READ_IMAGES

log = logging.getLogger("inferd.access")

ERROR_BODY_BYTES = 4096  # an error envelope is short; a longer body is cut (the log keeps a message)
PUBLIC_PATHS = frozenset({"/health", "/v1/health", "/healthz", "/readyz", "/", "/ui"})  # "/ui": the console page


class RequestContext:
    """Tags the request with an id (incoming X-Request-ID or a new one), echoes it back,
    logs one access line and counts the request for /metrics."""

    def __init__(self, app: ASGIApp, metrics: Metrics, errors: ErrorLog | None = None):
        self.app, self.metrics, self.errors = app, metrics, errors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        rid = headers.get(b"x-request-id", b"").decode("latin-1")[:64] or os.urandom(8).hex()  # as uuid4().hex[:16], cheaper
        token = request_id.set(rid)
        status, t0 = 500, time.perf_counter()
        err_body = b""  # the start of an error response's body, for the operator's error log

        async def send_wrapper(message: Message) -> None:
            nonlocal status, err_body
            if message["type"] == "http.response.start":
                status = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", rid.encode("latin-1"))]
            elif status >= 400 and len(err_body) < ERROR_BODY_BYTES:
                err_body += message.get("body", b"")[:ERROR_BODY_BYTES]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            dt = time.perf_counter() - t0
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            info = scope.get(SCOPE_KEY)  # the Observe middleware's: the model the request used, if any
            self.metrics.observe_request(scope["method"], route, status, dt, getattr(info, "model", None),
                                         getattr(info, "family", None))
            if status >= 400 and self.errors is not None:
                self.errors.response(scope["method"], scope["path"], route, status, err_body, rid)
            log.info("%s %s %d %.1fms", scope["method"], scope["path"], status, dt * 1000,
                     extra={"method": scope["method"], "path": scope["path"], "status": status,
                            "duration_ms": round(dt * 1000, 2)})
            request_id.reset(token)


WS_KEY_PROTOCOL = b"openai-insecure-api-key."   # how OpenAI's browser clients pass a key (no headers there)


class ApiKeyAuth:
    """Every route but health needs `Authorization: Bearer KEY` or, as Anthropic's clients send
    it, `x-api-key: KEY` (constant-time compare). WebSocket handshakes too, which may also carry
    the key as the subprotocol `openai-insecure-api-key.KEY`, as browsers (which cannot set
    headers on a WebSocket) do with OpenAI's clients."""

    def __init__(self, app: ASGIApp, api_key: str):
        self.app, self.key = app, api_key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # No OPTIONS exemption: CORS preflights are answered by the CORS middleware outside
        # this one; any other OPTIONS request is a request like the rest.
        if (scope["type"] not in ("http", "websocket") or scope["path"] in PUBLIC_PATHS
                or scope["path"].startswith("/ui/")):  # the console's static files: it asks for the key itself
            return await self.app(scope, receive, send)
        if self.allowed(dict(scope["headers"])):
            return await self.app(scope, receive, send)
        await refuse(Unauthorized(), scope, receive, send)

    def allowed(self, headers: dict[bytes, bytes]) -> bool:
        auth = headers.get(b"authorization", b"")
        scheme, _, given = auth.partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.key):
            return True
        x_key = headers.get(b"x-api-key")
        if x_key is not None and hmac.compare_digest(x_key.strip(), self.key):
            return True
        for proto in headers.get(b"sec-websocket-protocol", b"").split(b","):
            proto = proto.strip()
            if proto.startswith(WS_KEY_PROTOCOL) and hmac.compare_digest(proto[len(WS_KEY_PROTOCOL):], self.key):
                return True
        return False


FORM_MARGIN = 256 * 1024   # multipart boundaries, part headers and the small form fields beside a file


class MediaBudget(Protocol):
    """What the body limits read of the server's media limits (scheduling/media.py's
    MediaLimits, reached through the service: the API imports no scheduler)."""

    @property
    def request_bytes(self) -> int: ...
    @property
    def per_image_bytes(self) -> int: ...

    def read_budget(self, n_images: int) -> int: ...


def upload_limits(settings: Any, media: MediaBudget) -> dict[str, int]:
    """Body limits of the upload routes, where --max-body-bytes alone could refuse a file its
    own limit accepts: a /v1/files upload of exactly --max-file-bytes is a bigger multipart
    body; an audio upload of --max-audio-bytes likewise (and as base64, 4/3 of it). `media`:
    the service's media limits (InferenceService.media.limits)."""
    files = settings.max_file_bytes + FORM_MARGIN
    audio = settings.max_audio_bytes + FORM_MARGIN
    routes = {"/v1/files": files, "/ai/v1/transcribe": settings.max_audio_bytes * 4 // 3 + FORM_MARGIN}
    for p in ("/v1/audio/transcriptions", "/v1/audio/translations", "/audio/transcriptions", "/audio/translations"):
        routes[p] = audio
    # Inline images travel as base64 in JSON: a body must be able to carry the whole media
    # budget the route admits (scheduling/media.py), or --max-body-bytes would be the real,
    # smaller limit.
    inline = media.request_bytes * 4 // 3 + FORM_MARGIN if media.request_bytes else 0
    for p in MEDIA_ROUTES:
        routes[p] = inline
    routes["/ai/v1/read"] = media.read_budget(MAX_READ_IMAGES) * 4 // 3 + FORM_MARGIN if media.per_image_bytes else 0
    return {p: n for p, n in routes.items() if n > settings.max_body_bytes}


# JSON routes that take inline images (besides /ai/v1/read, whose budget is its own)
MEDIA_ROUTES = ("/ai/v1/generate", "/ai/v1/chat/completions", "/ai/v1/embed", "/ai/v1/embeddings",
                "/ai/v1/rerank_multimodal", "/ai/v1/extract", "/v1/chat/completions", "/chat/completions",
                "/api/chat", "/api/generate")


class BodyLimit:
    """413 before parsing: by Content-Length when given, else by counting streamed bytes.
    `routes` raises the limit of the upload routes (exact paths) to what their files need."""

    def __init__(self, app: ASGIApp, max_bytes: int, routes: dict[str, int] | None = None):
        self.app, self.default, self.routes = app, max_bytes, dict(routes or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith("/api/blobs/"):
            # Ollama blob uploads are model weights (GBs), streamed to disk and checked there.
            return await self.app(scope, receive, send)
        limit = self.routes.get(scope["path"], self.default)
        flag = "--max-body-bytes" if limit == self.default else "--max-body-bytes, or this route's file limit"

        def too_large() -> PayloadTooLarge:
            return PayloadTooLarge(f"request body exceeds the limit of {limit} bytes ({flag})")

        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            return await error_response(too_large(), family_of(scope["path"]))(scope, receive, send)
        seen, over = 0, False

        async def counting_receive() -> Message:
            nonlocal seen, over
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    over = True  # the framework turns this into its own 400; send_413 replaces it
                    raise too_large()
            return message

        refusal = None

        async def send_413(message: Message) -> None:
            nonlocal refusal
            if not over:
                return await send(message)
            if refusal is None:
                refusal = error_response(too_large(), family_of(scope["path"]))
                await refusal({**scope}, receive, send)

        await self.app(scope, counting_receive, send_413)


class JsonByDefault:
    """`curl -d '{...}'` sends application/x-www-form-urlencoded; every JSON API server users
    know (llama-server, Ollama) parses such bodies as JSON anyway, so we do too."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT", "PATCH"):
            headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
            ctype = dict(scope["headers"]).get(b"content-type", b"")
            if not ctype or ctype.startswith(b"application/x-www-form-urlencoded"):
                # In place, not a copy: the router records the matched route in this same scope,
                # where RequestContext reads it for /metrics (a copy left POST routes "unmatched").
                scope["headers"] = [*headers, (b"content-type", b"application/json")]
        await self.app(scope, receive, send)


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def lone_surrogate(body: bytes) -> bool:
    """Whether a JSON body decodes to a string holding a lone UTF-16 surrogate ("\\ud800"),
    which no UTF-8 encoder, tokenizer or model accepts. Parsed again only when the body has a
    surrogate escape at all (escaped emoji pairs are common and fine)."""
    if not _SURROGATE_ESCAPE.search(body):
        return False
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return False  # not JSON: the framework reports it
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    except (ValueError, RecursionError):
        return False
    return False


class JsonTextGuard:
    """400 for a JSON body whose strings are not valid Unicode, before any route sees it:
    lone surrogates otherwise fail deep inside encoders and tokenizers (UnicodeEncodeError,
    TypeError: a 500). Sits inside BodyLimit, so it only ever holds a body within the limit."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctype = dict(scope.get("headers") or []).get(b"content-type", b"")
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH") or b"json" not in ctype:
            return await self.app(scope, receive, send)
        chunks: list[bytes] = []
        first: Message | None = None
        try:
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    first = message  # the client left: let the app see it
                    break
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    break
        except InferdError as e:  # BodyLimit: too large
            return await error_response(e, family_of(scope["path"]))(scope, receive, send)
        body = b"".join(chunks)
        if first is None and lone_surrogate(body):
            err = InvalidInput("the request body holds a lone UTF-16 surrogate escape (such as \\ud800): "
                               "JSON strings must be valid Unicode")
            return await error_response(err, family_of(scope["path"]))(scope, receive, send)
        await self.app(scope, replay(first or {"type": "http.request", "body": body, "more_body": False}, receive),
                       send)


def replay(first: Message, receive: Receive) -> Receive:
    """A `receive` that gives `first` (a body already read, whole) once, then the real one."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return first
        return await receive()
    return again
