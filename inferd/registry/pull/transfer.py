"""Resumable, verified, shared file transfers into `<models_dir>/.downloads/`.

- A file downloads to `.downloads/<key>.part`; an interrupted transfer resumes from the
  part's length (HTTP Range) next time, in this process or another.
- When complete it is hashed (sha256, or git's blob sha1 for small non-LFS Hub files) and
  compared with what the source said; a mismatch deletes the part and fails clearly.
- Verified bytes are renamed to `.downloads/<key>`; install.py moves them into a model
  folder. `.downloads` is never scanned by discovery, so nothing partial is ever served.
- Two pulls of one file share one transfer: in this process the second waits on the
  first (and sees its progress); across processes an flock on `<key>.lock` serialises them
  and the second finds the finished file.
- Before a pull, free disk space must cover what is left to fetch plus a reserve."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import re
import shutil
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from inferd.errors import Cancelled, InsufficientStorage, UpstreamFailed

log = logging.getLogger("inferd.pull")

DOWNLOADS = ".downloads"
Progress = Callable[[int, int | None], None]          # (completed bytes, total bytes)
Fetch = Callable[[BinaryIO, int], None]              # write the bytes from offset into the file
_KEY = re.compile(r"^[a-z0-9-]{8,80}$")


@dataclass(frozen=True)
class Remote:
    """One file to fetch. `fetch(f, offset)` appends bytes from `offset`; it may call
    `Transfer.advance` through the `progress` hook it is given by the caller's closure."""

    name: str                 # for messages and progress bars
    size: int | None
    sha256: str | None = None
    git_sha1: str | None = None

    @property
    def key(self) -> str:
        if self.sha256:
            return f"sha256-{self.sha256.lower()}"
        if self.git_sha1:
            return f"gitsha1-{self.git_sha1.lower()}"
        return "name-" + hashlib.sha256(self.name.encode()).hexdigest()


