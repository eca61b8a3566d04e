"""Streaming turn detection for live audio (OpenAI's `server_vad`): frame energy against a
threshold, with prefix padding and a silence timeout, fed chunk by chunk.

Why energy and not Silero: Silero (faster-whisper's ONNX) is built for whole files here
(chunking.py) and restarts its state on every call; a live session needs a decision per
20 ms frame as audio arrives, at a cost that does not grow with the session. Frame energy is
that, and for the close-talking microphones realtime clients use it separates speech from
pauses well; Whisper itself then decides what, if anything, was said.

OpenAI's `threshold` (0..1, default 0.5) maps linearly onto a frame level in dBFS:
0.0 -> -70 dBFS (nearly everything is speech), 0.5 -> -40 dBFS, 1.0 -> -10 dBFS (only loud
speech). A turn starts after `MIN_SPEECH_MS` of frames above it (a click is not a turn); its
audio begins `prefix_padding_ms` before the first loud frame; it ends once
`silence_duration_ms` of frames below it have passed, and that silence belongs to the turn
(as OpenAI's `audio_end_ms` includes it). A turn that reaches `max_turn` samples is cut there.

All positions are sample indices from the start of the session's audio."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FRAME_MS = 20
MIN_SPEECH_MS = 60


@dataclass(frozen=True)
class VadConfig:
    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500

    @property
    def level_db(self) -> float:
        return -70.0 + 60.0 * self.threshold


@dataclass(frozen=True)
class TurnStarted:
    start: int          # first sample of the turn (prefix padding included)


@dataclass(frozen=True)
class TurnEnded:
    end: int            # one past the last sample of the turn (trailing silence included)


class EnergyVad:
    def __init__(self, config: VadConfig, rate: int, max_turn: int, origin: int = 0):
        """`origin`: the session sample this detector starts at (it may be switched on late)."""
        self.config, self.rate, self.max_turn = config, rate, max(1, max_turn)
        self.frame = rate * FRAME_MS // 1000
        self._min_frames = max(1, MIN_SPEECH_MS // FRAME_MS)
        self._prefix = rate * config.prefix_padding_ms // 1000
        self._silence = max(self.frame, rate * config.silence_duration_ms // 1000)
        self._floor = np.float32(10.0 ** (config.level_db / 10.0))  # mean square of a frame at that level
        self._pending = np.zeros(0, dtype=np.float32)
        self._pos = origin          # session sample of _pending[0]
        self._floor_pos = origin    # audio before this belongs to an earlier turn: no prefix from it
        self._run = 0               # consecutive loud frames while idle
        self._run_start = 0
        self.start: int | None = None   # the current turn's first sample, None while idle
        self._last_loud = 0

    @property
    def in_turn(self) -> bool:
        return self.start is not None

    def keep_from(self) -> int:
        """The earliest sample a later turn could still include (the buffer may drop older ones)."""
        if self.start is not None:
            return self.start
        head = self._run_start if self._run else self._pos
        return max(self._floor_pos, head - self._prefix)

    def reset(self, at: int) -> None:
        """Forget any turn in progress (the buffer was committed or cleared at sample `at`)."""
        self.start, self._run = None, 0
        self._floor_pos = at

    def feed(self, samples: np.ndarray) -> list[TurnStarted | TurnEnded]:
        x = np.concatenate([self._pending, samples]) if self._pending.size else samples
        n = x.shape[0] // self.frame
        if n == 0:
            self._pending = x
            return []
        frames = x[:n * self.frame].reshape(n, self.frame).astype(np.float32)
        loud = np.mean(frames * frames, axis=1) >= self._floor
        events: list[TurnStarted | TurnEnded] = []
        for i in range(n):
            s = self._pos + i * self.frame
            e = s + self.frame
            if self.start is None:
                if not loud[i]:
                    self._run = 0
                    continue
                if self._run == 0:
                    self._run_start = s
                self._run += 1
                if self._run >= self._min_frames:
                    self.start = max(self._floor_pos, self._run_start - self._prefix)
                    self._last_loud = e
                    self._run = 0
                    events.append(TurnStarted(self.start))
                continue
            if loud[i]:
                self._last_loud = e
            if e - self._last_loud >= self._silence or e - self.start >= self.max_turn:
                events.append(TurnEnded(e))
                self.start, self._floor_pos = None, e
        self._pos += n * self.frame
        self._pending = x[n * self.frame:]
        return events
