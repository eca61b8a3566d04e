"""Ollama's Go chat templates translated to Jinja and rendered by inferd's chat template
engine (trim_blocks and lstrip_blocks on): the outputs are what Go's text/template makes of
the same template and conversation (worked out by hand from Go's rules: `{{-`/`-}}` trim
all adjacent whitespace, nothing else is trimmed, maps print as JSON for Ollama's types)."""

from __future__ import annotations

import pytest

from inferd.chat.templates import render_chat
from inferd.registry.pull.gotemplate import Unsupported, to_jinja

QWEN25 = '''{{- if .Messages }}
{{- if or .System .Tools }}<|im_start|>system
{{- if .System }}
{{ .System }}
{{- end }}
{{- if .Tools }}

# Tools

<tools>
{{- range .Tools }}
{"type": "function", "function": {{ .Function }}}
{{- end }}
</tools>
{{- end }}<|im_end|>
{{ end }}
{{- range $i, $_ := .Messages }}
{{- $last := eq (len (slice $.Messages $i)) 1 -}}
{{- if eq .Role "user" }}<|im_start|>user
{{ .Content }}<|im_end|>
{{ else if eq .Role "assistant" }}<|im_start|>assistant
{{ if .Content }}{{ .Content }}
{{- else if .ToolCalls }}<tool_call>
{{ range .ToolCalls }}{"name": "{{ .Function.Name }}", "arguments": {{ .Function.Arguments }}}
{{ end }}</tool_call>
{{- end }}{{ if not $last }}<|im_end|>
{{ end }}
{{- else if eq .Role "tool" }}<|im_start|>user
<tool_response>
{{ .Content }}
</tool_response><|im_end|>
{{ end }}
{{- if and (ne .Role "assistant") $last }}<|im_start|>assistant
{{ end }}
{{- end }}
{{- else }}
{{- if .System }}<|im_start|>system
{{ .System }}<|im_end|>
{{ end }}{{ if .Prompt }}<|im_start|>user
{{ .Prompt }}<|im_end|>
{{ end }}<|im_start|>assistant
{{ end }}{{ .Response }}{{ if .Response }}<|im_end|>{{ end }}'''

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def test_qwen25_template_with_tools_and_tool_calls():
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "content": "sunny", "tool_call_id": "c1"}]
    out = render_chat(to_jinja(QWEN25), msgs, tools=TOOLS)
    assert out == (
        "<|im_start|>system\nBe brief.\n\n# Tools\n\n<tools>\n"
        '{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}\n'
        "</tools><|im_end|>\n"
        "<|im_start|>user\nweather?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n")


def test_qwen25_template_plain_chat():
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "bye"}]
    assert render_chat(to_jinja(QWEN25), msgs) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n"
        "<|im_start|>user\nbye<|im_end|>\n<|im_start|>assistant\n")


def test_legacy_prompt_response_template_renders_each_turn():
    legacy = ("{{ if .System }}<|system|>\n{{ .System }}</s>\n{{ end }}{{ if .Prompt }}<|user|>\n{{ .Prompt }}</s>\n"
              "{{ end }}<|assistant|>\n{{ .Response }}</s>\n")
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]
    assert render_chat(to_jinja(legacy), msgs) == (
        "<|system|>\nS</s>\n<|user|>\na</s>\n<|assistant|>\nb</s>\n"   # turn 1, completed
        "<|user|>\nc</s>\n<|assistant|>\n")                             # turn 2 stops at .Response


@pytest.mark.parametrize("bad", ["{{ template \"x\" }}", "{{ range .Messages }}{{ index .Images 0 }}{{ end }}",
                                 "{{ if .System }}unclosed", "{{ .Unknown }}", "{{ end }}",
                                 "{{ $x := .System }}{{ $x }}"])
def test_what_cannot_be_translated_is_refused(bad):
    with pytest.raises(Unsupported):
        to_jinja(bad)


def test_text_that_looks_like_jinja_stays_text():
    out = render_chat(to_jinja("{{ range .Messages }}{% raw %}{% endraw %}{# é\n #} {{ .Content }}{{ end }}"),
                      [{"role": "user", "content": "x"}])
    assert out == "{% raw %}{% endraw %}{# é\n #} x"
