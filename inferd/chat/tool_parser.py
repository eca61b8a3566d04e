"""Tool calls out of generated text, in one piece or streamed delta by delta.

Formats recognised (whichever the model writes; the parser does not need to be told):

- Hermes / Qwen: `<tool_call>{"name": "f", "arguments": {...}}</tool_call>` (any number,
  text may surround them). What `inline_tools` asks for and what the forcing grammar writes.
- Mistral: `[TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]` and the newer
  `[TOOL_CALLS]f[ARGS]{...}`.
- Llama 3.x JSON: the whole message is `{"name": "f", "parameters": {...}}` (or
  "arguments"), optionally after `<|python_tag|>`, several separated by `;`.

Streaming guarantee: text belonging to a call is never emitted as content. Text that could
still be the start of a call (a partial `<tool_c`, a message opening with `{"name"`) is held
back until it is decided. Each call is emitted whole, once its closing tag (or the end of
the output) arrives, with id `call_<hex>` and `index` in order. A block that turns out not
to be a valid call (bad JSON, a function that was not offered) is given back as content,
so nothing the model wrote is lost. Whitespace around calls is dropped.

`parse_tool_calls(text, specs)` is exactly one `feed` + `finish`, so streamed and
non-streamed responses agree by construction.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from inferd.chat.tools import ToolSpec
from inferd.text.markers import held_suffix_len
from inferd.types import ToolCall

HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
MISTRAL = "[TOOL_CALLS]"
MISTRAL_ARGS = "[ARGS]"
PYTHON_TAG = "<|python_tag|>"
_MARKERS = (HERMES_OPEN, MISTRAL)
_FIRST_KEY = re.compile(r'\s*\[?\s*\{\s*"((?:[^"\\]|\\.)*)"')
_CALL_KEYS = ("name", "type", "function")
_DECODER = json.JSONDecoder()


@dataclass
class ParsedDelta:
    """What one `feed`/`finish` produced: content text to stream and completed calls."""

    content: str = ""
    calls: list[ToolCall] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.content or self.calls)


def _json_values(text: str) -> list | None:
    """All JSON values in `text`, separated by whitespace or ';'; None if anything else."""
    values: list = []
    pos = 0
    while True:
        while pos < len(text) and (text[pos].isspace() or text[pos] == ";"):
            pos += 1
        if pos == len(text):
            return values
        try:
            value, pos = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError:
            return None
        values.append(value)


def _as_args(raw) -> dict | None:
    if raw is None:
        return {}
    if isinstance(raw, str):  # some models encode the arguments object as a string
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            return None
    return raw if isinstance(raw, dict) else None


class ToolCallStreamParser:
    """Feed generated text deltas; get content deltas and completed tool calls back.

        p = ToolCallStreamParser(specs)
        for text in deltas: out = p.feed(text)   # out.content -> delta.content, out.calls -> delta.tool_calls
        out = p.finish()                          # flushes what was held back
        p.calls                                   # every call, in order

    `specs`: the offered tools; calls of other functions are treated as content. None
    accepts any name.
    """

    def __init__(self, specs: list[ToolSpec] | None = None):
        self.names = {s.name for s in specs} if specs is not None else None
        self.calls: list[ToolCall] = []
        self._buf = ""
        self._mode = "content"  # "content" | "hermes" (inside a block) | "tail" (rest of output is calls)
        self._started = False  # has non-whitespace content been emitted?
        self._json_checked = False  # has the opening been ruled out as a Llama JSON call?
        self._after_call = False
        self._pending_ws = ""
        self._out: ParsedDelta = ParsedDelta()

    # -- public
    def feed(self, delta: str) -> ParsedDelta:
        self._out = ParsedDelta()
        self._buf += delta
        self._advance(final=False)
        return self._out

    def finish(self, cut: bool = False) -> ParsedDelta:
        """`cut`: the output was cut short (max_tokens, a full context). A call it cut off
        is dropped rather than given back as content: it is call text, never an answer,
        and complete calls before it stay."""
        self._out = ParsedDelta()
        self._advance(final=True, cut=cut)
        if self._mode == "hermes":
            calls = self._hermes_block(self._buf[len(HERMES_OPEN):])  # closed by EOS, not by its tag
            self._take(calls, self._buf, drop=cut)
        elif self._mode == "tail":
            self._take(self._tail_calls(self._buf), self._buf, drop=cut)
        self._buf = ""
        if not self.calls and self._pending_ws:
            self._out.content += self._pending_ws
        self._pending_ws = ""
        return self._out

    # -- internals
    def _emit(self, text: str):
        if self._after_call:
            text = text.lstrip()
            if not text:
                return
            self._after_call = False
        text = self._pending_ws + text
        body = text.rstrip()
        self._pending_ws = text[len(body):]
        if body:
            self._out.content += body
            self._started = self._started or bool(body.strip())

    def _add(self, name: str, args: dict) -> ToolCall:
        call = ToolCall(name, json.dumps(args, ensure_ascii=False), index=len(self.calls))
        self.calls.append(call)
        self._out.calls.append(call)
        self._after_call = True
        self._pending_ws = ""
        return call

    def _take(self, calls: list[tuple[str, dict]] | None, raw: str, drop: bool = False):
        if calls:
            for name, args in calls:
                self._add(name, args)
        elif not drop:
            self._emit(raw)

    def _advance(self, final: bool, cut: bool = False):
        while self._buf:
            if self._mode == "content":
                if not self._started and not self._json_checked:
                    verdict = self._llama_json_opening(final)
                    if verdict == "wait":
                        return
                    if verdict == "call":
                        self._mode = "tail"
                        return
                    self._json_checked = True
                hits = [(self._buf.find(m), m) for m in _MARKERS if m in self._buf]
                if hits:
                    k, marker = min(hits)
                    self._emit(self._buf[:k])
                    self._buf = self._buf[k:]
                    self._mode = "hermes" if marker == HERMES_OPEN else "tail"
                    continue
                hold = 0 if final and not cut else held_suffix_len(self._buf, _MARKERS)
                self._emit(self._buf[:len(self._buf) - hold])
                self._buf = "" if final else self._buf[len(self._buf) - hold:]  # cut: a marker's start goes
                return
            if self._mode == "hermes":
                k = self._buf.find(HERMES_CLOSE)
                if k < 0:
                    return
                block, self._buf = self._buf[:k + len(HERMES_CLOSE)], self._buf[k + len(HERMES_CLOSE):]
                self._take(self._hermes_block(block[len(HERMES_OPEN):-len(HERMES_CLOSE)]), block)
                self._mode = "content"
                continue
            return  # tail: everything until the end belongs to the calls

    def _llama_json_opening(self, final: bool) -> str:
        """'call' / 'content' / 'wait': could this message be a Llama-3 style JSON call?"""
        s = self._buf.lstrip()
        if not s:
            return "content" if final else "wait"
        if s.startswith(PYTHON_TAG):
            return "call"
        if PYTHON_TAG.startswith(s):
            return "content" if final else "wait"
        if s[0] not in "{[":
            return "content"
        if final:
            return "call"  # the whole text is here; `_tail_calls` decides, falling back to content
        m = _FIRST_KEY.match(s)
        if m:
            return "call" if m.group(1) in _CALL_KEYS else "content"
        if re.match(r'\s*\[?\s*\{\s*("(?:[^"\\]|\\.)*)?$', s) or re.match(r"\s*\[\s*$", s):
            return "wait"  # the first key is not complete yet
        return "content"

    def _call_from(self, obj) -> tuple[str, dict] | None:
        if not isinstance(obj, dict):
            return None
        if isinstance(obj.get("function"), dict):  # {"type": "function", "function": {...}}
            obj = obj["function"]
        name = obj.get("name")
        args = _as_args(obj["arguments"] if "arguments" in obj else obj.get("parameters"))
        if not isinstance(name, str) or args is None:
            return None
        if self.names is not None and name not in self.names:
            return None
        return name, args

    def _hermes_block(self, body: str) -> list[tuple[str, dict]] | None:
        values = _json_values(body)
        if not values or len(values) != 1:
            return None
        call = self._call_from(values[0])
        return [call] if call else None

    def _tail_calls(self, text: str) -> list[tuple[str, dict]] | None:
        """Calls that make up all of `text` (Mistral or Llama JSON), or None."""
        calls: list[tuple[str, dict]] = []
        if text.lstrip().startswith(MISTRAL):
            for seg in text.split(MISTRAL)[1:]:
                seg = seg.strip()
                if MISTRAL_ARGS in seg:
                    name, _, rest = seg.partition(MISTRAL_ARGS)
                    values = _json_values(rest)
                    one = self._call_from({"name": name.strip(), "arguments": values[0]}) \
                        if values and len(values) == 1 else None
                    if not one:
                        return None
                    calls.append(one)
                    continue
                got = self._objects(seg)
                if got is None:
                    return None
                calls.extend(got)
            return calls or None
        s = text.strip()
        if s.startswith(PYTHON_TAG):
            s = s[len(PYTHON_TAG):]
        return self._objects(s)

    def _objects(self, text: str) -> list[tuple[str, dict]] | None:
        values = _json_values(text)
        if not values:
            return None
        calls = []
        for v in values:
            for item in (v if isinstance(v, list) else [v]):
                call = self._call_from(item)
                if call is None:
                    return None
                calls.append(call)
        return calls or None


def parse_tool_calls(text: str, specs: list[ToolSpec] | None = None) -> tuple[str | None, list[ToolCall]]:
    """Split a finished output into (content or None, calls). Same rules as streaming."""
    p = ToolCallStreamParser(specs)
    content = p.feed(text).content + p.finish().content
    return (content if content else None), p.calls
