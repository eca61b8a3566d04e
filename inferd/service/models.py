"""Model management at run time: pull (Hub, Ollama registry), delete, copy, create, load,
unload, and the event stream a UI follows (downloading bytes, loading, loaded, failed,
unloaded). Its own class with explicit dependencies: settings and the registry."""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from inferd.config import Settings
from inferd.errors import Forbidden, InsufficientStorage, InvalidInput, ModelNotFound, NotFound
from inferd.net.policy import FetchPolicy
from inferd.registry.discovery import MANIFEST, make_spec, served_specs
from inferd.registry.pull.install import install, remove_folder
from inferd.registry.pull.names import is_hub_name, parse_hub
from inferd.registry.pull.puller import Pulled, Puller
from inferd.registry.pull.transfer import DOWNLOADS, Remote
from inferd.registry.registry import Registry
from inferd.models import ModelKind, ModelSpec

log = logging.getLogger("inferd.models")

# At most 4 folder levels under the kind (a/b/c:tag -> a/b/c/tag): as deep as discovery looks.
_LOCAL_NAME = re.compile(r"^[A-Za-z0-9][\w.-]{0,127}(/[A-Za-z0-9_][\w.-]{0,127}){0,2}(:[A-Za-z0-9_][\w.-]{0,127})?$")
_EVENT_INTERVAL = 0.1   # seconds between two "downloading" events of one file


class EventBus:
    """Fan-out of model events to every /models/events subscriber (bounded queues: a slow
    subscriber loses old events, it never blocks the server)."""

    def __init__(self, maxsize: int = 1000):
        self._subs: set[asyncio.Queue] = set()
        self.maxsize = maxsize
        self.loop: asyncio.AbstractEventLoop | None = None

    def publish(self, event: str, fields: dict[str, Any]) -> None:
        """Callable from any thread."""
        item = {"event": event, "time": time.time(), **fields}
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if self.loop is None:
            self.loop = running
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        if running is loop:
            self._put(item)
        else:
            loop.call_soon_threadsafe(self._put, item)

    def _put(self, item: dict[str, Any]) -> None:
        for q in list(self._subs):
            if q.full():
                q.get_nowait()
            q.put_nowait(item)

    async def subscribe(self) -> AsyncIterator[dict[str, Any]]:
        q: asyncio.Queue = asyncio.Queue(self.maxsize)
        self._subs.add(q)
        try:
            while True:
                yield await q.get()
        finally:
            self._subs.discard(q)


