"""The on-disk format of one prompt-cache entry (scheduling/disk_cache.py): a sequence's KV
state (llama_state_seq_get_data bytes) plus the token ids it holds.

Layout, little-endian:

    header  (HEADER.size bytes)
      magic          8s   b"INFDKVC\\0"
      version        u32  FORMAT_VERSION
      model_id       32s  sha256 of the model's path: which model file this was made from
      file_fp        32s  sha256 of that file's identity (size, mtime, first MiB)
      config_fp      32s  sha256 of the context config (n_ctx, KV dtype, LoRA set, llama.cpp build)
      n_tokens       u32
      key_len        u16  bytes of the prompt_cache_key (0: none)
      payload_len    u64
      body_sha256    32s  of key + tokens + payload
      meta_crc       u32  crc32 of every header byte before it, the key and the tokens
    key      key_len bytes (utf-8)
    tokens   n_tokens x int32
    payload  payload_len bytes

Why two checks: the meta CRC lets the index be built from headers and token ids alone
(a start-up scan reads kilobytes, not the states), and the body hash is verified before a
payload is ever handed to llama.cpp, so a flipped bit or a truncated file is refused there.

Writes are atomic: a `.tmp-*` file in the same folder, fsync, os.replace, fsync of the
folder, so a reader sees either the old entry or the whole new one, and a crash leaves only a
`.tmp-*` file that the next scan removes."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import secrets
import struct
import zlib
from pathlib import Path

MAGIC = b"INFDKVC\0"
FORMAT_VERSION = 1
HEADER = struct.Struct("<8sI32s32s32sIHQ32sI")
SUFFIX = ".kv"
TMP_PREFIX = ".tmp-"


class BadEntry(Exception):
    """The file is not a whole, intact entry of this format (truncated, corrupt, foreign)."""


@dataclasses.dataclass(frozen=True)
class Identity:
    """What an entry must match to be loaded into a context."""
    model_id: bytes    # 32 bytes
    file_fp: bytes     # 32 bytes
    config_fp: bytes   # 32 bytes


@dataclasses.dataclass
class Meta:
    path: Path
    ident: Identity
    tokens: tuple[int, ...]
    key: str | None
    payload_len: int
    size: int           # bytes of the whole file
    body_sha: bytes
    offset: int         # where the payload starts


def _body_hash(key: bytes, toks: bytes, payload: bytes | memoryview) -> bytes:
    h = hashlib.sha256(key)
    h.update(toks)
    h.update(payload)
    return h.digest()


def write_entry(path: Path, ident: Identity, tokens: list[int] | tuple[int, ...], payload: bytes,
                key: str | None = None) -> int:
    """Write an entry atomically at `path`; returns the bytes written. OSError (ENOSPC, ...)
    propagates after the temporary file is removed."""
    kb = (key or "").encode()
    toks = struct.pack(f"<{len(tokens)}i", *tokens)
    head = HEADER.pack(MAGIC, FORMAT_VERSION, ident.model_id, ident.file_fp, ident.config_fp, len(tokens), len(kb),
                       len(payload), _body_hash(kb, toks, payload), 0)
    head = head[:-4] + struct.pack("<I", zlib.crc32(toks, zlib.crc32(kb, zlib.crc32(head[:-4]))))
    tmp = path.with_name(f"{TMP_PREFIX}{secrets.token_hex(6)}-{path.name}")
    try:
        with open(tmp, "wb") as f:
            f.write(head)
            f.write(kb)
            f.write(toks)
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:  # the rename itself survives a power cut only once the folder is synced
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass
    return len(head) + len(kb) + len(toks) + len(payload)


def read_meta(path: Path) -> Meta:
    """The header, key and tokens of an entry, checked (magic, version, CRC, sizes against the
    file's length). BadEntry when any of it is wrong."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            raw = f.read(HEADER.size)
            if len(raw) < HEADER.size:
                raise BadEntry(f"truncated header ({len(raw)} of {HEADER.size} bytes)")
            magic, ver, mid, ffp, cfp, n_tok, n_key, n_pay, body, crc = HEADER.unpack(raw)
            if magic != MAGIC:
                raise BadEntry("not a prompt-cache entry (bad magic)")
            if ver != FORMAT_VERSION:
                raise BadEntry(f"format version {ver}, this server reads {FORMAT_VERSION}")
            offset = HEADER.size + n_key + 4 * n_tok
            if size != offset + n_pay:
                raise BadEntry(f"file is {size} bytes, its header says {offset + n_pay}")
            kb = f.read(n_key)
            toks = f.read(4 * n_tok)
    except OSError as e:
        raise BadEntry(f"unreadable: {e}") from e
    if len(kb) != n_key or len(toks) != 4 * n_tok:
        raise BadEntry("truncated while reading")
    if zlib.crc32(toks, zlib.crc32(kb, zlib.crc32(raw[:-4]))) != crc:
        raise BadEntry("header checksum mismatch")
    try:
        key = kb.decode() if n_key else None
    except UnicodeDecodeError as e:
        raise BadEntry("key is not utf-8") from e
    return Meta(path, Identity(mid, ffp, cfp), struct.unpack(f"<{n_tok}i", toks), key, n_pay, size, body, offset)


def read_payload(meta: Meta) -> bytes:
    """The state bytes of an entry whose body hash matches; BadEntry otherwise (including a
    file that changed since its header was read)."""
    try:
        with open(meta.path, "rb") as f:
            f.seek(HEADER.size)
            kb = f.read(meta.offset - HEADER.size - 4 * len(meta.tokens))
            toks = f.read(4 * len(meta.tokens))
            payload = f.read(meta.payload_len + 1)
    except OSError as e:
        raise BadEntry(f"unreadable: {e}") from e
    if len(payload) != meta.payload_len:
        raise BadEntry(f"payload is {len(payload)} bytes, expected {meta.payload_len}")
    if _body_hash(kb, toks, payload) != meta.body_sha:
        raise BadEntry("body checksum mismatch")
    if struct.unpack(f"<{len(meta.tokens)}i", toks) != meta.tokens:
        raise BadEntry("tokens changed since the header was read")
    return payload
