"""Model folders for the chat-feature tests (tools, structured output, reasoning, LoRA): the
tiny GGUF fixture laid out as `<models_dir>/generators/<name>/` with a manifest, so the
Hermes tool prompt fits (the fixture was trained on 256 positions; a random model does not
care, and the grammar is what is under test) and LoRA adapters can sit in `loras/`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "gguf"
TINY, LORA = FIXTURES / "tiny-llama.gguf", FIXTURES / "tiny-lora.gguf"
HI = [{"role": "user", "content": "hello world"}]

# A ChatML template that can think, Qwen3 style: reasoning in <think>...</think>; the
# generation prompt opens the block when thinking is on and closes an empty one when it is off.
THINK_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking %}<think>\n"
    "{% elif enable_thinking is defined %}<think>\n\n</think>\n\n{% endif %}{% endif %}")


def generator_dir(models_dir: Path, name: str, *, n_ctx: int = 4096, chat_template: str | None = None,
                  loras: dict[str, str] | None = None) -> Path:
    """generators/<name>/ with the tiny model. `loras`: adapter name -> "file" (loras/<name>.gguf)
    or "folder" (loras/<name>/adapter.gguf), each a copy of the fixture LoRA."""
    d = models_dir / "generators" / name
    d.mkdir(parents=True)
    shutil.copy(TINY, d / "model.gguf")
    manifest: dict = {"n_ctx": n_ctx}
    if chat_template:
        manifest["chat_template"] = chat_template
    (d / "model_manifest.json").write_text(json.dumps(manifest))
    for adapter, layout in (loras or {}).items():
        (d / "loras").mkdir(exist_ok=True)
        if layout == "folder":
            (d / "loras" / adapter).mkdir()
            shutil.copy(LORA, d / "loras" / adapter / "adapter.gguf")
        else:
            shutil.copy(LORA, d / "loras" / f"{adapter}.gguf")
    return d
