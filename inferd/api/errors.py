"""THE error table: every domain error -> HTTP status and body, for each API family.

Families: `openai` (also the control routes; GenAIServer/openai-server envelope
{"error": {"message", "type", "param", "code"}}), `ollama` ({"error": "..."}), `antfly`
({"error": CODE, "message", "reason"?, "retryable"?, "retry_after_ms"?}), `anthropic`
(/v1/messages: {"type": "error", "error": {"type", "message"}}, Anthropic's types by status), and
`llamacpp` (llama-server's native routes: {"error": {"code": STATUS, "message", "type"}})."""

from __future__ import annotations

import logging
from typing import Any

from starlette.responses import JSONResponse

from inferd.errors import (Cancelled, CapabilityMissing, CpuUnsupported, ContextOverflow, Forbidden, InferdError, InferenceFailed,
                           InvalidInput, MemoryBudgetExceeded, ModelLoadFailed, ModelNotFound, ModelNotSupported,
                           ModelUnloaded,
                           NotFound, NotImplementedYet, Overloaded, PayloadTooLarge, Unauthorized,
                           UnsupportedMediaType)
from inferd.errors import InsufficientStorage, StorageFailed, UpstreamFailed

log = logging.getLogger("inferd.api")

# class -> (status, openai type, antfly code). Lookup walks the MRO, so subclasses inherit.
TABLE: dict[type[BaseException], tuple[int, str, str]] = {
    InvalidInput: (400, "invalid_request_error", "INVALID_REQUEST"),
    ContextOverflow: (400, "invalid_request_error", "CONTEXT_LENGTH_EXCEEDED"),
    ModelNotSupported: (400, "invalid_request_error", "MODEL_NOT_SUPPORTED"),
    CapabilityMissing: (400, "invalid_request_error", "MODEL_NOT_SUPPORTED"),
    Unauthorized: (401, "authentication_error", "UNAUTHORIZED"),
    Forbidden: (403, "permission_error", "FORBIDDEN"),
    # OpenAI answers an unknown model with invalid_request_error / model_not_found (still 404).
    ModelNotFound: (404, "invalid_request_error", "MODEL_NOT_FOUND"),
    NotFound: (404, "not_found_error", "NOT_FOUND"),
    PayloadTooLarge: (413, "invalid_request_error", "PAYLOAD_TOO_LARGE"),
    UnsupportedMediaType: (415, "invalid_request_error", "UNSUPPORTED_MEDIA_TYPE"),
    Cancelled: (499, "cancelled", "CANCELLED"),
    ModelLoadFailed: (500, "server_error", "MODEL_LOAD_FAILED"),
    InferenceFailed: (500, "server_error", "INFERENCE_FAILED"),
    StorageFailed: (500, "server_error", "STORAGE_FAILED"),
    NotImplementedYet: (501, "not_implemented_error", "NOT_IMPLEMENTED"),
    CpuUnsupported: (501, "not_implemented_error", "CPU_UNSUPPORTED"),
    UpstreamFailed: (502, "server_error", "UPSTREAM_FAILED"),
    Overloaded: (503, "server_error", "SERVICE_UNAVAILABLE"),
    ModelUnloaded: (503, "server_error", "SERVICE_UNAVAILABLE"),
    MemoryBudgetExceeded: (507, "server_error", "MEMORY_BUDGET_EXCEEDED"),
    InsufficientStorage: (507, "server_error", "INSUFFICIENT_STORAGE"),
}
_INTERNAL = (500, "server_error", "INTERNAL_ERROR")
# llama-server's `type` where it differs from OpenAI's (its server-common error types).
LLAMACPP_TYPES: dict[type[BaseException], str] = {
    ContextOverflow: "exceed_context_size_error", NotFound: "not_found_error", ModelNotFound: "not_found_error",
    NotImplementedYet: "not_supported_error", Overloaded: "unavailable_error", ModelUnloaded: "unavailable_error",
}
# llama-server's native routes (not its /v1 ones).
LLAMACPP_PATHS = frozenset({"/completion", "/completions"})

# Anthropic's error types, by the status above. A busy server is its 529 overloaded_error
# (with retry-after), which its SDKs retry; statuses Anthropic does not use keep their number
# with the nearest type.
ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                   404: "not_found_error", 413: "request_too_large", 415: "invalid_request_error",
                   429: "rate_limit_error", 529: "overloaded_error"}
ANTHROPIC_STATUS: dict[type[BaseException], int] = {Overloaded: 529, ModelUnloaded: 529}


