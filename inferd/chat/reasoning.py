"""Reasoning ("thinking") output: which templates can think, and splitting it from the answer.

Rules (GenAIServer spec; docs/reasoning.md): `enable_thinking` (top level or in
`chat_template_kwargs`) on the OpenAI/Antfly faces and `think` on Ollama's is passed to the
template; the model's reasoning goes to `reasoning_content` (OpenAI) / `thinking` (Ollama),
omitted when empty; incoming reasoning fields are not replayed (see
`tools.prepare_messages`); asking a template that cannot think to think is a 400.

    wanted = requested_thinking(body.get("enable_thinking"), body.get("chat_template_kwargs"))
    plan   = plan_thinking(wanted, template)              # 400 if it cannot think
    prompt = render(messages, **plan.template_kwargs)
    split  = ReasoningStreamSplitter(plan.markers, in_reasoning=prompt_opens_reasoning(prompt, plan.markers))
    for text in deltas: reasoning, content = split.feed(text)
    reasoning, content = split.finish()

Budgets: `thinking_budget(budget, effort, server_default)` gives the tokens of thinking a
request allows (`EFFORT_BUDGETS` maps OpenAI's effort levels); the plan carries it and the
engine (scheduling/thinking.py) closes the block there by forcing the end marker.

A reasoning block is recognised only at the very start of the output (after whitespace),
or from the first token when the prompt itself ends with the opening marker (DeepSeek-R1
style templates). Whitespace just inside the markers and right after the block is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from inferd.errors import InvalidInput
from inferd.text.markers import held_suffix_len


@dataclass(frozen=True)
class ReasoningMarkers:
    open: str
    close: str


THINK = ReasoningMarkers("<think>", "</think>")
# Markers of thinking models whose templates name them; the first found in a template wins.
KNOWN_MARKERS = (
    ReasoningMarkers("<seed:think>", "</seed:think>"),  # ByteDance Seed
    THINK,  # Qwen3, DeepSeek-R1, QwQ, SmolLM3, GLM, ...
    ReasoningMarkers("<|START_THINKING|>", "<|END_THINKING|>"),  # Command R7B
    ReasoningMarkers("[THINK]", "[/THINK]"),  # Magistral
    ReasoningMarkers("\u25c1think\u25b7", "\u25c1/think\u25b7"),  # Kimi
)


def reasoning_markers(template: str | None) -> ReasoningMarkers | None:
    """The reasoning markers a chat template uses, or None when it cannot think.

    A template can think if it names one of the known marker pairs, or reads
    `enable_thinking` (then `<think>` is assumed, the convention of such templates).
    """
    if not template:
        return None
    for m in KNOWN_MARKERS:
        if m.open in template or m.close in template:
            return m
    return THINK if "enable_thinking" in template else None


# OpenAI's `reasoning_effort` levels (chat `reasoning_effort`, Responses `reasoning.effort`,
# Ollama `think` levels) -> tokens of thinking allowed; None: unbounded (the model decides).
# "none" allows none: the block is closed at once (and a template that can switch thinking
# off is told to). The steps follow the budgets llama.cpp and vLLM users pick for these levels.
EFFORT_BUDGETS: dict[str, int | None] = {"none": 0, "minimal": 256, "low": 1024, "medium": 4096, "high": None}


def effort_budget(effort: str, param: str = "reasoning_effort") -> int | None:
    """The thinking budget of an effort level; an unknown level is a 400."""
    if effort not in EFFORT_BUDGETS:
        raise InvalidInput(f"{param} must be one of {', '.join(EFFORT_BUDGETS)}, not {effort!r}", param=param)
    return EFFORT_BUDGETS[effort]


def thinking_budget(budget: int | None, effort: str | None, default: int | None = None,
                    param: str = "reasoning_effort") -> int | None:
    """Tokens of thinking this request allows: its own budget, else its effort's, else the
    server's default (--reasoning-budget; None or -1: unbounded). None: unbounded."""
    if budget is not None:
        if budget < 0:
            raise InvalidInput("the reasoning budget must be >= 0 tokens", param=param)
        return budget
    if effort is not None:
        return effort_budget(effort, param)
    return None if default is None or default < 0 else default


def _flag(value, param: str) -> bool | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value in ("high", "medium", "low"):  # Ollama's levels for gpt-oss
        return True
    raise InvalidInput(f"{param} must be a boolean", param=param)


def requested_thinking(enable_thinking=None, chat_template_kwargs=None, think=None) -> bool | None:
    """What the request asked for: True, False, or None (the template's default).

    OpenAI/Antfly: top-level `enable_thinking`, else `chat_template_kwargs.enable_thinking`
    (the top level wins). Ollama: `think`.
    """
    if chat_template_kwargs is not None and not isinstance(chat_template_kwargs, dict):
        raise InvalidInput("chat_template_kwargs must be an object", param="chat_template_kwargs")
    for value, param in ((enable_thinking, "enable_thinking"), (think, "think"),
                         ((chat_template_kwargs or {}).get("enable_thinking"), "chat_template_kwargs.enable_thinking")):
        flag = _flag(value, param)
        if flag is not None:
            return flag
    return None


