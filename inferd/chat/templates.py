"""Chat templates: the Jinja2 programs (from GGUF metadata, a manifest, or a request) that
turn a message list into the model's prompt text, rendered the way Hugging Face
transformers renders them (sandboxed, `tojson`, `raise_exception`, `strftime_now`).

Models that ship no template get a built-in one for their architecture where we know it
(Gemma); for any other, asking to chat is a clear 400, never a guessed format."""

from __future__ import annotations

import datetime as dt
import functools
import json
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes

from inferd.chat.sandbox import bounded_environment, render_bounded
from inferd.chat.tools import REASONING_FIELDS  # output-only: never replayed into a prompt
from inferd.errors import CapabilityMissing, InferdError, InvalidInput

# Gemma (1, 2, 3): a system message is folded into the first user turn; the assistant is "model".
GEMMA_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = '' -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '')"
    " + (message['content'] or '') | trim + '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)

BUILTIN_TEMPLATES: dict[str, str] = {"gemma": GEMMA_TEMPLATE, "gemma2": GEMMA_TEMPLATE, "gemma3": GEMMA_TEMPLATE}



def builtin_template(architecture: str) -> str | None:
    return BUILTIN_TEMPLATES.get(architecture)


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


def _clock() -> dt.datetime:
    """Now, for `strftime_now` and `date_string` (tests freeze it)."""
    return dt.datetime.now()


class _GenerationTag(jinja2.ext.Extension):
    """transformers' `{% generation %}...{% endgeneration %}` (it marks the assistant's tokens
    for training masks); rendering, it is just its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def _tojson(value: Any, indent: int | None = None, separators=None, sort_keys: bool = False,
            ensure_ascii: bool = False) -> str:
    return json.dumps(value, indent=indent, separators=separators, sort_keys=sort_keys, ensure_ascii=ensure_ascii)


MAX_TEMPLATE_CHARS = 1 << 18   # real chat templates are a few KB; this is a request field
MAX_CACHED_TEMPLATE_CHARS = 1 << 15


def compile_template(source: str) -> jinja2.Template:
    """The compiled template, in the bounded sandbox (chat/sandbox.py). Small ones are
    cached (models' own, repeated request ones); large ones are compiled each time, so 64
    cache entries cannot pin megabytes each."""
    if len(source) > MAX_TEMPLATE_CHARS:
        raise InvalidInput(f"chat_template is longer than {MAX_TEMPLATE_CHARS} characters", "chat_template")
    if len(source) > MAX_CACHED_TEMPLATE_CHARS:
        return _compile(source)
    return _compile_cached(source)


def _compile(source: str) -> jinja2.Template:
    env = bounded_environment(trim_blocks=True, lstrip_blocks=True,
                              extensions=["jinja2.ext.loopcontrols", _GenerationTag])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: _clock().strftime(fmt)
    env.globals["dict"] = dict  # transformers exposes it (some templates build dicts with it)
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise InvalidInput(f"chat template does not compile: {e.message} (line {e.lineno})", "chat_template") from e
    except RecursionError as e:  # "((((...": Jinja's parser recurses per level
        raise InvalidInput("chat template does not compile: nested too deeply", "chat_template") from e


_compile_cached = functools.lru_cache(maxsize=64)(_compile)


def _text_of(content: Any, index: int) -> str | None:
    """Message content as text: a string, or the text parts of a content-part list."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in ("text", "input_text"):
                texts.append(str(part.get("text", "")))
            elif kind in ("image_url", "input_image", "image", "input_audio", "media"):
                raise CapabilityMissing(f"messages[{index}] has a {kind} part; this model reads text only")
            else:
                raise InvalidInput(f"messages[{index}].content has an unknown part type {kind!r}",
                                   f"messages.{index}.content")
        return "\n".join(texts)
    raise InvalidInput(f"messages[{index}].content must be a string or a list of parts", f"messages.{index}.content")


def normalize_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Plain dicts a template can read: text content, no output-only fields, None dropped."""
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not m.get("role"):
            raise InvalidInput(f"messages[{i}] needs a 'role'", f"messages.{i}.role")
        msg = {k: v for k, v in m.items() if v is not None and k not in REASONING_FIELDS}
        msg["content"] = _text_of(m.get("content"), i) or ""
        out.append(msg)
    return out


def render_chat(template: str | None, messages: list[dict[str, Any]], *, bos_token: str = "",
                eos_token: str = "", add_generation_prompt: bool = True,
                tools: list[dict[str, Any]] | None = None, **kwargs: Any) -> str:
    """The prompt text for `messages`. `kwargs` become template variables (enable_thinking,
    and whatever else a request's chat_template_kwargs carry)."""
    if not template:
        raise CapabilityMissing("this model has no chat template; pass 'chat_template' in the request, set "
                                "\"chat_template\" in its model_manifest.json, or use the completions endpoint")
    if not messages:
        raise InvalidInput("'messages' must not be empty", "messages")
    variables = dict(kwargs)
    variables.update(messages=normalize_messages(messages), bos_token=bos_token, eos_token=eos_token,
                     add_generation_prompt=add_generation_prompt, tools=tools or None)
    # As transformers' apply_chat_template: `tools` and `documents` are always defined (None
    # when absent; templates test `tools is not none`). As llama.cpp: today's date for
    # Llama 3.x (`date_string`) and firefunction (`datetime`, `functions`), so no template
    # falls back to a date written into it or fails on a variable it expects.
    now = _clock()
    variables.setdefault("documents", None)
    variables.setdefault("date_string", now.strftime("%d %b %Y"))
    variables.setdefault("datetime", now.strftime("%b %d %Y %H:%M:%S GMT"))
    variables.setdefault("functions", json.dumps(tools or [], indent=2))
    try:
        return render_bounded(compile_template(template), variables)
    except InferdError:
        raise
    except jinja2.TemplateError as e:
        raise InvalidInput(f"chat template failed: {e.message or e}", "messages") from e
    except RecursionError as e:  # a macro calling itself without end
        raise InvalidInput("chat template failed: it recursed too deeply", "chat_template") from e
    except (OverflowError, MemoryError) as e:  # the sandbox's range() cap, an overlarge number
        raise InvalidInput(f"chat template failed: {e}", "chat_template") from e
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, ArithmeticError) as e:
        raise InvalidInput(f"chat template failed on these messages: {e}", "messages") from e
