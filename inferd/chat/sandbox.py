"""The Jinja sandbox chat templates render in, with bounds on what one render may cost.

A template can come from the request (`chat_template`), so it is hostile input. Jinja's own
sandbox stops attribute tricks and caps `range()` at 100,000 items, but not size or time:
`{{ "a " * 10000000 }}` allocates before any context check, a doubling `namespace` loop
grows exponentially, `9 ** 9 ** 9` never ends, a recursive macro hits Python's recursion
limit. Here every hook the sandbox offers checks the running render's limits:

- binary `*`, `**`, `%`, `+` on strings and lists: the result's size is computed first;
- calls (functions, methods, macros), filters, attribute and item reads: their arguments
  and results are size-checked, and the render's deadline and cancel flag are looked at;
- the rendered output is counted as it is produced and cut off past `max_chars`.

A broken limit raises `TemplateLimit` (a jinja2.TemplateError, so a 400); a cancelled render
raises `Cancelled`. Limits are per thread (`render_limits()`), since one compiled template
serves every request."""

from __future__ import annotations

import contextlib
import math
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from inferd.errors import Cancelled

DEFAULT_MAX_CHARS = 1 << 20
MAX_INT_ARG = 1_000_000          # widths and counts passed to string methods and filters
MAX_POW_BITS = 4096
_BIG_WIDTH = re.compile(r"\d{7,}")


class TemplateLimit(jinja2.TemplateError):
    """A chat template went past what one render may cost."""


@dataclass
class RenderLimits:
    max_chars: int = DEFAULT_MAX_CHARS
    deadline: float | None = None         # time.monotonic() value
    cancelled: threading.Event | None = None


_local = threading.local()


def current_limits() -> RenderLimits:
    return getattr(_local, "limits", None) or RenderLimits()


@contextlib.contextmanager
def render_limits(limits: RenderLimits) -> Iterator[RenderLimits]:
    prev = getattr(_local, "limits", None)
    _local.limits = limits
    try:
        yield limits
    finally:
        _local.limits = prev


def _tick(lim: RenderLimits) -> None:
    if lim.cancelled is not None and lim.cancelled.is_set():
        raise Cancelled("request cancelled while its chat template rendered")
    if lim.deadline is not None and time.monotonic() > lim.deadline:
        raise TemplateLimit("the chat template took too long to render")


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else 0


def _check_value(value: Any, lim: RenderLimits) -> Any:
    if _size(value) > lim.max_chars:
        raise TemplateLimit(f"the chat template built a value longer than {lim.max_chars} characters")
    return value


def _check_args(args: tuple, kwargs: dict, lim: RenderLimits, ints: bool) -> None:
    for a in (*args, *kwargs.values()):
        _check_value(a, lim)
        if ints and isinstance(a, int) and not isinstance(a, bool) and abs(a) > MAX_INT_ARG:
            raise TemplateLimit(f"the chat template passed {a} where at most {MAX_INT_ARG} is allowed")
        if isinstance(a, str) and _BIG_WIDTH.search(a) and "{" in a:
            raise TemplateLimit("the chat template used a format width that is too large")


class BoundedSandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def call_binop(self, context, operator: str, left: Any, right: Any) -> Any:
        lim = current_limits()
        _tick(lim)
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if _size(seq) and isinstance(n, int) and _size(seq) * max(n, 0) > lim.max_chars:
                    raise TemplateLimit(f"the chat template built a value longer than {lim.max_chars} characters")
        elif operator == "**":
            if isinstance(left, int) and isinstance(right, int) and right > 0 and \
                    right * math.log2(abs(left) + 1) > MAX_POW_BITS:
                raise TemplateLimit("the chat template computed a power that is too large")
        elif operator == "%":
            if isinstance(left, str) and _BIG_WIDTH.search(left):
                raise TemplateLimit("the chat template used a format width that is too large")
        elif operator == "+" and _size(left) + _size(right) > lim.max_chars:
            raise TemplateLimit(f"the chat template built a value longer than {lim.max_chars} characters")
        return _check_value(super().call_binop(context, operator, left, right), lim)

    def call(__self, __context, __obj, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 (jinja's signature)
        lim = current_limits()
        _tick(lim)
        bound_to = getattr(__obj, "__self__", None)
        if isinstance(bound_to, str) and "{" in bound_to and _BIG_WIDTH.search(bound_to):
            raise TemplateLimit("the chat template used a format width that is too large")
        _check_args(args, kwargs, lim, ints=isinstance(bound_to, (str, bytes, list)))
        return _check_value(super().call(__context, __obj, *args, **kwargs), lim)

    def getattr(self, obj: Any, attribute: str) -> Any:
        lim = current_limits()
        _tick(lim)
        return _check_value(super().getattr(obj, attribute), lim)

    def getitem(self, obj: Any, argument: Any) -> Any:
        lim = current_limits()
        _tick(lim)
        return _check_value(super().getitem(obj, argument), lim)


def _bounded_filter(fn):
    def run(*args: Any, **kwargs: Any) -> Any:
        lim = current_limits()
        _tick(lim)
        _check_args(args[1:] if args and isinstance(args[0], (jinja2.runtime.Context, jinja2.nodes.EvalContext,
                                                              jinja2.Environment)) else args, kwargs, lim, ints=True)
        return _check_value(fn(*args, **kwargs), lim)

    for attr in ("jinja_pass_arg",):  # keep @pass_context / @pass_eval_context / @pass_environment
        if hasattr(fn, attr):
            setattr(run, attr, getattr(fn, attr))
    run.__name__ = getattr(fn, "__name__", "filter")
    return run


def bounded_environment(**options: Any) -> BoundedSandbox:
    env = BoundedSandbox(**options)
    env.filters = {k: _bounded_filter(v) for k, v in env.filters.items()}
    return env


def render_bounded(template: jinja2.Template, variables: dict[str, Any]) -> str:
    """Render chunk by chunk, stopping once the output passes the thread's max_chars."""
    lim = current_limits()
    parts: list[str] = []
    total = 0
    for chunk in template.generate(**variables):
        total += len(chunk)
        if total > lim.max_chars:
            raise TemplateLimit(f"the rendered chat prompt is longer than {lim.max_chars} characters, more than "
                                "this model's context can hold")
        parts.append(chunk)
        _tick(lim)
    return "".join(parts)