@dataclass(frozen=True)
class ThinkingPlan:
    """How to render and read one request.

    markers: split the output with these (None: no reasoning split at all).
    include_reasoning: False when thinking was turned off; a model that thinks anyway has
        its reasoning dropped rather than leaked into the answer.
    enabled: whether the model is expected to think (grammars then allow a thinking block).
    template_kwargs: pass to the template renderer (`enable_thinking` when requested).
    budget: tokens of thinking allowed (None: unbounded); the engine closes the block there.
    """

    markers: ReasoningMarkers | None = None
    include_reasoning: bool = True
    enabled: bool = False
    template_kwargs: dict = field(default_factory=dict)
    budget: int | None = None


def plan_thinking(requested: bool | None, template: str | None, param: str = "enable_thinking",
                  budget: int | None = None, effort: str | None = None) -> ThinkingPlan:
    """Check the request against the template; InvalidInput (400) if it cannot think.

    A budget bounds thinking but does not ask for it (a model that cannot think has nothing
    to bound, so effort levels sent by agent SDKs to any model are no error); a budget of 0
    (effort "none") turns thinking off where the request did not say otherwise."""
    markers = reasoning_markers(template)
    if requested and markers is None:
        raise InvalidInput(f"this model's chat template does not support thinking; remove '{param}'", param=param)
    if requested is None and budget == 0 and markers is not None:
        requested = False
    kwargs: dict[str, object] = {} if requested is None else {"enable_thinking": requested}
    if effort is not None and template and "reasoning_effort" in template:
        kwargs["reasoning_effort"] = effort  # gpt-oss style templates read the level themselves
    return ThinkingPlan(markers, requested is not False, markers is not None and requested is not False, kwargs,
                        budget if markers is not None else None)


def prompt_opens_reasoning(prompt: str, markers: ReasoningMarkers | None) -> bool:
    """True when the rendered prompt already opened the reasoning block (output starts inside it)."""
    return markers is not None and prompt.rstrip().endswith(markers.open)


class ReasoningStreamSplitter:
    """Feed text deltas; get (reasoning_delta, content_delta) pairs back.

    Text that may be part of a marker is held back until decided, so a marker split across
    deltas never leaks into either stream. With `markers=None` everything is content.
    """

    def __init__(self, markers: ReasoningMarkers | None, in_reasoning: bool = False):
        self.m = markers
        self._state = "content" if markers is None else ("reasoning" if in_reasoning else "start")
        self._buf = ""
        self._pending_ws = ""  # trailing whitespace of reasoning, dropped if the close marker follows
        self._lstrip = in_reasoning  # drop whitespace at the start of reasoning / after the block
        self.reasoning = ""
        self.content = ""

    def feed(self, delta: str) -> tuple[str, str]:
        self._buf += delta
        return self._run(final=False)

    def finish(self) -> tuple[str, str]:
        return self._run(final=True)

    def _run(self, final: bool) -> tuple[str, str]:
        r_out: list[str] = []
        c_out: list[str] = []
        # Without markers the state is always "content" and no marker is looked at.
        m = self.m or ReasoningMarkers("", "")
        while True:
            if self._state == "start":
                s = self._buf.lstrip()
                if s.startswith(m.open):
                    self._buf = s[len(m.open):]
                    self._state, self._lstrip = "reasoning", True
                    continue
                if not final and (not s or m.open.startswith(s)):
                    break  # still could be the opening marker
                self._state = "content"
                continue
            if self._state == "reasoning":
                if self._lstrip:
                    self._buf = self._buf.lstrip()
                    if not self._buf:
                        break
                    self._lstrip = False
                k = self._buf.find(m.close)
                if k >= 0:
                    r_out.append(self._reasoning_text(self._buf[:k], final=True))
                    self._buf = self._buf[k + len(m.close):]
                    self._state, self._lstrip = "content", True
                    continue
                hold = 0 if final else held_suffix_len(self._buf, (m.close,))
                r_out.append(self._reasoning_text(self._buf[:len(self._buf) - hold], final))
                self._buf = self._buf[len(self._buf) - hold:]
                break
            # content
            if self._lstrip:
                self._buf = self._buf.lstrip()
                if not self._buf:
                    break
                self._lstrip = False
            c_out.append(self._buf)
            self._buf = ""
            break
        r, c = "".join(r_out), "".join(c_out)
        self.reasoning += r
        self.content += c
        return r, c

    def _reasoning_text(self, text: str, final: bool) -> str:
        text = self._pending_ws + text
        body = text.rstrip()
        self._pending_ws = "" if final else text[len(body):]
        return body


def split_reasoning(text: str, markers: ReasoningMarkers | None, in_reasoning: bool = False) -> tuple[str | None, str]:
    """(reasoning or None, content) of a finished output; same rules as streaming."""
    s = ReasoningStreamSplitter(markers, in_reasoning)
    s.feed(text)
    s.finish()
    return (s.reasoning or None), s.content
