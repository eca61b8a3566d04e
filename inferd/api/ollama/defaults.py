"""A model's own defaults on the Ollama face, as Ollama applies its Modelfile: `options`
(PARAMETER lines, the params layer of a pulled model) under the request's options, and
the `system` prompt when the request brings none. Pure."""

from __future__ import annotations

from inferd.api.ollama.gen_schemas import ChatRequest, GenerateRequest, OllamaMessage
from inferd.models import ModelSpec


def apply(spec: ModelSpec | None, body: ChatRequest | GenerateRequest) -> None:
    if spec is None:
        return
    m = spec.manifest
    opts = m.get("options")
    if isinstance(opts, dict) and opts:
        body.options = {**opts, **(body.options or {})}
    system = m.get("system")
    if not isinstance(system, str) or not system:
        return
    if isinstance(body, ChatRequest):
        if body.messages and not any(x.role == "system" for x in body.messages):
            body.messages = [OllamaMessage(role="system", content=system), *body.messages]
    elif body.system is None and not body.raw:
        body.system = system
