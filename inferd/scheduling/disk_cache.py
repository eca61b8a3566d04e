"""The disk tier of the prompt cache (`--cache-dir`, `--cache-disk-size`): sequence states
that outlive the process, so a restart does not cost a full prefill.

When a job finishes, its slot's sequence (prompt + generated tokens) is offered here: its KV
state is copied out on the worker thread (llama_state_seq_get_data, a memcpy) and handed to a
writer thread, which writes it atomically and checksummed (storage/kvfile.py). A later
prompt, in this process or the next, that shares a longer prefix with an entry than with any
slot or host-RAM state gets that entry's state restored into its slot, cut to the shared
prefix, and prefills only the rest.

Identity: an entry is loaded only when the model file (path, size, mtime, a hash of its
first MiB) and the context config (n_ctx, KV dtype, LoRA set, llama.cpp version and system
info) are the ones it was made with. An entry of the same model path whose file identity
differs is stale (the file was replaced): it is deleted. Entries of other models or configs
are left alone (another server, or this one with other flags, may use them) but never loaded.

Names: `<ident>-k-<hash of prompt_cache_key>.kv` for a request that names its entry (one
per key per model: each turn replaces it) and `<ident>-p-<hash of tokens>.kv` otherwise, so
the same key on two models never collides. An entry whose tokens are a prefix of a newer one
is superseded and removed.

Bounds: the folder as a whole (every model's entries) stays under `capacity` bytes, least
recently used (file mtime, touched on each hit) out first; at most `max_pending` bytes wait
for the writer (more is dropped and counted, never a stall). A write that fails (ENOSPC
included) is a warning. A file that fails a check is a warning and is deleted."""

from __future__ import annotations

import collections
import errno
import hashlib
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from inferd.storage.kvfile import SUFFIX, TMP_PREFIX, BadEntry, Identity, Meta, read_meta, read_payload, write_entry

log = logging.getLogger("inferd.disk_cache")

TMP_MAX_AGE = 600.0  # seconds: an older `.tmp-*` file is a crashed write (a live one is younger)


def _h(s: str) -> bytes:
    return hashlib.sha256(s.encode()).digest()


def identity(desc: Mapping[str, str]) -> Identity:
    """Identity from a backend's `cache_identity()`: {"model": path, "file": ..., "config": ...}."""
    return Identity(_h(desc["model"]), _h(desc["file"]), _h(desc["config"]))


