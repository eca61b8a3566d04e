"""One call that turns the chat-specific fields of a request into what the engine needs.

Every face (OpenAI, Antfly, Ollama) calls `plan_chat` with the request's fields, renders
the prompt, and uses the plan on both ends of generation:

    plan = plan_chat(body["messages"], template=template_source,
                     tools=body.get("tools"), tool_choice=body.get("tool_choice"),
                     parallel_tool_calls=body.get("parallel_tool_calls", True),
                     response_format=body.get("response_format"), grammar=body.get("grammar"),
                     enable_thinking=requested_thinking(body.get("enable_thinking"),
                                                        body.get("chat_template_kwargs")))
    # Ollama: ollama_format=body.get("format"), enable_thinking=requested_thinking(think=body.get("think")),
    #         tool_call_ids="optional"
    prompt  = render(template_source, plan.messages, add_generation_prompt=True, **plan.template_kwargs)
    grammar = plan.grammar(prompt)          # GBNF for llama_sampler_init_grammar, or None
    parser  = plan.output_parser(prompt)    # see inferd.chat.output
    ... generate, feeding text deltas to parser ...
    finish_reason = parser.result().finish_reason(engine_finish_reason)

All validation happens in `plan_chat` and raises `InvalidInput` (400) before any work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from inferd.chat import grammar as _grammar
from inferd.chat.output import ChatOutputParser
from inferd.chat.reasoning import ThinkingPlan, plan_thinking, prompt_opens_reasoning, thinking_budget
from inferd.chat.tools import (ToolChoice, ToolSpec, inline_tools, prepare_messages, resolve_tool_choice,
                               template_renders_tools, validate_tools)


@dataclass
class ChatPlan:
    messages: list[dict]  # what the template renders
    template_kwargs: dict  # extra template variables: `tools`, `enable_thinking`
    tools: list[ToolSpec]  # the tools offered to the model ([] for tool_choice 'none')
    tool_choice: ToolChoice
    thinking: ThinkingPlan
    _grammar_args: dict = field(default_factory=dict, repr=False)
    # Grammars built so far, by reasoning markers: plan_chat builds one to validate, and the
    # request's prompt usually needs the same one (compiling a big schema twice is waste).
    _grammars: dict = field(default_factory=dict, repr=False)

    def _reasoning(self, prompt: str) -> tuple[str, str] | None:
        m = self.thinking.markers
        if m is None or not self.thinking.enabled:
            return None
        return ("" if prompt_opens_reasoning(prompt, m) else m.open), m.close

    def grammar(self, prompt: str, endless: bool = False) -> str | None:
        """The GBNF constraining this request's output, or None (unconstrained). `endless`
        (ignore_eos): the variant that never completes where there is one (`endless_grammar`)."""
        reasoning = self._reasoning(prompt)
        key = (reasoning, endless and self.endless_grammar)
        if key not in self._grammars:
            self._grammars[key] = _grammar.request_grammar(**self._grammar_args, reasoning=reasoning,
                                                           endless=key[1])
        return self._grammars[key]

    @property
    def endless_grammar(self) -> bool:
        """Whether this plan's grammar has a variant that never completes, so that it can run
        with ignore_eos: strict tools under tool_choice 'auto' answering free text."""
        a = self._grammar_args
        return (self.tool_choice.mode == "auto" and any(t.strict for t in self.tools) and a["grammar"] is None
                and a["ollama_format"] in (None, "") and _grammar.response_format_grammar(a["response_format"]) is None)

    def output_parser(self, prompt: str) -> ChatOutputParser:
        """A fresh parser for one generated sequence of this request."""
        m = self.thinking.markers
        return ChatOutputParser(markers=m, in_reasoning=prompt_opens_reasoning(prompt, m),
                                include_reasoning=self.thinking.include_reasoning,
                                tools=self.tools or None)


def plan_chat(messages, *, template: str | None, tools=None, tool_choice=None, parallel_tool_calls: bool = True,
              response_format=None, ollama_format=None, grammar=None, enable_thinking: bool | None = None,
              thinking_param: str = "enable_thinking",
              tool_call_ids: Literal["required", "optional"] = "required", reasoning_effort: str | None = None,
              reasoning_budget: int | None = None, default_budget: int | None = None) -> ChatPlan:
    """Validate and resolve tools, history, thinking and constraints for one chat request.

    template: the chat template source the request will be rendered with (to learn whether
        it renders tools itself and whether it can think).
    tool_call_ids: 'optional' for Ollama, whose tool messages name no call id.
    reasoning_effort / reasoning_budget / default_budget: the thinking budget (see
        reasoning.thinking_budget); the engine closes the thinking block when it is spent.
    """
    specs = validate_tools(tools)
    choice = resolve_tool_choice(tool_choice, specs)
    budget = thinking_budget(reasoning_budget, reasoning_effort, default_budget,
                             param="think" if thinking_param == "think" else "reasoning_effort")
    thinking = plan_thinking(enable_thinking, template, param=thinking_param, budget=budget, effort=reasoning_effort)
    msgs = prepare_messages(messages, tool_call_ids=tool_call_ids)
    offered = choice.offered(specs)
    kwargs = dict(thinking.template_kwargs)
    if template_renders_tools(template):
        if offered:
            kwargs["tools"] = [s.openai() for s in offered]
    else:
        # Without native tool support, tool history must be plain text either way.
        msgs = inline_tools(msgs, offered, choice)
    grammar_args = {"grammar": grammar, "response_format": response_format, "ollama_format": ollama_format,
                    "tools": offered, "tool_choice": choice, "parallel_tool_calls": parallel_tool_calls}
    plan = ChatPlan(msgs, kwargs, offered, choice, thinking, grammar_args)
    plan.grammar("")  # validate schemas and raw grammar now, before any work (400s early)
    return plan
