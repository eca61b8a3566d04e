"""Anthropic face: POST /v1/messages and POST /v1/messages/count_tokens, the Messages API as
docs.anthropic.com defines it, on the service verbs, tool machinery, grammars and reasoning
of /v1/chat/completions. Three sections:

- wire requests (pydantic): `max_tokens` and `model` are required as Anthropic requires them;
  unknown fields are ignored (clients send `service_tier`, `container`, ...), an unknown
  block, tool or tool_choice type is a 400;
- wire <-> engine (pure): Anthropic messages become the engine's chat messages (`system`
  first; `tool_result` blocks become tool messages, `tool_use` blocks assistant tool calls;
  incoming `thinking` blocks are not replayed, as reasoning fields are not elsewhere), tools
  become function tools, `thinking.budget_tokens` the reasoning budget; a Generation becomes
  a `message` with thinking / text / tool_use blocks;
- the thin routes. Streaming is in stream.py.

Local-server differences, documented in docs/anthropic.md: `budget_tokens` may be any value from 1
(Anthropic asks >= 1024) below `max_tokens`; a `max_tokens` past the model's context is cut
to what fits (stop_reason `max_tokens` there); a final assistant message (prefill) is a 400;
thinking blocks carry an empty `signature`; `cache_read_input_tokens` counts the prompt
tokens reused from the KV cache (`input_tokens` the rest), `cache_creation_input_tokens` is 0.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from inferd.api.anthropic.convert import message_response
from inferd.api.anthropic.stream import event_stream
from inferd.api.deps import get_service
from inferd.api.streaming import cancel_on_disconnect, generate_or_stream
from inferd.errors import InvalidInput
from inferd.service import InferenceService
from inferd.types import ChatOptions, GenerateRequest, SamplingParams

log = logging.getLogger("inferd.api")


# ---- wire requests -------------------------------------------------------------------
class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]]


class Thinking(BaseModel):
    model_config = ConfigDict(extra="ignore")
    # enabled: a budget; adaptive / between_tools: the model decides (the server's default budget)
    type: Literal["enabled", "disabled", "adaptive", "between_tools"]
    budget_tokens: int | None = Field(None, ge=1)
    display: Literal["summarized", "omitted"] | None = None  # omitted: thinking blocks come back empty


class OutputFormat(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: OutputFormat | None = None


class Tool(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    type: str | None = None  # "custom" (or absent); Anthropic's server tools are refused


class ToolChoice(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool = False


class CountTokensRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str = Field(min_length=1, max_length=512)
    messages: list[Message]
    system: str | list[dict[str, Any]] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=0)  # 0: nothing generated (Anthropic's cache pre-warming)
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(None, ge=0.0, le=1.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    metadata: dict[str, Any] | None = None  # {user_id}: accepted, nothing to do with it locally
    stream: bool = False


# ---- wire -> engine (pure) -------------------------------------------------------------------
def _texts(blocks: str | list[dict[str, Any]], where: str) -> str:
    """The text of a string or of text blocks (system, tool_result content)."""
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise InvalidInput(f"{where} must be a string or a list of text blocks", where)
    parts = []
    for j, b in enumerate(blocks):
        if not isinstance(b, dict) or b.get("type") != "text" or not isinstance(b.get("text"), str):
            kind = b.get("type") if isinstance(b, dict) else type(b).__name__
            raise InvalidInput(f"{where}[{j}]: only text blocks are supported here, not {kind!r}", f"{where}.{j}")
        parts.append(b["text"])
    return "\n\n".join(parts)


def _image(b: dict[str, Any], where: str) -> dict[str, Any]:
    """An image block as the engine's image part (admitted under the media rules later)."""
    src = b.get("source")
    kind = src.get("type") if isinstance(src, dict) else None
    if kind == "base64" and isinstance(src, dict):
        return {"type": "image", "data": src.get("data"), "mime_type": src.get("media_type")}
    if kind == "url" and isinstance(src, dict):
        return {"type": "image_url", "image_url": {"url": src.get("url")}}
    if kind == "file" and isinstance(src, dict):  # an id from this server's /v1/files
        return {"type": "file", "file": {"file_id": src.get("file_id")}}
    raise InvalidInput(f"{where}.source.type must be 'base64', 'url' or 'file', not {kind!r}", f"{where}.source")


