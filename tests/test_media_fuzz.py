"""A bounded, deterministic fuzz run over the audio and image decoders (issue 32): inputs
made from the accepted containers' magic bytes and from real clips and images with bytes
flipped, cut or spliced. Every input decodes or is a domain error (400 InvalidInput, 413
PayloadTooLarge); nothing else escapes, nothing hangs (the run is bounded: 80 examples a decoder, a fixed seed)."""

from __future__ import annotations

import io

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st
from PIL import Image

from inferd.errors import InvalidInput, PayloadTooLarge
from inferd.media import images
from inferd.runtimes.speech import audio
from tests.conftest import FIXTURES

CLIPS = FIXTURES / "speech" / "clips"
# Short seeds keep each decode to milliseconds: the first ~6 KB of every clip.
AUDIO_SEEDS = [p.read_bytes()[:6_000] for p in sorted(CLIPS.iterdir()) if p.suffix != ".json"]
MAGICS = [b"RIFF\x24\x00\x00\x00WAVEfmt ", b"RF64\xff\xff\xff\xffWAVE", b"fLaC", b"OggS\x00\x02", b"ID3\x04\x00",
          b"\x1a\x45\xdf\xa3", b"\x00\x00\x00\x18ftypM4A ", b"\x00\x00\x00\x20ftypisom", b"\xff\xf1\x50\x80",
          b"\xff\xfb\x90\x64", b"ffconcat version 1.0\n", b"v=0\r\n", b"#EXTM3U\n"]


def _image_seeds() -> list[bytes]:
    out = []
    for fmt, mode, kw in [("PNG", "RGB", {}), ("JPEG", "RGB", {}), ("GIF", "P", {}), ("BMP", "RGB", {}),
                          ("WEBP", "RGB", {"lossless": True}), ("PNG", "RGBA", {})]:
        buf = io.BytesIO()
        Image.new(mode, (12, 9), 7).save(buf, fmt, **kw)
        out.append(buf.getvalue())
    return out


IMAGE_SEEDS = _image_seeds()
IMAGE_MAGICS = [b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff\xe0", b"GIF89a", b"RIFF\x00\x00\x00\x00WEBPVP8 ", b"BM",
                b"II*\x00", b"%PDF-1.4", b"<svg"]


@st.composite
def mutated(draw, seeds: list[bytes], magics: list[bytes]) -> bytes:
    how = draw(st.sampled_from(["magic+noise", "flip", "truncate", "splice"]))
    if how == "magic+noise":
        return draw(st.sampled_from(magics)) + draw(st.binary(max_size=600))
    data = bytearray(draw(st.sampled_from(seeds)))
    if how == "flip":
        for _ in range(draw(st.integers(1, 24))):
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(st.integers(0, 255))
    elif how == "truncate":
        data = data[: draw(st.integers(0, len(data)))]
    else:
        i = draw(st.integers(0, len(data)))
        data[i:i + draw(st.integers(0, 64))] = draw(st.binary(max_size=256))
    return bytes(data)


FUZZ = settings(max_examples=80, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FUZZ
@given(mutated(AUDIO_SEEDS, MAGICS))
def test_audio_decoder_gives_samples_or_a_domain_error(data):
    try:
        out = audio.decode(data, 16000, max_seconds=30)
    except (InvalidInput, PayloadTooLarge):
        return
    assert out.dtype == np.float32 and out.ndim == 1 and out.size > 0
    assert np.isfinite(out).all()


@FUZZ
@given(mutated(IMAGE_SEEDS, IMAGE_MAGICS))
def test_image_decoder_gives_pixels_or_a_domain_error(data):
    try:
        header = images.probe(data, "image")
        if header.pixels > 1 << 22:   # the admission rules refuse such an image before decoding
            return
        px = images.decode(data, "image")
    except (InvalidInput, PayloadTooLarge):
        return
    assert px.dtype == np.uint8 and px.ndim == 3 and px.shape[2] == 3
