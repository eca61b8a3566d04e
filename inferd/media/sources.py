"""Where an image's bytes come from: a `data:` URI, an uploaded file id (`file-...`, from
/v1/files), or an http(s) URL (only with --allow-remote-media).

Parsing a reference is pure and cheap (`parse_ref`): it says how many bytes the source may
cost before anything is read, so the request's byte budget can be reserved first. Reading
is separate (`read_data`, `read_file`, `fetch_url`) and never returns more than the limit
it is given."""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from inferd.errors import InvalidInput, NotFound, PayloadTooLarge
from inferd.net import policy
from inferd.net.policy import FetchPolicy

FILE_ID = re.compile(r"^file-[A-Za-z0-9]+$")
_DATA = re.compile(r"^data:([\w.+-]+/[\w.+-]+)?((?:;[\w.+-]+=[\w.+-]+)*)(;base64)?,", re.ASCII)


@dataclass(frozen=True)
class MediaRef:
    """One media source of a request. `where` names it in errors (`images[2]`)."""

    kind: str                 # data | file | http
    where: str
    payload: str              # the base64 text, the file id, or the URL
    mime_type: str | None = None

    @property
    def inline_bytes(self) -> int:
        """Exact decoded size of a data URI (0 for other kinds): known before decoding."""
        if self.kind != "data":
            return 0
        n = len(self.payload.rstrip("="))
        return n * 3 // 4


def parse_ref(url: object, where: str) -> MediaRef:
    """A reference from a request field. Unknown schemes are a 400 naming the field."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidInput(f"{where}: an image url is required (data URI, file id or http(s) URL)", where)
    url = url.strip()
    if url.startswith("data:"):
        m = _DATA.match(url)
        if m is None or not m.group(3):
            raise InvalidInput(f"{where}: malformed data URI (expected data:<type>;base64,<data>)", where)
        return MediaRef("data", where, "".join(url[m.end():].split()), m.group(1))
    if url.startswith("file-"):
        return MediaRef("file", where, url)
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("http", "https"):
        return MediaRef("http", where, url)
    raise InvalidInput(f"{where}: unsupported image url scheme {scheme or url[:16]!r} "
                       "(use a data: URI, a file-... id from /v1/files, or http(s))", where)


def inline_ref(data: str, mime_type: str | None, where: str) -> MediaRef:
    """Antfly's {"type": "media", "data": base64, "mime_type"} part."""
    if not isinstance(data, str) or not data.strip():
        raise InvalidInput(f"{where}: media part needs base64 'data'", where)
    if data.startswith("data:"):
        return parse_ref(data, where)
    return MediaRef("data", where, "".join(data.split()), mime_type)


def read_data(ref: MediaRef) -> bytes:
    try:
        return base64.b64decode(ref.payload + "=" * (-len(ref.payload) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(f"{ref.where}: invalid base64 image data", ref.where) from None


def file_path(data_dir: Path, file_id: str, where: str) -> tuple[Path, int]:
    """The bytes of uploaded file `file_id` in the /v1/files layout (`<data_dir>/files/<id>`
    with `<id>.json` metadata), and its size. An id that is not `file-[A-Za-z0-9]+` is never
    looked up on disk (it could name a path), it is simply not found."""
    if not FILE_ID.match(file_id):
        raise NotFound(f"{where}: no file with id '{file_id}'")
    root = Path(data_dir).expanduser() / "files"
    blob, meta = root / file_id, root / f"{file_id}.json"
    try:
        info = json.loads(meta.read_text())
        size = blob.stat().st_size
    except (OSError, ValueError):
        raise NotFound(f"{where}: no file with id '{file_id}'") from None
    if not isinstance(info, dict) or info.get("id") != file_id:
        raise NotFound(f"{where}: no file with id '{file_id}'")
    return blob, size


def read_file(path: Path, limit: int, where: str) -> bytes:
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise PayloadTooLarge(f"{where}: the file is larger than the request's remaining media budget "
                              f"of {limit} bytes")
    return data


# ---- remote URLs ---------------------------------------------------------------------------------
async def fetch_url(url: str, limit: int, *, timeout: float, allow_private: bool, where: str) -> bytes:
    """GET an image URL under the outbound-fetch policy (inferd/net/policy.py): the host and
    every redirect's checked (no private addresses unless allowed), the connection pinned to
    the checked address, at most `limit` bytes (the caller reserved them), and `timeout`
    bounding the whole fetch. Every failure is the client's 400, or 413 over the limit."""
    return await policy.fetch(FetchPolicy(allow_private=allow_private), url, limit, deadline=timeout,
                              where=where, what="the image", accept="image/*")
