"""The chat-only fields of a raw completion (/v1/completions and llama-server's bare
/completions). openai-server's field table lists tools, tool_choice and chat_template for its
completion routes too; GenAIServer's enable_thinking is a chat switch. A completion prompt is
sent as written, with no template to render a tool prompt or a thinking switch, so a value
that asks for something is a 400 naming the field, never silently dropped. Their empty values
(`tools: []`, `tool_choice: "auto"`/`"none"`, `enable_thinking: false`) are what a completion
does anyway, and pass."""

from __future__ import annotations

from typing import Any

from inferd.errors import InvalidInput

_USE_CHAT = "use /v1/chat/completions: a completion prompt is sent as written, without a chat template"


def refuse_chat_only(tools: list[Any] | None, tool_choice: Any, chat_template: str | None,
                     enable_thinking: bool | None = None) -> None:
    if tools:
        raise InvalidInput(f"tools need the model's chat template; {_USE_CHAT}", "tools")
    if tool_choice not in (None, "auto", "none"):
        raise InvalidInput(f"tool_choice {tool_choice!r} forces a tool call; {_USE_CHAT}", "tool_choice")
    if chat_template:
        raise InvalidInput(f"chat_template renders chat messages; {_USE_CHAT}", "chat_template")
    if enable_thinking:
        raise InvalidInput(f"enable_thinking is a chat template switch; {_USE_CHAT}", "enable_thinking")
