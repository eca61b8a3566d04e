"""What a grammar can match in one model's vocabulary, as llama.cpp's grammar sampler sees it.

llama.cpp masks, for every candidate token, end-of-generation tokens (until the grammar is
complete) and tokens whose text is empty or starts with NUL, and it decodes each token's
text only up to a NUL. A grammar whose every path needs something outside that makes the
sampler allow no token at all, and llama.cpp then throws across ctypes (process abort).
This view lets `inferd.chat.grammar_check` refuse such grammars with a 400 first; it
satisfies that module's `GrammarVocab` protocol structurally (no import of inferd.chat).

The producible set is computed once per model (one pass over the vocabulary, about a
second for 262k tokens) on the first grammar request, on that request's thread."""

from __future__ import annotations

import threading
from functools import cached_property

from inferd.runtimes.llama_cpp.model import LlamaModel


class GrammarVocabView:
    def __init__(self, model: LlamaModel):
        self.model = model
        self.n_vocab = model.n_vocab
        self._lock = threading.Lock()

    def token_usable(self, token: int) -> bool:
        if not 0 <= token < self.n_vocab or self.model.is_eog(token):
            return False
        text = self.model.piece(token, special=True)
        return bool(text) and text[0] != 0

    def token_id(self, text: str) -> int | None:
        try:
            ids = self.model.tokenize(text, add_special=False, parse_special=True)
        except Exception:  # not encodable (a lone surrogate): not a token
            return None
        return ids[0] if len(ids) == 1 else None

    def producible_ranges(self) -> tuple[tuple[int, int], ...]:
        with self._lock:
            return self._ranges

    @cached_property
    def _ranges(self) -> tuple[tuple[int, int], ...]:
        cps: set[int] = set()
        partial = False  # byte pieces (byte fallback, byte-level BPE) combine into any character
        for t in range(self.n_vocab):
            if not self.token_usable(t):
                continue
            data = self.model.piece(t, special=True).split(b"\0", 1)[0]
            text = data.decode("utf-8", "ignore")
            if len(text.encode("utf-8")) != len(data):
                partial = True
            cps.update(map(ord, text))
        cps.discard(0)
        ranges: list[tuple[int, int]] = []
        for cp in sorted(cps):
            if ranges and cp == ranges[-1][1] + 1:
                ranges[-1] = (ranges[-1][0], cp)
            else:
                ranges.append((cp, cp))
        if partial:  # conservative: every non-ASCII character may be spelled from byte pieces
            ranges.append((0x80, 0xD7FF))
            ranges.append((0xE000, 0x10FFFF))
        return tuple(ranges)
