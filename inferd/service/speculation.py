"""Per-request engine controls checked against the loaded model, and the speculation plan.

The Antfly spec's engine controls (docs/engine.md) arrive as `GenerateRequest.engine`. What
the loaded model cannot honour is a 400 naming the field and what it accepts: a KV cache
type other than the one the model was loaded with, an unknown or incompatible draft model,
`speculation_policy: on` with nothing to draft with."""

from __future__ import annotations

from inferd.errors import InferdError, InvalidInput
from inferd.models import ModelKind, ModelSpec
from inferd.scheduling.speculation import AUTO_NGRAM_K, DEFAULT_K, NGRAM, Speculation
from inferd.service.core import Catalog
from inferd.service.handles import GeneratorHandle
from inferd.types import EngineControls


def check_controls(ctl: EngineControls, spec: ModelSpec, handle: GeneratorHandle) -> None:
    loaded = getattr(handle.runtime, "cache_dtype", "f16")
    if ctl.cache_dtype is not None and ctl.cache_dtype != loaded:
        raise InvalidInput(f"cache_dtype: model '{spec.name}' is loaded with a {loaded} KV cache; this request "
                           f"asks for {ctl.cache_dtype}. Accepted: \"{loaded}\" or omitted (the cache type is "
                           "set per model: manifest cache_dtype or --cache-dtype)", "cache_dtype")


def loads_a_draft(ctl: EngineControls, spec: ModelSpec) -> bool:
    """Whether planning may load a draft model (then it runs on a thread; else inline)."""
    name = ctl.draft_model or spec.manifest.get("draft_model")
    return bool(name) and name != "ngram" and ctl.speculation_policy != "off"


def plan_speculation(ctl: EngineControls, spec: ModelSpec, handle: GeneratorHandle, catalog: Catalog) -> Speculation:
    """The request's Speculation (its drafter loaded on first use). Blocking: runs on a thread.
    `auto` with nothing named drafts with the engine's n-gram drafter (its shared pool), under
    the grounding and back-off rules of scheduling/speculation.py, unless --no-spec-auto."""
    name = ctl.draft_model or spec.manifest.get("draft_model")
    k = ctl.speculative_k or spec.manifest.get("speculative_k")
    ngram = getattr(handle.scheduler, "ngram", NGRAM)  # the engine's own: its pool is its vocabulary's
    drafter, implicit = None, False
    if ctl.speculation_policy != "off" and name:
        drafter = ngram if name == "ngram" else _draft_model(str(name), spec, handle, catalog)
    elif ctl.speculation_policy == "auto" and getattr(handle.scheduler, "auto_ngram", False):
        drafter, implicit = ngram, True
    if ctl.speculation_policy == "on" and drafter is None:
        raise InvalidInput("speculation_policy: \"on\" needs a draft_model (\"ngram\" or a served generator with "
                           f"the same vocabulary); model '{spec.name}' names none. Accepted: \"auto\", \"off\", "
                           "or \"on\" with draft_model", "speculation_policy")
    return Speculation(drafter, policy=ctl.speculation_policy, calibration=ctl.speculation_calibration,
                       k=int(k or (AUTO_NGRAM_K if implicit else DEFAULT_K)), implicit=implicit)


def _draft_model(name: str, spec: ModelSpec, handle: GeneratorHandle, catalog: Catalog):
    try:
        dspec = catalog.resolve(name, ModelKind.GENERATOR)
    except InferdError:
        served = ", ".join(s.name for s in catalog.registry.of_kind(ModelKind.GENERATOR))
        raise InvalidInput(f"draft_model: no served generator '{name}'. Accepted: \"ngram\" or one of: {served}",
                           "draft_model") from None
    if dspec.name == spec.name:
        raise InvalidInput(f"draft_model: '{name}' is the target model itself; name a smaller generator with the "
                           "same vocabulary, or \"ngram\"", "draft_model")
    make = handle.make_draft
    if make is None:
        raise InvalidInput(f"draft_model: model '{spec.name}' cannot load draft models", "draft_model")
    return handle.scheduler.drafters.get(dspec.name, lambda: make(dspec))
