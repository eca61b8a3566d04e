"""Text to speech verbs (/v1/audio/speech): text in, the voice's audio out, sentence by sentence.

A request's way: resolve the served name (unknown: 404, another kind: 400), check the text,
voice and speed against the limits and the voice's catalog facts (400s, before anything is
loaded), take an admission slot held for the whole synthesis, hold the loaded voice, cut the
text into sentences and phonemise them on a thread, and submit them to the voice's queue,
which synthesises them in order, batched with other requests' sentences. Audio comes back
sentence by sentence, so a stream sends each as soon as it is synthesised; closing the
stream early drops the sentences not yet synthesised."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np

from inferd.errors import InvalidInput
from inferd.kinds.speaker import SPEAKER
from inferd.models import ModelKind, ModelSpec
from inferd.registry.registry import Registry
from inferd.runtimes.tts.types import OPENAI_VOICES
from inferd.scheduling.admission import Admission
from inferd.service.core import Catalog

MAX_INPUT_CHARS = 4096          # OpenAI's limit for `input`
MAX_INSTRUCTIONS_CHARS = 4096
MIN_SPEED, MAX_SPEED = 0.25, 4.0


@dataclass
class SpeakRequest:
    model: str | None
    input: str
    voice: str | None = None     # None: the model's first voice
    speed: float = 1.0           # 2.0 speaks twice as fast (Piper: length_scale / speed)
    instructions: str | None = None  # accepted; a Piper voice has no way to follow them

    def check(self, spec: ModelSpec) -> None:
        if not self.input or not self.input.strip():
            raise InvalidInput("'input' is empty: give the text to speak", "input")
        if len(self.input) > MAX_INPUT_CHARS:
            raise InvalidInput(f"'input' is {len(self.input)} characters; at most {MAX_INPUT_CHARS} per request",
                               "input")
        if not MIN_SPEED <= self.speed <= MAX_SPEED:
            raise InvalidInput(f"'speed' must be between {MIN_SPEED} and {MAX_SPEED}, not {self.speed}", "speed")
        if self.instructions is not None and len(self.instructions) > MAX_INSTRUCTIONS_CHARS:
            raise InvalidInput(f"'instructions' is longer than {MAX_INSTRUCTIONS_CHARS} characters", "instructions")
        own = [str(v) for v in spec.manifest.get("voices") or []]
        if self.voice is not None and self.voice not in own and self.voice not in OPENAI_VOICES:
            raise InvalidInput(f"unknown voice '{self.voice}' for model '{spec.name}' (use one of {', '.join(own)}, "
                               f"or an OpenAI voice name: {', '.join(OPENAI_VOICES)})", "voice")


@dataclass
class SpeechUsage:
    characters: int = 0      # characters of text spoken
    phoneme_ids: int = 0     # ids fed to the voice: its input tokens
    samples: int = 0

    def seconds(self, rate: int) -> float:
        return self.samples / rate if rate else 0.0


class SpeechStream:
    """The audio of one running synthesis, sentence by sentence (mono float32 at
    `sample_rate`). Iterate `sentences()`; always `aclose()` it: that drops the sentences not
    yet synthesised and releases the voice and the admission slot."""

    def __init__(self, spec: ModelSpec, sample_rate: int, stack: contextlib.AsyncExitStack):
        self.model, self.sample_rate = spec.name, sample_rate
        self.usage = SpeechUsage()
        self._futures: list[asyncio.Future] = []
        self._stack = stack
        self.closed = False

    async def sentences(self) -> AsyncIterator[np.ndarray]:
        for fut in self._futures:
            audio = await fut
            self.usage.samples += int(audio.shape[0])
            yield audio

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        for f in self._futures:
            f.cancel()  # the queue drops these sentences before their batch runs
        self._futures = []
        await self._stack.aclose()


class SynthesisService:
    def __init__(self, catalog: Catalog, registry: Registry, admission: Admission):
        self.catalog, self.registry, self.admission = catalog, registry, admission

    def spec(self, model: str | None) -> ModelSpec:
        return self.catalog.resolve(model, ModelKind.SPEAKER)

    def voices(self, spec: ModelSpec) -> list[str]:
        return [str(v) for v in spec.manifest.get("voices") or []]

    async def open(self, req: SpeakRequest) -> SpeechStream:
        """Start a synthesis; every request error is raised here, before a stream exists."""
        spec = self.spec(req.model)
        req.check(spec)
        stack = contextlib.AsyncExitStack()
        try:
            await stack.enter_async_context(self.admission.slot())
            handle = await stack.enter_async_context(self.registry.use(spec.name, SPEAKER))
            rt = handle.runtime
            items = await asyncio.to_thread(rt.prepare, req.input, req.voice, req.speed)
            if not items:
                raise InvalidInput("'input' has nothing to speak (no letters or digits espeak can read)", "input")
            stream = SpeechStream(spec, rt.sample_rate, stack)
            stream.usage.characters = sum(u.chars for u in items)
            stream.usage.phoneme_ids = sum(u.cost for u in items)
            stream._futures = handle.scheduler.submit(items)
            return stream
        except BaseException:
            await stack.aclose()
            raise

    async def speak(self, req: SpeakRequest) -> tuple[np.ndarray, SpeechStream]:
        """The whole audio of `req` (mono float32) and its (closed) stream, for its usage and rate."""
        stream = await self.open(req)
        try:
            parts = [a async for a in stream.sentences()]
            return (np.concatenate(parts) if parts else np.zeros(0, np.float32)), stream
        finally:
            await stream.aclose()