class ModelManager:
    def __init__(self, settings: Settings, registry: Registry):
        self.settings, self.registry = settings, registry
        self.models_dir = settings.models_dir
        self.events = EventBus()
        # Hosts a pull may reach: the configured registry and Hub endpoint, and client-named
        # registry hosts only on public addresses (unless --allow-private-registries).
        self.policy = FetchPolicy(allow_private=settings.allow_private_registries, flag="--allow-private-registries")
        self.puller = Puller(settings.models_dir, reserve_bytes=settings.download_reserve_bytes,
                             prefer_quantized=settings.prefer_quantized, ollama_registry=settings.ollama_registry,
                             policy=self.policy)
        registry.listener = self.events.publish
        if settings.allow_downloads:
            registry.downloadable = self.downloadable
            registry.fetch_missing = self.fetch_missing
        # Pulls block on the network and on each other (one pull per model folder): their own
        # threads, so they never starve the default pool that model loads and file I/O use.
        self._executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="inferd-pull")
        self._running: set[threading.Event] = set()   # cancel flags of the pulls in flight
        self._meta: dict[tuple[str, int], dict[str, Any]] = {}   # GGUF headers by (file, mtime)

    def close(self) -> None:
        """Server shutdown: running pulls stop at their next chunk (their parts stay)."""
        for c in list(self._running):
            c.set()
        self._executor.shutdown(wait=False, cancel_futures=True)

    # ---- pulls --------------------------------------------------------------------------------
    @staticmethod
    def downloadable(name: str) -> bool:
        """With --allow-downloads: `hf.co/org/repo[:QUANT]` or a bare repo id."""
        try:
            parse_hub(name)
        except ValueError:
            return False
        return is_hub_name(name) or name.count("/") == 1

    async def fetch_missing(self, name: str, kind: ModelKind) -> ModelSpec:
        log.info("downloading %s (not local; --allow-downloads)", name)
        # An embedding request makes a GGUF repo an embedder; otherwise the repo says what it is
        # (and the registry refuses a kind the endpoint cannot use).
        return await self.pull(name, hub=True, kind=kind if kind is ModelKind.EMBEDDER else None)

    async def check_pull(self, name: str, *, hub: bool | None = None, insecure: bool = False) -> None:
        """Refusals a pull meets before anything is fetched, raised before a progress stream
        starts (so they are the response's status, not an error line): downloads off (403), a
        malformed name or a registry host on a non-public address (400)."""
        if not self.settings.allow_downloads:
            raise Forbidden("downloads are disabled on this server; start it with --allow-downloads to pull models")
        repo_ids_are_hub = hub if hub is not None else True
        if is_hub_name(name) or (repo_ids_are_hub and name.count("/") == 1):
            return  # the Hub endpoint is the operator's (HF_ENDPOINT), not the client's
        from inferd.registry.pull.names import parse_ollama
        from inferd.registry.pull.ollama import Registry as OllamaRegistry

        try:
            ref = parse_ollama(name)
        except ValueError as e:
            raise InvalidInput(str(e), "model") from e
        reg = OllamaRegistry(self.settings.ollama_registry, insecure, self.policy)
        await asyncio.to_thread(reg.policy.resolve, reg.base(ref) + "/v2/", "model")

    async def pull(self, name: str, on_event: Callable[[dict[str, Any]], None] | None = None, *,
                   hub: bool | None = None, insecure: bool = False, kind: ModelKind | None = None) -> ModelSpec:
        """Download `name` and serve it. Progress goes to `on_event` (on the event loop) and, as
        `downloading` events, to /models/events. A caller that goes away (its task cancelled)
        stops the transfer once nobody else waits for it; the part stays for a resume.
        Only with --allow-downloads (403 otherwise)."""
        if not self.settings.allow_downloads:
            raise Forbidden("downloads are disabled on this server; start it with --allow-downloads to pull models")
        loop = asyncio.get_running_loop()
        self.events.loop = loop
        cancel = threading.Event()
        last: dict[str, float] = {}

        def emit(e: dict[str, Any]) -> None:  # on the pull's worker thread
            if "digest" in e:
                done = e.get("completed") == e.get("total")
                now = time.monotonic()
                if not done and now - last.get(e["digest"], 0.0) < _EVENT_INTERVAL:
                    return
                last[e["digest"]] = now
                self.events.publish("downloading", {"model": name, "file": e.get("file"), "digest": e["digest"],
                                                    "completed": e["completed"], "total": e["total"]})
            if on_event is not None:
                loop.call_soon_threadsafe(on_event, e)

        repo_ids_are_hub = hub if hub is not None else True
        self._running.add(cancel)
        try:
            pulled = await loop.run_in_executor(self._executor, functools.partial(
                self.puller.pull, name, kind=kind, on_event=emit, cancel=cancel, insecure=insecure,
                repo_ids_are_hub=repo_ids_are_hub))
        except asyncio.CancelledError:
            cancel.set()
            raise
        except Exception as e:
            self.events.publish("failed", {"model": name, "error": getattr(e, "message", str(e))})
            raise
        finally:
            self._running.discard(cancel)
        return await self.register(pulled)

    async def register(self, pulled: Pulled) -> ModelSpec:
        rel = pulled.path.relative_to(self.models_dir / pulled.kind.plural).as_posix()
        spec = make_spec(rel, pulled.path, "models_dir", pulled.kind)
        # served under its kind's names, as discovery serves a folder (an embedder with a float
        # and an int8 graph: `<name>` and `<name>-i8`); a variant name another model already has
        # stays that model's
        for s in served_specs(spec):
            other = self.registry.specs.get(s.name)
            if "variant_of" in s.manifest and other is not None and other.manifest.get("variant_of") != spec.name:
                log.warning("not serving %s's int8 graph as %r: a model has that name", pulled.path, s.name)
                continue
            if s.name in self.registry.loaded:  # re-pulled: the next use loads the new files
                await self.registry.unload(s.name)
            self.registry.specs[s.name] = s
        return self.registry.specs[spec.name]

    # ---- management ---------------------------------------------------------------------------
    def _own(self, name: str) -> tuple[ModelSpec, Path]:
        """A served model that lives in models_dir (the only ones inferd may change), and its path."""
        spec = self.registry.lookup(name)
        if spec is None:
            raise ModelNotFound(name)
        if spec.source != "models_dir" or spec.path is None \
                or not spec.path.resolve().is_relative_to(self.models_dir.resolve()):
            raise InvalidInput(f"model '{name}' is not in the models folder ({spec.source}); inferd only "
                               "changes models it manages there", "model")
        return spec, spec.path

    def _folder_for(self, name: str, kind: ModelKind = ModelKind.GENERATOR) -> Path:
        if not _LOCAL_NAME.match(name) or ".." in name.split("/"):
            raise InvalidInput(f"invalid model name {name!r} (letters, digits, . _ -, at most 3 parts "
                               "separated by /, and one :tag)", "model")
        return self.models_dir / kind.plural / name.replace(":", "/")

    def _free_name(self, name: str, kind: ModelKind) -> Path:
        if self.registry.lookup(name) is not None:
            raise InvalidInput(f"model '{name}' already exists", "model")
        folder = self._folder_for(name, kind)
        if folder.exists():
            raise InvalidInput(f"model '{name}' already exists at {folder}", "model")
        return folder

    async def delete(self, name: str) -> None:
        spec, path = self._own(name)
        await self.registry.unload(spec.name)
        if path.is_dir():
            await asyncio.to_thread(remove_folder, self.models_dir, path)
        else:
            path.unlink()
        self.registry.specs.pop(spec.name, None)
        self.events.publish("deleted", {"model": spec.name})

    async def copy(self, source: str, destination: str) -> ModelSpec:
        spec, path = self._own(source)
        folder = self._free_name(destination, spec.kind)
        files = _model_files(path)
        manifest = {**spec.manifest, "name": destination, "copied_from": spec.name}
        return await self._install(folder, spec.kind, files, manifest, destination)

    async def create(self, name: str, *, source: str | None, files: dict[str, str] | None,
                     template: str | None, system: str | None, parameters: dict[str, Any] | None) -> ModelSpec:
        """Ollama's /api/create: from a served model (`source` a name), a local GGUF (`source` a
        path), or uploaded blobs (`files`: name -> sha256 digest), with template/system/parameters."""
        manifest: dict[str, Any] = {"name": name, "type": "generator", "format": "gguf"}
        blobs: dict[str, Path] = {}
        kind = ModelKind.GENERATOR
        if files:
            for fname, digest in files.items():
                if not fname.endswith(".gguf") or "/" in fname or fname.startswith("."):
                    raise InvalidInput(f"files: {fname!r} must be a .gguf file name", "files")
                blobs[fname] = self.blob_path(digest, must_exist=True)
        elif source:
            if source.endswith(".gguf") and os.path.isabs(source):
                path = Path(source)
                if not path.is_file():
                    raise NotFound(f"no GGUF file at {source}")
                blobs[path.name] = path
            else:
                base, base_path = self._own(source)
                kind = base.kind
                blobs = _model_files(base_path)
                manifest = {**base.manifest, "name": name, "parent_model": base.name}
        else:
            raise InvalidInput("'from' or 'files' is required", "from")
        if template is not None:
            from inferd.registry.pull import gotemplate

            manifest["ollama_template"] = template
            try:
                manifest["chat_template"] = gotemplate.to_jinja(template)
            except gotemplate.Unsupported as e:
                raise InvalidInput(f"template: {e}", "template") from e
        if system is not None:
            manifest["system"] = system
        if parameters:
            manifest["options"] = {**manifest.get("options", {}), **parameters}
        folder = self._free_name(name, kind)
        await asyncio.to_thread(_check_weights, blobs)
        return await self._install(folder, kind, blobs, manifest, name)

    async def _install(self, folder: Path, kind: ModelKind, files: dict[str, Path], manifest: dict[str, Any],
                       name: str) -> ModelSpec:
        rel = folder.relative_to(self.models_dir).as_posix()
        # install() moves what it is given: hand it links (or copies) so the source stays.
        tmp = self.models_dir / DOWNLOADS / f"copy-{os.urandom(6).hex()}"
        tmp.mkdir(parents=True)
        linked = {}
        try:
            for dest, src in files.items():
                target = tmp / dest.replace("/", "__")
                try:
                    os.link(src, target)
                except OSError:
                    await asyncio.to_thread(shutil.copyfile, src, target)
                linked[dest] = target
            path = await asyncio.to_thread(install, self.models_dir, rel, linked, manifest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return await self.register(Pulled(name, path, kind))

    # ---- blobs (Ollama /api/blobs) ------------------------------------------------------------
    def blob_path(self, digest: str, must_exist: bool = False) -> Path:
        if not re.fullmatch(r"sha256[:-][0-9a-f]{64}", digest or ""):
            raise InvalidInput(f"invalid blob digest {digest!r} (expected sha256:<64 hex>)", "digest")
        path = self.puller.transfers.done_path(Remote("blob", None, sha256=digest[7:]))
        if must_exist and not path.is_file():
            raise NotFound(f"blob {digest} not found; upload it with POST /api/blobs/{digest}")
        return path

    async def save_blob(self, digest: str, chunks: AsyncIterator[bytes], length: int | None) -> Path:
        """Store an uploaded blob after checking its sha256 (streamed to disk, never held in memory)."""
        import hashlib

        path = self.blob_path(digest)
        if length is not None:
            self.puller.transfers.check_space([Remote("blob", length, sha256=digest[7:])])
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(path.name + f".upload-{os.urandom(4).hex()}")
        h = hashlib.sha256()
        written, checked = 0, 0
        try:
            with open(part, "wb") as f:
                async for chunk in chunks:
                    h.update(chunk)
                    try:
                        f.write(chunk)
                    except OSError as e:
                        if e.errno == errno.ENOSPC:
                            raise InsufficientStorage(f"disk full while receiving blob {digest}") from e
                        raise
                    written += len(chunk)
                    if written - checked >= 64 << 20:  # no length given, or a client sending more than it said
                        checked = written
                        if shutil.disk_usage(part.parent).free < self.puller.transfers.reserve:
                            raise InsufficientStorage(f"receiving blob {digest} would leave less free disk "
                                                      "than --download-reserve-bytes")
            if h.hexdigest() != digest[7:]:
                raise InvalidInput(f"uploaded bytes do not match {digest} (got sha256:{h.hexdigest()})", "digest")
            os.replace(part, path)
        finally:
            part.unlink(missing_ok=True)
        return path

    # ---- metadata (Ollama /api/show) ----------------------------------------------------------
    def gguf_metadata(self, spec: ModelSpec) -> dict[str, Any]:
        """The GGUF header of a model's weights (first shard), {} if it has none. Blocking."""
        from inferd.registry.discovery import model_ggufs
        from inferd.registry.gguf_meta import NotGGUF, read_metadata

        if spec.format != "gguf" or spec.path is None:
            return {}
        files = [spec.path] if spec.path.is_file() else model_ggufs(spec.path)
        if not files:
            return {}
        key = (str(files[0]), files[0].stat().st_mtime_ns)
        if key not in self._meta:
            try:
                self._meta[key] = read_metadata(files[0])
            except (NotGGUF, OSError) as e:
                log.warning("cannot read the GGUF header of %s: %s", files[0], e)
                self._meta[key] = {}
        return self._meta[key]


def _model_files(path: Path) -> dict[str, Path]:
    """The files of a model (folder or single GGUF), by their path in the folder, manifest excluded."""
    if path.is_file():
        return {path.name: path}
    out = {}
    for p in sorted(path.rglob("*")):
        if p.is_file() and p.name != MANIFEST:
            out[p.relative_to(path).as_posix()] = p
    return out




def _check_weights(files: dict[str, Path]) -> None:
    """Every GGUF a created model would be made of has a sane header: a bad upload is the
    create's 400, not a 500 at its first chat. Blocking."""
    from inferd.registry.gguf_meta import NotGGUF, check_gguf

    for dest, path in files.items():
        if not dest.endswith(".gguf"):
            continue
        try:
            check_gguf(path)
        except NotGGUF as e:
            raise InvalidInput(f"{dest}: {e}", "files") from e
        except OSError as e:
            raise InvalidInput(f"{dest}: cannot be read ({e.strerror})", "files") from e
