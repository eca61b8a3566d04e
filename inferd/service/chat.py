"""Chat features on top of generation: tools, structured output, raw grammars, thinking.

A face fills `GenerateRequest.chat` (engine types only); here it becomes a plan
(`inferd.chat.plan`), on the request's thread, before anything is queued:

    plan = plan_request(req, template)      # every 400 (tools, history, schema, grammar, thinking)
    messages, kwargs = plan.messages, {...req.template_kwargs, **plan.template_kwargs}
    prompt = render(...)                    # the model's own template
    sampling.grammar = plan.grammar(prompt) # forced tool calls / JSON / raw GBNF
    output = ChatOutput(plan.output_parser(prompt))

and the stream hands every engine delta to `output.apply`, which splits its text into
reasoning, answer and tool calls. A streamed and a non-streamed response see the same
deltas through the same parser, so they agree exactly.
"""

from __future__ import annotations

from inferd.chat.output import ChatDelta, ChatOutputParser
from inferd.chat.plan import ChatPlan, plan_chat
from inferd.chat.reasoning import reasoning_markers
from inferd.types import Delta, GenerateRequest


def plan_request(req: GenerateRequest, template: str | None, default_budget: int | None = None) -> ChatPlan | None:
    """The chat plan of `req` rendered with `template` (None: a plain prompt, or a model
    without a template whose messages are read as text). None when the request has no
    chat options (completions). `default_budget`: the server's --reasoning-budget."""
    o = req.chat
    if o is None:
        return None
    chat = req.messages is not None
    thinking = o.enable_thinking
    if thinking is None and o.reasoning_effort is not None:
        # An effort level asks for thinking where the template can think, and none where it cannot
        # (OpenAI models without reasoning accept the field too); "none" turns it off.
        thinking = o.reasoning_effort != "none" and reasoning_markers(template if chat else None) is not None
        if not thinking and reasoning_markers(template if chat else None) is None:
            thinking = None  # nothing to turn off: leave the template's variables as they are
    return plan_chat(req.messages if chat else [], template=template if chat else None, tools=o.tools,
                     tool_choice=o.tool_choice, parallel_tool_calls=o.parallel_tool_calls,
                     response_format=o.response_format, ollama_format=o.json_format, grammar=o.grammar,
                     enable_thinking=thinking, thinking_param=o.thinking_param,
                     tool_call_ids=o.tool_call_ids, reasoning_effort=o.reasoning_effort,
                     reasoning_budget=o.reasoning_budget, default_budget=default_budget)


class ChatOutput:
    """One sequence's output parser, applied to the engine's deltas in order."""

    def __init__(self, parser: ChatOutputParser):
        self.parser = parser

    def apply(self, d: Delta) -> Delta:
        """Rewrite `d` in place: `text` becomes the answer only, `reasoning` and
        `tool_calls` are filled, and the last delta flushes what the parser held back and
        turns finish_reason 'stop' into 'tool_calls' when calls were made."""
        out = self.parser.feed(d.text) if d.text else ChatDelta()
        if d.finish_reason is not None:
            end = self.parser.finish(cut=d.finish_reason == "length")
            out = ChatDelta(out.reasoning + end.reasoning, out.content + end.content,
                            out.tool_calls + end.tool_calls)
            d.finish_reason = self.parser.result().finish_reason(d.finish_reason)
        d.text, d.reasoning, d.tool_calls = out.content, out.reasoning, out.tool_calls
        return d
