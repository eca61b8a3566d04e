"""Chat: turning messages into prompts and model output back into messages.

templates.py renders chat templates (GGUF metadata, manifest, request, or a built-in per
architecture); the other modules (tools, grammar, reasoning, ...) parse tool calls, compile
JSON schemas to GBNF and split reasoning. All pure Python: no native imports."""
