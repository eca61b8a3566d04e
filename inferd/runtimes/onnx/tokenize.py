"""Tokenization with Hugging Face `tokenizers` (tokenizer.json), and padding into arrays.

Truncation rule: an input longer than `max_length` tokens (special tokens included) keeps its
first tokens and ends with the closing special token(s); for (query, document) pairs the longer
side is cut first (`longest_first`). Each encoding records whether it was cut, so callers that
must not truncate (Ollama `truncate: false`) can refuse instead."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer

from inferd.errors import InvalidInput


@dataclass(frozen=True)
class Encoded:
    ids: tuple[int, ...]
    type_ids: tuple[int, ...]
    truncated: bool = False
    offsets: tuple[tuple[int, int], ...] = ()   # char spans; filled only when asked for

    def __len__(self) -> int:
        return len(self.ids)


class TextTokenizer:
    def __init__(self, path: str, max_length: int | None = None):
        self.tok = Tokenizer.from_file(path)
        self.raw = Tokenizer.from_file(path)  # untruncated twin for long texts (chunking)
        self.raw.no_truncation()
        self.raw.no_padding()
        trunc = self.tok.truncation
        self.file_max_length = int(trunc["max_length"]) if trunc else None
        self.tok.no_padding()
        self.set_max_length(max_length or self.file_max_length or 512)
        self.vocab_size = self.tok.get_vocab_size(with_added_tokens=True)
        self.pad_id = self._pad_id()
        self.prefix, self.suffix = self._specials()

    def set_max_length(self, n: int) -> None:
        self.max_length = n
        self.tok.enable_truncation(n, strategy="longest_first")

    def _pad_id(self) -> int:
        for t in ("[PAD]", "<pad>", "<|padding|>"):
            i = self.tok.token_to_id(t)
            if i is not None:
                return i
        return 0

    def _specials(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The special ids the post-processor puts before and after a single sequence."""
        enc = self.tok.encode("a")
        seq = enc.sequence_ids
        first = next((i for i, s in enumerate(seq) if s is not None), len(seq))
        last = max((i for i, s in enumerate(seq) if s is not None), default=len(seq) - 1)
        return tuple(enc.ids[:first]), tuple(enc.ids[last + 1:])

    def encode(self, texts: Sequence[str], with_offsets: bool = False) -> list[Encoded]:
        # One text (a single-sentence request): plain encode, no hand-off to the tokenizer's
        # thread pool, whose wake-up competes with onnxruntime's threads for the cores.
        encs = [self.tok.encode(texts[0])] if len(texts) == 1 else self.tok.encode_batch(list(texts))
        return [Encoded(tuple(e.ids), tuple(e.type_ids), bool(e.overflowing),
                        tuple(e.offsets) if with_offsets else ()) for e in encs]

    def encode_pairs(self, first: Sequence[str], second: Sequence[str]) -> list[Encoded]:
        encs = self.tok.encode_batch(list(zip(first, second)))
        return [Encoded(tuple(e.ids), tuple(e.type_ids), bool(e.overflowing)) for e in encs]

    def encode_untruncated(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """All content tokens of a long text with char offsets, no special tokens (chunking)."""
        enc = self.raw.encode(text, add_special_tokens=False)
        return list(enc.ids), list(enc.offsets)

    def from_ids(self, ids: Sequence[int]) -> Encoded:
        """Token ids given by the client: kept as they are, wrapped in the model's special
        tokens, and cut to max_length like text."""
        bad = [i for i in ids if not 0 <= int(i) < self.vocab_size]
        if bad:
            raise InvalidInput(f"token id {bad[0]} is outside the model's vocabulary (0..{self.vocab_size - 1})",
                               "input")
        room = self.max_length - len(self.prefix) - len(self.suffix)
        body = tuple(int(i) for i in ids)
        out = self.prefix + body[:room] + self.suffix
        return Encoded(out, (0,) * len(out), len(body) > room)


def pad(encs: Sequence[Encoded], pad_id: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(input_ids, attention_mask, token_type_ids) as int64 [batch, longest] arrays."""
    n, width = len(encs), max(len(e) for e in encs)
    ids = np.full((n, width), pad_id, dtype=np.int64)
    mask = np.zeros((n, width), dtype=np.int64)
    types = np.zeros((n, width), dtype=np.int64)
    for i, e in enumerate(encs):
        k = len(e)
        ids[i, :k] = e.ids
        mask[i, :k] = 1
        types[i, :k] = e.type_ids
    return ids, mask, types