def family_of(path: str) -> str:
    if path.startswith("/v1/messages"):
        return "anthropic"
    if path.startswith("/api/"):
        return "ollama"
    if path.startswith(("/ai/", "/ml/")):
        return "antfly"
    if path in LLAMACPP_PATHS:
        return "llamacpp"
    return "openai"


def classify(exc: BaseException) -> tuple[int, str, str]:
    for cls in type(exc).__mro__:
        if cls in TABLE:
            return TABLE[cls]
    return _INTERNAL


def error_body(exc: BaseException, family: str) -> tuple[int, dict[str, Any], dict[str, str]]:
    """(status, body, extra headers) for `exc` in `family`'s envelope. Pure."""
    status, oai_type, code = classify(exc)
    message = exc.message if isinstance(exc, InferdError) else "internal server error"
    headers: dict[str, str] = {}
    retry_ms = getattr(exc, "retry_after_ms", None) if isinstance(exc, InferdError) else None
    if retry_ms is not None:
        headers["Retry-After"] = str(max(1, -(-int(retry_ms) // 1000)))
    if isinstance(exc, Unauthorized):
        headers["WWW-Authenticate"] = "Bearer"
    if family == "ollama":
        return status, {"error": message}, headers
    if family == "anthropic":
        status = next((ANTHROPIC_STATUS[c] for c in type(exc).__mro__ if c in ANTHROPIC_STATUS), status)
        if isinstance(exc, Unauthorized):
            headers.pop("WWW-Authenticate", None)  # Anthropic's clients send x-api-key
        kind = ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return status, {"type": "error", "error": {"type": kind, "message": message}}, headers
    if family == "llamacpp":
        kind = next((LLAMACPP_TYPES[c] for c in type(exc).__mro__ if c in LLAMACPP_TYPES), oai_type)
        param = getattr(exc, "param", None)
        if param and param not in message:  # this envelope has no `param`: the message names it
            message = f"{param}: {message}"
        lerr: dict[str, Any] = {"code": status, "message": message, "type": kind}
        if retry_ms is not None:
            lerr["retry_after_ms"] = retry_ms
        return status, {"error": lerr}, headers
    if family == "antfly":
        body: dict[str, Any] = {"error": code, "message": message}
        if isinstance(exc, Overloaded):
            body.update(reason="inference_capacity", retryable=True, retry_after_ms=exc.retry_after_ms)
        elif isinstance(exc, ModelUnloaded):
            body.update(reason="model_unloaded", retryable=True, retry_after_ms=exc.retry_after_ms)
        elif isinstance(exc, InferdError) and exc.retryable:
            body["retryable"] = True
        return status, body, headers
    err: dict[str, Any] = {"message": message, "type": oai_type, "param": getattr(exc, "param", None),
                           "code": code.lower()}
    if retry_ms is not None:
        err["retry_after_ms"] = retry_ms
    return status, {"error": err}, headers


def item_error(exc: InferdError) -> dict[str, Any]:
    """One item's failure inside an Antfly 200 response (batch generation, per_item embeddings)."""
    out: dict[str, Any] = {"code": classify(exc)[2], "message": exc.message, "retryable": bool(exc.retryable)}
    retry_ms = getattr(exc, "retry_after_ms", None)
    if retry_ms is not None:
        out["retry_after_ms"] = retry_ms
    return out


def error_response(exc: BaseException, family: str, status: int | None = None) -> JSONResponse:
    """The JSON error response; `status` overrides the table (405 from the router)."""
    table_status, body, headers = error_body(exc, family)
    status = status or table_status
    if family == "llamacpp":
        body["error"]["code"] = status  # llama-server's code is the HTTP status (405 from the router)
    if status >= 500 and not isinstance(exc, InferdError):
        log.error("unhandled error", exc_info=exc)
    return JSONResponse(body, status_code=status, headers=headers)


async def refuse(exc: BaseException, scope: Any, receive: Any, send: Any) -> None:
    """Answer `exc` before (or instead of) a route, for HTTP and WebSocket scopes alike. A
    WebSocket handshake gets the same JSON error response (status and envelope) where the
    server has the ASGI denial-response extension (uvicorn has); elsewhere it is closed
    before it opens, which its client sees as a 403."""
    if scope["type"] == "websocket" and "websocket.http.response" not in (scope.get("extensions") or {}):
        message = exc.message if isinstance(exc, InferdError) else "refused"
        await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
        return
    await error_response(exc, family_of(scope["path"]))(scope, receive, send)
