"""The key/value metadata of a GGUF file (its header), read in pure Python without loading
the model: what Ollama's /api/show reports as `model_info`, and the model's own chat
template. Arrays (the vocabulary) are skipped, only their lengths kept; sizes are bounded
so a hostile file cannot make this read gigabytes."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_MAX_KV = 100_000
_MAX_TENSORS = 1_000_000   # the largest models have tens of thousands
_VERSIONS = (2, 3)
_MAX_STR = 16 << 20
_MAX_ARRAY = 50_000_000


class NotGGUF(ValueError):
    pass


def _read(f: BinaryIO, n: int) -> bytes:
    b = f.read(n)
    if len(b) != n:
        raise NotGGUF("truncated GGUF header")
    return b


def _string(f: BinaryIO) -> str:
    (n,) = struct.unpack("<Q", _read(f, 8))
    if n > _MAX_STR:
        raise NotGGUF("GGUF string too long")
    return _read(f, n).decode("utf-8", errors="replace")


def _value(f: BinaryIO, vtype: int) -> Any:
    if vtype in _SCALARS:
        fmt = _SCALARS[vtype]
        return struct.unpack(fmt, _read(f, struct.calcsize(fmt)))[0]
    if vtype == 8:
        return _string(f)
    if vtype == 9:
        (itype,) = struct.unpack("<I", _read(f, 4))
        (n,) = struct.unpack("<Q", _read(f, 8))
        if n > _MAX_ARRAY:
            raise NotGGUF("GGUF array too long")
        if itype in _SCALARS:
            f.seek(n * struct.calcsize(_SCALARS[itype]), 1)
        elif itype == 8:
            for _ in range(n):
                (k,) = struct.unpack("<Q", _read(f, 8))
                if k > _MAX_STR:
                    raise NotGGUF("GGUF string too long")
                f.seek(k, 1)
        else:
            raise NotGGUF(f"GGUF array of type {itype} not supported")
        return {"array_length": n}
    raise NotGGUF(f"unknown GGUF value type {vtype}")


def read_metadata(path: Path) -> dict[str, Any]:
    """Every key of the header: scalars and strings as they are, arrays as {"array_length": n}."""
    with open(path, "rb") as f:
        if _read(f, 4) != b"GGUF":
            raise NotGGUF(f"{path} is not a GGUF file")
        (version,) = struct.unpack("<I", _read(f, 4))
        if version < 2:
            raise NotGGUF(f"GGUF version {version} is not supported")
        _tensors, n_kv = struct.unpack("<QQ", _read(f, 16))
        if n_kv > _MAX_KV:
            raise NotGGUF("too many GGUF metadata keys")
        out: dict[str, Any] = {}
        for _ in range(n_kv):
            key = _string(f)
            (vtype,) = struct.unpack("<I", _read(f, 4))
            out[key] = _value(f, vtype)
        return out


def check_gguf(path: Path) -> dict[str, Any]:
    """Is `path` a GGUF llama.cpp can load, as far as its header tells (checked before it is
    installed): the magic, a known version, tensor and key counts within bounds, every key
    readable, an architecture named, and the file longer than its header. NotGGUF says what
    is wrong; returns the metadata."""
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise NotGGUF("not a GGUF file (no GGUF magic)")
        (version,) = struct.unpack("<I", _read(f, 4))
        if version not in _VERSIONS:
            raise NotGGUF(f"GGUF version {version} is not supported (2 or 3)")
        n_tensors, n_kv = struct.unpack("<QQ", _read(f, 16))
        if not 1 <= n_tensors <= _MAX_TENSORS:
            raise NotGGUF(f"implausible GGUF tensor count {n_tensors}")
        if n_kv > _MAX_KV:
            raise NotGGUF(f"implausible GGUF metadata key count {n_kv}")
        meta: dict[str, Any] = {}
        try:
            for _ in range(n_kv):
                key = _string(f)
                (vtype,) = struct.unpack("<I", _read(f, 4))
                meta[key] = _value(f, vtype)
        except struct.error:
            raise NotGGUF("truncated GGUF header") from None
        if f.tell() >= path.stat().st_size:
            raise NotGGUF("the file ends inside its GGUF header (truncated)")
    # A split model's later shards hold only split.* keys; the first one names the architecture.
    if not isinstance(meta.get("general.architecture"), str) and not meta.get("split.no"):
        raise NotGGUF("the GGUF header names no general.architecture")
    return meta
