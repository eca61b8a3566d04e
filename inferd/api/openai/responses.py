"""OpenAI face, the Responses API: /v1/responses and its stored-response routes, in three
sections:

- the wire request (CreateResponse): fields inferd honours, and fields it knows but cannot
  honour, which are a 400 naming them (a built-in tool, `background`, `include`, ...).
  Unknown fields are ignored, as on /v1/chat/completions;
- wire <-> engine, pure: input items -> chat messages (the same GenerateRequest, template,
  tools, grammar and reasoning machinery as chat completions), Responses tools / tool_choice /
  text.format -> their chat forms, and the Response object. The event machine that turns the
  engine's deltas into output items and stream events is in responses_stream.py;
- the thin routes. Stored responses live in inferd.storage.responses (SQLite, blocking: its
  calls go to a worker thread)."""

from __future__ import annotations

import asyncio
import copy
import time
import uuid
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from inferd.api.deps import get_service
from inferd.api.openai.responses_stream import ResponseBuilder, drain, sse_events
from inferd.api.streaming import cancel_on_disconnect
from inferd.errors import InvalidInput, NotFound
from inferd.service import InferenceService
from inferd.storage.responses import ResponseStore
from inferd.types import ChatOptions, EngineControls, GenerateRequest, SamplingParams

EFFORTS = ("none", "minimal", "low", "medium", "high")
SUMMARIES = ("auto", "concise", "detailed")
METADATA_KEYS, METADATA_KEY_CHARS, METADATA_VALUE_CHARS = 16, 64, 512  # OpenAI's metadata bounds
MAX_ITEMS = 4096
# Stateless clients (store: false, e.g. Codex CLI) ask for reasoning they can send back. A local
# server has nothing to hide from its own client: `encrypted_content` carries the reasoning text
# as it is, and like any reasoning item sent back it is not replayed into the prompt.
INCLUDABLE = frozenset({"reasoning.encrypted_content"})


# ---- wire request ----------------------------------------------------------------------------
class PromptFields(BaseModel):
    """The fields that shape the prompt: what POST /v1/responses/input_tokens counts."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    input: str | list[dict[str, Any]] = Field(default_factory=list, max_length=MAX_ITEMS)
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    previous_response_id: str | None = None
    truncation: Literal["disabled", "auto"] | None = None
    conversation: Any = None


class CreateResponse(PromptFields):
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    metadata: dict[str, str] | None = None
    stream: bool = False
    store: bool | None = None
    background: bool | None = None
    include: list[str] | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    max_tool_calls: int | None = None
    prompt: Any = None
    prompt_cache_key: str | None = Field(None, max_length=256)
    seed: int | None = None        # inferd extensions, as on chat completions
    grammar: str | None = None     # raw GBNF constraining the output
    user: str | None = None
    safety_identifier: str | None = None
    service_tier: str | None = None
    stream_options: dict[str, Any] | None = None


CountTokensBody = PromptFields


# ---- wire -> engine (pure) -------------------------------------------------------------------
def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _refuse(body: BaseModel) -> None:
    """Fields of OpenAI's request inferd knows and cannot honour: a 400 each, never ignored."""
    b: Any = body
    if getattr(b, "background", None):
        raise InvalidInput("background responses are not offered by inferd; send background: false "
                           "(or stream: true)", "background")
    if getattr(b, "truncation", None) == "auto":
        raise InvalidInput("truncation 'auto' is not supported: an input longer than the context is a 400 "
                           "(truncation 'disabled')", "truncation")
    if getattr(b, "conversation", None) is not None:
        raise InvalidInput("conversations are not supported; continue with previous_response_id", "conversation")
    if getattr(b, "prompt", None) is not None:
        raise InvalidInput("prompt templates are not supported; send input and instructions", "prompt")
    for value in getattr(b, "include", None) or ():
        if value not in INCLUDABLE:
            raise InvalidInput(f"include {value!r} is not supported; inferd can include "
                               f"{', '.join(sorted(INCLUDABLE))}", "include")
    if getattr(b, "top_logprobs", None):
        raise InvalidInput("top_logprobs is not supported on /v1/responses; use /v1/chat/completions", "top_logprobs")
    if getattr(b, "max_tool_calls", None) is not None:
        raise InvalidInput("max_tool_calls is not supported; bound calls with tool_choice and "
                           "parallel_tool_calls", "max_tool_calls")
    tier = getattr(b, "service_tier", None)
    if tier not in (None, "auto", "default"):
        raise InvalidInput(f"service_tier {tier!r} is not offered; inferd has one tier ('default')", "service_tier")
    meta = getattr(b, "metadata", None) or {}
    if len(meta) > METADATA_KEYS:
        raise InvalidInput(f"metadata: at most {METADATA_KEYS} keys", "metadata")
    for k, v in meta.items():
        if len(k) > METADATA_KEY_CHARS or len(v) > METADATA_VALUE_CHARS:
            raise InvalidInput(f"metadata: keys at most {METADATA_KEY_CHARS} characters, values at most "
                               f"{METADATA_VALUE_CHARS}", "metadata")


