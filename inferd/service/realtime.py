"""Realtime transcription sessions: live PCM in, turns out, each turn transcribed through the
same speech service (admission, model queue, batching) as an uploaded file.

A session's way: the face configures it (model, language, prompt, turn detection) and feeds
it PCM16 chunks at 24 kHz; they are resampled to 16 kHz into the session's input buffer.
With turn detection on, the energy VAD (media/vad.py) announces where a turn
starts and ends; its end commits the turn. With it off, only the client's commit does. A
committed turn becomes an item and is transcribed as a task of the session; the segments of
each decoded window come back as deltas, then the whole transcript. Everything the session
has to say goes, in order, into its outbox, which the face drains onto the wire.

Bounds: sessions per server (`max_sessions`), audio per buffer (`max_buffer_seconds`: with
turn detection a longer turn is cut there, without it an append past it is refused), turns
waiting for the model per session (`max_pending_turns`: past it a turn fails at once) and
events waiting for a slow client (`max_outbox`: past it the session is closed). Closing a
session (the client went away) cancels its transcriptions, whose windows the model's queue
then drops, and frees its buffers."""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from inferd.errors import InferdError, InvalidInput, Overloaded, PayloadTooLarge
from inferd.media.pcm import StreamResampler, pcm16_samples
from inferd.media.vad import EnergyVad, TurnEnded, TurnStarted, VadConfig
from inferd.service.speech import SpeechService, TranscribeRequest

log = logging.getLogger("inferd.realtime")

INPUT_RATE = 24000      # the protocol's PCM16 rate
RATE = 16000            # the session's buffer: Whisper's rate (the speech service resamples for others)
MIN_COMMIT_MS = 100     # OpenAI's smallest committable buffer


class BufferEmpty(InvalidInput):
    """A commit of less than MIN_COMMIT_MS of audio."""


class BufferFull(PayloadTooLarge):
    """An append that would hold more than max_buffer_seconds of audio."""

    param = "audio"


@dataclass
class RealtimeLimits:
    max_sessions: int = 64
    max_buffer_seconds: float = 60.0
    max_pending_turns: int = 8
    max_outbox: int = 4096


@dataclass(frozen=True)
class SessionConfig:
    model: str | None = None          # served transcriber; None: the only one served
    language: str | None = None       # None: detect
    prompt: str | None = None
    vad: VadConfig | None = field(default_factory=VadConfig)   # None: commits only


# ---- what a session says (the face turns these into protocol events) ------------------------
@dataclass(frozen=True)
class SpeechStarted:
    item_id: str
    audio_start_ms: int


@dataclass(frozen=True)
class SpeechStopped:
    item_id: str
    audio_end_ms: int


@dataclass(frozen=True)
class Committed:
    item_id: str
    previous_item_id: str | None


@dataclass(frozen=True)
class Cleared:
    pass


@dataclass(frozen=True)
class TranscriptDelta:
    item_id: str
    text: str


@dataclass(frozen=True)
class TranscriptDone:
    item_id: str
    transcript: str
    seconds: float
    language: str


@dataclass(frozen=True)
class TranscriptFailed:
    item_id: str
    error: InferdError


Event = SpeechStarted | SpeechStopped | Committed | Cleared | TranscriptDelta | TranscriptDone | TranscriptFailed


def new_id(prefix: str) -> str:
    return f"{prefix}_{os.urandom(10).hex()}"


def _ms(sample: int) -> int:
    return sample * 1000 // RATE


