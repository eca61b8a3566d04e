"""llama-server's helper verbs on a generator: its properties (/props) and a chat template
applied without generating (/apply-template). Both hold the loaded model (llama-server has
its one model loaded), so the values are the ones requests get: the context per slot, the
slots, the template in force (manifest, GGUF or built-in), images or not."""

from __future__ import annotations

import time
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from inferd import __version__
from inferd.kinds import GENERATOR
from inferd.chat.sandbox import RenderLimits, render_limits
from inferd.chat.templates import render_chat
from inferd.errors import CapabilityMissing, InvalidInput
from inferd.service.generation import (CHARS_PER_TOKEN_CAP, MIN_RENDER_CHARS, RESERVED_TEMPLATE_KWARGS,
                                       TEMPLATE_SECONDS, GenerationService)
from inferd.service.prep import cancel_flag



def build_info() -> str:
    try:
        llama = metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        llama = "absent"
    return f"inferd {__version__} (llama-cpp-python {llama})"


@dataclass
class Props:
    model: str
    model_path: str
    n_ctx: int
    total_slots: int
    busy_slots: int
    chat_template: str
    vision: bool
    media_marker: str | None
    build_info: str
    lora: list[dict[str, Any]]


async def props(gen: GenerationService, model: str | None) -> Props:
    spec = gen.spec(model)
    async with gen.registry.use(spec.name, GENERATOR) as handle:
        rt, engine = handle.runtime, handle.scheduler
        path = getattr(getattr(rt, "model", None), "path", spec.path)
        return Props(model=spec.name, model_path=str(path or ""), n_ctx=rt.n_ctx_seq,
                     total_slots=len(engine.slots), busy_slots=engine.active, chat_template=rt.chat_template or "",
                     vision=rt.media_marker is not None, media_marker=rt.media_marker, build_info=build_info(),
                     lora=[{"id": a["id"], "scale": a["scale"]} for a in gen.lora.adapters_table(spec)])


async def apply_template(gen: GenerationService, model: str | None, messages: list[dict[str, Any]],
                         template_kwargs: dict[str, Any], tools: list[dict[str, Any]] | None,
                         add_generation_prompt: bool = True) -> str:
    """The prompt text the model's chat template makes of `messages` (what a chat request
    would tokenize), bounded like a request's rendering (size, deadline, client gone)."""
    if not messages:
        raise InvalidInput("'messages' must hold at least one message", "messages")
    bad = RESERVED_TEMPLATE_KWARGS & set(template_kwargs)
    if bad:
        raise InvalidInput(f"chat_template_kwargs may not set {sorted(bad)[0]!r}: the server sets it",
                           "chat_template_kwargs")
    spec = gen.spec(model)
    async with gen.registry.use(spec.name, GENERATOR) as handle:
        rt = handle.runtime
        if not rt.chat_template:
            raise CapabilityMissing(f"model '{spec.name}' has no chat template")
        template = rt.chat_template

        def render() -> str:
            limits = RenderLimits(max_chars=max(MIN_RENDER_CHARS, rt.n_ctx_seq * CHARS_PER_TOKEN_CAP),
                                  deadline=time.monotonic() + TEMPLATE_SECONDS, cancelled=cancel_flag())
            with render_limits(limits):
                return render_chat(template, messages, bos_token=rt.bos_text, eos_token=rt.eos_text,
                                   add_generation_prompt=add_generation_prompt, tools=tools, **template_kwargs)
        return await gen.prep.run(render)


__all__ = ["Props", "apply_template", "build_info", "props"]