def function_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Responses function tools ({type, name, description, parameters, strict}) -> the chat
    form the tool machinery validates. A built-in tool type is a 400 naming it."""
    if tools is None:
        return None
    out = []
    for i, t in enumerate(tools):
        kind = t.get("type")
        if kind != "function":
            raise InvalidInput(f"tools[{i}].type {kind!r} is a tool inferd does not offer (built-in tools such as "
                               "web_search, file_search, code_interpreter run on OpenAI's servers); only "
                               "'function' tools are supported", f"tools[{i}].type")
        if not isinstance(t.get("name"), str) or not t["name"]:
            raise InvalidInput(f"tools[{i}].name is required", f"tools[{i}].name")
        fn = {"name": t["name"]}
        for key in ("description", "parameters", "strict"):
            if t.get(key) is not None:
                fn[key] = t[key]
        out.append({"type": "function", "function": fn})
    return out


def tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    if choice is None or isinstance(choice, str):
        return choice  # auto | none | required, checked by the tool machinery
    if choice.get("type") == "function":
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidInput("tool_choice.name is required for a function tool choice", "tool_choice")
        return {"type": "function", "function": {"name": name}}
    raise InvalidInput(f"tool_choice type {choice.get('type')!r} is not supported; use 'auto', 'none', "
                       "'required' or {'type': 'function', 'name': ...}", "tool_choice")


def text_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    """`text.format` -> chat's response_format (json_schema's fields move under `json_schema`)."""
    if not text:
        return None
    verbosity = text.get("verbosity")
    if verbosity not in (None, "medium"):
        raise InvalidInput(f"text.verbosity {verbosity!r} is not supported (a local model has no verbosity "
                           "control); omit it", "text.verbosity")
    fmt = text.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise InvalidInput("text.format must be an object", "text.format")
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        if not isinstance(fmt.get("schema"), dict):
            raise InvalidInput("text.format.schema is required for json_schema (a JSON Schema object)",
                               "text.format.schema")
        inner = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": inner}
    raise InvalidInput(f"text.format.type must be 'text', 'json_object' or 'json_schema', not {kind!r}",
                       "text.format.type")


def effort(reasoning: dict[str, Any] | None) -> tuple[str | None, bool]:
    """-> (reasoning effort or None, whether a summary was asked for)."""
    if not reasoning:
        return None, False
    e = reasoning.get("effort")
    if e is not None and e not in EFFORTS:
        raise InvalidInput(f"reasoning.effort must be one of {', '.join(EFFORTS)}, not {e!r}", "reasoning.effort")
    summary = reasoning.get("summary", reasoning.get("generate_summary"))
    if summary is not None and summary not in SUMMARIES:
        raise InvalidInput(f"reasoning.summary must be one of {', '.join(SUMMARIES)}, not {summary!r}",
                           "reasoning.summary")
    return e, summary is not None


def _text_of(content: Any, where: str, kinds: tuple[str, ...]) -> str:
    """A content string, or the text of a list of parts of the given kinds."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidInput(f"{where} must be a string or an array of content parts", where)
    out = []
    for j, p in enumerate(content):
        if not isinstance(p, dict) or p.get("type") not in kinds or not isinstance(p.get("text"), str):
            raise InvalidInput(f"{where}[{j}] must be a part of type {' or '.join(kinds)} with a 'text'", where)
        out.append(p["text"])
    return "".join(out)


