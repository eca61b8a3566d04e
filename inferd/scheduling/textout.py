"""Turning a stream of token bytes into safe text: whole UTF-8 characters only, and stop
strings never emitted, even when one is split across tokens. Pure, no native code."""

from __future__ import annotations

import codecs

from inferd.text.markers import held_suffix_len


class TextOut:
    """Feed token bytes, get the text that may be shown now.

    Text that might be the start of a stop string is held back until it is either
    completed (then it and everything after it is dropped) or ruled out."""

    def __init__(self, stop: list[str]):
        self.stops = [s for s in stop if s]
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._held = ""
        self.stopped = False
        self.stop_word: str | None = None  # the stop string that matched
        self.text = ""  # everything emitted so far

    def feed(self, data: bytes) -> str:
        """Text to emit after these bytes; sets `stopped` when a stop string appeared."""
        if self.stopped:
            return ""
        return self._push(self._utf8.decode(data))

    def flush(self) -> str:
        """At the end of generation: whatever is held is final text (no stop string came)."""
        if self.stopped:
            return ""
        out = self._push(self._utf8.decode(b"", final=True))
        if self.stopped:
            return out
        rest, self._held = self._held, ""
        self.text += rest
        return out + rest

    def _push(self, new: str) -> str:
        buf = self._held + new
        if not self.stops:
            self._held = ""
            self.text += buf
            return buf
        cut = -1
        for s in self.stops:
            i = buf.find(s)
            if i >= 0 and (cut < 0 or i < cut):
                cut, self.stop_word = i, s
        if cut >= 0:
            self.stopped = True
            self._held = ""
            self.text += buf[:cut]
            return buf[:cut]
        keep = held_suffix_len(buf, self.stops)
        out, self._held = (buf[:-keep], buf[-keep:]) if keep else (buf, "")
        self.text += out
        return out
