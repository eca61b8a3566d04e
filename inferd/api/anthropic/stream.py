"""Anthropic Messages streaming: a GenerationStream's deltas as Anthropic's typed SSE events,
each `event: <type>` + `data: {json}`:

    message_start, ping,
    (content_block_start, content_block_delta*, content_block_stop)*   thinking / text / tool_use
    message_delta {stop_reason, stop_sequence, usage}, message_stop

A thinking block streams `thinking_delta`s, a text block `text_delta`s; a tool call (the
engine completes a call before it reports it) is one tool_use block with one
`input_json_delta` carrying its whole input. message_start waits for the first engine delta,
so its usage already knows how much of the prompt came from the KV cache. A failure after the
first byte is an `event: error` in Anthropic's envelope, and the stream ends there."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from inferd.api.anthropic.convert import stop_reason, thinking_block, tool_use_id, usage
from inferd.api.errors import error_body
from inferd.api.streaming import SSE_HEADERS, ClosingStream, _dumps, _log_failure


async def events(stream: Any, omit_thinking: bool = False) -> AsyncIterator[dict[str, Any]]:
    """`omit_thinking` (thinking.display 'omitted'): thinking blocks open and close, empty."""
    mid = "msg_" + stream.id
    index, open_kind = -1, None  # the content block being written
    started = False

    def start(kind: str, block: dict[str, Any]) -> dict[str, Any]:
        nonlocal index, open_kind
        index, open_kind = index + 1, kind
        return {"type": "content_block_start", "index": index, "content_block": block}

    def stop() -> list[dict[str, Any]]:
        nonlocal open_kind
        if open_kind is None:
            return []
        open_kind = None
        return [{"type": "content_block_stop", "index": index}]

    last = None
    async for d in stream:
        if not started:
            started = True
            u = usage(d.usage) if d.usage is not None else usage_zero()
            yield {"type": "message_start", "message": {
                "id": mid, "type": "message", "role": "assistant", "model": stream.model, "content": [],
                "stop_reason": None, "stop_sequence": None, "usage": u}}
            yield {"type": "ping"}
        for kind, text in (("thinking", d.reasoning), ("text", d.text)):
            if not text:
                continue
            if open_kind != kind:
                for e in stop():
                    yield e
                yield start(kind, thinking_block("") if kind == "thinking" else {"type": "text", "text": ""})
            if kind == "thinking" and omit_thinking:
                continue
            yield {"type": "content_block_delta", "index": index,
                   "delta": {"type": "thinking_delta", "thinking": text} if kind == "thinking"
                   else {"type": "text_delta", "text": text}}
        for c in d.tool_calls:
            for e in stop():
                yield e
            yield start("tool_use", {"type": "tool_use", "id": tool_use_id(c.id), "name": c.name, "input": {}})
            yield {"type": "content_block_delta", "index": index,
                   "delta": {"type": "input_json_delta", "partial_json": c.arguments}}
            for e in stop():
                yield e
        if d.finish_reason is not None:
            last = d
    for e in stop():
        yield e
    if last is None:
        return  # cancelled before anything was generated: no message to finish
    reason = stop_reason(last.finish_reason, last.stop_word)
    yield {"type": "message_delta",
           "delta": {"stop_reason": reason, "stop_sequence": last.stop_word if reason == "stop_sequence" else None},
           "usage": usage(last.usage) if last.usage is not None else usage_zero()}
    yield {"type": "message_stop"}


def usage_zero() -> dict[str, Any]:
    return {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}


def event_stream(stream: Any, omit_thinking: bool = False) -> ClosingStream:
    """The SSE response; it closes `stream` (cancelling the generation) however it ends."""

    async def body() -> AsyncIterator[str]:
        try:
            async for ev in events(stream, omit_thinking):
                yield f"event: {ev['type']}\ndata: {_dumps(ev)}\n\n"
        except Exception as e:
            _log_failure(e)
            _, err, _ = error_body(e, "anthropic")
            yield f"event: error\ndata: {_dumps(err)}\n\n"

    return ClosingStream(body(), stream.aclose, "text/event-stream", SSE_HEADERS)
