"""Raw PCM for live audio (realtime sessions): PCM16 bytes -> float32 samples, and a streaming
resampler that keeps its filter state between chunks, so audio sent in 20 ms pieces
resamples exactly as the same audio sent at once would (no clicks at chunk edges).

Resampling is FFmpeg's (PyAV's AudioResampler, the same swresample the file decoder in
audio.py uses), so a live session and an uploaded WAV at the same rate give Whisper the
same samples."""

from __future__ import annotations

import numpy as np

from inferd.errors import InvalidInput


def pcm16_samples(data: bytes) -> np.ndarray:
    """int16 little-endian mono samples of raw PCM16 bytes (an odd length is not PCM16)."""
    if len(data) % 2:
        raise InvalidInput(f"PCM16 audio has 2 bytes per sample; {len(data)} bytes is not a whole number of "
                           "samples", "audio")
    return np.frombuffer(data, dtype="<i2")


def looks_like_container(data: bytes) -> str | None:
    """The name of a file format whose header `data` starts with (a whole WAV or Ogg file sent
    where raw PCM is expected), else None."""
    heads = {b"RIFF": "WAV", b"OggS": "Ogg", b"fLaC": "FLAC", b"ID3": "MP3", b"\x1aE\xdf\xa3": "WebM/Matroska"}
    for magic, name in heads.items():
        if data.startswith(magic):
            return name
    return None


class StreamResampler:
    """int16 mono at `src` Hz in, float32 mono in [-1, 1) at `dst` Hz out, chunk by chunk."""

    def __init__(self, src: int, dst: int):
        self.src, self.dst = src, dst
        self._av = None
        if src != dst:
            import av

            self._av = av
            self._resampler = av.AudioResampler(format="s16", layout="mono", rate=dst)

    def feed(self, samples: np.ndarray) -> np.ndarray:
        if samples.size == 0:
            return np.zeros(0, dtype=np.float32)
        if self._av is None:
            return samples.astype(np.float32) / 32768.0
        frame = self._av.AudioFrame.from_ndarray(np.ascontiguousarray(samples, dtype="<i2").reshape(1, -1),
                                                 format="s16", layout="mono")
        frame.sample_rate = self.src
        outs = [f.to_ndarray().reshape(-1) for f in self._resampler.resample(frame)]
        if not outs:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate(outs).astype(np.float32) / 32768.0


def resample(samples: np.ndarray, src: int, dst: int) -> np.ndarray:
    """float32 mono samples at `src` -> at `dst` (one shot, for a runtime whose rate differs)."""
    if src == dst:
        return samples
    import av

    r = av.AudioResampler(format="flt", layout="mono", rate=dst)
    frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(samples, dtype=np.float32).reshape(1, -1),
                                       format="flt", layout="mono")
    frame.sample_rate = src
    outs = [f.to_ndarray().reshape(-1) for f in (*r.resample(frame), *r.resample(None))]
    return np.concatenate(outs).astype(np.float32) if outs else np.zeros(0, dtype=np.float32)
