"""Images for the reader and media tests: Pillow-rendered invoice lines (Pillow's bundled
font, so no system font is needed), data URIs, and files in the /v1/files on-disk layout."""

from __future__ import annotations

import base64
import io
import json
import shutil
import time
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

INVOICE = ["Invoice 2024-117", "ACME Corp. 42 Main Street", "Total due: $1,250.00", "Date: 2025-01-31"]


def render(lines: list[str], size: int = 32, pad: int = 20, fg=(0, 0, 0), bg=(255, 255, 255)) -> Image.Image:
    font = ImageFont.load_default(size=size)
    width = max(int(font.getlength(line)) for line in lines) + 2 * pad
    img = Image.new("RGB", (width, len(lines) * (size + 16) + 2 * pad), bg)
    draw = ImageDraw.Draw(img)
    for i, line in enumerate(lines):
        draw.text((pad, pad + i * (size + 16)), line, font=font, fill=fg)
    return img


def encode(img: Image.Image, fmt: str = "PNG", **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def data_uri(img: Image.Image | bytes, fmt: str = "PNG") -> str:
    raw = img if isinstance(img, bytes) else encode(img, fmt)
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(raw).decode()


def store_file(data_dir: Path, file_id: str, raw: bytes, filename: str = "page.png") -> None:
    """Write an uploaded file exactly as /v1/files stores it: bytes + <id>.json metadata."""
    root = Path(data_dir) / "files"
    root.mkdir(parents=True, exist_ok=True)
    (root / file_id).write_bytes(raw)
    (root / f"{file_id}.json").write_text(json.dumps({"id": file_id, "bytes": len(raw), "created_at": int(time.time()),
                                                      "filename": filename, "purpose": "vision",
                                                      "content_type": "image/png"}))


def reader_models(tmp_path: Path) -> Path:
    """A models dir holding the tiny TrOCR fixture as readers/trocr-tiny."""
    d = tmp_path / "models"
    shutil.copytree(Path(__file__).parent / "fixtures" / "vision" / "trocr-tiny", d / "readers" / "trocr-tiny")
    return d


def read_images(s, *urls: str, model: str = "trocr-tiny", timeout: float = 60):
    """POST /ai/v1/read of these image URLs (2 tokens each)."""
    import httpx

    return httpx.post(s.url + "/ai/v1/read", json={"model": model, "max_tokens": 2,
                                                   "images": [{"url": u} for u in urls]}, timeout=timeout)
