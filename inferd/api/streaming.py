"""Stream writers for generation: SSE (OpenAI and Antfly faces) and NDJSON (Ollama).

- The response always closes its GenerationStream when it ends, however it ends (done,
  error, client gone): that cancels an unfinished sequence, so no token is generated for a
  client that left, and releases the admission slot.
- A failure after the first byte cannot change the status any more; it becomes an error
  frame in the stream's own format, and the stream ends without its normal terminator.
- Non-streamed requests watch for the client leaving too (`cancel_on_disconnect`), and so
  do streamed ones until their stream opens: a client that leaves while queued for
  admission or while its prompt is prepared leaves the queue / stops the work at once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from inferd.api.errors import error_body
from inferd.errors import Cancelled, InferdError
from inferd.observability.context import current

log = logging.getLogger("inferd.api")

T = TypeVar("T")
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class ClosingStream(StreamingResponse):
    """A StreamingResponse that awaits `on_close` once the response is over, whether it
    finished, failed, or was cut off by a disconnect (even before the first chunk)."""

    def __init__(self, content: AsyncIterator[str] | AsyncIterator[bytes], on_close: Callable[[], Awaitable[None]], media_type: str,
                 headers: dict[str, str] | None = None):
        super().__init__(content, media_type=media_type, headers=headers)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with contextlib.suppress(Exception):
                await self.body_iterator.aclose()  # type: ignore[attr-defined]
            await self._on_close()


# Characters that Python's str.splitlines (and so httpx's iter_lines, which the ollama and
# other clients read streams with) takes for line breaks, although JSON leaves them raw.
# They only occur inside JSON strings, where their escapes mean the same.
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).translate(_LINE_BREAKS)


def _log_failure(e: BaseException) -> None:
    if not isinstance(e, InferdError):
        log.error("stream failed", exc_info=e)


KEEPALIVE_SECONDS = 5.0  # llama-server's --sse-ping-interval default is of this order


def is_output(frame: dict[str, Any]) -> bool:
    """Does a frame carry generated output? Not OpenAI's opening role chunk, nor prompt
    progress: until an output frame, a long prefill can leave the stream silent."""
    if "prompt_progress" in frame:
        return False
    choices = frame.get("choices")
    return not (isinstance(choices, list) and len(choices) == 1 and isinstance(choices[0], dict)
                and choices[0].get("delta") == {"role": "assistant", "content": ""})


async def with_keepalive(frames: AsyncIterator[dict[str, Any]], every: float | None
                         ) -> AsyncIterator[dict[str, Any] | None]:
    """`frames`, with a None each time `every` seconds pass without one before the first
    output frame (a long prefill, or a queue): the writer turns it into an SSE comment, so
    proxies and clients see a live connection. The pending frame is awaited again, never
    cancelled (cancelling would end the stream). From the first output on, frames pass
    straight through: the timed wait costs ~65 us a frame, and tokens keep a stream alive."""
    it = frames.__aiter__()
    nxt: asyncio.Future | None = None
    try:
        while every and every > 0:
            if nxt is None:
                nxt = asyncio.ensure_future(it.__anext__())
            done, _ = await asyncio.wait({nxt}, timeout=every)
            if not done:
                yield None
                continue
            try:
                frame = nxt.result()
            except StopAsyncIteration:
                return
            finally:
                nxt = None
            yield frame
            if is_output(frame):
                break
        async for frame in it:
            yield frame
    finally:
        if nxt is not None:
            nxt.cancel()


def sse_response(frames: AsyncIterator[dict[str, Any]], on_close: Callable[[], Awaitable[None]],
                 family: str = "openai", done: bool = True, ping: float | None = None) -> ClosingStream:
    """`data: {json}` per frame, then `data: [DONE]` (unless `done` is False: llama-server's
    own /completion and /infill streams end with a frame whose `stop` is true). `ping`:
    seconds of silence before the first output after which a `: keep-alive` comment line
    goes out (llama-server's sse_ping_interval). On failure: OpenAI and llamacpp families
    `data: {"error": {...}}`, Antfly `event: error` with a plain-text message; no [DONE]."""

    async def body() -> AsyncIterator[str]:
        try:
            async for frame in with_keepalive(frames, ping):
                if frame is None:
                    yield ": keep-alive\n\n"
                    continue
                yield f"data: {_dumps(frame)}\n\n"
        except Exception as e:
            _log_failure(e)
            _, err, _ = error_body(e, family)
            if family == "antfly":
                text = err.get("message", "generation failed").replace("\n", " ")
                yield f"event: error\ndata: {text}\n\n"
            else:
                yield f"data: {_dumps(err)}\n\n"
            return
        if done:
            yield "data: [DONE]\n\n"

    return ClosingStream(body(), on_close, "text/event-stream", SSE_HEADERS)


def ndjson_response(frames: AsyncIterator[dict[str, Any]], on_close: Callable[[], Awaitable[None]]) -> ClosingStream:
    """One JSON object per line (Ollama). On failure: a final `{"error": "..."}` line."""

    async def body() -> AsyncIterator[str]:
        try:
            async for frame in frames:
                yield _dumps(frame) + "\n"
        except Exception as e:
            _log_failure(e)
            _, err, _ = error_body(e, "ollama")
            yield _dumps(err) + "\n"

    return ClosingStream(body(), on_close, "application/x-ndjson")


async def cancel_on_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Await `work`, cancelling it if the client disconnects first (its generation stops at
    the next step instead of running to max_tokens for nobody).

    The work runs in the request's own task and the watcher cancels that task on a
    disconnect: one task per request instead of two plus an asyncio.wait (a measurable share
    of a small embedding request)."""
    me = asyncio.current_task()
    assert me is not None
    why: str | None = None  # who cancelled the work: the client leaving, or the operator

    def interrupt(reason: str) -> None:
        nonlocal why
        if why is None:
            why = reason
            me.cancel()

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        interrupt("client disconnected")

    info = current()
    if info is not None:  # the operator's Cancel (observability/active.py) while it waits or computes
        info.interrupt = lambda: interrupt("cancelled by the operator")
    watch = asyncio.ensure_future(disconnected())
    try:
        result = await work
    except asyncio.CancelledError:
        # Ours alone (no outside cancel pending as well): the client left, or the operator.
        if why is not None and me.uncancel() == 0:
            raise Cancelled(why) from None
        raise
    finally:
        watch.cancel()
        if info is not None:
            info.interrupt = None
    if why is not None:  # the work swallowed our cancel and finished anyway: take the request back
        me.uncancel()
    return result


async def generate_or_stream(request: Request, svc: Any, req: Any, stream: Callable[[Any], Any],
                             respond: Callable[[Any], Any]) -> Any:
    """The skeleton every generation route shares: a streamed request opens a generation
    (every request error is raised before the first byte) and hands it to `stream` (the
    face's SSE or NDJSON writer); otherwise the whole generation goes to `respond`. Either
    way a client that disconnects cancels the work."""
    if req.stream:
        return stream(await cancel_on_disconnect(request, svc.open_generation(req)))
    return respond(await cancel_on_disconnect(request, svc.generate(req)))