def _user_parts(content: Any, where: str) -> str | list[dict[str, Any]]:
    """input_text / input_image parts -> chat content parts (text / image_url / file)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidInput(f"{where} must be a string or an array of content parts", where)
    parts: list[dict[str, Any]] = []
    for j, p in enumerate(content):
        kind = p.get("type") if isinstance(p, dict) else None
        if kind == "input_text" and isinstance(p.get("text"), str):
            parts.append({"type": "text", "text": p["text"]})
        elif kind == "input_image":
            if isinstance(p.get("image_url"), str):
                parts.append({"type": "image_url", "image_url": {"url": p["image_url"]}})
            elif isinstance(p.get("file_id"), str):
                parts.append({"type": "file", "file": {"file_id": p["file_id"]}})
            else:
                raise InvalidInput(f"{where}[{j}]: an input_image needs image_url or file_id", where)
        elif kind == "input_file":
            raise InvalidInput(f"{where}[{j}]: input_file parts are not supported; send the text as input_text",
                               where)
        else:
            raise InvalidInput(f"{where}[{j}] must be an input_text or input_image part, not {kind!r}", where)
    return parts


def input_messages(items: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Input items -> chat messages. A function_call joins the assistant message before it (a
    model's turn is its text then its calls); reasoning items are output-only and dropped, as
    chat completions drops incoming reasoning."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    msgs: list[dict[str, Any]] = []
    for i, it in enumerate(items):
        where = f"input[{i}]"
        kind = it.get("type", "message" if "role" in it else None)
        if kind == "message":
            role = it.get("role")
            if role == "assistant":
                msgs.append({"role": "assistant",
                             "content": _text_of(it.get("content"), f"{where}.content", ("output_text", "refusal",
                                                                                          "input_text"))})
            elif role in ("user", "system", "developer"):
                # Chat templates know system, not OpenAI's newer developer role; OpenAI treats them alike.
                msgs.append({"role": "system" if role == "developer" else role,
                             "content": _user_parts(it.get("content"), f"{where}.content")})
            else:
                raise InvalidInput(f"{where}.role must be user, assistant, system or developer, not {role!r}",
                                   f"{where}.role")
        elif kind == "function_call":
            call_id, name, args = it.get("call_id"), it.get("name"), it.get("arguments")
            if not all(isinstance(x, str) and x for x in (call_id, name)) or not isinstance(args, str):
                raise InvalidInput(f"{where}: a function_call needs call_id, name and arguments (a JSON string)",
                                   where)
            call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            last = msgs[-1] if msgs else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                msgs.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            call_id, output = it.get("call_id"), it.get("output")
            if not isinstance(call_id, str) or not call_id:
                raise InvalidInput(f"{where}.call_id is required", f"{where}.call_id")
            msgs.append({"role": "tool", "tool_call_id": call_id,
                         "content": _text_of(output, f"{where}.output", ("input_text", "output_text"))})
        elif kind == "reasoning":
            continue
        else:
            raise InvalidInput(f"{where}.type {kind!r} is not supported; use message, function_call, "
                               "function_call_output or reasoning items", f"{where}.type")
    return msgs


def input_resources(items: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The input items as GET .../input_items lists them: each with an id and a status."""
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": items}]}]
    out = []
    for it in items:
        kind = it.get("type", "message" if "role" in it else None)
        if kind == "reasoning":
            continue
        r = copy.deepcopy(it)
        r["type"] = kind
        if kind == "message":
            r.setdefault("id", new_id("msg"))
            content = r.get("content")
            if isinstance(content, str):
                part = "output_text" if r.get("role") == "assistant" else "input_text"
                r["content"] = [{"type": part, "text": content}]
            if r.get("role") == "assistant":
                r["content"] = [{"annotations": [], "logprobs": [], **p} if p.get("type") == "output_text" else p
                                for p in r["content"]]
        else:
            r.setdefault("id", new_id("fc" if kind == "function_call" else "fco"))
        r.setdefault("status", "completed")
        out.append(r)
    return out


def generate_request(body: CreateResponse | CountTokensBody, history: list[dict[str, Any]]) -> GenerateRequest:
    """The engine request: instructions (as a system message), the stored history of
    previous_response_id, then this request's input."""
    _refuse(body)
    msgs = history + input_messages(body.input)
    if body.instructions:
        msgs = [{"role": "system", "content": body.instructions}, *msgs]
    if not msgs:
        raise InvalidInput("input is empty: send a string or at least one input item", "input")
    e, _summary = effort(body.reasoning)
    chat = ChatOptions(tools=function_tools(body.tools), tool_choice=tool_choice(body.tool_choice),
                       parallel_tool_calls=True if body.parallel_tool_calls is None else body.parallel_tool_calls,
                       response_format=text_format(body.text), grammar=getattr(body, "grammar", None),
                       reasoning_effort=e)
    b: Any = body
    sampling = SamplingParams(temperature=1.0 if getattr(b, "temperature", None) is None else b.temperature,
                              top_p=1.0 if getattr(b, "top_p", None) is None else b.top_p, seed=getattr(b, "seed", None))
    return GenerateRequest(model=body.model or "", messages=msgs, max_tokens=getattr(b, "max_output_tokens", None),
                           sampling=sampling, stream=bool(getattr(b, "stream", False)), chat=chat,
                           engine=EngineControls(prompt_cache_key=getattr(b, "prompt_cache_key", None)))


