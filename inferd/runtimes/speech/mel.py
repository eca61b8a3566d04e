"""Whisper's log-mel features in numpy, as transformers' WhisperFeatureExtractor computes them
(its numpy path: Slaney mel filters, a periodic Hann window, centred STFT with reflect
padding, power spectrum, log10 clamped to 8 below the window's maximum, then (x + 4) / 4).

The audio is zero-padded to the full window (30 s) before the STFT, as the extractor pads
with padding="max_length": the maximum the clamp is taken from, and the frames near the end
of the speech, depend on that padding."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above."""
    f = np.asarray(f, dtype=np.float64)
    mel = 3.0 * f / 200.0
    logstep = 27.0 / np.log(6.4)
    return np.where(f >= 1000.0, 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) * logstep, mel)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    logstep = np.log(6.4) / 27.0
    return np.where(m >= 15.0, 1000.0 * np.exp(logstep * (m - 15.0)), 200.0 * m / 3.0)


def mel_filters(rate: int, n_fft: int, n_mels: int) -> np.ndarray:
    """[n_fft // 2 + 1, n_mels] triangular filters, Slaney-normalised (transformers'
    mel_filter_bank(norm="slaney", mel_scale="slaney"), 0 Hz to rate / 2)."""
    bins = n_fft // 2 + 1
    mels = np.linspace(_hz_to_mel(np.array(0.0)), _hz_to_mel(np.array(rate / 2)), n_mels + 2)
    edges = _mel_to_hz(mels)
    fft_freqs = np.linspace(0, rate // 2, bins)
    diff = np.diff(edges)
    slopes = edges[None, :] - fft_freqs[:, None]
    down = -slopes[:, :-2] / diff[:-1]
    up = slopes[:, 2:] / diff[1:]
    filters = np.maximum(0.0, np.minimum(down, up))
    return filters * (2.0 / (edges[2:n_mels + 2] - edges[:n_mels]))[None, :]


@dataclass(frozen=True)
class LogMel:
    rate: int = 16000
    n_fft: int = 400
    hop: int = 160
    n_mels: int = 80
    n_samples: int = 480000     # the window, in samples (30 s)

    @classmethod
    def from_config(cls, pre: dict[str, Any]) -> "LogMel":
        rate = int(pre.get("sampling_rate", 16000))
        return cls(rate=rate, n_fft=int(pre.get("n_fft", 400)), hop=int(pre.get("hop_length", 160)),
                   n_mels=int(pre.get("feature_size", 80)),
                   n_samples=int(pre.get("n_samples") or int(pre.get("chunk_length", 30)) * rate))

    @property
    def frames(self) -> int:
        """Frames of a full window (3000: the encoder's input length)."""
        return self.n_samples // self.hop

    @cached_property
    def _filters(self) -> np.ndarray:
        return mel_filters(self.rate, self.n_fft, self.n_mels)

    @cached_property
    def _window(self) -> np.ndarray:
        n = np.arange(self.n_fft)
        return 0.5 - 0.5 * np.cos(2 * np.pi * n / self.n_fft)  # periodic Hann

    def __call__(self, audio: np.ndarray) -> np.ndarray:
        """[n_mels, frames] float32 for one window of audio (longer audio is cut to the window)."""
        x = np.zeros(self.n_samples, dtype=np.float64)
        a = np.asarray(audio, dtype=np.float64)[: self.n_samples]
        x[: a.shape[0]] = a
        half = self.n_fft // 2
        padded = np.pad(x, half, mode="reflect")
        frames = np.lib.stride_tricks.sliding_window_view(padded, self.n_fft)[:: self.hop]
        spec = np.abs(np.fft.rfft(frames * self._window, n=self.n_fft, axis=-1)) ** 2
        mel = (spec[:-1] @ self._filters).T  # the last frame is dropped, as the extractor does
        log = np.log10(np.maximum(mel, 1e-10))
        log = np.maximum(log, log.max() - 8.0)
        return ((log + 4.0) / 4.0).astype(np.float32)

    def content_frames(self, samples: int) -> int:
        """Frames that hold the audio (not the padding) of a window of `samples` samples."""
        return max(1, min(self.frames, -(-samples // self.hop)))