def _tool_result(b: dict[str, Any], where: str) -> dict[str, Any]:
    cid = b.get("tool_use_id")
    if not isinstance(cid, str) or not cid:
        raise InvalidInput(f"{where}.tool_use_id is required", f"{where}.tool_use_id")
    text = _texts(b.get("content") or "", f"{where}.content")
    if b.get("is_error"):
        text = "Error: " + text  # the template has no field for it: the model reads it
    return {"role": "tool", "tool_call_id": cid, "content": text}


def _user(blocks: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """Tool results become tool messages (they answer the assistant turn before), the rest
    one user message."""
    tools, parts = [], []
    for j, b in enumerate(blocks):
        w = f"{where}.content.{j}"
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text" and isinstance(b.get("text"), str):
            parts.append({"type": "text", "text": b["text"]})
        elif kind == "image":
            parts.append(_image(b, w))
        elif kind == "tool_result":
            tools.append(_tool_result(b, w))
        else:
            raise InvalidInput(f"{w}.type {kind!r} is not supported in a user message (text, image, tool_result)", w)
    out = list(tools)
    if parts:
        only_text = all(p["type"] == "text" for p in parts)
        out.append({"role": "user", "content": "\n\n".join(p["text"] for p in parts) if only_text else parts})
    return out


def _assistant(blocks: list[dict[str, Any]], where: str) -> dict[str, Any]:
    texts, calls = [], []
    for j, b in enumerate(blocks):
        w = f"{where}.content.{j}"
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text" and isinstance(b.get("text"), str):
            texts.append(b["text"])
        elif kind == "tool_use":
            if not isinstance(b.get("id"), str) or not isinstance(b.get("name"), str):
                raise InvalidInput(f"{w}: a tool_use block needs an id and a name", w)
            if not isinstance(b.get("input", {}), dict):
                raise InvalidInput(f"{w}.input must be an object", f"{w}.input")
            calls.append({"id": b["id"], "type": "function",
                          "function": {"name": b["name"], "arguments": json.dumps(b.get("input", {}))}})
        elif kind in ("thinking", "redacted_thinking"):
            continue  # output-only: earlier reasoning is not replayed into the prompt
        else:
            raise InvalidInput(f"{w}.type {kind!r} is not supported in an assistant message "
                               "(text, tool_use, thinking)", w)
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if calls:
        msg["tool_calls"] = calls
    return msg


def chat_messages(body: CountTokensRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if body.system is not None:
        system = _texts(body.system, "system")
        if system:
            out.append({"role": "system", "content": system})
    if not body.messages:
        raise InvalidInput("messages: at least one message is required", "messages")
    for i, m in enumerate(body.messages):
        where = f"messages.{i}"
        blocks = [{"type": "text", "text": m.content}] if isinstance(m.content, str) else m.content
        if not blocks:
            raise InvalidInput(f"{where}.content must not be empty", f"{where}.content")
        out.extend(_user(blocks, where) if m.role == "user" else [_assistant(blocks, where)])
    if body.messages[-1].role == "assistant":
        raise InvalidInput("a final assistant message (prefill) is not supported; end with a user message",
                           f"messages.{len(body.messages) - 1}")
    return out


def _tools(tools: list[Tool] | None) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    out = []
    for i, t in enumerate(tools):
        if t.type not in (None, "custom"):
            raise InvalidInput(f"tools.{i}.type {t.type!r}: Anthropic's server tools are not supported here; "
                               "define a custom tool with an input_schema", f"tools.{i}.type")
        fn: dict[str, Any] = {"name": t.name, "parameters": t.input_schema or {"type": "object", "properties": {}}}
        if t.description:
            fn["description"] = t.description
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(c: ToolChoice | None) -> Any:
    if c is None:
        return None
    if c.type == "tool":
        if not c.name:
            raise InvalidInput("tool_choice.name is required with type 'tool'", "tool_choice.name")
        return {"type": "function", "function": {"name": c.name}}
    return {"auto": "auto", "any": "required", "none": "none"}[c.type]


# output_config.effort -> OpenAI's effort levels (chat.reasoning.EFFORT_BUDGETS)
EFFORTS = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}


def chat_options(body: CountTokensRequest, max_tokens: int | None = None) -> ChatOptions:
    """Tools, tool_choice, thinking and output format for the engine. `thinking.budget_tokens`
    is the reasoning budget: the engine closes the thinking block after that many tokens;
    `output_config.effort` maps to an effort budget; `output_config.format` is a JSON schema
    the grammar enforces."""
    enable, budget = None, None
    t = body.thinking
    if t is not None and t.type == "enabled":
        if t.budget_tokens is None:
            raise InvalidInput("thinking.budget_tokens is required with type 'enabled'", "thinking.budget_tokens")
        if max_tokens is not None and t.budget_tokens >= max_tokens:
            raise InvalidInput("thinking.budget_tokens must be less than max_tokens", "thinking.budget_tokens")
        enable, budget = True, t.budget_tokens
    elif t is not None:
        enable = t.type != "disabled"
    oc = body.output_config
    fmt = None
    if oc is not None and oc.format is not None:
        fmt = {"type": "json_schema", "json_schema": {"name": "output", "schema": oc.format.schema_, "strict": True}}
    parallel = not (body.tool_choice is not None and body.tool_choice.disable_parallel_tool_use)
    return ChatOptions(tools=_tools(body.tools), tool_choice=_tool_choice(body.tool_choice),
                       parallel_tool_calls=parallel, response_format=fmt, enable_thinking=enable,
                       reasoning_effort=EFFORTS[oc.effort] if oc is not None and oc.effort else None,
                       reasoning_budget=budget, thinking_param="thinking")


def omit_thinking(body: CountTokensRequest) -> bool:
    return body.thinking is not None and body.thinking.display == "omitted"


def message_request(body: MessagesRequest) -> GenerateRequest:
    sampling = SamplingParams(temperature=1.0 if body.temperature is None else body.temperature,
                              top_p=1.0 if body.top_p is None else body.top_p, top_k=body.top_k or 0)
    return GenerateRequest(model=body.model, messages=chat_messages(body), max_tokens=body.max_tokens,
                           stop=[s for s in body.stop_sequences or [] if s], sampling=sampling, stream=body.stream,
                           chat=chat_options(body, body.max_tokens), clamp_to_context=True)


def count_request(body: CountTokensRequest) -> GenerateRequest:
    """The same prompt as a message request, generating nothing (max_tokens 0 ends at once)."""
    return GenerateRequest(model=body.model, messages=chat_messages(body), max_tokens=0, chat=chat_options(body))


# ---- routes --------------------------------------------------------------------------
router = APIRouter()


def _version(request: Request, response: Response | None = None) -> str | None:
    """`anthropic-version` is read and echoed; every version is served the same way."""
    v = request.headers.get("anthropic-version")
    if v is not None:
        log.debug("anthropic-version %s", v)
        if response is not None:
            response.headers["anthropic-version"] = v
    return v


@router.post("/v1/messages")
async def messages(body: MessagesRequest, request: Request, response: Response,
                   svc: InferenceService = Depends(get_service)):
    version = _version(request, response)

    omit = omit_thinking(body)

    def stream(s: Any) -> Any:
        out = event_stream(s, omit)
        if version is not None:
            out.headers["anthropic-version"] = version
        return out
    return await generate_or_stream(request, svc, message_request(body), stream=stream,
                                    respond=lambda g: message_response(g, omit))


@router.post("/v1/messages/count_tokens")
async def count_tokens(body: CountTokensRequest, request: Request, response: Response,
                       svc: InferenceService = Depends(get_service)) -> dict[str, int]:
    _version(request, response)
    g = await cancel_on_disconnect(request, svc.generate(count_request(body)))
    return {"input_tokens": g.usage.prompt_tokens}