def response_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The tools as the Response object echoes them (FunctionTool: strict and parameters always present)."""
    return [{"type": "function", "name": t["name"], "description": t.get("description"),
             "parameters": t.get("parameters"), "strict": t.get("strict", True)} for t in tools or []]


def skeleton(body: CreateResponse, model: str, history_id: str | None) -> dict[str, Any]:
    """The Response object before any output: what response.created carries."""
    e, summary = effort(body.reasoning)
    fmt = (body.text or {}).get("format") or {"type": "text"}
    return {"id": new_id("resp"), "object": "response", "created_at": int(time.time()), "status": "in_progress",
            "background": False, "completed_at": None, "error": None, "incomplete_details": None,
            "instructions": body.instructions, "max_output_tokens": body.max_output_tokens,
            "model": model, "output": [], "parallel_tool_calls": body.parallel_tool_calls is not False,
            "previous_response_id": history_id,
            "reasoning": {"effort": e, "summary": (body.reasoning or {}).get("summary") if summary else None},
            "store": body.store is not False, "temperature": 1.0 if body.temperature is None else body.temperature,
            "text": {"format": fmt}, "tool_choice": _choice_echo(body.tool_choice), "tools": response_tools(body.tools),
            "top_p": 1.0 if body.top_p is None else body.top_p, "truncation": "disabled",
            "metadata": dict(body.metadata or {}), **({"user": body.user} if body.user is not None else {})}


def _choice_echo(choice: str | dict[str, Any] | None) -> str | dict[str, Any]:
    return "auto" if choice is None else choice


# ---- routes ----------------------------------------------------------------------------------
router = APIRouter()


def store_of(request: Request) -> ResponseStore:
    """The app's store, opened at start (create_app) so a corrupt database stops the server."""
    store = getattr(request.app.state, "responses", None)
    if store is None:
        s = request.app.state.settings
        store = request.app.state.responses = ResponseStore.for_data_dir(
            s.data_dir, max_count=s.responses_max_count, max_age=s.responses_max_age)
    return store


async def _history(store: ResponseStore, previous: str | None) -> list[dict[str, Any]]:
    if previous is None:
        return []
    try:
        return await asyncio.to_thread(store.history, previous)
    except NotFound:
        raise NotFound(f"Previous response with id '{previous[:80]}' not found.") from None


@router.post("/v1/responses")
async def create_response(body: CreateResponse, request: Request, svc: InferenceService = Depends(get_service)):
    store = store_of(request)
    history = await _history(store, body.previous_response_id)
    req = generate_request(body, history)
    builder = ResponseBuilder(skeleton(body, req.model, body.previous_response_id), effort(body.reasoning)[1],
                              reasoning_content="reasoning.encrypted_content" in (body.include or ()))
    stream = await cancel_on_disconnect(request, svc.open_generation(req))
    builder.base["model"] = stream.model
    keep = body.store is not False
    inputs = input_resources(body.input)

    async def save(response: dict[str, Any]) -> None:
        if keep:
            await asyncio.to_thread(store.put, response, inputs, history + input_messages(body.input)
                                    + builder.history_messages())

    if body.stream:
        return sse_events(builder, stream, save)
    try:
        response = await cancel_on_disconnect(request, drain(builder, stream))
    finally:
        await stream.aclose()
    await save(response)
    return response


@router.post("/v1/responses/input_tokens")
async def input_tokens(body: CountTokensBody, request: Request, svc: InferenceService = Depends(get_service)):
    history = await _history(store_of(request), body.previous_response_id)
    _model, n = await cancel_on_disconnect(request, svc.count_prompt_tokens(generate_request(body, history)))
    return {"object": "response.input_tokens", "input_tokens": n}


@router.get("/v1/responses/{response_id}")
async def retrieve(response_id: str, request: Request) -> dict:
    return await asyncio.to_thread(store_of(request).get, response_id)


@router.delete("/v1/responses/{response_id}")
async def delete(response_id: str, request: Request) -> dict:
    await asyncio.to_thread(store_of(request).delete, response_id)
    return {"id": response_id, "object": "response", "deleted": True}


@router.post("/v1/responses/{response_id}/cancel")
async def cancel(response_id: str, request: Request) -> dict:
    await asyncio.to_thread(store_of(request).get, response_id)  # 404 for an unknown id
    raise InvalidInput("only background responses can be cancelled, and inferd runs none (background is not "
                       "offered)", "response_id")


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(response_id: str, request: Request, limit: int = Query(20, ge=1, le=100),
                           order: Literal["asc", "desc"] = "desc", after: str | None = None,
                           include: list[str] | None = Query(None)) -> dict:
    """OpenAI's cursor page: newest first by default; `after` is the last id of the previous page."""
    if include:
        raise InvalidInput(f"include {include[0]!r} is not supported", "include")
    items = await asyncio.to_thread(store_of(request).input_items, response_id)
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [it["id"] for it in items]
        if after not in ids:
            raise InvalidInput(f"'after': no item with id '{after[:80]}' in this response's input", "after")
        items = items[ids.index(after) + 1:]
    page = items[:limit]
    return {"object": "list", "data": page, "has_more": len(items) > limit,
            "first_id": page[0]["id"] if page else None, "last_id": page[-1]["id"] if page else None}
