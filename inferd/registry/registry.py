"""Served names -> loaded handles. Loads on first use, keeps a model for `keep_alive` after
its last use, evicts idle models in LRU order beyond `max_loaded` or the memory budget.

A load belongs to the registry, not to the request that asked first: it runs in a task of
the registry's own, shielded from every requester's cancellation, so a client that leaves
mid-load costs the others nothing, and the loaded model is always registered (or closed).
Every waiter gets the model or the same error; at most one load per model runs, and loads
of different models run one at a time (`max_loading`), as Ollama does. A failed load raises
ModelLoadFailed and is retried next time.

Preload (`preload`, from `inferd serve --preload`): a load begun on a thread before the event
loop runs, so that it overlaps the rest of the start (the web stack's imports, the socket);
the first request, or `start()`, adopts it as the model's load task, so it is registered,
counted and kept alive like any other load.

Memory budget (`max_memory` bytes, 0 = none): a load first evicts idle models, least
recently used first, until the model's estimated size fits; if it cannot fit even then it
is MemoryBudgetExceeded (507). Estimates: before loading, from the files (`estimate`); once
loaded, the handle's own `size_bytes` (weights + KV cache for generators)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, overload

from inferd.kinds import KINDS
from inferd.errors import (ConfigError, InferdError, InvalidInput, MemoryBudgetExceeded, ModelLoadFailed,
                           ModelNotFound, ModelNotSupported)
from inferd.observability.context import note_model
from inferd.registry.pull.names import aliases as name_aliases
from inferd.models import ModelKind, ModelSpec

log = logging.getLogger("inferd.registry")

LoaderLookup = Callable[[ModelSpec], Callable[[ModelSpec], Any]]
H = TypeVar("H")
H_co = TypeVar("H_co", covariant=True)


class TypedKind(Protocol[H_co]):
    """A kind that says its handle type: a KindSpec of the kinds table (inferd/kinds). It is
    iterable as a one-kind filter, so it stands wherever a list of kinds does."""

    def __iter__(self) -> Iterator[ModelKind]: ...
    def handle_of(self, model: object) -> H_co: ...


@dataclass
class Loaded:
    spec: ModelSpec
    model: Any
    loaded_at: float
    last_used: float
    keep_alive: float
    in_use: int = 0
    load_seconds: float = 0.0
    size_bytes: int = 0

    def expires_at(self, now: float) -> float:
        return now + self.keep_alive if self.in_use else self.last_used + self.keep_alive


@dataclass
class Registry:
    specs: dict[str, ModelSpec]
    loader_for: LoaderLookup
    keep_alive: float = 300.0
    max_loaded: int = 4
    max_memory: int = 0                 # bytes; 0: no budget
    max_loading: int = 1                # different models loading at once
    clock: Callable[[], float] = time.monotonic
    loaded: dict[str, Loaded] = field(default_factory=dict)
    loads: int = 0                      # loader calls made (for tests and /metrics)
    load_failures: int = 0
    _loading: dict[str, asyncio.Task] = field(default_factory=dict)
    _load_gate: asyncio.Semaphore | None = None
    _reaper: asyncio.Task | None = None
    _early: dict[str, concurrent.futures.Future[Any]] = field(default_factory=dict)  # preloads not yet adopted
    # Getting models at run time (service/models.py): `listener(event, fields)` hears loading,
    # loaded, failed, unloaded; with `fetch_missing`, a name `downloadable` says it can fetch
    # resolves to a pending spec that is downloaded (once, in the load task, before the load
    # gate) when first used, which is after admission.
    listener: Callable[[str, dict[str, Any]], None] | None = None
    downloadable: Callable[[str], bool] | None = None
    fetch_missing: Callable[[str, ModelKind], Awaitable[ModelSpec]] | None = None
    aliases: dict[str, str] = field(default_factory=dict)
    # Specs that are loaded and held like any other but are not served names of their own, so
    # no catalog lists them: a GGUF generator's embedding twin (service/core.py)
    twins: dict[str, ModelSpec] = field(default_factory=dict)

    @classmethod
    def build(cls, specs: Iterable[ModelSpec], loader_for: LoaderLookup, **kw: Any) -> "Registry":
        table: dict[str, ModelSpec] = {}
        for s in specs:
            if s.name in table:
                other = table[s.name]
                raise ConfigError(f"duplicate served model name {s.name!r}: {other.path or other.source} "
                                  f"and {s.path or s.source}")
            table[s.name] = s
        # other names a spec answers to (a built-in voice by its file's name: en_US-joe-medium)
        spelled = {str(a): s.name for s in table.values() for a in s.manifest.get("aliases") or ()
                   if str(a) not in table}
        reg = cls(specs=table, loader_for=loader_for, **kw)
        reg.aliases.update(spelled)
        return reg

    # ---- lookup ---------------------------------------------------------------------------
    def resolve(self, name: str | None, kinds: Iterable[ModelKind] | None = None) -> ModelSpec:
        """The spec for `name`. With `kinds`, a model of another kind is a ModelNotSupported,
        never a silent fallback to some default model."""
        kinds = tuple(kinds or ())
        if not name:
            raise InvalidInput("'model' is required", param="model")
        spec = self.lookup(name)
        if spec is None and self.downloadable is not None and self.downloadable(name):
            spec = ModelSpec(name=name, kind=kinds[0] if kinds else ModelKind.GENERATOR, format="download",
                             path=None, source="download")
        if spec is None:
            raise ModelNotFound(name, kinds[0].value if len(kinds) == 1 else None)
        if kinds and spec.kind not in kinds:
            wanted = " or ".join(k.value for k in kinds)
            raise ModelNotSupported(f"model '{name}' is a {spec.kind.value}; this endpoint needs a {wanted}")
        return spec

    def resolve_served(self, name: str | None, kinds: Iterable[ModelKind] | None = None) -> ModelSpec:
        """resolve() for catalogs: a model not downloaded yet is not served (404)."""
        spec = self.resolve(name, kinds)
        if spec.source == "download":
            kinds = tuple(kinds or ())
            raise ModelNotFound(spec.name, kinds[0].value if len(kinds) == 1 else None)
        return spec

    def lookup(self, name: str) -> ModelSpec | None:
        """The served model called `name` (or one of its other spellings), else None."""
        spec = self.specs.get(name) or self.twins.get(name) or self._alias(name)
        if spec is None and name.endswith(":latest"):  # Ollama's `name:tag`: "x:latest" is "x"
            spec = self.specs.get(name[: -len(":latest")])
        return spec

    def _alias(self, name: str) -> ModelSpec | None:
        """Other spellings of a pulled model's name (hf.co/..., registry.ollama.ai/..., :latest)."""
        if name in self.aliases and self.aliases[name] in self.specs:
            return self.specs[self.aliases[name]]
        return next((self.specs[a] for a in name_aliases(name) if a in self.specs), None)

    def _event(self, event: str, **fields: Any) -> None:
        if self.listener is not None:
            try:
                self.listener(event, fields)
            except Exception:
                log.exception("model event listener failed")

    def of_kind(self, *kinds: ModelKind) -> list[ModelSpec]:
        return [s for s in self.specs.values() if s.kind in kinds]

    # ---- use --------------------------------------------------------------------------------
    @overload
    def use(self, name: str, kinds: TypedKind[H], keep_alive: float | None = None
            ) -> contextlib.AbstractAsyncContextManager[H]: ...

    @overload
    def use(self, name: str, kinds: Iterable[ModelKind] | None = None, keep_alive: float | None = None
            ) -> contextlib.AbstractAsyncContextManager[Any]: ...

    def use(self, name: str, kinds: Iterable[ModelKind] | None = None, keep_alive: float | None = None
            ) -> contextlib.AbstractAsyncContextManager[Any]:
        """Hold the loaded handle of `name` (it is not unloaded while held). With a kind of the
        kinds table (inferd/kinds: `registry.use(name, EMBEDDER)`) the handle is typed as that
        kind's; with a list of kinds, or none, it is Any."""
        return self._use(name, kinds, keep_alive)

    def handle(self, name: str, kind: TypedKind[H]) -> H | None:
        """The loaded handle of `name`, typed by its kind, without holding it; None if it is not
        loaded or is of another kind (catalogs: a loaded generator's chat template)."""
        entry = self.loaded.get(name)
        if entry is None or entry.spec.kind not in kind:
            return None
        return kind.handle_of(entry.model)

    @contextlib.asynccontextmanager
    async def _use(self, name: str, kinds: Iterable[ModelKind] | None, keep_alive: float | None
                   ) -> AsyncIterator[Any]:
        spec = self.resolve(name, kinds)
        t0 = time.time_ns()
        try:
            entry = await self._ensure_loaded(spec)
        finally:
            note_model(spec.name, t0)  # per-model request counts, timing headers, the trace's load span
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
        return await asyncio.shield(self._load_started(spec))

    def _load_started(self, spec: ModelSpec) -> asyncio.Task:
        """The model's load task: the one running, or a new one."""
        task = self._loading.get(spec.name)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._load_task(spec), name=f"load:{spec.name}")
            self._loading[spec.name] = task
            # Retrieve a failure even when every waiter has gone, so it is never logged as lost.
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return task

    def preload(self, names: Iterable[str], between: Callable[[], None] = lambda: None) -> list[str]:
        """Begin loading these served models now, one after another on a thread of their own
        (no event loop is needed: called before the server runs), in the order given, calling
        `between()` before each but the first (the server waits there until no request is in
        flight: a second load would slow the first model's first answer). -> their names. An
        unknown name is a ConfigError; a load that fails is logged when adopted and retried
        on first use."""
        try:
            specs = [self.resolve(n) for n in names]
        except ModelNotFound as e:
            raise ConfigError(f"--preload: {e.message}") from e
        todo = []
        for spec in specs:
            if spec.name in self.loaded or spec.name in self._early or spec.source == "download":
                continue
            fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
            self._early[spec.name] = fut
            todo.append((spec, self.loader_for(spec), fut))

        def run() -> None:
            for i, (spec, loader, fut) in enumerate(todo):
                if i:
                    between()
                log.info("preloading %s %s (%s)", spec.kind.value, spec.name, spec.format)
                try:
                    fut.set_result(loader(spec))
                except BaseException as e:  # noqa: BLE001 (delivered to the adopting load)
                    fut.set_exception(e)

        if todo:
            threading.Thread(target=run, name="preload", daemon=True).start()
        return [s.name for s in specs]

    async def _load_task(self, spec: ModelSpec) -> Loaded:
        key = spec.name
        try:
            if spec.source == "download" and self.fetch_missing is not None:
                pending = spec
                spec = await self.fetch_missing(pending.name, pending.kind)
                if spec.kind is not pending.kind:
                    raise ModelNotSupported(f"model '{pending.name}' is a {spec.kind.value}; this endpoint "
                                            f"needs a {pending.kind.value}")
                self.aliases[pending.name] = spec.name
                if spec.name in self.loaded:
                    return self.loaded[spec.name]
            if spec.name in self._early:  # a preload, already running on its thread: not gated
                return await self._load(spec)
            if self._load_gate is None:
                self._load_gate = asyncio.Semaphore(max(1, self.max_loading))
            async with self._load_gate:
                return await self._load(spec)
        finally:
            self._loading.pop(key, None)

    async def _load(self, spec: ModelSpec) -> Loaded:
        early = self._early.pop(spec.name, None)  # begun by preload(): waited for below
        try:
            loader = self.loader_for(spec)  # raises NotImplementedYet for a format with no runtime
            await self._make_room(spec.name, self.estimate(spec))
        except BaseException:
            if early is not None:  # refused (no room): the preloaded model is closed once built
                early.add_done_callback(_close_result)
            raise
        t0 = time.perf_counter()
        log.info("loading %s %s (%s) from %s", spec.kind.value, spec.name, spec.format, spec.path or spec.source)
        self.loads += 1
        self._event("loading", model=spec.name)
        try:
            try:
                model = await (asyncio.wrap_future(early) if early is not None else asyncio.to_thread(loader, spec))
            except ModelLoadFailed as e:  # the runtime's own reason; say which model it was
                self.load_failures += 1
                raise ModelLoadFailed(f"model '{spec.name}' failed to load: {e.message}") from e
            except InferdError:
                self.load_failures += 1
                raise
            except Exception as e:
                self.load_failures += 1
                log.exception("loading %s failed", spec.name)
                raise ModelLoadFailed(f"model '{spec.name}' failed to load: {e}") from e
        except InferdError as e:
            self._event("failed", model=spec.name, error=e.message)
            raise
        now = self.clock()
        size = int(getattr(model, "size_bytes", 0) or self.estimate(spec))
        entry = Loaded(spec=spec, model=model, loaded_at=now, last_used=now, keep_alive=self.keep_alive,
                       load_seconds=time.perf_counter() - t0, size_bytes=size)
        self.loaded[spec.name] = entry
        log.info("loaded %s in %.2fs (about %d MiB)", spec.name, entry.load_seconds, size >> 20)
        self._event("loaded", model=spec.name, seconds=round(entry.load_seconds, 3))
        if self.max_memory and self.resident_bytes() > self.max_memory:  # the estimate was low
            await self._evict_idle(lambda: self.resident_bytes() > self.max_memory, keep=spec.name)
        return entry

    def estimate(self, spec: ModelSpec) -> int:
        """Resident size before loading: the weights on disk, times the kind's load overhead (a
        generator's KV cache and compute buffers, guessed at 25%). The loaded handle reports
        a better figure."""
        size = spec.size_bytes
        if not size and spec.path is not None and spec.path.exists():
            p = spec.path
            size = p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        return int(size * KINDS[spec.kind].load_overhead)  # a generator's KV cache and buffers

    def resident_bytes(self) -> int:
        return sum(e.size_bytes for e in self.loaded.values())

    async def _make_room(self, name: str, need: int) -> None:
        """Evict idle models (LRU) for one more model of `need` bytes: beyond `max_loaded`
        and beyond the memory budget. Busy models are never evicted."""
        if len(self.loaded) >= self.max_loaded:
            await self._evict_idle(lambda: len(self.loaded) >= self.max_loaded)
            if len(self.loaded) >= self.max_loaded:  # all busy: go over now, the reaper trims later
                log.warning("all %d loaded models are busy; loading one more", len(self.loaded))
        if not self.max_memory:
            return
        if need > self.max_memory:
            raise MemoryBudgetExceeded(f"model '{name}' needs about {_mib(need)} MiB; the memory budget "
                                       f"(--max-memory) is {_mib(self.max_memory)} MiB")
        await self._evict_idle(lambda: self.resident_bytes() + need > self.max_memory)
        if self.resident_bytes() + need > self.max_memory:
            busy = ", ".join(sorted(self.loaded))
            raise MemoryBudgetExceeded(
                f"model '{name}' needs about {_mib(need)} MiB; {_mib(self.resident_bytes())} of the "
                f"{_mib(self.max_memory)} MiB budget (--max-memory) are held by models in use ({busy}); "
                "retry when they are idle")

    async def _evict_idle(self, over: Callable[[], bool], keep: str | None = None) -> None:
        while over():
            idle = [e for e in self.loaded.values() if e.in_use == 0 and e.spec.name != keep]
            if not idle:
                return
            await self._unload(min(idle, key=lambda e: e.last_used).spec.name)

    async def _unload(self, name: str) -> None:
        entry = self.loaded.pop(name, None)
        if entry is None:
            return
        log.info("unloading %s", name)
        self._event("unloaded", model=name)
        close = getattr(entry.model, "close", None)
        if close is not None:
            try:
                # Shielded: a requester cancelled while this runs must not leave it half done.
                await asyncio.shield(asyncio.to_thread(close))
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
        for name in list(self._early):  # preloads become load tasks: registered once done
            self._load_started(self.specs[name])

    async def close(self) -> None:
        if self._reaper:
            self._reaper.cancel()
        for task in list(self._loading.values()):  # a load in flight is registered, then closed
            with contextlib.suppress(BaseException):
                await task
        for name in list(self.loaded):
            await self._unload(name)

    def ps(self) -> list[dict[str, Any]]:
        now, wall = self.clock(), time.time()
        out = []
        for e in self.loaded.values():
            exp = e.expires_at(now)
            out.append({"spec": e.spec, "in_use": e.in_use,
                        "expires_at": None if math.isinf(exp) else wall + (exp - now),
                        "load_seconds": e.load_seconds, "size_bytes": e.size_bytes})
        return out


def _close_result(fut: concurrent.futures.Future[Any]) -> None:
    if fut.exception() is None:
        with contextlib.suppress(Exception):
            fut.result().close()


def _mib(n: int) -> str:
    """MiB for messages; one decimal below 10 MiB, so a 300 KiB budget does not read "1 MiB"."""
    return f"{n / 2**20:.1f}" if n < 10 << 20 else str(n >> 20)