def _common(a: tuple[int, ...], b: list[int]) -> int:
    """Length of the common prefix. Runs for every entry at each admission on the worker, so
    past the first tokens (where most entries differ) it compares slices, at C speed, by
    bisection instead of token by token."""
    n = min(len(a), len(b))
    i = 0
    while i < n and i < 16:
        if a[i] != b[i]:
            return i
        i += 1
    lo, hi = i, n  # a[:lo] == b[:lo]; find the largest such lo
    tb = tuple(b[:n])
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == tb[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class DiskCache:
    MIN_TOKENS = 32  # as the host cache: shorter prompts are cheaper to prefill than to load

    def __init__(self, root: Path, capacity: int, describe: Callable[[], Mapping[str, str]],
                 max_pending: int | None = None, reuse_floor: Callable[[int], int] | None = None):
        self.root, self.capacity, self._describe = Path(root), capacity, describe
        # reuse_floor(n): the shortest prefix a state of n tokens can be cut back to (backend's);
        # when states cannot be cut far (sliding window), the prompt's own state is kept as a
        # checkpoint beside the longer final one instead of being superseded by it
        self._floor = reuse_floor or (lambda n: 0)
        self.checkpoints = self._floor(1 << 20) > 0
        self.max_pending = max_pending if max_pending is not None else max(capacity // 4, 64 << 20)
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._index: dict[str, Meta] = {}           # file name -> usable entry of this identity
        # (identity and name tag at the time of the copy, tokens, key, state)
        self._queue: collections.deque[tuple[Identity, str, tuple[int, ...], str | None, bytes]] = \
            collections.deque()
        self._pending = 0
        self._cond = threading.Condition(self._lock)
        self._busy = False
        self._inflight: list[tuple[Identity, str, tuple[int, ...], str | None, bytes]] = []
        self._closing = False
        # counters (/metrics)
        self.hits = self.restored_tokens = self.writes = self.written_bytes = 0
        self.write_errors = self.dropped = self.bad_files = self.stale_files = self.evicted = 0
        self.ident = identity(describe())
        self.tag = hashlib.sha256(self.ident.model_id + self.ident.file_fp + self.ident.config_fp).hexdigest()[:12]
        self._scan()
        self._writer = threading.Thread(target=self._write_loop, name=f"kvdisk:{self.tag}", daemon=True)
        self._writer.start()

    # ---- index --------------------------------------------------------------------------------
    def _scan(self) -> None:
        """Index the usable entries; delete broken and stale files and dead temporaries."""
        index: dict[str, Meta] = {}
        now = time.time()
        for p in self.root.iterdir():
            name = p.name
            if name.startswith(TMP_PREFIX):
                try:
                    if now - p.stat().st_mtime > TMP_MAX_AGE:
                        p.unlink(missing_ok=True)
                except OSError:
                    pass
                continue
            if not name.endswith(SUFFIX):
                continue
            meta = self._check(p)
            if meta is not None:
                index[name] = meta
        with self._lock:
            self._index = index

    def _check(self, p: Path) -> Meta | None:
        """The entry at `p` if it is intact and ours; deletes it when broken or stale."""
        try:
            meta = read_meta(p)
        except BadEntry as e:
            if not p.exists():  # another process evicted it
                return None
            self._discard(p, f"broken ({e})")
            self.bad_files += 1
            return None
        if meta.ident == self.ident:
            return meta
        if meta.ident.model_id == self.ident.model_id and meta.ident.file_fp != self.ident.file_fp:
            self._discard(p, "stale: the model file changed since it was written")
            self.stale_files += 1
        return None  # another model or config: not ours to load or to delete

    def _discard(self, p: Path, why: str) -> None:
        log.warning("prompt cache: deleting %s: %s", p, why)
        try:
            p.unlink(missing_ok=True)
        except OSError as e:
            log.warning("prompt cache: could not delete %s: %s", p, e)
        with self._lock:
            self._index.pop(p.name, None)

    def refresh(self) -> None:
        """The context config changed (a LoRA adapter was switched): rebuild the identity and
        the index, so states computed under other weights are never loaded."""
        ident = identity(self._describe())
        if ident != self.ident:
            self.ident = ident
            self.tag = hashlib.sha256(ident.model_id + ident.file_fp + ident.config_fp).hexdigest()[:12]
            self._scan()

    def __len__(self) -> int:
        return len(self._index)

    @property
    def used(self) -> int:
        return sum(m.size for m in list(self._index.values()))

    # ---- lookups (worker thread) ---------------------------------------------------------------
    def best(self, prompt: list[int], limit: int, key: str | None = None) -> tuple[int, Meta | None]:
        """(prompt tokens the best entry covers, at most `limit`; the entry). On a tie the
        entry named by `key` wins."""
        best, hit, keyed = 0, None, False
        with self._lock:
            entries = list(self._index.values())
        for m in entries:
            n = min(_common(m.tokens, prompt), limit)
            if n < self._floor(len(m.tokens)):
                continue  # this state cannot be resumed that far back
            mine = key is not None and m.key == key
            if n > best or (n == best and n > 0 and mine and not keyed):
                best, hit, keyed = n, m, mine
        return best, hit

    def load(self, meta: Meta) -> bytes | None:
        """The entry's state, checked; None (and the file deleted) when it fails a check."""
        try:
            data = read_payload(meta)
        except BadEntry as e:
            if meta.path.exists():
                self._discard(meta.path, f"broken ({e})")
                self.bad_files += 1
            else:
                with self._lock:
                    self._index.pop(meta.path.name, None)
            return None
        try:
            os.utime(meta.path)  # least recently used goes first
        except OSError:
            pass
        return data

    def restore(self, backend: Any, seq: int, prompt: list[int], limit: int, key: str | None,
                better_than: int) -> int:
        """Load the best entry into `seq` when it covers more than `better_than` tokens, cut to
        the shared prefix. Returns the tokens now cached in `seq`; 0 when nothing was loaded
        (the sequence is untouched); -1 when a restore failed after `seq` was emptied."""
        n, meta = self.best(prompt, limit, key)
        if meta is None or n <= better_than:
            return 0
        data = self.load(meta)
        if data is None:
            return 0
        backend.seq_rm(seq, -1, -1)
        if not backend.set_seq_state(seq, data):
            self._discard(meta.path, "llama.cpp refused its state")
            self.bad_files += 1
            return -1
        if n < len(meta.tokens) and not backend.seq_rm(seq, n, -1):
            backend.seq_rm(seq, -1, -1)  # this memory cannot be cut partially: start over
            return -1
        check = getattr(backend, "reusable", None)
        if check is not None and not check(seq, n):
            backend.seq_rm(seq, -1, -1)  # it lacks cells position n attends to: prefill instead
            return -1
        self.hits += 1
        self.restored_tokens += n
        return n

    # ---- saves (worker thread enqueues, the writer writes) -----------------------------------------
    def covered(self, tokens: tuple[int, ...], key: str | None) -> bool:
        """An entry already holds these tokens (or more, starting with them, and can be cut back
        to them)."""
        with self._lock:
            for _i, _t, q, k, _d in [*self._queue, *self._inflight]:  # queued or being written
                if q == tokens and k == key:
                    return True
            for m in self._index.values():
                if len(m.tokens) >= len(tokens) and m.tokens[:len(tokens)] == tokens \
                        and (key is None or m.key == key) and self._floor(len(m.tokens)) <= len(tokens):
                    return True
        return False

    def offer(self, tokens: list[int], key: str | None, get_state: Callable[[], bytes]) -> bool:
        """Queue the sequence for writing unless it is short, already on disk, holds image
        placeholders, or the writer is behind. True when queued."""
        toks = tuple(tokens)
        if len(toks) < self.MIN_TOKENS or any(t < 0 for t in toks) or self.covered(toks, key):
            return False
        with self._lock:
            if self._closing or self._pending >= self.max_pending:
                self.dropped += 1
                return False
        try:
            data = get_state()
        except Exception:
            log.exception("prompt cache: copying a sequence's state failed")
            return False
        if not data or len(data) > self.capacity:
            return False
        with self._cond:
            self._queue.append((self.ident, self.tag, toks, key, data))
            self._pending += len(data)
            self._cond.notify_all()
        return True

    def flush(self, timeout: float = 60.0) -> bool:
        """Wait until every queued entry is written (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout: float = 30.0) -> None:
        self.flush(timeout)
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._writer.join(timeout)

    @staticmethod
    def _name(tag: str, toks: tuple[int, ...], key: str | None) -> str:
        if key is not None:
            return f"{tag}-k-{hashlib.sha256(key.encode()).hexdigest()[:24]}{SUFFIX}"
        raw = struct.pack(f"<{len(toks)}i", *toks)
        return f"{tag}-p-{hashlib.sha256(raw).hexdigest()[:24]}{SUFFIX}"

    def _write_loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                item = self._queue.popleft()
                ident, tag, toks, key, data = item
                self._busy, self._inflight = True, [item]
            try:
                self._write(ident, tag, toks, key, data)
            except Exception:
                log.exception("prompt cache: writing an entry failed")
                self.write_errors += 1
            finally:
                with self._cond:
                    self._pending -= len(data)
                    self._busy, self._inflight = False, []
                    self._cond.notify_all()

    def _write(self, ident: Identity, tag: str, toks: tuple[int, ...], key: str | None, data: bytes) -> None:
        name = self._name(tag, toks, key)
        self._make_room(len(data))
        path = self.root / name
        try:
            n = write_entry(path, ident, toks, data, key)
        except OSError as e:
            self.write_errors += 1
            why = "the disk is full" if e.errno in (errno.ENOSPC, errno.EDQUOT) else str(e)
            log.warning("prompt cache: not saving a %d-token state to %s: %s", len(toks), self.root, why)
            return
        self.writes += 1
        self.written_bytes += n
        try:
            meta = read_meta(path)
        except BadEntry:
            return  # another process replaced or evicted it meanwhile
        with self._lock:
            if ident != self.ident:  # the config changed while this was queued: not ours any more
                return
            self._index[name] = meta
            old = [m for nm, m in self._index.items() if nm != name and len(m.tokens) < len(toks)
                   and toks[:len(m.tokens)] == m.tokens and m.key == key]
        if self.checkpoints:
            old = []  # a state cut back that far could not be resumed: keep the shorter one
        for m in old:  # superseded by this longer sequence
            try:
                m.path.unlink(missing_ok=True)
            except OSError:
                pass
            with self._lock:
                self._index.pop(m.path.name, None)
        self._make_room(0)

    def _make_room(self, incoming: int) -> None:
        """Evict the folder's least recently used entries (any model's) until `incoming` more
        bytes fit the budget."""
        files = []
        for p in self.root.iterdir():
            if p.name.endswith(SUFFIX) and not p.name.startswith(TMP_PREFIX):
                try:
                    st = p.stat()
                except OSError:
                    continue
                files.append((st.st_mtime_ns, st.st_size, p))
        total = sum(s for _t, s, _p in files)
        for _t, size, p in sorted(files, key=lambda f: f[0]):
            if total + incoming <= self.capacity:
                break
            try:
                p.unlink(missing_ok=True)
            except OSError:
                continue
            total -= size
            self.evicted += 1
            with self._lock:
                self._index.pop(p.name, None)
