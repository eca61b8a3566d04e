"""Image headers and decoding with Pillow: JPEG, PNG, WebP, GIF (first frame), BMP.

`probe` reads only the header (format and size, no pixel data), so a request's pixel budget
is admitted before anything is decoded; `decode` then applies the EXIF orientation and
converts to RGB. Anything Pillow cannot read is the client's 400, never a 500."""

from __future__ import annotations

import io
from struct import error as struct_error
import warnings
from dataclasses import dataclass

import numpy as np

from inferd.errors import InvalidInput

FORMATS = frozenset({"JPEG", "PNG", "WEBP", "GIF", "BMP"})  # JPEG also opens MPO (multi-picture) files
BYTES_PER_PIXEL = 16  # the conservative decode cost the admission rules charge per source pixel


@dataclass(frozen=True)
class Header:
    format: str
    width: int
    height: int

    @property
    def pixels(self) -> int:
        return self.width * self.height


def _open(data: bytes, where: str):
    from PIL import Image, UnidentifiedImageError

    Image.MAX_IMAGE_PIXELS = None  # our own pixel budget applies (scheduling/media.py)
    Image.init()  # register every plugin, so `formats` below can name them all
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return Image.open(io.BytesIO(data), formats=sorted(FORMATS))
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, struct_error, IndexError, KeyError):
        raise InvalidInput(f"{where}: not a readable image (supported: JPEG, PNG, WebP, GIF, BMP)", where) from None


def probe(data: bytes, where: str) -> Header:
    if not data:
        raise InvalidInput(f"{where}: the image is empty", where)
    img = _open(data, where)
    w, h = img.size
    if w < 1 or h < 1:
        raise InvalidInput(f"{where}: the image has no pixels ({w}x{h})", where)
    return Header(str(img.format), int(w), int(h))


def decode(data: bytes, where: str) -> np.ndarray:
    """RGB uint8 array [height, width, 3], EXIF orientation applied (first frame of a GIF)."""
    from PIL import Image, ImageOps

    img = _open(data, where)
    try:
        img.seek(0)
        img.load()
        img = ImageOps.exif_transpose(img)
        if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
            # Transparent pixels over white, as a document viewer shows them (not black).
            rgba = img.convert("RGBA")
            bg = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
            img = Image.alpha_composite(bg, rgba)
        rgb = img.convert("RGB")
    except (OSError, ValueError, SyntaxError, EOFError, struct_error, IndexError, KeyError):
        raise InvalidInput(f"{where}: the image data is truncated or corrupt", where) from None
    return np.asarray(rgb, dtype=np.uint8)
