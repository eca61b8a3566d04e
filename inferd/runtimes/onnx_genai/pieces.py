"""The raw bytes of each token of a tokenizer.json vocabulary, as llama.cpp's token pieces are:
byte-level BPE (GPT-2's byte alphabet), SentencePiece-style (▁ for a space, <0xNN> byte
fallback), added tokens as their text. Streaming needs bytes, not text: a character split
across tokens is joined by the scheduler's UTF-8 decoder (TextOut), and an invalid byte becomes
U+FFFD there instead of vanishing with the text after it."""

from __future__ import annotations

import re
from typing import Any

_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _gpt2_bytes() -> dict[str, int]:
    """GPT-2's bytes_to_unicode, inverted: the character that stands for each byte -> the byte."""
    bs = [*range(33, 127), *range(161, 173), *range(174, 256)]
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def _decoder_types(d: Any) -> set[str]:
    if not isinstance(d, dict):
        return set()
    found = {str(d.get("type"))}
    for sub in d.get("decoders") or []:
        found |= _decoder_types(sub)
    return found


class TokenBytes:
    """id -> bytes, computed once per id (the scheduler asks for every generated token)."""

    def __init__(self, tokenizer: Any, tokenizer_json: dict[str, Any]):
        self.tok = tokenizer
        kinds = _decoder_types(tokenizer_json.get("decoder"))
        self.byte_level = "ByteLevel" in kinds
        self.sentencepiece = not self.byte_level and bool(kinds & {"Metaspace", "ByteFallback", "Replace"})
        self.added = {int(t["id"]): str(t["content"]) for t in tokenizer_json.get("added_tokens") or []}
        self._map = _gpt2_bytes() if self.byte_level else {}
        self._cache: dict[int, bytes] = {}

    def bytes_of(self, token: int) -> bytes:
        b = self._cache.get(token)
        if b is None:
            b = self._cache[token] = self._compute(token)
        return b

    def _compute(self, token: int) -> bytes:
        if token in self.added:
            return self.added[token].encode()
        piece = self.tok.id_to_token(token)
        if piece is None:
            return b""
        if self.byte_level and all(ch in self._map for ch in piece):
            return bytes(self._map[ch] for ch in piece)
        if self.sentencepiece:
            m = _BYTE_TOKEN.fullmatch(piece)
            if m is not None:
                return bytes([int(m.group(1), 16)])
            return piece.replace("\u2581", " ").encode()
        return str(self.tok.decode([token], skip_special_tokens=False)).encode()
