"""Engine types of speech recognition (/v1/audio/*, /ai/v1/transcribe), shared by the Whisper
and CTC runtimes, the speech service and the faces: the shared base, not a runtime module, so
the API converters read them without importing a runtime.

A transcription is cut into chunks (at most 30 s of audio each, the window Whisper sees);
a model's queue decodes the chunks of many requests together, one batch at a time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

# OpenAI's ladder for temperature 0: raise the temperature while the output looks wrong
# (too repetitive or too unlikely), as whisper and faster-whisper do.
FALLBACK_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


@dataclass(frozen=True)
class DecodeOptions:
    """What a request asks of the decoder. Chunks batch together only when these are equal
    (language is per chunk, so requests in different languages still share a batch)."""

    task: str = "transcribe"                  # transcribe | translate
    beam_size: int = 5
    best_of: int = 5                          # candidates per sampled temperature
    temperatures: tuple[float, ...] = FALLBACK_TEMPERATURES
    initial_prompt: str | None = None
    timestamps: bool = False                  # decode timestamp tokens (segments inside a chunk)
    word_timestamps: bool = False
    compression_ratio_threshold: float | None = 2.4
    log_prob_threshold: float | None = -1.0
    no_speech_threshold: float | None = 0.6


@dataclass
class Chunk:
    """One window of a request's audio: samples at the model's rate, its place in the file."""

    audio: np.ndarray
    offset: float                             # seconds from the start of the file
    language: str | None                      # None: detect on this chunk


@dataclass
class Word:
    word: str
    start: float
    end: float
    probability: float


@dataclass
class Segment:
    start: float
    end: float
    text: str
    tokens: list[int]
    temperature: float = 0.0
    avg_logprob: float = 0.0
    compression_ratio: float = 0.0
    no_speech_prob: float = 0.0
    seek: int = 0
    words: list[Word] | None = None
    # GenAIServer's ASR confidence probe, where the decoder gives one: Whisper's mean token
    # probability, exp(avg_logprob). None: the runtime has no such measure (CTC here).
    confidence: float | None = None


@dataclass
class ChunkResult:
    """What one chunk decoded to. `segments` is empty when the chunk held no speech."""

    language: str
    language_probability: float
    segments: list[Segment] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)   # every generated token of the chunk, in order
