"""Images in chat: which parts of a request's messages are images, their admission (the
media budgets of inferd/scheduling/media.py: bytes, headers, decoded pixels, before any model
work), and the message text the chat template sees (each image becomes the projector's media
marker, so llama.cpp's mtmd can put the image's embeddings there).

Parts recognised, on every face: OpenAI's {"type": "image_url", "image_url": {"url"}} (data
URI, `file-...` id from /v1/files, or http(s) when remote media is allowed) and
{"type": "file", "file": {"file_id"}}; Antfly's {"type": "media", "data", "mime_type"}; and
the {"type": "image", "data"} parts the Ollama converter makes of `images`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from inferd.errors import CapabilityMissing, InferdError, InvalidInput
from inferd.media.sources import MediaRef, inline_ref, parse_ref
from inferd.models import ModelSpec
from inferd.types import Image

IMAGE_PARTS = {"image_url", "input_image", "image", "media", "file"}


def _ref(part: dict[str, Any], where: str) -> MediaRef:
    kind = part.get("type")
    if kind in ("image_url", "input_image"):
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, dict) else url
        return parse_ref(url, where)
    if kind == "file":
        f = part.get("file")
        file_id = f.get("file_id") if isinstance(f, dict) else None
        if not isinstance(file_id, str):
            raise InvalidInput(f"{where}: a file part needs file.file_id (an id from /v1/files)", where)
        return parse_ref(file_id, where)
    if kind in ("image", "media"):
        mime = part.get("mime_type")
        if kind == "media" and isinstance(mime, str) and not mime.startswith("image/"):
            raise CapabilityMissing(f"{where}: {mime} media is not an image; chat takes images only")
        data = part.get("data")
        if not isinstance(data, str):
            raise InvalidInput(f"{where}: an image part needs base64 'data'", where)
        return inline_ref(data, mime if isinstance(mime, str) else None, where)
    raise InvalidInput(f"{where}: not an image part", where)


def image_refs(messages: Sequence[dict[str, Any]] | None) -> list[MediaRef]:
    """The images of a chat request, in prompt order (400 for a malformed part)."""
    refs: list[MediaRef] = []
    for i, m in enumerate(messages or ()):
        content = m.get("content") if isinstance(m, dict) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") in IMAGE_PARTS:
                refs.append(_ref(part, f"messages[{i}].content[{j}]"))
    return refs


def require_vision(spec: ModelSpec, refs: Sequence[MediaRef]) -> None:
    if refs and "vision" not in spec.capabilities:
        raise CapabilityMissing(f"model '{spec.name}' cannot read images: it has no vision projector "
                                "(an mmproj-*.gguf beside its weights, or --mmproj)")


def without_images(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with their image parts left out (openai-server, a model without a projector)."""
    out = []
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            m = {**m, "content": [p for p in content if not (isinstance(p, dict) and p.get("type") in IMAGE_PARTS)]}
        out.append(m)
    return out


def with_markers(messages: Sequence[dict[str, Any]], marker: str) -> list[dict[str, Any]]:
    """The messages with each image part replaced by a text part holding the media marker."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            parts = [{"type": "text", "text": marker} if isinstance(p, dict) and p.get("type") in IMAGE_PARTS
                     else p for p in content]
            m = {**m, "content": parts}
        out.append(m)
    return out


def to_images(decoded: Sequence[Any]) -> list[Image]:
    """Decoded RGB arrays (H x W x 3, uint8) as the projector takes them; a per-image error
    (a corrupt body behind a valid header) fails the request with that error."""
    out = []
    for d in decoded:
        if isinstance(d, InferdError):
            raise d
        arr = np.ascontiguousarray(d, dtype=np.uint8)
        if arr.ndim != 3 or arr.shape[2] != 3:
            raise InvalidInput("an image did not decode to RGB")
        out.append(Image(arr.tobytes(), int(arr.shape[1]), int(arr.shape[0])))
    return out
