"""Audio encoding for text to speech: mono float samples in, the bytes of an audio file out,
whole or chunk by chunk as sentences are synthesised. Pure: no model, no request.

mp3 (LAME), opus (Ogg), aac (ADTS), flac through PyAV (FFmpeg); wav and pcm written here.
mp3, aac, flac and wav keep the voice's own sample rate; opus is resampled to 24 kHz (Opus
runs at 8, 12, 16, 24 or 48 kHz); pcm is raw signed 16-bit little-endian mono at 24 kHz,
what OpenAI's `pcm` is, so a client that plays OpenAI's pcm plays ours.

A streamed wav's header cannot know the length yet: its RIFF and data sizes are 0xFFFFFFFF
(read as "to the end of the stream" by FFmpeg, browsers and most players). A streamed
container is written to a sink that cannot seek, so the muxers write nothing they would
have to come back to (mp3's Xing header, flac's final STREAMINFO totals)."""

from __future__ import annotations

import io
import struct
from fractions import Fraction
from typing import Any

import numpy as np

FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
MEDIA_TYPES = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac", "flac": "audio/flac",
               "wav": "audio/wav", "pcm": "audio/pcm"}
PCM_RATE = 24000
OPUS_RATE = 24000
# format -> (FFmpeg muxer, encoder, bit rate)
_AV = {"mp3": ("mp3", "libmp3lame", 64_000), "opus": ("ogg", "libopus", 32_000), "aac": ("adts", "aac", 64_000),
       "flac": ("flac", "flac", 0)}


def output_rate(fmt: str, rate: int) -> int:
    """The sample rate a file of `fmt` carries for a voice of `rate` Hz."""
    return PCM_RATE if fmt == "pcm" else OPUS_RATE if fmt == "opus" else rate


def to_s16(samples: np.ndarray) -> np.ndarray:
    return (np.clip(samples, -1.0, 1.0) * 32767.0).astype("<i2")


def wav_header(rate: int, n_samples: int | None) -> bytes:
    """A 44-byte PCM s16 mono WAV header; None: length unknown (a stream)."""
    data = 0xFFFFFFFF if n_samples is None else 2 * n_samples
    riff = 0xFFFFFFFF if n_samples is None else 36 + data
    return (b"RIFF" + struct.pack("<I", riff) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate, 2 * rate, 2, 16)
            + b"data" + struct.pack("<I", data))


class _Sink:
    """A write-only file for PyAV: what the muxer wrote since the last take()."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, b: Any) -> int:
        self.parts.append(bytes(b))
        return len(b)

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        out = b"".join(self.parts)
        self.parts.clear()
        return out


class Encoder:
    """Feed float samples (mono, at `rate`) as they come; each call returns the bytes that are
    ready. `streaming` False: the whole file is returned by finish() (a seekable file, so
    headers carry the totals)."""

    def __init__(self, fmt: str, rate: int, streaming: bool = True):
        if fmt not in FORMATS:
            raise ValueError(f"unknown audio format {fmt!r}")
        self.fmt, self.rate, self.streaming = fmt, rate, streaming
        self.out_rate = output_rate(fmt, rate)
        self.samples = 0
        self._held: list[np.ndarray] = []   # wav, not streamed: the header needs the total first
        self._resampler: Any = None
        self._container: Any = None
        if fmt == "pcm" and self.out_rate != rate:
            self._resampler = _resampler(self.out_rate)
        elif fmt in _AV:
            import av

            muxer, codec, bit_rate = _AV[fmt]
            self._file: Any = _Sink() if streaming else io.BytesIO()
            self._container = av.open(self._file, mode="w", format=muxer)
            self._stream = self._container.add_stream(codec, rate=self.out_rate)
            self._stream.codec_context.layout = "mono"
            if bit_rate:
                self._stream.codec_context.bit_rate = bit_rate
        self._started = False

    def feed(self, samples: np.ndarray) -> bytes:
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        first = not self._started
        self._started = True
        if self.fmt == "wav":
            if not self.streaming:
                self._held.append(samples)
                return b""
            return (wav_header(self.rate, None) if first else b"") + to_s16(samples).tobytes()
        if self.fmt == "pcm":
            if self._resampler is None:
                return to_s16(samples).tobytes()
            return b"".join(_s16_bytes(f) for f in self._resampler.resample(self._frame(samples)))
        if samples.size:
            for packet in self._stream.encode(self._frame(samples)):
                self._container.mux(packet)
        return self._take()

    def finish(self) -> bytes:
        if self.fmt == "wav":
            if self.streaming:
                return b"" if self._started else wav_header(self.rate, None)
            pcm = to_s16(np.concatenate(self._held)) if self._held else np.zeros(0, "<i2")
            return wav_header(self.rate, pcm.size) + pcm.tobytes()
        if self.fmt == "pcm":
            if self._resampler is None:
                return b""
            return b"".join(_s16_bytes(f) for f in self._resampler.resample(None))
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        if not self.streaming:
            return self._file.getvalue()
        return self._file.take()

    def close(self) -> None:
        """Free the encoder of a stream that ended early (finish() does it otherwise)."""
        if self._container is not None:
            try:
                self._container.close()
            except Exception:  # noqa: BLE001 - an encoder cut off mid-stream may refuse to finish cleanly
                pass
            self._container = None

    def _take(self) -> bytes:
        return self._file.take() if self.streaming else b""

    def _frame(self, samples: np.ndarray) -> Any:
        import av

        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="flt", layout="mono")
        frame.sample_rate = self.rate
        frame.pts = self.samples
        frame.time_base = Fraction(1, self.rate)
        self.samples += samples.size
        return frame


def _resampler(rate: int) -> Any:
    import av

    return av.AudioResampler(format="s16", layout="mono", rate=rate)


def _s16_bytes(frame: Any) -> bytes:
    return frame.to_ndarray().astype("<i2").reshape(-1).tobytes()


def encode(samples: np.ndarray, rate: int, fmt: str) -> bytes:
    """A whole file of `fmt` holding `samples` (mono float at `rate`)."""
    enc = Encoder(fmt, rate, streaming=False)
    return enc.feed(samples) + enc.finish()
