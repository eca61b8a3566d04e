"""Where an image's bytes come from: a `data:` URI, an uploaded file id (`file-...`, from
/v1/files), or an http(s) URL (only with --allow-remote-media).

Parsing a reference is pure and cheap (`parse_ref`): it says how many bytes the source may
cost before anything is read, so the request's byte budget can be reserved first. Reading
is separate (`read_data`, `read_file`, `fetch_url`) and never returns more than the limit
it is given."""

from __future__ import annotations

import asyncio
import base64
import binascii
import ipaddress
import json
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from inferd.errors import InvalidInput, NotFound, PayloadTooLarge

FILE_ID = re.compile(r"^file-[A-Za-z0-9]+$")
_DATA = re.compile(r"^data:([\w.+-]+/[\w.+-]+)?((?:;[\w.+-]+=[\w.+-]+)*)(;base64)?,", re.ASCII)
MAX_REDIRECTS = 3


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
def _public(addr: str) -> bool:
    ip = ipaddress.ip_address(addr.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


async def check_host(url: str, allow_private: bool, where: str) -> str | None:
    """Refuse URLs whose host resolves to a loopback, private, link-local or otherwise
    non-global address (SSRF), unless private URLs are allowed. Returns the checked address
    to connect to (None when private URLs are allowed), so that a second DNS answer cannot
    swap in a private one between the check and the connection (DNS rebinding)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput(f"{where}: only http(s) URLs with a host can be fetched", where)
    if allow_private:
        return None
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(parts.hostname, parts.port or 0,
                                                             type=socket.SOCK_STREAM)
    except OSError:
        raise InvalidInput(f"{where}: cannot resolve host {parts.hostname!r}", where) from None
    for info in infos:
        if not _public(str(info[4][0])):
            raise InvalidInput(f"{where}: refusing to fetch {parts.hostname!r}: it resolves to a private or "
                               "loopback address (see --allow-private-media-urls)", where)
    if not infos:
        raise InvalidInput(f"{where}: cannot resolve host {parts.hostname!r}", where)
    return str(infos[0][4][0])


def pinned(url: str, addr: str) -> tuple[str, dict[str, str], dict[str, str]]:
    """(url with its host replaced by the checked address, headers, request extensions): the
    Host header and the TLS server name (certificate check) stay the original host's."""
    parts = urlsplit(url)
    host = f"[{addr}]" if ":" in addr else addr
    netloc = host + (f":{parts.port}" if parts.port else "")
    target = parts._replace(netloc=netloc).geturl()
    host_header = parts.hostname + (f":{parts.port}" if parts.port else "") if parts.hostname else netloc
    return target, {"Host": host_header}, {"sni_hostname": parts.hostname or addr}


async def fetch_url(url: str, limit: int, *, timeout: float, allow_private: bool, where: str) -> bytes:
    """GET `url` following at most 3 redirects (each hop's host checked), reading at most
    `limit` bytes (the caller reserved them). Every failure is the client's 400, or 413 for
    a body over the limit; never a 500."""
    import httpx

    try:
        async with httpx.AsyncClient(follow_redirects=False, timeout=timeout) as client:
            for _ in range(MAX_REDIRECTS + 1):
                addr = await check_host(url, allow_private, where)
                target, headers, ext = pinned(url, addr) if addr else (url, {}, {})
                async with client.stream("GET", target, headers={"Accept": "image/*", **headers},
                                         extensions=ext) as resp:
                    if resp.is_redirect:
                        url = urljoin(url, resp.headers.get("location", ""))
                        continue
                    if resp.status_code != 200:
                        raise InvalidInput(f"{where}: fetching the image failed with HTTP {resp.status_code}", where)
                    declared = resp.headers.get("content-length")
                    if declared and declared.isdigit() and int(declared) > limit:
                        raise PayloadTooLarge(f"{where}: the image ({declared} bytes) exceeds the request's "
                                              f"remaining media budget of {limit} bytes")
                    buf = bytearray()
                    async for chunk in resp.aiter_bytes():
                        buf += chunk
                        if len(buf) > limit:
                            raise PayloadTooLarge(f"{where}: the image exceeds the request's remaining media "
                                                  f"budget of {limit} bytes")
                    return bytes(buf)
            raise InvalidInput(f"{where}: more than {MAX_REDIRECTS} redirects", where)
    except httpx.TimeoutException:
        raise InvalidInput(f"{where}: fetching the image timed out after {timeout:g}s", where) from None
    except httpx.HTTPError as e:
        raise InvalidInput(f"{where}: fetching the image failed: {e}", where) from None