@dataclass
class _Transfer:
    done: threading.Event = field(default_factory=threading.Event)
    listeners: list[Progress] = field(default_factory=list)
    callers: list[threading.Event] = field(default_factory=list)   # each set when its caller gives up
    result: Path | None = None
    error: BaseException | None = None
    completed: int = 0
    total: int | None = None

    def advance(self, completed: int, total: int | None) -> None:
        self.completed, self.total = completed, total
        for cb in list(self.listeners):
            cb(completed, total)
        if self.callers and all(c.is_set() for c in self.callers):
            raise Cancelled("download cancelled: every client that asked for it went away")


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def git_blob_sha1(path: Path) -> str:
    h = hashlib.sha1()
    h.update(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


class Transfers:
    """The transfers of one models folder. One instance per folder per process (`of`)."""

    _instances: dict[Path, "Transfers"] = {}
    _instances_lock = threading.Lock()

    def __init__(self, models_dir: Path, reserve_bytes: int = 0):
        self.dir = Path(models_dir) / DOWNLOADS
        self.reserve = reserve_bytes
        self._lock = threading.Lock()
        self._active: dict[str, _Transfer] = {}
        self._folder_locks: dict[str, threading.Lock] = {}
        self._claims: dict[str, int] = {}   # pulls holding a finished file (two quants may share an mmproj)

    @classmethod
    def of(cls, models_dir: Path, reserve_bytes: int = 0) -> "Transfers":
        key = Path(models_dir).resolve()
        with cls._instances_lock:
            inst = cls._instances.get(key)
            if inst is None:
                inst = cls._instances[key] = cls(key, reserve_bytes)
            inst.reserve = reserve_bytes
            return inst

    @contextlib.contextmanager
    def folder_lock(self, folder: str):
        """One pull of a model folder at a time, in this process and across processes: a
        second pull of the same model waits, then finds it installed."""
        self.dir.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256(folder.encode()).hexdigest()[:24]
        with self._lock:
            tlock = self._folder_locks.setdefault(name, threading.Lock())
        with tlock, open(self.dir / f"folder-{name}.lock", "a+b") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def done_path(self, r: Remote) -> Path:
        return self.dir / r.key

    def have(self, r: Remote) -> int:
        """Bytes already here for `r` (complete or partial)."""
        done = self.done_path(r)
        if done.is_file():
            return done.stat().st_size
        part = self.dir / f"{r.key}.part"
        return part.stat().st_size if part.is_file() else 0

    def check_space(self, remotes: Iterable[Remote]) -> None:
        need = sum(max(0, (r.size or 0) - self.have(r)) for r in remotes)
        self.dir.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(self.dir).free
        if need + self.reserve > free:
            raise InsufficientStorage(
                f"not enough disk space in {self.dir.parent}: the download needs {need} more bytes, "
                f"{free} are free" + (f" and {self.reserve} are kept in reserve (--download-reserve-bytes)"
                                      if self.reserve else ""))

    def get(self, r: Remote, fetch: Callable[[BinaryIO, int, Progress], None],
            progress: Progress | None = None, cancel: threading.Event | None = None) -> Path:
        """The verified file for `r`, fetching it (or waiting for the transfer already running).
        `cancel` is set when the caller gives up; the transfer stops when every caller has
        (its part stays, for a later resume)."""
        if not _KEY.match(r.key[:80]):
            raise UpstreamFailed(f"{r.name}: unusable checksum from the source")
        with self._lock:
            self._claims[r.key] = self._claims.get(r.key, 0) + 1
        try:
            return self._get(r, fetch, progress, cancel)
        except BaseException:
            self.release(r, drop=False)
            raise

    def release(self, r: Remote, drop: bool = True) -> None:
        """A pull is done with the file `get` gave it. Installed (`drop`): the last pull to let
        go deletes it from the download area. A failed pull keeps it for the next attempt."""
        with self._lock:
            n = self._claims.get(r.key, 0) - 1
            if n > 0:
                self._claims[r.key] = n
                return
            self._claims.pop(r.key, None)
            if drop and r.key not in self._active:
                self.done_path(r).unlink(missing_ok=True)

    def _get(self, r: Remote, fetch: Callable[[BinaryIO, int, Progress], None], progress: Progress | None,
             cancel: threading.Event | None) -> Path:
        done = self.done_path(r)
        if done.is_file():
            if progress:
                progress(done.stat().st_size, done.stat().st_size)
            return done
        with self._lock:
            existing = self._active.get(r.key)
            owner = existing is None
            t = existing if existing is not None else _Transfer()
            self._active[r.key] = t
            cancel = cancel or threading.Event()
            t.callers.append(cancel)
            if progress:
                t.listeners.append(progress)
        try:
            if not owner:
                while not t.done.wait(0.2):
                    if cancel.is_set():
                        raise Cancelled("download cancelled")
                if t.error is not None:
                    raise t.error
                assert t.result is not None
                return t.result
            try:
                t.result = self._run(r, fetch, t)
            except BaseException as e:
                t.error = e
                raise
            finally:
                with self._lock:
                    self._active.pop(r.key, None)
                t.done.set()
            return t.result
        finally:
            with self._lock:
                t.callers.remove(cancel)
                if progress is not None and progress in t.listeners:
                    t.listeners.remove(progress)

    def _run(self, r: Remote, fetch: Callable[[BinaryIO, int, Progress], None], t: _Transfer) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        done, part = self.done_path(r), self.dir / f"{r.key}.part"
        with open(self.dir / f"{r.key}.lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process fetching the same file: wait for it
            try:
                if done.is_file():
                    t.advance(done.stat().st_size, done.stat().st_size)
                    return done
                offset = part.stat().st_size if part.is_file() else 0
                if r.size is not None and offset > r.size:
                    part.unlink()
                    offset = 0
                if offset:
                    log.info("resuming %s at byte %d of %s", r.name, offset, r.size)
                try:
                    with open(part, "ab") as raw:
                        f = _HashingWriter(raw, part, offset, r)
                        fetch(f, offset, t.advance)  # type: ignore[arg-type]
                        raw.flush()
                        os.fsync(raw.fileno())  # durable before the rename that makes it visible
                        digest = f.hexdigest()
                except OSError as e:
                    if e.errno == errno.ENOSPC:
                        part.unlink(missing_ok=True)
                        raise InsufficientStorage(f"disk full while downloading {r.name}; the partial "
                                                  "file was removed") from e
                    raise
                self._verify(r, part, digest)
                os.replace(part, done)
                return done
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _verify(self, r: Remote, part: Path, digest: str | None = None) -> None:
        size = part.stat().st_size
        if r.size is not None and size != r.size:
            part.unlink(missing_ok=True)
            raise UpstreamFailed(f"{r.name}: received {size} bytes, expected {r.size}; the partial file was "
                                 "removed, try again")
        if r.sha256:
            got = digest or file_sha256(part)
            if got != r.sha256.lower():
                part.unlink(missing_ok=True)
                raise UpstreamFailed(f"{r.name}: sha256 mismatch (expected {r.sha256}, got {got}); the corrupt "
                                     "download was removed")
        elif r.git_sha1:
            got = digest or git_blob_sha1(part)
            if got != r.git_sha1.lower():
                part.unlink(missing_ok=True)
                raise UpstreamFailed(f"{r.name}: checksum mismatch (expected git blob {r.git_sha1}, got {got}); "
                                     "the corrupt download was removed")


class _HashingWriter:
    """The part file as the fetcher sees it: bytes are hashed as they are written, so a
    finished download is verified without reading it back. A resumed part is hashed once
    first; a fetcher that rewinds (a server ignored Range) restarts the hash."""

    def __init__(self, f: BinaryIO, path: Path, offset: int, r: Remote):
        self.f, self.r = f, r
        self.h: Any
        if r.sha256:
            self.h = hashlib.sha256()
        elif r.git_sha1:
            self.h = hashlib.sha1(b"blob %d\0" % r.size) if r.size is not None else None
        else:
            self.h = None
        self.valid = self.h is not None and (r.sha256 is not None or r.size is not None)
        if self.valid and offset:
            with open(path, "rb") as old:
                while chunk := old.read(1 << 20):
                    self.h.update(chunk)

    def write(self, b: bytes) -> int:
        if self.valid:
            self.h.update(b)
        return self.f.write(b)

    def tell(self) -> int:
        return self.f.tell()

    def seek(self, pos: int, whence: int = 0) -> int:
        return self.f.seek(pos, whence)

    def truncate(self, size: int | None = None) -> int:
        n = self.f.truncate(size)
        if n == 0 and self.valid:
            self.h = hashlib.sha256() if self.r.sha256 else hashlib.sha1(b"blob %d\0" % (self.r.size or 0))
        elif self.valid:
            self.valid = False  # cut somewhere else: _verify reads the file back
        return n

    def flush(self) -> None:
        self.f.flush()

    def hexdigest(self) -> str | None:
        return self.h.hexdigest() if self.valid else None
