"""The pure-Python GGUF header reader (/api/show's model_info): the same keys and values as
the gguf package's reader on the fixtures, and bounded, clear failures on bad files."""

from __future__ import annotations

import struct
from pathlib import Path

import gguf
import pytest

from inferd.registry.gguf_meta import NotGGUF, read_metadata

FIX = Path(__file__).parent / "fixtures" / "gguf"


@pytest.mark.parametrize("name", ["tiny-llama.gguf", "shards/tiny-00002-of-00003.gguf", "tiny-lora.gguf"])
def test_matches_the_gguf_package(name):
    ours = read_metadata(FIX / name)
    ref = gguf.GGUFReader(FIX / name)
    fields = {k: f for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    assert list(ours) == list(fields)
    for k, f in fields.items():
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            assert ours[k] == {"array_length": len(f.data)}
        elif isinstance(ours[k], float):
            assert ours[k] == pytest.approx(float(f.contents()), rel=1e-6)
        else:
            assert ours[k] == f.contents(), k


def test_bad_files(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(b"NOPE" + b"\0" * 20)
    with pytest.raises(NotGGUF, match="not a GGUF file"):
        read_metadata(p)
    good = (FIX / "tiny-llama.gguf").read_bytes()
    p.write_bytes(good[:300])
    with pytest.raises(NotGGUF, match="truncated"):
        read_metadata(p)
    # a header claiming a 2**60-byte string is refused, not read
    p.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1 << 60))
    with pytest.raises(NotGGUF, match="too long"):
        read_metadata(p)
