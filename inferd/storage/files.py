"""Uploaded files (OpenAI `/v1/files`): bytes at `<data_dir>/files/<id>`, metadata beside
them at `<id>.json`. No HTTP here; the routes in api/openai/files.py are thin.

Crash safety: bytes and metadata are each written to a `.tmp-*` file and renamed into
place (os.replace is atomic on one filesystem), bytes first, metadata last. A file is
listed only when its metadata exists, so a half-written upload is never visible; stale
`.tmp-*` leftovers of a crash are removed when the store opens.

Ids are `file-` + 24 random hex digits and are checked against that pattern before they
touch the filesystem, so no id can name a path (`/`, `..`): anything else is a 404."""

from __future__ import annotations

import json
import os
import re
import secrets
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

from inferd.errors import InvalidInput, NotFound, PayloadTooLarge

FILE_ID = re.compile(r"^file-[0-9a-f]{24}$")
# OpenAI's purposes; the server itself uses the files for vision and audio inputs.
PURPOSES = frozenset({"assistants", "batch", "fine-tune", "vision", "user_data", "evals"})
_CHUNK = 1 << 20


def sniff(head: bytes) -> str | None:
    """The media type of a file from its first bytes (images and audio only), or None.
    The client's Content-Type is never trusted: it is whatever the client says. Only what
    every route taking file ids decodes is accepted: TIFF, HEIC and AVIF are refused here
    rather than stored and then refused by chat and /ai/v1/read."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "audio/wav"
    if head.startswith(b"BM") and len(head) >= 14 and int.from_bytes(head[2:6], "little") >= 14:
        return "image/bmp"
    if head.startswith(b"fLaC"):
        return "audio/flac"
    if head.startswith(b"OggS"):
        return "audio/ogg"
    if head.startswith(b"ID3"):
        return "audio/mpeg"
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "audio/webm"  # Matroska/WebM container: what browsers record audio in
    if head[4:8] == b"ftyp":
        # HEIC/AVIF (brands heic, mif1, avif ...) are not accepted: no route decodes them.
        return "audio/mp4" if head[8:12] in (b"M4A ", b"M4B ", b"mp42", b"isom", b"dash") else None
    if len(head) >= 2 and head[0] == 0xFF and (head[1] & 0xF6) == 0xF0:
        return "audio/aac"   # ADTS frame sync with layer bits 00
    if len(head) >= 2 and head[0] == 0xFF and (head[1] & 0xE0) == 0xE0 and (head[1] & 0x06):
        return "audio/mpeg"  # an MPEG audio frame header (MP3 without an ID3 tag)
    return None


def _public(meta: dict[str, Any]) -> dict[str, Any]:
    """The OpenAI file object: the metadata without our own bookkeeping keys."""
    return {k: v for k, v in meta.items() if not k.startswith("_")}


class FileStore:
    """The files of one data directory. Thread-safe; blocking (call from a worker thread)."""

    def __init__(self, root: Path, max_file_bytes: int = 32 << 20, max_total_bytes: int = 1 << 30):
        self.root = Path(root)
        self.max_file_bytes, self.max_total_bytes = max_file_bytes, max_total_bytes
        self._lock = threading.Lock()
        self._used: int | None = None      # bytes of stored files, counted once on first use
        self._reserved = 0                 # bytes of uploads being written right now

    @classmethod
    def for_data_dir(cls, data_dir: Path, **limits: int) -> "FileStore":
        return cls(Path(data_dir).expanduser() / "files", **limits)

    # ---- paths -------------------------------------------------------------------------------
    def _check_id(self, file_id: str) -> str:
        if not isinstance(file_id, str) or not FILE_ID.match(file_id):
            raise NotFound(f"no file with id '{file_id}'")
        return file_id

    def path(self, file_id: str) -> Path:
        """The bytes of a stored file (for readers of files referenced in requests)."""
        meta = self.get(file_id)
        return self.root / meta["id"]

    def _meta_path(self, file_id: str) -> Path:
        return self.root / f"{file_id}.json"

    def _open(self) -> None:
        if self._used is not None:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        for stale in self.root.glob(".tmp-*"):  # leftovers of a crash mid-write
            stale.unlink(missing_ok=True)
        self._used = sum(m["bytes"] for m in self._scan())

    def _scan(self) -> list[dict[str, Any]]:
        out = []
        for p in self.root.glob("file-*.json"):
            try:
                meta = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            if FILE_ID.match(str(meta.get("id", ""))) and (self.root / meta["id"]).is_file():
                out.append(meta)
        return out

    # ---- verbs -------------------------------------------------------------------------------
    def create(self, src: BinaryIO, filename: str, purpose: str, size: int | None = None) -> dict[str, Any]:
        """Store the bytes read from `src`. `size`, when known, is checked before any write."""
        if purpose not in PURPOSES:
            raise InvalidInput(f"unknown purpose {purpose!r}; expected one of {sorted(PURPOSES)}", "purpose")
        filename = os.path.basename(str(filename or "upload").replace("\\", "/"))[:255] or "upload"
        head = src.read(64)
        ctype = sniff(head)
        if ctype is None:
            raise InvalidInput("unsupported file type: only images (PNG, JPEG, GIF, WebP, BMP) and audio "
                               "(WAV, MP3, FLAC, OGG, M4A, WebM, AAC) are accepted, recognised by their content",
                               "file")
        with self._lock:
            self._open()
            budget = self._reserve(size if size is not None else self.max_file_bytes)
        file_id = "file-" + secrets.token_hex(12)
        tmp = self.root / f".tmp-{file_id}"
        written = 0
        try:
            with open(tmp, "wb") as f:
                chunk = head
                while chunk:
                    written += len(chunk)
                    if written > budget:
                        self._too_large(written)
                    f.write(chunk)
                    chunk = src.read(_CHUNK)
                f.flush()
                os.fsync(f.fileno())
            meta = {"id": file_id, "object": "file", "bytes": written, "created_at": int(time.time()),
                    "filename": filename, "purpose": purpose, "content_type": ctype, "status": "processed",
                    "expires_at": None, "status_details": None, "_ns": time.time_ns()}  # _ns: listing order
            os.replace(tmp, self.root / file_id)
            self._write_meta(meta)
        except BaseException:
            tmp.unlink(missing_ok=True)
            (self.root / file_id).unlink(missing_ok=True)
            with self._lock:
                self._reserved -= budget
            raise
        with self._lock:
            self._reserved -= budget
            self._used = (self._used or 0) + written
        return _public(meta)

    def _reserve(self, want: int) -> int:
        """Under the lock: reserve room for an upload of at most `want` bytes (413 if none)."""
        if want > self.max_file_bytes:
            self._too_large(want)
        used = self._used or 0
        free = self.max_total_bytes - used - self._reserved
        if want > free:
            raise PayloadTooLarge(f"file storage quota exceeded: {used} of {self.max_total_bytes} bytes used "
                                  f"(--max-files-total-bytes); delete files to make room")
        self._reserved += want
        return want

    def _too_large(self, n: int) -> None:
        raise PayloadTooLarge(f"file of {n} bytes exceeds the limit of {self.max_file_bytes} bytes (--max-file-bytes)")

    def _write_meta(self, meta: dict[str, Any]) -> None:
        tmp = self.root / f".tmp-{meta['id']}.json"
        tmp.write_text(json.dumps(meta))
        os.replace(tmp, self._meta_path(meta["id"]))

    def list(self, purpose: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            self._open()
        files = [m for m in self._scan() if purpose is None or m.get("purpose") == purpose]
        files.sort(key=lambda m: (m.get("_ns", m["created_at"] * 10**9), m["id"]), reverse=True)
        return [_public(m) for m in files]

    def get(self, file_id: str) -> dict[str, Any]:
        self._check_id(file_id)
        with self._lock:
            self._open()
        try:
            meta = json.loads(self._meta_path(file_id).read_text())
        except (OSError, ValueError):
            raise NotFound(f"no file with id '{file_id}'") from None
        if not (self.root / file_id).is_file():
            raise NotFound(f"no file with id '{file_id}'")
        return _public(meta)

    def read_audio(self, file_id: str, limit: int, where: str) -> bytes:
        """The bytes of a stored audio file for a transcription: 404 for an unknown id, 400 for
        a file that is not audio, 413 over `limit` (checked on the stored size first)."""
        meta = self.get(file_id)
        if not str(meta.get("content_type", "")).startswith("audio/"):
            raise InvalidInput(f"{where}: file '{file_id}' is {meta.get('content_type')}, not audio", where)
        if int(meta["bytes"]) > limit:
            raise PayloadTooLarge(f"the audio file is {meta['bytes']} bytes; at most {limit} bytes per request")
        with open(self.root / file_id, "rb") as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise PayloadTooLarge(f"the audio file is larger than {limit} bytes, the most per request")
        return data

    def delete(self, file_id: str) -> dict[str, Any]:
        meta = self.get(file_id)
        # Metadata first: from this moment the file is not listed, even if we crash before the bytes go.
        self._meta_path(file_id).unlink(missing_ok=True)
        (self.root / file_id).unlink(missing_ok=True)
        with self._lock:
            self._used = max(0, (self._used or 0) - int(meta["bytes"]))
        return {"id": file_id, "object": "file", "deleted": True}
