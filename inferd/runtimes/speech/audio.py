"""Audio decoding through PyAV (FFmpeg) of untrusted uploads, down-mixed to mono and
resampled to the model's rate.

Only real audio/video containers are opened, chosen by their magic bytes from an allow-list
(WAV, MP3, OGG/Opus, FLAC, M4A/MP4/MOV, WebM/Matroska, AAC ADTS) and named to FFmpeg
explicitly, so it never probes its other demuxers: playlists and session descriptions
(ffconcat, HLS, DASH, SDP, RTSP, image2 patterns ...) would open files of the server or bind
its ports. The bytes are read from memory, never from a path, and the demuxer may open
nothing else: FFmpeg's protocol whitelist names no protocol, so a nested open (a MOV
reference, a dref) fails, and MOV's external references stay off besides. Anything
else is refused with one message that depends only on the upload's first bytes.

Budgets are enforced while decoding: a file whose header already declares more than
`max_seconds` is refused before any frame is decoded, and one that lies about its length is
refused as soon as the decoded samples pass the budget, so a small request cannot make the
server decode hours of audio."""

from __future__ import annotations

import ctypes
import ctypes.util
import io
import re

import numpy as np

from inferd.errors import InvalidInput, PayloadTooLarge

ACCEPTED = "WAV, MP3, OGG/Opus, FLAC, M4A/MP4, WebM/Matroska or AAC (ADTS)"
# What FFmpeg may open inside a container: nothing ("none" names no protocol; an empty
# string would be read as "no whitelist at all").
_CONTAINER_OPTIONS = {"protocol_whitelist": "none", "enable_drefs": "0", "use_absolute_path": "0"}
_MAX_CHANNELS = 1024


def container_of(data: bytes) -> str:
    """The FFmpeg demuxer for these bytes, from their magic bytes; InvalidInput for anything
    not on the allow-list (the message never depends on more than the first bytes)."""
    head = data[:16]
    fmt: str | None = None
    if head[:4] in (b"RIFF", b"RF64") and head[8:12] == b"WAVE":
        fmt = "wav"
    elif head.startswith(b"fLaC"):
        fmt = "flac"
    elif head.startswith(b"OggS"):
        fmt = "ogg"
    elif head.startswith(b"\x1a\x45\xdf\xa3"):
        fmt = "matroska"   # WebM too: one demuxer
    elif head[4:8] == b"ftyp":
        fmt = "mov"        # mov,mp4,m4a,3gp
    elif head.startswith(b"ID3"):
        fmt = "mp3"
    elif len(head) >= 2 and head[0] == 0xFF and (head[1] & 0xF6) == 0xF0:
        fmt = "aac"        # ADTS frame sync, layer bits 00
    elif len(head) >= 2 and head[0] == 0xFF and (head[1] & 0xE0) == 0xE0 and (head[1] & 0x06):
        fmt = "mp3"        # an MPEG audio frame header (MP3 without an ID3 tag)
    if fmt is None:
        raise InvalidInput(f"could not decode the audio file: not an accepted audio format (send {ACCEPTED})", "file")
    return fmt


def release_memory() -> None:
    """Hand freed heap pages back to the OS after a large decode (glibc keeps them otherwise:
    the process would stay at its peak size after one long upload)."""
    if _trim is not None:
        _trim(0)


def _load_trim():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


_trim = _load_trim()


def decode(data: bytes, rate: int = 16000, max_seconds: float | None = None) -> np.ndarray:
    """float32 mono samples in [-1, 1) at `rate`. Empty or undecodable input is InvalidInput;
    audio longer than `max_seconds` is PayloadTooLarge."""
    import av

    if not data:
        raise InvalidInput("the audio file is empty", "file")
    fmt = container_of(data)
    try:
        container = av.open(io.BytesIO(data), mode="r", format=fmt, metadata_errors="ignore",
                            container_options=dict(_CONTAINER_OPTIONS))
    except Exception as e:  # av.error.* for anything the demuxer cannot read
        raise InvalidInput(f"could not decode the audio file: {_reason(e)}", "file") from e
    limit = int(max_seconds * rate) if max_seconds else None
    with container:
        if not container.streams.audio:
            raise InvalidInput("the file has no audio stream", "file")
        stream = container.streams.audio[0]
        channels = stream.codec_context.channels or 0
        if channels > _MAX_CHANNELS:
            raise InvalidInput(f"the audio has {channels} channels; at most {_MAX_CHANNELS}", "file")
        declared = container.duration / 1_000_000 if container.duration else None  # microseconds
        if max_seconds and declared and declared > max_seconds + 1:
            raise PayloadTooLarge(f"the audio is {declared:.0f} s long; at most {max_seconds:.0f} s per request")
        # s16 then /32768, as faster-whisper's own decode_audio does: the same samples either way.
        resampler = av.AudioResampler(format="s16", layout="mono", rate=rate)
        parts: list[np.ndarray] = []
        total = 0
        try:
            for frame in container.decode(stream):
                if frame.layout.nb_channels > 2:
                    # FFmpeg's resampler refuses layouts it has no name for (32, 255 channels:
                    # "Invalid argument"): the channels are averaged here into a mono frame.
                    frame = _downmix(av, frame)
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
    samples = np.concatenate(parts).astype(np.float32) / 32768.0
    del parts
    if len(data) > 8 << 20 or samples.nbytes > 64 << 20:
        release_memory()
    return samples


_SCALE = {"u8": 128.0, "s16": 32768.0, "s32": 2147483648.0, "s64": 9223372036854775808.0}


def _downmix(av, frame):
    """A mono float frame with the mean of `frame`'s channels, same rate and time base."""
    a = frame.to_ndarray()
    name = frame.format.name.rstrip("p")
    n = frame.layout.nb_channels
    if not frame.format.is_planar:
        a = a.reshape(-1, n).T
    x = a.astype(np.float32)
    if name == "u8":
        x -= 128.0
    x = x.mean(axis=0, keepdims=True) / np.float32(_SCALE.get(name, 1.0))
    mono = av.AudioFrame.from_ndarray(np.ascontiguousarray(x, dtype=np.float32), format="flt", layout="mono")
    mono.sample_rate = frame.sample_rate
    mono.pts, mono.time_base = frame.pts, frame.time_base
    return mono


def _reason(e: Exception) -> str:
    """FFmpeg's message without its errno and the '<none>' name of an in-memory file."""
    text = str(e).strip() or type(e).__name__
    text = re.sub(r"^\[Errno -?\d+\]\s*", "", text)
    return re.sub(r":?\s*'?<none>'?:?", "", text).strip()[:200] or type(e).__name__
