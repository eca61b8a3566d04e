"""The hot route without the framework: a well-formed POST /v1/embeddings (or /embeddings) is
answered by plain ASGI, inside every security, limit and observability middleware but ahead
of FastAPI's router, dependency solving and exception middleware.

Why: one short sentence costs about 1 ms of a MiniLM pass on 2 cores, and taking it through
FastAPI's routing and request handling cost a third of the event loop's time again (issue 31;
the profile is in docs/benchmarks.md). The lane calls the route's own function with the
route's own request model, so the two cannot drift apart: a body the model does not accept,
a non-JSON content type and every other path go on to FastAPI unchanged (its errors, its
OpenAPI document), and a domain error leaves through the one error table."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from inferd.api.errors import error_response, family_of
from inferd.api.middleware import replay
from inferd.errors import InferdError

log = logging.getLogger("inferd.api")

Endpoint = Callable[..., Awaitable[Response]]  # (request model, Request, service) -> Response


class Lane:
    def __init__(self, model: type[BaseModel], endpoint: Endpoint, route: Any):
        self.model, self.endpoint, self.route = model, endpoint, route  # route: for the metrics label


class FastLane:
    def __init__(self, app: ASGIApp, service: Any, lanes: dict[str, Lane]):
        self.app, self.service, self.lanes = app, service, lanes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        lane = self.lanes.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if lane is None or b"json" not in dict(scope["headers"]).get(b"content-type", b""):
            return await self.app(scope, receive, send)
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before its body arrived: nothing to answer
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        try:
            req = lane.model.model_validate_json(body)
        except ValidationError:  # FastAPI words the error, as for any other route
            return await self.app(scope, replay({"type": "http.request", "body": body, "more_body": False}, receive), send)
        scope["route"] = lane.route
        try:
            response = await lane.endpoint(req, Request(scope, receive), self.service)
        except Exception as e:  # noqa: BLE001 (the app's handlers, InferdError or not: one table)
            if not isinstance(e, InferdError):  # a bug, not the request: its traceback is logged
                log.exception("unexpected error in %s %s", scope["method"], scope["path"])
            response = error_response(e, family_of(scope["path"]))
        await response(scope, receive, send)


def embedding_lanes() -> dict[str, Lane]:
    """The lanes, bound to the routes they stand in for (their path labels the metrics)."""
    from inferd.api.openai import embed

    by_path = {getattr(r, "path", ""): r for r in embed.router.routes if "POST" in getattr(r, "methods", ())}
    return {path: Lane(embed.EmbeddingRequest, embed.embeddings, by_path[path])
            for path in ("/v1/embeddings", "/embeddings")}
