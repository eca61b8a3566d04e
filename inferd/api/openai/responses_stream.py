"""The Responses API's event machine: a GenerationStream's deltas (already split by the chat
output parser into reasoning, answer text and tool calls) -> output items and the typed
stream events OpenAI documents, each with its `sequence_number`:

    response.created, response.in_progress
    per item: response.output_item.added
      reasoning: content_part.added (reasoning_text), reasoning_text.delta..., reasoning_text.done,
                 content_part.done [+ reasoning_summary_part.added, reasoning_summary_text.delta/.done,
                 reasoning_summary_part.done when reasoning.summary was asked for]
      message:   content_part.added (output_text), output_text.delta..., output_text.done, content_part.done
      function_call: function_call_arguments.delta, function_call_arguments.done
    response.output_item.done
    response.completed | response.incomplete (max_output_tokens) | response.failed

A non-streamed request runs the same machine and returns the final response, so both agree
exactly. The model writes its reasoning first, then its answer, then its calls; an item is
closed when output of another kind starts (the parser emits a tool call whole, so its
arguments arrive as one delta).

A local model's thinking is not summarised by a second model: a requested summary carries the
reasoning text itself."""

from __future__ import annotations

import copy
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from inferd.api.streaming import SSE_HEADERS, ClosingStream, _dumps
from inferd.errors import Cancelled, InferdError
from inferd.types import Delta

