"""Audio decoding through PyAV (FFmpeg): WAV, MP3, FLAC, M4A/AAC, OGG/Opus, WebM and whatever
else FFmpeg reads, down-mixed to mono and resampled to the model's rate.

Budgets are enforced while decoding: a file whose header already declares more than
`max_seconds` is refused before any frame is decoded, and one that lies about its length is
refused as soon as the decoded samples pass the budget, so a small request cannot make the
server decode hours of audio."""

from __future__ import annotations

import io
import re

import numpy as np

from inferd.errors import InvalidInput, PayloadTooLarge


def decode(data: bytes, rate: int = 16000, max_seconds: float | None = None) -> np.ndarray:
    """float32 mono samples in [-1, 1) at `rate`. Empty or undecodable input is InvalidInput;
    audio longer than `max_seconds` is PayloadTooLarge."""
    import av

    if not data:
        raise InvalidInput("the audio file is empty", "file")
    try:
        container = av.open(io.BytesIO(data), mode="r", metadata_errors="ignore")
    except Exception as e:  # av.error.* for anything FFmpeg cannot probe
        raise InvalidInput(f"could not decode the audio file: {_reason(e)}", "file") from e
    limit = int(max_seconds * rate) if max_seconds else None
    with container:
        if not container.streams.audio:
            raise InvalidInput("the file has no audio stream", "file")
        stream = container.streams.audio[0]
        declared = container.duration / 1_000_000 if container.duration else None  # microseconds
        if max_seconds and declared and declared > max_seconds + 1:
            raise PayloadTooLarge(f"the audio is {declared:.0f} s long; at most {max_seconds:.0f} s per request")
        # s16 then /32768, as faster-whisper's own decode_audio does: the same samples either way.
        resampler = av.AudioResampler(format="s16", layout="mono", rate=rate)
        parts: list[np.ndarray] = []
        total = 0
        try:
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    a = out.to_ndarray().reshape(-1)
                    parts.append(a)
                    total += a.size
                if limit is not None and total > limit:
                    raise PayloadTooLarge(f"the audio is longer than {max_seconds:.0f} s, the most per request")
            for out in resampler.resample(None):
                parts.append(out.to_ndarray().reshape(-1))
                total += parts[-1].size
        except PayloadTooLarge:
            raise
        except Exception as e:
            if total == 0:
                raise InvalidInput(f"could not decode the audio file: {_reason(e)}", "file") from e
            # A truncated file: keep what decoded, as ffmpeg itself does.
    if total == 0:
        raise InvalidInput("the audio file holds no samples (empty audio)", "file")
    if limit is not None and total > limit:
        raise PayloadTooLarge(f"the audio is longer than {max_seconds:.0f} s, the most per request")
    return (np.concatenate(parts).astype(np.float32) / 32768.0)


def _reason(e: Exception) -> str:
    """FFmpeg's message without its errno and the '<none>' name of an in-memory file."""
    text = str(e).strip() or type(e).__name__
    text = re.sub(r"^\[Errno -?\d+\]\s*", "", text)
    return re.sub(r":?\s*'?<none>'?:?", "", text).strip()[:200] or type(e).__name__