class _Buffer:
    """The input audio buffer: samples from session sample `start` on, in appended pieces."""

    def __init__(self) -> None:
        self.start = 0
        self.parts: list[np.ndarray] = []
        self.size = 0

    @property
    def end(self) -> int:
        return self.start + self.size

    def append(self, x: np.ndarray) -> None:
        if x.size:
            self.parts.append(x)
            self.size += x.size

    def take(self, end: int) -> np.ndarray:
        """Samples [start, end), removed from the buffer (what follows stays)."""
        n = max(0, min(end, self.end) - self.start)
        flat = np.concatenate(self.parts) if self.parts else np.zeros(0, dtype=np.float32)
        self.parts = [flat[n:]] if flat.size > n else []
        self.start += n
        self.size -= n
        return flat[:n]

    def drop_before(self, pos: int) -> None:
        if pos > self.start:
            self.take(pos)

    def clear(self) -> None:
        self.start, self.parts, self.size = self.end, [], 0


@dataclass
class RealtimeStats:
    sessions_open: int = 0
    sessions_total: int = 0
    sessions_refused: int = 0
    turns: int = 0
    turns_cancelled: int = 0
    turns_failed: int = 0


class RealtimeSession:
    def __init__(self, service: RealtimeService):
        self.service, self.id = service, new_id("sess")
        self.config = SessionConfig()
        # Session events, and the face's own replies (posted dicts) in between: one writer, one order.
        self.outbox: asyncio.Queue[Event | dict[str, Any]] = asyncio.Queue()
        self.closed = False
        self.overflowed = False     # the client stopped reading: the face ends the session
        self._resampler = StreamResampler(INPUT_RATE, RATE)
        self._buf = _Buffer()
        self._max = int(service.limits.max_buffer_seconds * RATE)
        self._vad: EnergyVad | None = self._new_vad()
        self._turn_item: str | None = None     # announced by speech_started, not committed yet
        self._last_item: str | None = None
        self._tasks: set[asyncio.Task] = set()

    # ---- client commands (errors raise: the face answers them with an error event) ----------
    def configure(self, config: SessionConfig) -> None:
        if config.model is not None:
            self.service.speech.spec(config.model)   # unknown: ModelNotFound; another kind: 400
        vad_changed = config.vad != self.config.vad
        self.config = config
        if vad_changed:
            self._turn_item = None
            self._vad = self._new_vad()

    def append(self, pcm: bytes) -> None:
        x = self._resampler.feed(pcm16_samples(pcm))
        if x.size > self._max or (self._vad is None and self._buf.size + x.size > self._max):
            raise BufferFull(f"the input audio buffer holds at most {self.service.limits.max_buffer_seconds:g} s "
                             "of audio: commit or clear it (or turn on server_vad)")
        self._buf.append(x)
        if self._vad is None:
            return
        for ev in self._vad.feed(x):
            if isinstance(ev, TurnStarted):
                self._turn_item = new_id("item")
                self._put(SpeechStarted(self._turn_item, _ms(ev.start)))
                self._buf.drop_before(ev.start)
            elif isinstance(ev, TurnEnded):
                item = self._turn_item or new_id("item")
                self._put(SpeechStopped(item, _ms(ev.end)))
                self._commit(ev.end)
        self._buf.drop_before(self._vad.keep_from())   # idle audio no turn can reach any more

    def commit(self) -> None:
        if self._buf.size * 1000 < MIN_COMMIT_MS * RATE:
            raise BufferEmpty(f"the input audio buffer holds {self._buf.size * 1000 / RATE:.0f} ms of audio; "
                              f"a commit needs at least {MIN_COMMIT_MS} ms")
        end = self._buf.end
        self._commit(end)
        if self._vad is not None:
            self._vad.reset(end)

    def clear(self) -> None:
        self._buf.clear()
        self._turn_item = None
        if self._vad is not None:
            self._vad.reset(self._buf.end)
        self._put(Cleared())

    # ---- turns ----------------------------------------------------------------------------------
    def _commit(self, end: int) -> None:
        item, self._turn_item = self._turn_item or new_id("item"), None
        samples = self._buf.take(end)
        self._put(Committed(item, self._last_item))
        self._last_item = item
        self.service.stats.turns += 1
        if len(self._tasks) >= self.service.limits.max_pending_turns:
            self.service.stats.turns_failed += 1
            self._put(TranscriptFailed(item, Overloaded(
                f"{len(self._tasks)} turns of this session are still being transcribed; this one was dropped")))
            return
        task = asyncio.get_running_loop().create_task(self._transcribe(item, samples, self.config))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _transcribe(self, item: str, samples: np.ndarray, config: SessionConfig) -> None:
        req = TranscribeRequest(model=config.model, audio=b"", language=config.language, prompt=config.prompt)
        stream = None
        try:
            stream = await self.service.speech.open_samples(req, samples, RATE)
            del samples
            first = True
            async for segments in stream.windows():
                for s in segments:
                    text = s.text.lstrip() if first else s.text
                    if text:
                        self._put(TranscriptDelta(item, text))
                        first = False
            t = stream.result()
            self._put(TranscriptDone(item, t.text, round(t.duration, 3), t.language))
        except asyncio.CancelledError:
            self.service.stats.turns_cancelled += 1
            raise
        except InferdError as e:
            self.service.stats.turns_failed += 1
            self._put(TranscriptFailed(item, e))
        except Exception as e:  # noqa: BLE001 - the turn fails, the session goes on
            log.exception("realtime transcription failed")
            self.service.stats.turns_failed += 1
            self._put(TranscriptFailed(item, InferdError(f"transcription failed: {type(e).__name__}")))
        finally:
            if stream is not None:
                await stream.aclose()

    def _new_vad(self) -> EnergyVad | None:
        vad = self.config.vad
        return None if vad is None else EnergyVad(vad, RATE, self._max, origin=self._buf.end)

    def post(self, reply: dict[str, Any]) -> None:
        """Queue a reply of the face (an error, session.updated) behind the events before it."""
        self._put(reply)

    def _put(self, event: Event | dict[str, Any]) -> None:
        if self.outbox.qsize() >= self.service.limits.max_outbox:
            self.overflowed = True   # the client is not reading what it asked for
            return
        self.outbox.put_nowait(event)

    @property
    def pending_turns(self) -> int:
        return len(self._tasks)

    @property
    def buffered_ms(self) -> int:
        return _ms(self._buf.size)

    async def close(self) -> None:
        """Cancel every transcription still running and free the audio (idempotent)."""
        if self.closed:
            return
        self.closed = True
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._buf = _Buffer()
        self._vad = None
        self.service._release(self)


