"""Reasoning budgets on the worker: count one sequence's thinking tokens and say when to close
the block. Pure, bytes only (the markers' bytes and the close marker's token ids come from the
service, which knows the template); the engine (generation.py) does the forcing:

    think = ThinkingBudget(b"<think>", b"</think>", close_ids, budget=64, in_block=prompt_opened_it)
    before sampling:  if think.due(): forced = think.close()   # then decode those ids, one per step
    every token:      think.feed(piece, forced=was_forced)

The block is recognised only at the very start of the output (after whitespace), or from the
first token when the prompt opened it, as inferd.chat.reasoning splits it. `count` is the
tokens generated inside the block (the forced end marker is not counted): Usage.reasoning_tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_WS = b" \t\r\n"


@dataclass
class ThinkingBudget:
    open: bytes
    close_marker: bytes
    close_ids: list[int]                 # the end marker as tokens, forced at the budget
    budget: int | None = None            # None: unbounded (only counted)
    in_block: bool = False               # the prompt opened the block
    count: int = 0
    state: str = field(default="start")  # start | block | done
    forcing: bool = False
    _buf: bytes = b""

    def __post_init__(self) -> None:
        if self.in_block:
            self.state = "block"

    @property
    def bounding(self) -> bool:
        """Still able to force the end marker (speculative drafting waits until it is not)."""
        return self.budget is not None and self.state != "done"

    def due(self) -> bool:
        """The budget is spent inside an open block: force the end marker now."""
        return (self.state == "block" and not self.forcing and self.budget is not None
                and self.count >= self.budget)

    def close(self) -> list[int]:
        self.forcing = True
        return list(self.close_ids)

    def feed(self, piece: bytes, forced: bool = False) -> None:
        """One generated token's bytes, in order."""
        if self.state == "done":
            return
        if self.state == "start":
            self._buf += piece
            s = self._buf.lstrip(_WS)
            if s.startswith(self.open):
                self.state, self._buf = "block", s[len(self.open):]
                self._check_close()
            elif s and not self.open.startswith(s):
                self.state, self._buf = "done", b""  # the output does not start with thinking
            return
        if not forced:
            self.count += 1
        self._buf += piece
        self._check_close()

    def _check_close(self) -> None:
        if self.close_marker in self._buf:
            self.state, self._buf, self.forcing = "done", b"", False
        else:  # only a possible start of the marker needs keeping
            self._buf = self._buf[-(len(self.close_marker) - 1):] if len(self.close_marker) > 1 else b""