log = logging.getLogger("inferd.api")
FINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class ResponseBuilder:
    """One response's output items and events. `base` is the Response object skeleton."""

    def __init__(self, base: dict[str, Any], summary: bool = False, reasoning_content: bool = False):
        self.base, self.summary = base, summary
        self.reasoning_content = reasoning_content  # include reasoning.encrypted_content (in plain)
        self.seq = 0
        self.item: dict[str, Any] | None = None  # the open reasoning or message item
        self.reasoning_tokens = 0
        self.usage: Any = None
        self.error: BaseException | None = None  # why the response failed (non-streamed: raised)

    # ---- helpers ------------------------------------------------------------------------------
    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        e = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return e

    def snapshot(self) -> dict[str, Any]:
        return copy.deepcopy(self.base)

    @property
    def index(self) -> int:
        return len(self.base["output"]) - 1

    def _add(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        self.base["output"].append(item)
        return [self._event("response.output_item.added", output_index=self.index, item=copy.deepcopy(item))]

    def _open(self, kind: str) -> list[dict[str, Any]]:
        """Close the open item unless it is of `kind`; open one of `kind` if none is."""
        events: list[dict[str, Any]] = []
        if self.item is not None and self.item["type"] == kind:
            return events
        events += self._close("completed")
        if kind == "reasoning":
            item: dict[str, Any] = {"id": _id("rs"), "type": "reasoning", "summary": [], "content": [],
                                    "status": "in_progress"}
            part: dict[str, Any] = {"type": "reasoning_text", "text": ""}
        else:
            item = {"id": _id("msg"), "type": "message", "role": "assistant", "status": "in_progress",
                    "content": []}
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        self.item = item
        events += self._add(item)
        item["content"].append(part)
        events.append(self._event("response.content_part.added", item_id=item["id"], output_index=self.index,
                                  content_index=0, part=copy.deepcopy(part)))
        return events

    def _close(self, status: str) -> list[dict[str, Any]]:
        item, self.item = self.item, None
        if item is None:
            return []
        i, part = self.index, item["content"][0]
        where = {"item_id": item["id"], "output_index": i, "content_index": 0}
        if item["type"] == "reasoning":
            events = [self._event("response.reasoning_text.done", **where, text=part["text"])]
        else:
            events = [self._event("response.output_text.done", **where, text=part["text"], logprobs=[])]
        events.append(self._event("response.content_part.done", **where, part=copy.deepcopy(part)))
        if item["type"] == "reasoning" and self.summary:
            s = {"type": "summary_text", "text": part["text"]}
            at = {"item_id": item["id"], "output_index": i, "summary_index": 0}
            events.append(self._event("response.reasoning_summary_part.added", **at,
                                      part={"type": "summary_text", "text": ""}))
            events.append(self._event("response.reasoning_summary_text.delta", **at, delta=part["text"]))
            events.append(self._event("response.reasoning_summary_text.done", **at, text=part["text"]))
            events.append(self._event("response.reasoning_summary_part.done", **at, part=dict(s)))
            item["summary"] = [s]
        if item["type"] == "reasoning" and self.reasoning_content:
            item["encrypted_content"] = part["text"]
        item["status"] = status
        events.append(self._event("response.output_item.done", output_index=i, item=copy.deepcopy(item)))
        return events

    # ---- deltas -------------------------------------------------------------------------------
    def feed(self, d: Delta) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if d.usage is not None:
            self.usage = d.usage
        if d.reasoning and not d.text and not d.tool_calls:
            self.reasoning_tokens += len(d.tokens)  # this step's tokens were thinking only
        if d.reasoning:
            events += self._open("reasoning")
            assert self.item is not None
            self.item["content"][0]["text"] += d.reasoning
            events.append(self._event("response.reasoning_text.delta", item_id=self.item["id"],
                                      output_index=self.index, content_index=0, delta=d.reasoning))
        if d.text:
            events += self._open("message")
            assert self.item is not None
            self.item["content"][0]["text"] += d.text
            events.append(self._event("response.output_text.delta", item_id=self.item["id"], output_index=self.index,
                                      content_index=0, delta=d.text, logprobs=[]))
        for call in d.tool_calls:
            events += self._close("completed")
            item = {"id": _id("fc"), "type": "function_call", "status": "in_progress", "call_id": call.id,
                    "name": call.name, "arguments": ""}
            events += self._add(item)
            where = {"item_id": item["id"], "output_index": self.index}
            events.append(self._event("response.function_call_arguments.delta", **where, delta=call.arguments))
            item["arguments"] = call.arguments
            events.append(self._event("response.function_call_arguments.done", **where, name=call.name,
                                      arguments=call.arguments))
            item["status"] = "completed"
            events.append(self._event("response.output_item.done", output_index=self.index, item=copy.deepcopy(item)))
        return events

    def _usage(self) -> dict[str, Any] | None:
        u = self.usage
        if u is None:
            return None
        # Every prompt token the engine did not find in its cache it computes and keeps for the next
        # request with this prefix (the prompt cache is on for responses): written to the cache.
        written = u.prompt_tokens - u.cached_prompt_tokens
        return {"input_tokens": u.prompt_tokens,
                "input_tokens_details": {"cached_tokens": u.cached_prompt_tokens, "cache_write_tokens": written},
                "output_tokens": u.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": min(self.reasoning_tokens, u.completion_tokens)},
                "total_tokens": u.prompt_tokens + u.completion_tokens}

    def _put_usage(self) -> None:
        usage = self._usage()
        if usage is not None:  # the schema has no null usage: absent until known
            self.base["usage"] = usage

    def finish(self, reason: str) -> list[dict[str, Any]]:
        if reason == "cancelled":  # /stop: the open item stays incomplete
            return self.fail(Cancelled("the response was cancelled"), status="cancelled")
        cut = reason == "length"
        events = self._close("incomplete" if cut else "completed")
        b = self.base
        self._put_usage()
        if cut:
            b["status"], b["incomplete_details"] = "incomplete", {"reason": "max_output_tokens"}
            events.append(self._event("response.incomplete", response=self.snapshot()))
        else:
            b["status"], b["completed_at"] = "completed", int(time.time())
            events.append(self._event("response.completed", response=self.snapshot()))
        return events

    def fail(self, exc: BaseException, status: str = "failed") -> list[dict[str, Any]]:
        self.error = exc
        events = self._close("incomplete")
        message = exc.message if isinstance(exc, InferdError) else "internal server error"
        b = self.base
        b["status"], b["error"] = status, {"code": "server_error", "message": message}
        self._put_usage()
        return events + [self._event("response.failed", response=self.snapshot())]

    async def run(self, stream: Any) -> AsyncIterator[dict[str, Any]]:
        """Every event of the response, the final one last."""
        yield self._event("response.created", response=self.snapshot())
        yield self._event("response.in_progress", response=self.snapshot())
        reason = None
        try:
            async for d in stream:
                for ev in self.feed(d):
                    yield ev
                reason = d.finish_reason or reason
        except Exception as exc:  # after the first byte a failure is an event, not a status
            if not isinstance(exc, InferdError):
                log.error("response stream failed", exc_info=exc)
            for ev in self.fail(exc):
                yield ev
            return
        for ev in self.finish(reason or "stop"):
            yield ev

    def error_before(self, final: dict[str, Any], code: str, message: str) -> dict[str, Any]:
        """An `error` event placed before the (already numbered) final event, which moves one on."""
        err = {"type": "error", "sequence_number": final["sequence_number"], "code": code, "message": message,
               "param": None}
        final["sequence_number"] += 1
        self.seq += 1
        return err

    def history_messages(self) -> list[dict[str, Any]]:
        """This response's output as the assistant turn of the stored conversation (reasoning
        is output-only and is not replayed, as on chat completions)."""
        text, calls = [], []
        for item in self.base["output"]:
            if item["type"] == "message":
                text.append(item["content"][0]["text"])
            elif item["type"] == "function_call":
                calls.append({"id": item["call_id"], "type": "function",
                              "function": {"name": item["name"], "arguments": item["arguments"]}})
        if not text and not calls:
            return []
        msg: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
        if calls:
            msg["tool_calls"] = calls
        return [msg]


async def drain(builder: ResponseBuilder, stream: Any) -> dict[str, Any]:
    """The final Response of a non-streamed request. A failed generation raises its error (the
    HTTP status and envelope say what went wrong), a cancelled one `Cancelled`."""
    last: dict[str, Any] | None = None
    async for e in builder.run(stream):
        last = e
    if builder.error is not None:
        raise builder.error
    assert last is not None and last["type"] in FINAL
    return last["response"]


def sse_events(builder: ResponseBuilder, stream: Any, save: Callable[[dict[str, Any]], Awaitable[None]]
               ) -> ClosingStream:
    """`event: <type>` + `data: {json}` per event, as OpenAI streams responses (no [DONE]).
    The final response is stored before its event is sent, so a client that reads
    response.completed can GET it at once; if storing fails, an `error` event says so first
    and the final response says `store: false` (never a silent loss)."""

    async def body() -> AsyncIterator[str]:
        async for e in builder.run(stream):
            if e["type"] in FINAL:
                try:
                    await save(e["response"])
                except Exception as exc:  # the answer is still the client's
                    log.error("storing response %s failed", e["response"]["id"], exc_info=exc)
                    message = exc.message if isinstance(exc, InferdError) else "the response could not be stored"
                    e = {**e, "response": {**e["response"], "store": False}}
                    err = builder.error_before(e, "storage_failed", message)
                    yield f"event: error\ndata: {_dumps(err)}\n\n"
            yield f"event: {e['type']}\ndata: {_dumps(e)}\n\n"

    return ClosingStream(body(), on_close=stream.aclose, media_type="text/event-stream", headers=SSE_HEADERS)


__all__ = ["ResponseBuilder", "drain", "sse_events"]