class RealtimeService:
    def __init__(self, speech: SpeechService, limits: RealtimeLimits):
        self.speech, self.limits = speech, limits
        self.stats = RealtimeStats()
        self.sessions: dict[str, RealtimeSession] = {}

    def open(self, config: SessionConfig | None = None) -> RealtimeSession:
        """A new session (Overloaded at max_sessions); `config`: its first settings."""
        if len(self.sessions) >= self.limits.max_sessions:
            self.stats.sessions_refused += 1
            raise Overloaded(f"{len(self.sessions)} realtime sessions are open, the most this server allows "
                             "(--realtime-max-sessions)", 1000)
        s = RealtimeSession(self)
        if config is not None:
            s.configure(replace(config))
        self.sessions[s.id] = s
        self.stats.sessions_open = len(self.sessions)
        self.stats.sessions_total += 1
        return s

    def _release(self, session: RealtimeSession) -> None:
        self.sessions.pop(session.id, None)
        self.stats.sessions_open = len(self.sessions)

    def gauges(self) -> dict[str, float]:
        st = self.stats
        return {"realtime_sessions_open": st.sessions_open, "realtime_sessions_total": st.sessions_total,
                "realtime_sessions_refused_total": st.sessions_refused, "realtime_turns_total": st.turns,
                "realtime_turns_cancelled_total": st.turns_cancelled, "realtime_turns_failed_total": st.turns_failed,
                "realtime_turns_pending": sum(s.pending_turns for s in self.sessions.values())}
