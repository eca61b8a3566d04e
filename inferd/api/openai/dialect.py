"""OpenAI's chat wire format is spoken by two faces: OpenAI's own (/v1) and Antfly's
(/ai/v1/generate, /ai/v1/chat/completions), which adds fields of its own. A Dialect says
which additions a response carries; the converters take one instead of a flag per field."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dialect:
    name: str                   # the error family of in-stream failures (api/errors.py)
    cached_prompt_tokens: bool  # usage.cached_prompt_tokens beside OpenAI's prompt_tokens_details
    speculation: bool           # the `speculation` report of the engine controls


OPENAI = Dialect("openai", cached_prompt_tokens=False, speculation=False)
ANTFLY = Dialect("antfly", cached_prompt_tokens=True, speculation=True)
