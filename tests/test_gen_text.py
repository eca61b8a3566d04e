"""Pure pieces of generation: stop strings and UTF-8 across tokens, chat templates, wire
conversions. No model needed."""

import pytest

from inferd.api.ollama.gen import options_to_request
from inferd.api.openai.gen import completion_prompt
from inferd.chat.templates import GEMMA_TEMPLATE, builtin_template, render_chat
from inferd.errors import CapabilityMissing, InvalidInput
from inferd.scheduling.generation import common_prefix
from inferd.scheduling.textout import TextOut


def feed_all(out: TextOut, pieces: list[bytes]) -> str:
    text = "".join(out.feed(p) for p in pieces)
    return text + out.flush()


def test_stop_string_split_across_tokens_is_never_emitted():
    out = TextOut(["</end>"])
    emitted = [out.feed(p) for p in [b"hello <", b"/e", b"nd> more"]]
    assert "".join(emitted) == "hello " and out.stopped
    assert "<" not in "".join(emitted)  # the partial match was held back, then dropped
    assert out.flush() == "" and out.text == "hello "


def test_held_text_is_released_when_the_stop_does_not_come():
    out = TextOut(["STOP"])
    assert out.feed(b"ab S") == "ab "        # "S" could start STOP
    assert out.feed(b"T") == ""              # "ST" still could
    assert out.feed(b"x") == "STx"           # ruled out: released in order
    assert out.feed(b"yS") == "y"
    assert out.flush() == "S" and not out.stopped and out.text == "ab STxyS"


def test_earliest_of_several_stops_wins_and_no_stops_passes_through():
    out = TextOut(["bb", "a"])
    assert feed_all(out, [b"xxbbya"]) == "xx"
    assert feed_all(TextOut([]), [b"a", b"b"]) == "ab"


def test_utf8_split_across_tokens():
    data = "日本 ✓".encode()
    out = TextOut([])
    parts = [out.feed(data[i:i + 1]) for i in range(len(data))]
    assert "".join(parts) == "日本 ✓"
    assert parts[0] == "" and parts[2] == "日"  # no half characters
    bad = TextOut([])
    assert feed_all(bad, [b"ok\xff"]) == "ok\ufffd"  # invalid bytes become U+FFFD, never an exception


def test_common_prefix():
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([], [1]) == 0 and common_prefix([5, 6], [5, 6, 7]) == 2


def test_gemma_template_renders_turns_and_folds_system():
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi "},
            {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}]
    text = render_chat(builtin_template("gemma3"), msgs, bos_token="<bos>")
    assert text == ("<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
                    "<start_of_turn>model\nHello.<end_of_turn>\n"
                    "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n")
    assert builtin_template("gemma") == GEMMA_TEMPLATE and builtin_template("llama") is None
    no_prompt = render_chat(GEMMA_TEMPLATE, msgs[1:2], bos_token="<bos>", add_generation_prompt=False)
    assert no_prompt.endswith("<end_of_turn>\n")


def test_template_gets_content_parts_kwargs_and_tools_and_drops_reasoning():
    tpl = ("{% for m in messages %}[{{ m.role }}:{{ m.content }}{{ '|R' if m.reasoning_content }}]{% endfor %}"
           "{{ 'T' if enable_thinking }}{{ tools | tojson if tools }}")
    msgs = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": "x", "reasoning_content": "secret"}]
    out = render_chat(tpl, msgs, enable_thinking=True, tools=[{"name": "f"}])
    assert out == '[user:a\nb][assistant:x]T[{"name": "f"}]'


def test_template_errors_are_400():
    with pytest.raises(InvalidInput, match="does not compile"):
        render_chat("{% for %}", [{"role": "user", "content": "x"}])
    with pytest.raises(InvalidInput, match="roles must alternate"):
        render_chat("{{ raise_exception('roles must alternate') }}", [{"role": "user", "content": "x"}])
    with pytest.raises(CapabilityMissing, match="no chat template"):
        render_chat(None, [{"role": "user", "content": "x"}])
    with pytest.raises(CapabilityMissing, match="image_url"):
        render_chat(GEMMA_TEMPLATE, [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])
    with pytest.raises(InvalidInput, match="empty"):
        render_chat(GEMMA_TEMPLATE, [])


def test_completion_prompt_shapes():
    assert completion_prompt("x") == "x"
    assert completion_prompt(["a", "b"]) == "a\nb"  # joined by newlines, as GenAIServer does
    assert completion_prompt([1, 2]) == [1, 2] and completion_prompt([[3, 4]]) == [3, 4]
    with pytest.raises(InvalidInput):
        completion_prompt([[1], [2]])


def test_ollama_options():
    r = options_to_request({"num_predict": 5, "temperature": 0, "top_k": 3, "seed": 7, "stop": "x", "num_ctx": 64})
    sp = r["sampling"]
    assert (r["max_tokens"], r["stop"], r["num_ctx"], r["clamp_to_context"]) == (5, ["x"], 64, True)
    assert (sp.temperature, sp.top_k, sp.seed, sp.top_p, sp.repetition_penalty) == (0.0, 3, 7, 0.9, 1.1)
    assert options_to_request({"num_predict": -1})["max_tokens"] is None
    assert options_to_request(None)["sampling"].temperature == 0.8  # Ollama's default
    with pytest.raises(InvalidInput, match="options.top_k"):
        options_to_request({"top_k": "many"})
