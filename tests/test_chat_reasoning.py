"""Reasoning split: which templates can think, and <think> blocks out of realistic outputs,
batch and streamed in every split; combined with tool-call parsing."""

import random

import pytest

from inferd.chat.output import ChatOutputParser, parse_chat_output
from inferd.chat.reasoning import (THINK, ReasoningMarkers, ReasoningStreamSplitter, plan_thinking,
                                   prompt_opens_reasoning, reasoning_markers, requested_thinking, split_reasoning)
from inferd.chat.tools import validate_tools
from inferd.errors import InvalidInput

QWEN3 = ("{%- for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
         "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
         "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
         "{%- endif %}{%- endif %}")
DEEPSEEK_R1 = ("{% for m in messages %}{% if m['role'] == 'user' %}<｜User｜>{{ m['content'] }}{% endif %}{% endfor %}"
               "{% if add_generation_prompt %}<｜Assistant｜><think>\\n{% endif %}")
GEMMA3 = ("{{ bos_token }}{% for message in messages %}<start_of_turn>{{ message['role'] }}\n"
          "{{ message['content'] | trim }}<end_of_turn>\n{% endfor %}"
          "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
ONLY_FLAG = "{% if enable_thinking %}/think{% else %}/no_think{% endif %}"
COMMAND_R = "{{ '<|START_THINKING|>' }} ... {{ '<|END_THINKING|>' }}"


def test_detect_thinking_templates():
    assert reasoning_markers(QWEN3) == THINK
    assert reasoning_markers(DEEPSEEK_R1) == THINK
    assert reasoning_markers(ONLY_FLAG) == THINK
    assert reasoning_markers(COMMAND_R) == ReasoningMarkers("<|START_THINKING|>", "<|END_THINKING|>")
    assert reasoning_markers(GEMMA3) is None and reasoning_markers(None) is None


def test_thinking_request_rules():
    assert requested_thinking() is None
    assert requested_thinking(chat_template_kwargs={"enable_thinking": False}) is False
    assert requested_thinking(True, {"enable_thinking": False}) is True  # the top level wins
    assert requested_thinking(think=True) is True and requested_thinking(think="high") is True
    with pytest.raises(InvalidInput, match="enable_thinking must be a boolean"):
        requested_thinking("yes")
    with pytest.raises(InvalidInput) as e:
        plan_thinking(True, GEMMA3)  # a template that cannot think: 400, not a silent ignore
    assert e.value.param == "enable_thinking" and "does not support thinking" in e.value.message
    with pytest.raises(InvalidInput) as e:
        plan_thinking(True, GEMMA3, param="think")
    assert e.value.param == "think"
    assert plan_thinking(False, GEMMA3).template_kwargs == {"enable_thinking": False}  # turning it off is fine
    p = plan_thinking(None, QWEN3)
    assert p.markers == THINK and p.enabled and p.include_reasoning and p.template_kwargs == {}
    p = plan_thinking(False, QWEN3)
    assert not p.enabled and not p.include_reasoning and p.template_kwargs == {"enable_thinking": False}
    assert prompt_opens_reasoning("<｜Assistant｜><think>\n", THINK)
    assert not prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n", THINK)


CASES = [  # (output, in_reasoning, reasoning, content)
    ("<think>\nThe user asks 9.11 vs 9.9. 9.9 is larger.\n</think>\n\n9.9 is larger.", False,
     "The user asks 9.11 vs 9.9. 9.9 is larger.", "9.9 is larger."),
    ("  <think>short</think>Answer <think> stays</think> in content", False, "short",
     "Answer <think> stays</think> in content"),
    ("Okay, compare digits.\n</think>\n\nThe answer is 9.9.", True, "Okay, compare digits.", "The answer is 9.9."),
    ("No thinking here, <think> mid-text is content.", False, None, "No thinking here, <think> mid-text is content."),
    ("<think>\ncut off by max_tokens while thinking", False, "cut off by max_tokens while thinking", ""),
    ("<think></think>Just the answer.", False, None, "Just the answer."),
    ("<thin", False, None, "<thin"),
    ("a < b </think", True, "a < b </think", ""),
]


@pytest.mark.parametrize("text,inside,reasoning,content", CASES)
def test_split_batch_and_every_streaming_split_agree(text, inside, reasoning, content):
    assert split_reasoning(text, THINK, inside) == (reasoning, content)
    rng = random.Random(1)
    splits = [[i] for i in range(1, len(text))] + [list(range(1, len(text)))]
    splits += [sorted(rng.sample(range(1, len(text)), k=min(4, len(text) - 1))) for _ in range(10)]
    for cuts in splits:
        s = ReasoningStreamSplitter(THINK, inside)
        r_parts, c_parts, prev = [], [], 0
        for cut in [*cuts, len(text)]:
            r, c = s.feed(text[prev:cut])
            r_parts.append(r)
            c_parts.append(c)
            prev = cut
        r, c = s.finish()
        r_parts.append(r)
        c_parts.append(c)
        assert ("".join(r_parts) or None, "".join(c_parts)) == (reasoning, content), cuts
        for part in c_parts:  # markers never leak into the content stream unless they are content
            assert "</think>" not in part or "</think>" in (content or "")


SPECS = validate_tools([{"type": "function", "function": {"name": "get_weather"}}])
QWEN_CALL = ('<think>\nThe user wants the weather; <tool_call> is how I call tools.\n</think>\n\n'
             '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')


def test_reasoning_is_never_parsed_for_tool_calls_and_streams_agree():
    r = parse_chat_output(QWEN_CALL, markers=THINK, tools=SPECS)
    assert r.reasoning == "The user wants the weather; <tool_call> is how I call tools."
    assert r.content is None and [c.name for c in r.tool_calls] == ["get_weather"]
    assert r.finish_reason("stop") == "tool_calls" and r.finish_reason("length") == "length"
    p = ChatOutputParser(markers=THINK, tools=SPECS)
    deltas = [p.feed(ch) for ch in QWEN_CALL] + [p.finish()]
    assert "".join(d.reasoning for d in deltas) == r.reasoning
    assert "".join(d.content for d in deltas) == ""
    assert [c.arguments for d in deltas for c in d.tool_calls] == ['{"city": "Paris"}']
    first_reasoning = next(i for i, d in enumerate(deltas) if d.reasoning)
    assert first_reasoning < 20  # reasoning streams as it comes, not at the end


def test_thinking_turned_off_drops_reasoning_and_plain_models_are_untouched():
    r = parse_chat_output("<think>secret</think>Answer", markers=THINK, include_reasoning=False)
    assert r.reasoning is None and r.content == "Answer"
    r = parse_chat_output("<think>literal</think>Answer", markers=None)
    assert r.reasoning is None and r.content == "<think>literal</think>Answer"
    assert parse_chat_output("").content is None
