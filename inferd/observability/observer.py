"""The Observer: per-model statistics kept across loads, and the views built from them at
read time: /metrics (Prometheus text), /load (for routers and load balancers) and /slots
(llama-server's shape).

It wraps the registry's loader lookup, so every load is timed, its failures counted and its
resident-memory growth measured, and every loaded runtime gets the stats object kept under
its name (the engine and batcher record into it from their worker threads)."""

from __future__ import annotations

import collections
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from inferd.kinds import KINDS
from inferd.metrics import Metrics
from inferd.observability.active import ActiveRequests, ErrorLog
from inferd.observability.drain import Drain
from inferd.observability.llamacpp import render_llamacpp
from inferd.observability.prom import Family, render
from inferd.observability.stats import EncStats, GenStats
from inferd.types import SAMPLER_STAGES, SamplingParams

if TYPE_CHECKING:
    from inferd.observability.tracing import Tracer

log = logging.getLogger("inferd.observe")


def rss_bytes() -> int:
    """Resident set size of this process (Linux); 0 where /proc is missing."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def engine_of(spec: Any, handle: Any) -> Any:
    """The continuous-batching engine of a loaded generator, or None: its kind says (the kinds
    table's `observe`), and every handle names its scheduler `scheduler`."""
    return handle.scheduler if KINDS[spec.kind].observe == "engine" else None


def batcher_of(spec: Any, handle: Any) -> Any:
    """The dynamic batcher of a loaded encoder (embedder, reader, ...), or None."""
    return handle.scheduler if KINDS[spec.kind].observe == "batch" else None


def slot_params(job: Any) -> dict[str, Any]:
    """llama-server's `params` of a slot: the running job's sampling (defaults when idle)."""
    p = getattr(getattr(job, "sampler", None), "params", None) or SamplingParams()
    return {"n_predict": job.max_tokens if job is not None else -1, "seed": 0xFFFFFFFF if p.seed is None else p.seed,
            "temperature": p.temperature, "top_k": p.top_k, "top_p": p.top_p, "min_p": p.min_p,
            "typical_p": p.typical_p, "repeat_last_n": p.penalty_last_n, "repeat_penalty": p.repetition_penalty,
            "presence_penalty": p.presence_penalty, "frequency_penalty": p.frequency_penalty,
            "stop": list(job.stop) if job is not None else [], "ignore_eos": p.ignore_eos,
            "stream": bool(job.stream) if job is not None else False, "n_probs": p.top_logprobs if p.logprobs else 0,
            "samplers": list(p.samplers if p.samplers is not None else SAMPLER_STAGES), "lora": []}


class Observer:
    def __init__(self, registry: Any, admission: Any, drain: Drain | None = None, show_prompts: bool = False,
                 metrics: Metrics | None = None):
        self.registry, self.admission = registry, admission
        # HTTP requests are counted once, by the service's Metrics; the per-model families render from it
        self.metrics = metrics if metrics is not None else Metrics()
        self.drain = drain or Drain()
        self.show_prompts = show_prompts
        self.gen: dict[str, GenStats] = {}
        self.enc: dict[str, EncStats] = {}
        self.loads: collections.Counter[str] = collections.Counter()
        self.load_failures: collections.Counter[str] = collections.Counter()
        self.load_seconds: dict[str, float] = {}
        self.resident: dict[str, int] = {}
        self.rejections: collections.Counter[str] = collections.Counter()  # refusals outside admission
        self.tracer: Tracer | None = None  # --otlp-endpoint (set by the service)
        self.active = ActiveRequests()  # the requests in flight (GET /admin/requests)
        self.errors = ErrorLog()        # recent error responses and error log records (GET /admin/errors)

    # ---- recording ----------------------------------------------------------------------------
    def reject(self, reason: str) -> None:
        self.rejections[reason] += 1

    def wrap_loader(self, lookup: Callable[[Any], Callable[[Any], Any]]) -> Callable[[Any], Callable[[Any], Any]]:
        """registry.loader_for, observed: load time, failures, resident growth, stats attached."""

        def observed_lookup(spec: Any) -> Callable[[Any], Any]:
            try:
                loader = lookup(spec)
            except Exception:  # no runtime for this format: a failed load too
                self.load_failures[spec.name] += 1
                raise

            def load(spec_: Any) -> Any:
                rss0, t0 = rss_bytes(), time.perf_counter()
                try:
                    rt = loader(spec_)
                except BaseException:
                    self.load_failures[spec_.name] += 1
                    raise
                self.loads[spec_.name] += 1
                self.load_seconds[spec_.name] = time.perf_counter() - t0
                # Approximate when two models load at once: both see the other's growth.
                self.resident[spec_.name] = max(0, rss_bytes() - rss0)
                self.attach(spec_, rt)
                return rt

            return load

        return observed_lookup

    def attach(self, spec: Any, rt: Any) -> None:
        eng = engine_of(spec, rt)
        if eng is not None:
            eng.stats = self.gen.setdefault(spec.name, GenStats())
        b = batcher_of(spec, rt)
        if b is not None:
            b.observed = self.enc.setdefault(spec.name, EncStats())

    # ---- views --------------------------------------------------------------------------------
    def _loaded(self) -> list[tuple[str, Any, Any]]:
        return [(name, e.spec, e.model) for name, e in list(self.registry.loaded.items())]

    def load_view(self) -> dict[str, Any]:
        """Cheap: a few attribute reads per loaded model, no lock taken."""
        models: dict[str, dict[str, Any]] = {}
        for name, spec, rt in self._loaded():
            eng, b = engine_of(spec, rt), batcher_of(spec, rt)
            if eng is not None:
                slots = len(eng.slots)
                running = eng.active
                row = {"kind": spec.kind.value, "running": running, "waiting": eng.queued, "slots": slots,
                       "slots_free": slots - running}
                st = self.gen.get(name)
                if st is not None:
                    row["generated_tokens"] = st.generated_tokens
            elif b is not None:
                busy = 1 if b.running else 0
                row = {"kind": spec.kind.value, "running": b.running, "waiting": b.waiting, "slots": 1,
                       "slots_free": 1 - busy}
            else:
                continue
            models[name] = row
        totals = {k: sum(m[k] for m in models.values()) for k in ("running", "waiting", "slots", "slots_free")}
        totals.update(requests_in_flight=self.admission.in_flight, requests_queued=self.admission.queued)
        # Totals also at the top level, as the cluster ingress's /load has them (cluster/ingress.py).
        return {"models": models, **{k: totals[k] for k in ("running", "waiting", "slots", "slots_free")},
                "totals": totals, "draining": self.drain.draining}

    def render_llamacpp(self) -> str:
        """llama-server's llamacpp:* metric names (llamacpp.py)."""
        engines = [e for _n, s, rt in self._loaded() if (e := engine_of(s, rt)) is not None]
        return render_llamacpp(self.gen, engines)

    def slots_view(self, model: str | None = None) -> list[dict[str, Any]]:
        """llama-server's GET /slots, one entry per slot of each loaded generator (or of `model`)."""
        out = []
        for name, spec, rt in self._loaded():
            eng = engine_of(spec, rt)
            if eng is None or (model is not None and name != model):
                continue
            n_ctx = getattr(eng.backend, "n_ctx_seq", 0)
            for slot in list(eng.slots):
                job = slot.job
                cache = list(slot.cache)
                row: dict[str, Any] = {
                    "id": slot.id, "id_task": job.number if job is not None else -1, "model": name,
                    "n_ctx": n_ctx, "is_processing": job is not None, "tokens_cached": len(cache),
                    "n_prompt_tokens": len(job.prompt) if job is not None else 0,
                    "n_prompt_tokens_cache": job.cached if job is not None else 0,
                    "speculative": job is not None and job.speculation is not None,
                    "params": slot_params(job),
                    "next_token": {"has_next_token": job is not None and not job.done,
                                   "has_new_line": job is not None and job.out is not None and "\n" in job.out.text,
                                   "n_decoded": len(job.generated) if job is not None else 0,
                                   "n_remain": (job.max_tokens - len(job.generated)) if job is not None else -1},
                }
                if self.show_prompts:
                    try:
                        row["prompt"] = rt.runtime.detokenize(cache) if cache else ""
                    except Exception:  # a partial multi-byte piece: show what decodes
                        log.debug("detokenizing slot %d failed", slot.id, exc_info=True)
                        row["prompt"] = ""
                out.append(row)
        return out

    def render(self) -> str:
        F = Family
        req = F("inferd_model_requests_total", "counter", "Requests that used a model, by route family and status.")
        counts, durations = self.metrics.model_requests()
        for (m, fam, status), n in sorted(counts.items()):
            req.add(n, model=m, family=fam, status=status)
        dur = F("inferd_request_duration_seconds", "histogram", "End-to-end HTTP request latency per model.")
        for (m, fam), h in sorted(durations.items()):
            dur.add_histogram(h, model=m, family=fam)

        ttft = F("inferd_time_to_first_token_seconds", "histogram", "Arrival to first generated token.")
        itl = F("inferd_inter_token_latency_seconds", "histogram", "Time between consecutive tokens of a sequence.")
        e2e = F("inferd_e2e_request_latency_seconds", "histogram", "Arrival to end of a generated sequence.")
        batch = F("inferd_decode_batch_size", "histogram", "Sequences carried by one decode step.")
        ptok = F("inferd_prompt_tokens_total", "counter", "Prompt tokens of generated sequences.")
        gtok = F("inferd_generation_tokens_total", "counter", "Generated tokens.")
        hit = F("inferd_prompt_cache_hit_tokens_total", "counter", "Prompt tokens reused from the KV cache.")
        fin = F("inferd_sequences_finished_total", "counter", "Generated sequences by finish reason.")
        drafted = F("inferd_speculative_drafted_tokens_total", "counter", "Draft tokens verified by the target.")
        accepted = F("inferd_speculative_accepted_tokens_total", "counter", "Draft tokens the target accepted.")
        shifts = F("inferd_context_shifts_total", "counter", "Context shifts (cache_compaction_ratio).")
        hostc = F("inferd_host_cache_restored_tokens_total", "counter",
                  "Prompt tokens restored from the host-RAM prompt cache (--cache-ram).")
        diskc = F("inferd_disk_cache_restored_tokens_total", "counter",
                  "Prompt tokens restored from the disk prompt cache (--cache-dir).")
        refused = F("inferd_prompt_cache_refused_total", "counter",
                    "Prefix reuses refused because the KV cache had dropped cells (sliding window): full prefill.")
        for m, st in sorted(self.gen.items()):
            ttft.add_histogram(st.ttft, model=m)
            itl.add_histogram(st.itl, model=m)
            e2e.add_histogram(st.e2e, model=m)
            batch.add_histogram(st.batch, model=m)
            ptok.add(st.prompt_tokens, model=m)
            gtok.add(st.generated_tokens, model=m)
            hit.add(st.cached_tokens, model=m)
            drafted.add(st.drafted_tokens, model=m)
            accepted.add(st.accepted_tokens, model=m)
            shifts.add(st.context_shifts, model=m)
            hostc.add(st.host_cache_restored_tokens, model=m)
            diskc.add(st.disk_cache_restored_tokens, model=m)
            refused.add(st.prompt_cache_refused, model=m)
            for reason, n in sorted(st.finished.items()):
                fin.add(n, model=m, reason=reason)

        running = F("inferd_sequences_running", "gauge", "Sequences holding a slot (prefilling or decoding).")
        waiting = F("inferd_sequences_waiting", "gauge", "Sequences waiting for a slot.")
        slots = F("inferd_slots", "gauge", "Sequence slots of a loaded generator.")
        used = F("inferd_slots_in_use", "gauge", "Slots running a sequence.")
        kv = F("inferd_kv_cache_cells_used", "gauge", "KV cache cells holding tokens (live and cached sequences).")
        kvt = F("inferd_kv_cache_cells_total", "gauge", "KV cache cells of a loaded generator.")
        ebatch = F("inferd_encoder_batch_size", "histogram", "Inputs in one encoder forward pass.")
        epad = F("inferd_encoder_padded_tokens_total", "counter", "Tokens fed to encoder passes, padding included.")
        etok = F("inferd_encoder_tokens_total", "counter", "Real (unpadded) tokens fed to encoder passes.")
        ewait = F("inferd_encoder_waiting_inputs", "gauge", "Inputs waiting for an encoder forward pass.")
        for m, es in sorted(self.enc.items()):
            ebatch.add_histogram(es.batch, model=m)
            epad.add(es.padded_tokens, model=m)
            etok.add(es.tokens, model=m)

        loaded = F("inferd_model_loaded", "gauge", "1 while a model is loaded.")
        res = F("inferd_model_resident_bytes", "gauge",
                "Estimated resident size of a loaded model (weights + KV cache; what --max-memory counts).")
        rss = F("inferd_model_load_rss_bytes", "gauge", "Process resident memory grown by the model's last load.")
        for name, spec, rt in sorted(self._loaded(), key=lambda t: t[0]):
            loaded.add(1, model=name)
            entry = self.registry.loaded.get(name)
            if entry is not None:
                res.add(entry.size_bytes, model=name)
            eng, b = engine_of(spec, rt), batcher_of(spec, rt)
            if eng is not None:
                n_ctx = getattr(eng.backend, "n_ctx_seq", 0)
                running.add(eng.active, model=name)
                waiting.add(eng.queued, model=name)
                slots.add(len(eng.slots), model=name)
                used.add(eng.active, model=name)
                kv.add(sum(len(s.cache) for s in list(eng.slots)), model=name)
                kvt.add(n_ctx * len(eng.slots), model=name)
            if b is not None:
                ewait.add(b.waiting, model=name)

        rej = F("inferd_admission_rejections_total", "counter", "Requests refused before running, by reason.")
        reasons = self.admission.rejections + self.rejections
        reasons["engine_queue_full"] += sum(st.rejected for st in self.gen.values())
        for reason, n in sorted(reasons.items()):
            rej.add(n, reason=reason)
        lsec = F("inferd_model_load_seconds", "gauge", "Duration of the model's last load.")
        lcount = F("inferd_model_loads_total", "counter", "Completed model loads.")
        lfail = F("inferd_model_load_failures_total", "counter", "Failed model loads.")
        size = F("inferd_model_size_bytes", "gauge", "Size of the model's files on disk.")
        for m in sorted(self.load_seconds):
            lsec.add(round(self.load_seconds[m], 6), model=m)
            rss.add(self.resident.get(m, 0), model=m)
        for m, n in sorted(self.loads.items()):
            lcount.add(n, model=m)
        for m, n in sorted(self.load_failures.items()):
            lfail.add(n, model=m)
        for spec in sorted(self.registry.specs.values(), key=lambda s: s.name):
            if spec.size_bytes:
                size.add(spec.size_bytes, model=spec.name)
        drain = F("inferd_draining", "gauge", "1 while the server drains (refuses new requests).")
        drain.add(1 if self.drain.draining else 0)
        return render([req, dur, ttft, itl, e2e, batch, ptok, gtok, hit, fin, drafted, accepted, shifts, hostc, diskc, refused,
                       running, waiting, slots, used, kv, kvt,
                       ebatch, epad, etok, ewait, loaded, rej, lsec, lcount, lfail, res, rss, size, drain])
