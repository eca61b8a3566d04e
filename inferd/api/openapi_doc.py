"""/openapi.json that documents what inferd really answers.

FastAPI documents a 422 for every route with a body or parameters, in its own validation
format; inferd never sends one (bad input is a 400 in the family's envelope, see
api/errors.py). So the generated document is post-processed: 422 and its schemas go, and
every operation gets the statuses of the error table with the response model of its API
family (OpenAI, Ollama, Antfly or Anthropic envelope), so clients and fuzzers can rely on it."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from inferd.api.errors import TABLE, family_of

_STR = {"type": "string"}
SCHEMAS: dict[str, dict[str, Any]] = {
    "OpenAIError": {"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["message", "type", "code"], "properties": {
            "message": _STR, "type": _STR, "param": {"anyOf": [_STR, {"type": "null"}]}, "code": _STR,
            "retry_after_ms": {"type": "integer"}}}}},
    "OllamaError": {"type": "object", "required": ["error"], "properties": {"error": _STR}},
    "LlamaCppError": {"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["code", "message", "type"], "properties": {
            "code": {"type": "integer"}, "message": _STR, "type": _STR}}}},
    "AntflyError": {"type": "object", "required": ["error", "message"], "properties": {
        "error": _STR, "message": _STR, "reason": _STR, "retryable": {"type": "boolean"},
        "retry_after_ms": {"type": "integer"}}},
    "AnthropicError": {"type": "object", "required": ["type", "error"], "properties": {
        "type": {"const": "error"}, "error": {"type": "object", "required": ["type", "message"],
                                             "properties": {"type": _STR, "message": _STR}}}},
}
_MODEL = {"openai": "OpenAIError", "ollama": "OllamaError", "antfly": "AntflyError", "anthropic": "AnthropicError",
          "llamacpp": "LlamaCppError"}
_DESCRIPTIONS = {400: "invalid request", 401: "missing or wrong API key", 403: "origin or host not allowed",
                 404: "unknown model, route or resource", 405: "method not allowed", 413: "request too large",
                 415: "unsupported Content-Type",
                 499: "cancelled", 500: "model load or inference failed", 501: "not available in this build",
                 503: "at capacity: retry after Retry-After", 507: "memory budget exceeded",
                 529: "at capacity (Anthropic's overloaded_error): retry after Retry-After"}
STATUSES = sorted({status for status, _, _ in TABLE.values()} | {405})
# /v1/messages answers a busy server with Anthropic's 529 (errors.ANTHROPIC_STATUS); a draining one
# still with 503
ANTHROPIC_STATUSES = sorted(set(STATUSES) | {529})


def install(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        schemas.update(SCHEMAS)
        for path, ops in doc.get("paths", {}).items():
            family = family_of(path)
            ref = {"$ref": f"#/components/schemas/{_MODEL[family]}"}
            for op in ops.values():
                responses = op.setdefault("responses", {})
                responses.pop("422", None)
                for status in ANTHROPIC_STATUSES if family == "anthropic" else STATUSES:
                    responses.setdefault(str(status), {"description": _DESCRIPTIONS.get(status, "error"),
                                                       "content": {"application/json": {"schema": ref}}})
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]
