"""Speech verbs: transcription and translation for every face (/v1/audio/*, /ai/v1/transcribe).

A request's way: resolve the served name (unknown: 404, another kind: 400), refuse audio over
the byte budget (413) before touching it, take an admission slot that is held for the whole
transcription, hold the loaded model, check the options against the model (an English-only
model asked to translate: 400 naming the capability), decode the audio on a thread with the
duration budget enforced while decoding (413), cut it into windows (VAD pauses for long
audio) and submit them to the model's queue, which batches them with other requests'
windows. Results come back window by window, in order, so a stream can send each as it is
decoded; closing the stream early cancels the windows not yet decoded."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import numpy as np

from inferd.errors import InvalidInput, PayloadTooLarge
from inferd.kinds import TRANSCRIBER
from inferd.models import ModelKind, ModelSpec
from inferd.registry.registry import Registry
from inferd.speech_types import FALLBACK_TEMPERATURES, ChunkResult, DecodeOptions, Segment
from inferd.scheduling.admission import Admission
from inferd.service.core import Catalog
from inferd.service.handles import TranscriberHandle
from inferd.service.verb import Verb

TASKS = ("transcribe", "translate")
MAX_PROMPT_CHARS = 4000   # Whisper keeps the last 223 prompt tokens anyway


@dataclass
class SpeechLimits:
    max_audio_bytes: int = 25 * 1024 * 1024
    max_audio_seconds: float = 1800.0


@dataclass
class TranscribeRequest:
    model: str | None
    audio: bytes
    task: str = "transcribe"
    language: str | None = None           # None: detect
    prompt: str | None = None
    temperature: float | None = None      # None or 0: the fallback ladder from 0
    temperature_fallback: bool = True
    beam_size: int = 5
    timestamps: bool = False              # segment times are needed (srt, vtt, verbose_json)
    word_timestamps: bool = False

    def options(self) -> DecodeOptions:
        if self.task not in TASKS:
            raise InvalidInput(f"unknown task '{self.task}' (use transcribe or translate)", "task")
        t = self.temperature or 0.0
        if not 0.0 <= t <= 1.0:
            raise InvalidInput("temperature must be between 0 and 1", "temperature")
        if not 1 <= self.beam_size <= 10:
            raise InvalidInput("beam_size must be between 1 and 10", "beam_size")
        if self.prompt is not None and len(self.prompt) > MAX_PROMPT_CHARS:
            raise InvalidInput(f"prompt is longer than {MAX_PROMPT_CHARS} characters", "prompt")
        if not self.temperature_fallback:
            temps: tuple[float, ...] = (t,)
        else:
            temps = tuple(x for x in FALLBACK_TEMPERATURES if x >= t) or (t,)
            if temps[0] != t:
                temps = (t, *temps)
        return DecodeOptions(task=self.task, beam_size=self.beam_size, temperatures=temps,
                             initial_prompt=self.prompt or None, timestamps=self.timestamps or self.word_timestamps,
                             word_timestamps=self.word_timestamps)


@dataclass
class Transcription:
    model: str
    task: str
    language: str
    language_probability: float
    duration: float
    segments: list[Segment] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.segments).strip()

    @property
    def tokens(self) -> int:
        return sum(len(s.tokens) for s in self.segments)


class TranscriptionStream:
    """Segments of one running transcription, window by window. Iterate it; always `aclose()`
    it: that drops the windows not yet decoded and releases the model and the admission slot.
    `language`, `language_probability` and `duration` are known once the first window is in."""

    def __init__(self, spec: ModelSpec, task: str, stack: contextlib.AsyncExitStack):
        self.model, self.task = spec.name, task
        self.language = ""
        self.language_probability = 0.0
        self.duration = 0.0
        self.segments: list[Segment] = []
        self._futures: list[asyncio.Future] = []
        self._windows: AsyncIterator[ChunkResult] | None = None
        self._stack = stack
        self.closed = False
        self.large = False      # a long decode: its freed heap is handed back to the OS on close

    async def windows(self) -> AsyncIterator[list[Segment]]:
        """The segments of each window as it is decoded (a window without speech: [])."""
        assert self._windows is not None
        async for r in self._windows:
            if not self.language:
                self.language, self.language_probability = r.language, r.language_probability
            self.segments.extend(r.segments)
            yield r.segments

    def result(self) -> Transcription:
        return Transcription(self.model, self.task, self.language, self.language_probability, self.duration,
                             list(self.segments))

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        for f in self._futures:
            f.cancel()  # the queue drops these windows before their batch runs
        self._futures, self._windows = [], None   # the samples and windows go with them
        await self._stack.aclose()
        if self.large:
            from inferd.runtimes.speech.audio import release_memory

            await asyncio.to_thread(release_memory)


class SpeechService:
    def __init__(self, catalog: Catalog, registry: Registry, admission: Admission, limits: SpeechLimits):
        self.catalog, self.registry, self.admission, self.limits = catalog, registry, admission, limits
        self.verb = Verb(TRANSCRIBER, registry, admission)

    def spec(self, model: str | None) -> ModelSpec:
        return self.catalog.resolve(model, ModelKind.TRANSCRIBER)

    async def open(self, req: TranscribeRequest) -> TranscriptionStream:
        """Start a transcription; every request error is raised here, before a stream exists."""
        spec = self.spec(req.model)
        opts = req.options()
        if len(req.audio) > self.limits.max_audio_bytes:
            raise PayloadTooLarge(f"the audio file is {len(req.audio)} bytes; at most "
                                  f"{self.limits.max_audio_bytes} bytes per request")
        if not req.audio:
            raise InvalidInput("the audio file is empty", "file")
        from inferd.runtimes.speech.audio import container_of, decode

        container_of(req.audio)  # not an accepted container (a playlist, an SDP ...): 400 before a slot is taken
        return await self._start(spec, opts, req.language, large=len(req.audio) > 4 << 20,
                                 audio_at=lambda rate: decode(req.audio, rate, self.limits.max_audio_seconds))

    async def open_samples(self, req: TranscribeRequest, samples: np.ndarray, rate: int) -> TranscriptionStream:
        """open() for audio that is already samples (float32 mono at `rate`: a realtime session's
        turn): no container to decode, the same admission, model queue and batching."""
        spec = self.spec(req.model)
        opts = req.options()
        if samples.size == 0:
            raise InvalidInput("the audio is empty", "audio")
        if samples.shape[0] > self.limits.max_audio_seconds * rate:
            raise PayloadTooLarge(f"the audio is longer than {self.limits.max_audio_seconds:.0f} s, "
                                  "the most per request")
        from inferd.media.pcm import resample

        return await self._start(spec, opts, req.language, large=False,
                                 audio_at=lambda to: resample(samples, rate, to))

    async def _start(self, spec: ModelSpec, opts: DecodeOptions, language: str | None, large: bool,
                     audio_at: Callable[[int], np.ndarray]) -> TranscriptionStream:
        """Admission slot, model, option check, then `audio_at(model rate)` on a thread."""
        stack = contextlib.AsyncExitStack()
        try:
            handle = (await stack.enter_async_context(self.verb.use(spec.name))).handle
            rt = handle.runtime
            rt.check(opts, language)
            from inferd.runtimes.speech.chunking import plan

            audio = await asyncio.to_thread(audio_at, rt.rate)
            chunks = await asyncio.to_thread(plan, audio, rt.rate, language)
            stream = TranscriptionStream(spec, opts.task, stack)
            stream.duration = audio.shape[0] / rt.rate
            stream.large = stream.duration > 120 or large
            del audio
            stream._windows = self._run(handle, chunks, opts, stream, language is None and rt.multilingual)
            return stream
        except BaseException:
            await stack.aclose()
            raise

    async def _run(self, handle: TranscriberHandle, chunks, opts: DecodeOptions, stream: TranscriptionStream,
                   detect: bool) -> AsyncIterator[ChunkResult]:
        rest = chunks
        if detect and len(chunks) > 1:  # the first window names the language of all the others
            (fut,) = handle.scheduler.submit(chunks[:1], opts)
            stream._futures.append(fut)
            first = await fut
            yield first
            for c in chunks[1:]:
                c.language = first.language
            rest = chunks[1:]
        futs = handle.scheduler.submit(rest, opts)
        stream._futures.extend(futs)
        for fut in futs:
            yield await fut

    async def transcribe(self, req: TranscribeRequest) -> Transcription:
        stream = await self.open(req)
        try:
            async for _ in stream.windows():
                pass
            return stream.result()
        finally:
            await stream.aclose()
