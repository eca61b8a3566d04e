"""Generated text -> what a chat response carries: reasoning, content and tool calls.

The reasoning splitter runs first (a thinking block is never parsed for tool calls), then
the tool-call parser reads the content. Batch parsing is one `feed` + `finish`, so a
streamed response and a non-streamed one agree exactly.

    parser = plan.output_parser(prompt)               # or ChatOutputParser(...)
    for text in engine_deltas:
        d = parser.feed(text)      # d.reasoning -> delta.reasoning_content / message.thinking
                                   # d.content   -> delta.content
                                   # d.tool_calls -> delta.tool_calls ([c.openai_delta()])
    d = parser.finish()            # flush what was held back; send it like any delta
    r = parser.result()            # ChatResult: whole message + finish_reason(engine_reason)
"""

from __future__ import annotations

from inferd.types import FinishReason

from dataclasses import dataclass, field

from inferd.chat.reasoning import ReasoningMarkers, ReasoningStreamSplitter
from inferd.chat.tool_parser import ToolCallStreamParser
from inferd.chat.tools import ToolSpec
from inferd.types import ToolCall


@dataclass
class ChatDelta:
    reasoning: str = ""
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.reasoning or self.content or self.tool_calls)


@dataclass
class ChatResult:
    """A finished message. Empty reasoning/content are None (omitted on the wire)."""

    content: str | None
    reasoning: str | None
    tool_calls: list[ToolCall]

    def finish_reason(self, engine_reason: FinishReason) -> FinishReason:
        """'tool_calls' when the model stopped on its own after calling; else the engine's."""
        return "tool_calls" if self.tool_calls and engine_reason == "stop" else engine_reason


class ChatOutputParser:
    """One per generated sequence.

    markers / in_reasoning: see `reasoning.ReasoningStreamSplitter` (None: no split).
    include_reasoning: False drops reasoning (thinking turned off but the model thought).
    tools: the offered tools to parse calls of; None when tool_choice is 'none' / no tools.
    """

    def __init__(self, *, markers: ReasoningMarkers | None = None, in_reasoning: bool = False,
                 include_reasoning: bool = True, tools: list[ToolSpec] | None = None):
        self._split = ReasoningStreamSplitter(markers, in_reasoning)
        self._tools = ToolCallStreamParser(tools) if tools else None
        self._include = include_reasoning
        self._reasoning: list[str] = []
        self._content: list[str] = []
        self._calls: list[ToolCall] = []

    def _route(self, reasoning: str, content: str, final: bool, cut: bool = False) -> ChatDelta:
        d = ChatDelta(reasoning=reasoning if self._include else "")
        if self._tools is None:
            d.content = content
        else:
            p = self._tools.feed(content)
            d.content, d.tool_calls = p.content, list(p.calls)
            if final:
                p = self._tools.finish(cut)
                d.content += p.content
                d.tool_calls += p.calls
        self._reasoning.append(d.reasoning)
        self._content.append(d.content)
        self._calls += d.tool_calls
        return d

    def feed(self, text: str) -> ChatDelta:
        return self._route(*self._split.feed(text), final=False)

    def finish(self, cut: bool = False) -> ChatDelta:
        """`cut`: the output ended on max_tokens / a full context, not by the model's choice."""
        return self._route(*self._split.finish(), final=True, cut=cut)

    def result(self) -> ChatResult:
        content, reasoning = "".join(self._content), "".join(self._reasoning)
        return ChatResult(content or None, reasoning or None, list(self._calls))


def parse_chat_output(text: str, **options) -> ChatResult:
    """Parse a finished output at once (same options as ChatOutputParser)."""
    p = ChatOutputParser(**options)
    p.feed(text)
    p.finish()
    return p.result()
