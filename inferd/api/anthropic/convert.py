"""Engine -> Anthropic wire shapes (pure): the `message` object, its content blocks, stop
reasons and usage, shared by the non-streamed response (messages.py) and the stream."""

from __future__ import annotations

import uuid
from typing import Any

from inferd.types import FinishReason, Generation, Usage
from inferd.types import ToolCall


def new_id() -> str:
    return "msg_" + uuid.uuid4().hex[:24]


def tool_use_id(call_id: str) -> str:
    """Anthropic's `toolu_` ids for the engine's `call_` ids (any other id passes as it is)."""
    return "toolu_" + call_id[5:] if call_id.startswith("call_") else call_id


def tool_use(c: ToolCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_use_id(c.id), "name": c.name, "input": c.args}


def stop_reason(finish: FinishReason | str, stop_sequence: str | None) -> str:
    if finish == "tool_calls":
        return "tool_use"
    if finish == "length":
        return "max_tokens"
    return "stop_sequence" if stop_sequence else "end_turn"


def usage(u: Usage) -> dict[str, Any]:
    """Anthropic counts cached prompt tokens apart from input_tokens; thinking_tokens are the
    engine's count of tokens inside the thinking block (part of output_tokens)."""
    return {"input_tokens": u.prompt_tokens - u.cached_prompt_tokens, "output_tokens": u.completion_tokens,
            "cache_read_input_tokens": u.cached_prompt_tokens, "cache_creation_input_tokens": 0,
            "output_tokens_details": {"thinking_tokens": u.reasoning_tokens}}


def thinking_block(text: str, omit: bool = False) -> dict[str, Any]:
    """`signature` is empty: nothing here verifies replayed thinking (it is not replayed)."""
    return {"type": "thinking", "thinking": "" if omit else text, "signature": ""}


def message_response(g: Generation, omit_thinking: bool = False) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if g.reasoning:
        content.append(thinking_block(g.reasoning, omit_thinking))
    if g.text:
        content.append({"type": "text", "text": g.text})
    content.extend(tool_use(c) for c in g.tool_calls)
    reason = stop_reason(g.finish_reason, g.stop_word)
    return {"id": new_id(), "type": "message", "role": "assistant", "model": g.model, "content": content,
            "stop_reason": reason, "stop_sequence": g.stop_word if reason == "stop_sequence" else None,
            "usage": usage(g.usage)}
