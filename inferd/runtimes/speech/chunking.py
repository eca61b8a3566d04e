"""Cutting a request's audio into the windows a model decodes: short audio is one window;
long audio is cut at the pauses Silero VAD (bundled with faster-whisper, run on onnxruntime)
finds, each window a contiguous slice of at most `window` seconds, so timestamps inside a
window plus its offset are times in the file, and silence between windows costs nothing."""

from __future__ import annotations

import numpy as np

from inferd.speech_types import Chunk


def plan(audio: np.ndarray, rate: int, language: str | None, window: float = 30.0) -> list[Chunk]:
    n = int(window * rate)
    if audio.shape[0] <= n:
        return [Chunk(audio, 0.0, language)]
    spans = speech_spans(audio, rate, max_speech=window - 2.0)
    if not spans:  # no speech anywhere: one window, so the language is still detected honestly
        return [Chunk(audio[:n], 0.0, language)]
    chunks, start, end = [], spans[0][0], spans[0][1]
    for s, e in spans[1:]:
        if e - start <= n:
            end = e
            continue
        chunks.append((start, end))
        start, end = s, e
    chunks.append((start, end))
    out = []
    for s, e in chunks:
        for a in range(s, e, n):  # a span VAD could not split is cut hard at the window
            out.append(Chunk(audio[a:min(e, a + n)], a / rate, language))
    return out


def speech_spans(audio: np.ndarray, rate: int, max_speech: float) -> list[tuple[int, int]]:
    from faster_whisper.vad import VadOptions, get_speech_timestamps

    opts = VadOptions(max_speech_duration_s=max_speech, min_silence_duration_ms=500, speech_pad_ms=200)
    return [(int(t["start"]), int(t["end"])) for t in get_speech_timestamps(audio, opts, sampling_rate=rate)]
