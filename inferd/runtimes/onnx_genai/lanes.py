"""The native stepping of an onnxruntime-genai generator: sequences ("lanes") and one step that
advances every lane by a token.

Batched lanes are requests of one `og.Engine`: every `Engine.run` is one forward pass over all
its running requests. With a PagedAttention model (built for CUDA with `use_paged_attention`,
`engine.dynamic_batching` in genai_config.json) the engine batches continuously: a request joins
and leaves at any step. Without it (every CPU build) an engine batches statically: the requests
it holds when its batch starts run together until the last of them finishes. So requests that
arrive meanwhile start at once in another engine (micro-batches side by side, up to
`max_batches` engines, each step runs each engine once) instead of waiting for the running
batch to end (docs/generators-onnx.md has numbers).

Solo lanes are `og.Generator`s of batch size one, stepped in the same step. They exist for one
case: a sampled request with a seed on a static engine, whose per-turn seed onnxruntime-genai
refuses ("A per-turn seed requires an Engine configured for dynamic batching"); a Generator
takes `random_seed`, so the seed is honoured, at the cost of that request not sharing the
batch. Everything here runs on the scheduler's worker thread only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from inferd.errors import InvalidInput
from inferd.types import SamplingParams

# og.FinishReason names -> inferd finish reasons (EOS and stop strings: "stop")
FINISH = {"EOS": "stop", "STOP_STRING": "stop", "MAX_GENERATED_TOKENS": "length", "MAX_SESSION_TOKENS": "length",
          "CANCELLED": "cancelled"}


@dataclass(eq=False)
class Turn:
    """A request's sampling as onnxruntime-genai takes it (the `sampler` of the engine's Job):
    built and checked by OgaGenerator.make_sampler, so every refusal is a 400 before any work."""

    params: SamplingParams
    guidance: tuple[str, str] | None = None   # ("json_schema" | "regex" | "lark_grammar", data)

    def close(self) -> None:
        pass

    @property
    def sampled(self) -> bool:
        return self.params.temperature > 0


@dataclass(eq=False)
class Lane:
    """One running sequence. `request`/`turn_id` for an engine lane, `generator` for a solo one."""

    request: Any = None
    turn_id: int = 0
    generator: Any = None
    done: bool = False


# onnxruntime-genai's static scheduler batches at most 4 requests per forward pass, whatever
# engine.static_batching.max_batch_size says (src/engine/scheduler.cpp: static_batch_size = 4)
STATIC_ROWS = 4


class _Batch:
    """One og.Engine and the lanes it runs. A static engine's batch is fixed by its first run:
    until then (`open`) it takes new requests; then it runs until all of them finished."""

    def __init__(self, og: Any, model: Any):
        self.engine = og.Engine(model)
        self.buffer = self.engine.create_event_buffer(256)
        self.lanes: dict[int, Lane] = {}
        self.started = False


class Lanes:
    """All running sequences of one model (og.Model shared by the engines and solo generators).

    Static engines: a batch holds up to STATIC_ROWS requests; more, or requests arriving while
    a batch runs, start at once in another engine (up to `max_batches`) rather than waiting for
    a running batch to end; each step runs every engine once, and each batch's rows share its
    forward pass. A dynamic engine is one batch that takes new requests at every step."""

    def __init__(self, og: Any, model: Any, dynamic: bool, vocab: int, max_batches: int = 4):
        self.og, self.model, self.dynamic, self.vocab = og, model, dynamic, vocab
        self.max_batches = 1 if dynamic else max(1, max_batches)
        # og.Engine answers only the thread that made it ("Engine operations must be called from
        # the Engine owner thread"): engines are made on first use, on the scheduler's worker
        # thread, and closed there (close()).
        self._batches: list[_Batch] = []
        self._by_request: dict[int, tuple[Lane, _Batch]] = {}
        self._solo: list[Lane] = []

    def _open_batch(self) -> _Batch:
        for b in self._batches:
            if not b.lanes:
                b.started = False
            if self.dynamic or (not b.started and len(b.lanes) < STATIC_ROWS):
                return b
        if len(self._batches) < self.max_batches:
            self._batches.append(_Batch(self.og, self.model))
            return self._batches[-1]
        # every engine runs a batch: join the one with the fewest rows (it starts when that ends)
        return min(self._batches, key=lambda b: len(b.lanes))

    # ---- start / stop --------------------------------------------------------------------
    def start(self, prompt: list[int], turn: Turn, max_tokens: int) -> Lane:
        ids = np.asarray(prompt, dtype=np.int32)
        p = turn.params
        if turn.sampled and p.seed is not None and not self.dynamic:
            return self._start_solo(ids, turn, max_tokens)
        og = self.og
        batch = self._open_batch()
        req = batch.engine.create_request()
        opts = og.TurnOptions(req)
        opts.set_max_generated_tokens(max_tokens)
        opts.set_do_sample(turn.sampled)
        if turn.sampled:
            opts.set_temperature(p.temperature)
            opts.set_top_k(max(0, p.top_k))   # zero disables top-k (genai_config's search.top_k is not used)
            opts.set_top_p(min(1.0, max(0.0, p.top_p)))
            if p.seed is not None:
                opts.set_seed(p.seed & 0xFFFFFFFF)
        if p.repetition_penalty != 1.0:
            opts.set_repetition_penalty(p.repetition_penalty)
        if p.ignore_eos:
            opts.set_min_generated_tokens(max_tokens)  # EOS masked until max_tokens: ignore_eos
        if turn.guidance is not None:
            opts.set_guidance(*turn.guidance)
        try:
            turn_id = req.begin_turn(ids, opts)
        except RuntimeError as e:
            req.close()
            raise InvalidInput(f"onnxruntime-genai refused the request: {e}") from e
        lane = Lane(request=req, turn_id=turn_id)
        self._by_request[id(req)] = (lane, batch)
        batch.lanes[id(req)] = lane
        return lane

    def _start_solo(self, ids: np.ndarray, turn: Turn, max_tokens: int) -> Lane:
        p = turn.params
        gp = self.og.GeneratorParams(self.model)
        opts: dict[str, Any] = {"max_length": len(ids) + max_tokens, "do_sample": True,
                                "temperature": p.temperature, "top_k": p.top_k if p.top_k > 0 else self.vocab,
                                "top_p": min(1.0, max(0.0, p.top_p)), "random_seed": int(p.seed or 0) & 0x7FFFFFFF,
                                "repetition_penalty": p.repetition_penalty}
        if p.ignore_eos:
            opts["min_length"] = len(ids) + max_tokens
        gp.set_search_options(**opts)
        if turn.guidance is not None:
            gp.set_guidance(*turn.guidance)
        gen = self.og.Generator(self.model, gp)
        try:
            gen.append_tokens(ids)
        except RuntimeError as e:
            raise InvalidInput(f"onnxruntime-genai refused the request: {e}") from e
        lane = Lane(generator=gen)
        self._solo.append(lane)
        return lane

    def stop(self, lane: Lane) -> None:
        """Free a lane (finished, cancelled, or ended by a stop string)."""
        if lane.request is not None:
            _lane, batch = self._by_request.pop(id(lane.request), (None, None))
            if batch is not None:
                batch.lanes.pop(id(lane.request), None)
            lane.request.close()
            lane.request = None
        elif lane.generator is not None:
            if lane in self._solo:
                self._solo.remove(lane)
            lane.generator = None
        lane.done = True

    # ---- one step -------------------------------------------------------------------------
    def step(self) -> tuple[list[tuple[Lane, int | None, str | None]], list[int]]:
        """Advance every lane by one token: -> ((lane, token or None, finish reason or None)
        in order, the rows of each forward pass run)."""
        out: list[tuple[Lane, int | None, str | None]] = []
        passes: list[int] = []
        flags_of = self.og.EngineEventFlags
        for batch in self._batches:
            if not batch.lanes or not batch.engine.has_pending_requests():
                continue
            batch.started = True
            rows = 0
            for ev in batch.engine.run(batch.buffer):
                lane = batch.lanes.get(id(ev.request))
                if lane is None:
                    continue
                flags = ev.flags
                if flags & flags_of.FAILED:
                    raise RuntimeError(f"onnxruntime-genai engine failed: {ev.error_code.name}")
                if flags & flags_of.TOKEN:
                    rows += 1
                    out.append((lane, int(ev.token), None))
                if flags & flags_of.TURN_FINISHED:
                    out.append((lane, None, FINISH.get(ev.finish_reason.name, "stop")))
            if rows:
                passes.append(rows)
        for lane in list(self._solo):
            gen = lane.generator
            if gen.is_done():
                out.append((lane, None, "stop"))
                continue
            gen.generate_next_token()
            passes.append(1)
            tok = int(gen.get_next_tokens()[0])
            out.append((lane, tok, None))
            if gen.is_done():  # EOS (its token is reported; the scheduler ends on it) or max_length
                out.append((lane, None, "length"))
        return out, passes

    @property
    def running(self) -> int:
        return len(self._by_request) + len(self._solo)

    def close(self) -> None:
        """On the worker thread, as it ends: the requests, then the engines."""
        for lane in [ln for ln, _b in self._by_request.values()] + list(self._solo):
            self.stop(lane)
        self._batches.clear()
