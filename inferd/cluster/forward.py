"""The ingress's forwarder: an ASGI middleware inside inferd's own app (so auth, Host and
Origin checks, body limits and error envelopes are the single server's), in front of its
router. A POST naming a model that runs on cluster replicas is sent to that model's Serve
deployment and its response streamed back; everything else (catalogs, health, unknown
names) is answered by the ingress's own app.

`Target` is what the forwarder needs from a deployment: `open(request)` returning an async
iterator of ("start", status, headers) then body chunks, with `aclose()` cancelling the
replica's work. serve_app.py adapts Serve's handles to it; tests can use any object."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from inferd.api.errors import error_body, family_of
from inferd.api.middleware import replay
from inferd.cluster.bridge import ForwardedRequest
from inferd.errors import InferdError, InferenceFailed

log = logging.getLogger("inferd.cluster")

# Headers a replica may see: content negotiation and the request id. Host, Origin and
# Authorization were checked by the ingress; the replica's app runs without those checks.
_PASS = {"content-type", "accept", "x-request-id", "content-length"}
# Routes whose omitted `model` means the only generator (the single server's rule).
_GEN_ROUTES = ("/v1/chat/completions", "/chat/completions", "/v1/completions", "/completions", "/completion",
               "/api/chat", "/api/generate", "/ai/v1/generate", "/ai/v1/chat/completions",
               "/tokenize", "/detokenize")


class Stream(Protocol):
    def __aiter__(self) -> AsyncIterator[Any]: ...
    async def __anext__(self) -> Any: ...
    async def aclose(self) -> None: ...


class Target(Protocol):
    name: str

    def open(self, req: ForwardedRequest) -> Stream: ...


def affinity_key(body: dict[str, Any]) -> str | None:
    """The replica-affinity hint: the request's prompt_cache_key, else a hash of the start
    of its prompt (requests sharing a prefix prefer the replica that holds its KV cache)."""
    key = body.get("prompt_cache_key")
    if isinstance(key, str) and key:
        return key
    head = body.get("messages") or body.get("prompt")
    if not head:
        return None
    text = json.dumps(head, sort_keys=True, ensure_ascii=False)[:512]
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()


class ModelForwarder:
    def __init__(self, app: Any, targets: dict[str, Target], default_generator: str | None = None,
                 local: Callable[[Any, Any, Any], Any] | None = None):
        self.app, self.targets, self.default_generator = app, targets, default_generator
        self.local = local  # extra local routes (e.g. the cluster's /load): scope -> app or None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self.local is not None:
            handler = self.local(scope, receive, send)
            if handler is not None:
                return await handler
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        body, more = bytearray(), True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body.extend(msg.get("body", b""))
            more = msg.get("more_body", False)
        target, parsed = self._pick(scope["path"], bytes(body), dict(scope.get("headers") or []))
        if target is None:
            return await self.app(scope, replay({"type": "http.request", "body": bytes(body), "more_body": False},
                                                receive), send)
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers") or []
                   if k.decode("latin-1").lower() in _PASS]
        req = ForwardedRequest(scope["method"], scope["path"], scope.get("query_string", b"").decode("latin-1"),
                               headers, bytes(body), affinity_key(parsed))
        await self._forward(target, req, scope, receive, send)

    def _pick(self, path: str, body: bytes, headers: dict[bytes, bytes]) -> tuple[Target | None, dict[str, Any]]:
        if not headers.get(b"content-type", b"application/json").startswith((b"application/json",
                                                                            b"application/x-www-form-urlencoded")):
            return None, {}
        try:
            parsed = json.loads(body) if body else {}
        except (ValueError, UnicodeDecodeError):
            return None, {}  # the local app answers malformed JSON with its 400
        if not isinstance(parsed, dict):
            return None, {}
        name = parsed.get("model") or parsed.get("name")
        if not name and path in _GEN_ROUTES:
            name = self.default_generator
        if not isinstance(name, str):
            return None, parsed
        target = self.targets.get(name) or (self.targets.get(name[: -len(":latest")])
                                            if name.endswith(":latest") else None)
        return target, parsed

    async def _forward(self, target: Target, req: ForwardedRequest, scope: dict[str, Any], receive: Any,
                       send: Any) -> None:
        family = family_of(req.path)
        stream = target.open(req)
        started, streaming = False, False
        try:
            async for item in _until_disconnect(stream, receive):
                if isinstance(item, tuple) and item and item[0] == "start":
                    _, status, headers = item
                    ctype = next((v for k, v in headers if k.lower() == "content-type"), "")
                    streaming = ctype.startswith(("text/event-stream", "application/x-ndjson"))
                    await send({"type": "http.response.start", "status": status,
                                "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers
                                            if k.lower() != "content-length" or not streaming]})
                    started = True
                else:
                    await send({"type": "http.response.body", "body": item, "more_body": True})
        except Exception as e:  # the replica failed or was unreachable
            err = e if isinstance(e, InferdError) else _as_domain_error(e, target.name)
            if not started:
                status, body, hdrs = error_body(err, family)
                await _send_json(send, status, body, hdrs)
                return
            await send({"type": "http.response.body", "body": _error_frame(err, family, streaming),
                        "more_body": True})
        finally:
            await stream.aclose()
        if started:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


def _as_domain_error(e: Exception, model: str) -> InferdError:
    """Serve's and Ray's failures in the client's terms: a full cluster is a 503 with
    retry_after_ms, like a full single server; a dead replica a retryable failure."""
    from inferd.errors import ModelUnloaded, Overloaded

    name = type(e).__name__
    if name == "BackPressureError":
        return Overloaded(f"every replica of model '{model}' is busy; retry later", retry_after_ms=1000)
    if name in ("ActorDiedError", "RayActorError", "ActorUnavailableError", "DeploymentUnavailableError",
                "ActorUnschedulableError"):
        log.warning("replica of %s failed: %s", model, e)
        return ModelUnloaded(model, retry_after_ms=1000)
    log.error("forwarding to %s failed", model, exc_info=e)
    return InferenceFailed(f"the replica serving model '{model}' failed: {name}")


def _error_frame(err: InferdError, family: str, streaming: bool) -> bytes:
    """A failure after the response started, in the family's in-stream form."""
    _, body, _ = error_body(err, family)
    if family == "antfly":
        return f"event: error\ndata: {err.message}\n\n".encode()
    if family == "ollama":
        return (json.dumps(body) + "\n").encode()
    return f"data: {json.dumps(body)}\n\n".encode() if streaming else b""


async def _send_json(send: Any, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
    raw = json.dumps(body).encode()
    hdrs = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    hdrs += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": raw, "more_body": False})


async def _until_disconnect(stream: Stream, receive: Any) -> AsyncIterator[Any]:
    """Items of `stream` until it ends or the client disconnects (then it stops: the caller's
    `aclose()` cancels the replica's sequence)."""
    import asyncio

    gone = asyncio.ensure_future(_wait_disconnect(receive))
    try:
        it = stream.__aiter__()
        while True:
            nxt = asyncio.ensure_future(it.__anext__())
            done, _ = await asyncio.wait({nxt, gone}, return_when=asyncio.FIRST_COMPLETED)
            if nxt not in done:
                nxt.cancel()
                return
            try:
                yield nxt.result()
            except StopAsyncIteration:
                return
    finally:
        gone.cancel()


async def _wait_disconnect(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
