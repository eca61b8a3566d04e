"""Served names -> loaded runtimes. Loads on first use (once, even under concurrent first
requests), keeps a model for `keep_alive` after its last use, evicts idle models in LRU
order beyond `max_loaded`. A failed load raises ModelLoadFailed and is retried next time."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from inferd.errors import (ConfigError, InferdError, InvalidInput, ModelLoadFailed, ModelNotFound,
                           ModelNotSupported)
from inferd.registry.spec import ModelKind, ModelSpec

log = logging.getLogger("inferd.registry")

LoaderLookup = Callable[[ModelSpec], Callable[[ModelSpec], Any]]


@dataclass
class Loaded:
    spec: ModelSpec
    model: Any
    loaded_at: float
    last_used: float
    keep_alive: float
    in_use: int = 0
    load_seconds: float = 0.0

    def expires_at(self, now: float) -> float:
        return now + self.keep_alive if self.in_use else self.last_used + self.keep_alive


@dataclass
class Registry:
    specs: dict[str, ModelSpec]
    loader_for: LoaderLookup
    keep_alive: float = 300.0
    max_loaded: int = 4
    clock: Callable[[], float] = time.monotonic
    loaded: dict[str, Loaded] = field(default_factory=dict)
    _loading: dict[str, asyncio.Future] = field(default_factory=dict)
    _reaper: asyncio.Task | None = None

    @classmethod
    def build(cls, specs: Iterable[ModelSpec], loader_for: LoaderLookup, **kw: Any) -> "Registry":
        table: dict[str, ModelSpec] = {}
        for s in specs:
            if s.name in table:
                other = table[s.name]
                raise ConfigError(f"duplicate served model name {s.name!r}: {other.path or other.source} "
                                  f"and {s.path or s.source}")
            table[s.name] = s
        return cls(specs=table, loader_for=loader_for, **kw)

    # ---- lookup ---------------------------------------------------------------------------
    def resolve(self, name: str | None, kinds: Iterable[ModelKind] | None = None) -> ModelSpec:
        """The spec for `name`. With `kinds`, a model of another kind is a ModelNotSupported,
        never a silent fallback to some default model."""
        kinds = tuple(kinds or ())
        if not name:
            raise InvalidInput("'model' is required", param="model")
        spec = self.specs.get(name)
        if spec is None and name.endswith(":latest"):  # Ollama's `name:tag`: "x:latest" is "x"
            spec = self.specs.get(name[:-len(":latest")])
        if spec is None:
            raise ModelNotFound(name, kinds[0].value if len(kinds) == 1 else None)
        if kinds and spec.kind not in kinds:
            wanted = " or ".join(k.value for k in kinds)
            raise ModelNotSupported(f"model '{name}' is a {spec.kind.value}; this endpoint needs a {wanted}")
        return spec

    def of_kind(self, *kinds: ModelKind) -> list[ModelSpec]:
        return [s for s in self.specs.values() if s.kind in kinds]

    # ---- use --------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def use(self, name: str, kinds: Iterable[ModelKind] | None = None,
                  keep_alive: float | None = None) -> AsyncIterator[Any]:
        """Yield the loaded runtime for `name`; it is not unloaded while in use."""
        spec = self.resolve(name, kinds)
        entry = await self._ensure_loaded(spec)
        entry.in_use += 1
        if keep_alive is not None:
            entry.keep_alive = keep_alive
        try:
            yield entry.model
        finally:
            entry.in_use -= 1
            entry.last_used = self.clock()
            if entry.keep_alive == 0 and entry.in_use == 0:
                await self._unload(spec.name)

    async def _ensure_loaded(self, spec: ModelSpec) -> Loaded:
        entry = self.loaded.get(spec.name)
        if entry is not None:
            entry.last_used = self.clock()
            return entry
        fut = self._loading.get(spec.name)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._loading[spec.name] = fut
            try:
                entry = await self._load(spec)
                fut.set_result(entry)
            except BaseException as e:
                fut.set_exception(e)
                fut.exception()  # mark retrieved: nobody else may be waiting
                raise
            finally:
                del self._loading[spec.name]
            return entry
        return await asyncio.shield(fut)

    async def _load(self, spec: ModelSpec) -> Loaded:
        await self._evict_for_one_more()
        loader = self.loader_for(spec)  # raises NotImplementedYet for a format with no runtime
        t0 = time.perf_counter()
        log.info("loading %s %s (%s) from %s", spec.kind.value, spec.name, spec.format, spec.path or spec.source)
        try:
            model = await asyncio.to_thread(loader, spec)
        except ModelLoadFailed as e:  # the runtime's own reason; say which model it was
            raise ModelLoadFailed(f"model '{spec.name}' failed to load: {e.message}") from e
        except InferdError:
            raise
        except Exception as e:
            log.exception("loading %s failed", spec.name)
            raise ModelLoadFailed(f"model '{spec.name}' failed to load: {e}") from e
        now = self.clock()
        entry = Loaded(spec=spec, model=model, loaded_at=now, last_used=now, keep_alive=self.keep_alive,
                       load_seconds=time.perf_counter() - t0)
        self.loaded[spec.name] = entry
        log.info("loaded %s in %.2fs", spec.name, entry.load_seconds)
        return entry

    async def _evict_for_one_more(self) -> None:
        while len(self.loaded) >= self.max_loaded:
            idle = [e for e in self.loaded.values() if e.in_use == 0]
            if not idle:  # all busy: go over budget now, the reaper trims once they are idle
                log.warning("all %d loaded models are busy; loading one more", len(self.loaded))
                return
            await self._unload(min(idle, key=lambda e: e.last_used).spec.name)

    async def _unload(self, name: str) -> None:
        entry = self.loaded.pop(name, None)
        if entry is None:
            return
        log.info("unloading %s", name)
        close = getattr(entry.model, "close", None)
        if close is not None:
            try:
                await asyncio.to_thread(close)
            except Exception:
                log.exception("closing %s failed", name)

    async def unload(self, name: str) -> bool:
        """Explicit unload (Ollama keep_alive=0). Busy models unload when their last user ends."""
        entry = self.loaded.get(name)
        if entry is None:
            return False
        entry.keep_alive = 0
        if entry.in_use == 0:
            await self._unload(name)
        return True

    async def reap(self) -> None:
        now = self.clock()
        for name, e in list(self.loaded.items()):
            if e.in_use == 0 and now >= e.expires_at(now):
                await self._unload(name)
        idle = sorted((e for e in self.loaded.values() if e.in_use == 0), key=lambda e: e.last_used)
        while len(self.loaded) > self.max_loaded and idle:
            await self._unload(idle.pop(0).spec.name)

    # ---- lifecycle --------------------------------------------------------------------------
    def start(self, interval: float = 1.0) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    await self.reap()
                except Exception:
                    log.exception("reaper failed")
        self._reaper = asyncio.get_running_loop().create_task(loop())

    async def close(self) -> None:
        if self._reaper:
            self._reaper.cancel()
        for name in list(self.loaded):
            await self._unload(name)

    def ps(self) -> list[dict[str, Any]]:
        now, wall = self.clock(), time.time()
        out = []
        for e in self.loaded.values():
            exp = e.expires_at(now)
            out.append({"spec": e.spec, "in_use": e.in_use,
                        "expires_at": None if math.isinf(exp) else wall + (exp - now),
                        "load_seconds": e.load_seconds})
        return out
