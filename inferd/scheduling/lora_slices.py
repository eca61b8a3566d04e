"""Which LoRA adapter set the generation engine decodes next, when sequences of several sets
are running at once.

llama.cpp applies adapters per context, and a context that changes its adapter set
re-reserves its compute graph on the next decode: on the tiny fixture (1 thread) a decode
right after a switch took ~2.5 ms against ~0.4 ms without one. Switching at every step (one
set per step, alternating) therefore spent most of the time switching: 2 adapters x 4
streams ran at 0.26-0.34x the throughput (per CPU second) of 8 streams on one adapter
(`python bench/lora_sets.py --engine --threads 1 --per-step`).

So the sets take turns in time slices, round-robin: a set decodes for a slice of
`FACTOR` times the measured switch cost (between `MIN_SLICE` and `MAX_SLICE`), then the next set present
gets one. No set waits for another's requests to finish, only for at most one slice of each
other set, and the switching overhead stays near 1 / (1 + FACTOR) of the time: the same
bench without --per-step gives 0.85-0.98x (per CPU second; 0.95-1.06x in wall time). Pure policy,
timed by the engine's worker thread."""

from __future__ import annotations

from collections.abc import Collection

from inferd.scheduling.jobs import Adapters

FACTOR = 4.0      # a slice is this many switch costs: the overhead stays under ~20%
MIN_SLICE = 0.05  # seconds; also the slice before any switch has been measured
MAX_SLICE = 1.0   # no set waits longer than this per other set, however slow switching is
EMA = 0.3


class AdapterSlices:
    def __init__(self) -> None:
        self.until = 0.0          # the current set's slice ends then
        self.decode_s = 0.0       # a decode without a switch (moving average)
        self.switch_s = 0.0       # what a switch adds to the decode after it (moving average)
        self.switches = 0

    @property
    def slice_s(self) -> float:
        return min(MAX_SLICE, max(MIN_SLICE, FACTOR * self.switch_s))

    def pick(self, present: Collection[Adapters], applied: Adapters | None, now: float) -> Adapters:
        """The set to decode this step: the one in force while its slice lasts (or while it is
        the only one), else the next present set after it in a fixed order."""
        if applied is not None and applied in present and (len(present) == 1 or now < self.until):
            return applied
        order = sorted(present)
        later = [a for a in order if applied is not None and a > applied]
        choice = later[0] if later else order[0]
        self.until = now + self.slice_s
        return choice

    def observe(self, seconds: float, switched: bool) -> None:
        """The duration of one decode, and whether the adapters were switched before it."""
        if not switched:
            self.decode_s = seconds if self.decode_s == 0 else (1 - EMA) * self.decode_s + EMA * seconds
            return
        self.switches += 1
        extra = max(0.0, seconds - self.decode_s)
        self.switch_s = extra if self.switches == 1 else (1 - EMA) * self.switch_s + EMA * extra


__all__ = ["AdapterSlices"]
