"""Media admission: the byte and pixel budgets of image inputs (Antfly's rules, spec 003,
`/generate` and `/read`), applied after capacity admission and before any model loads.

0. Capacity: a request takes `weight(refs)` admission units (16 MiB of potential bytes each,
   and for /read at least one per two images), before anything is fetched.
1. Bytes, per request: encoded media (inline and fetched) may add up to
   min(100 MiB, --max-media-bytes, 16 MiB x --max-concurrent-requests); 0 disables media.
   Inline data counts its exact decoded size, known before decoding; an uploaded file its
   stored size; a remote URL may read at most what is left (reserved before the fetch).
2. Headers: each image's header is read (no pixel decoding); not an image -> 400; an edge
   over --max-image-dimension -> 413.
3. Pixels, across the server: each source pixel costs 16 bytes against
   min(512 MiB, 16 MiB x --max-concurrent-requests). A request over the whole budget is a
   413; one that fits waits (at most --queue-timeout, then 503) while other requests hold
   the budget, and releases its share when it ends.

The caller decodes the admitted images (media/images.py) while it holds the reservation."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferd.errors import InferdError, InvalidInput, Overloaded, PayloadTooLarge
from inferd.media import images, sources
from inferd.media.images import BYTES_PER_PIXEL, Header
from inferd.media.sources import MediaRef

MiB = 1 << 20
MAX_REQUEST_MEDIA = 100 * MiB
MAX_PIXEL_BYTES = 512 * MiB
PER_SLOT = 16 * MiB
READ_BATCH = 256 * MiB   # /read's default batch limit (--max-read-batch-bytes)


@dataclass(frozen=True)
class MediaLimits:
    request_bytes: int
    pixel_bytes: int
    max_dimension: int
    allow_remote: bool = False
    allow_private: bool = False
    fetch_timeout: float = 10.0
    data_dir: Path = Path("~/.inferd")
    wait_timeout: float = 60.0
    # /read (spec 003): each image may bring per_image_bytes (the configured download limit),
    # and the request min(per_image_bytes x images, read_batch_bytes, 16 MiB x a positive
    # --max-concurrent-requests) in all.
    per_image_bytes: int = MAX_REQUEST_MEDIA
    read_batch_bytes: int = READ_BATCH
    slots: int = 0

    def read_budget(self, n_images: int) -> int:
        budget = min(self.per_image_bytes * max(1, n_images), self.read_batch_bytes)
        return min(budget, PER_SLOT * self.slots) if self.slots > 0 else budget

    @classmethod
    def from_settings(cls, s: Any) -> "MediaLimits":
        conc = int(s.max_concurrent_requests)
        req = min(MAX_REQUEST_MEDIA, int(s.max_media_bytes))
        pix = MAX_PIXEL_BYTES
        if conc > 0:
            req, pix = min(req, PER_SLOT * conc), min(pix, PER_SLOT * conc)
        return cls(request_bytes=req, pixel_bytes=pix, max_dimension=int(s.max_image_dimension),
                   allow_remote=bool(s.allow_remote_media), allow_private=bool(s.allow_private_media_urls),
                   fetch_timeout=float(s.media_fetch_timeout), data_dir=Path(s.data_dir).expanduser(),
                   wait_timeout=float(s.queue_timeout), per_image_bytes=int(s.max_media_bytes),
                   read_batch_bytes=int(getattr(s, "max_read_batch_bytes", READ_BATCH)), slots=conc)


@dataclass
class Admitted:
    """One image that passed admission: its encoded bytes and header."""

    ref: MediaRef
    data: bytes
    header: Header

    def decode(self):
        return images.decode(self.data, self.ref.where)


@dataclass
class Grant:
    """What `MediaAdmission.admit` yields: per reference, an Admitted image or (per_item
    only) that reference's error."""

    items: list[Admitted | InferdError] = field(default_factory=list)
    media_bytes: int = 0
    pixel_bytes: int = 0


class MediaAdmission:
    def __init__(self, limits: MediaLimits):
        self.limits = limits
        self.held = 0                      # pixel bytes reserved by running requests
        self._freed: asyncio.Event | None = None
        self.refused = 0

    def weight(self, refs: Sequence[MediaRef], per_two_images: bool = False, budget: int | None = None) -> int:
        """Capacity units a request with these images takes (Admission.slot weight): one per
        16 MiB of the bytes it may bring (inline data by its size; files and remote URLs by
        what is left of the request's budget, since that is what they may read), and for
        /read at least one per two images. `budget`: the request's byte budget when it is not
        the default one (/read's)."""
        budget = self.limits.request_bytes if budget is None else budget
        inline = sum(r.inline_bytes for r in refs)
        potential = min(budget, inline + (budget - inline if any(r.kind != "data" for r in refs) else 0))
        units = -(-potential // PER_SLOT)
        if per_two_images:
            units = max(units, -(-len(refs) // 2))
        return max(1, units)

    # ---- bytes --------------------------------------------------------------------------------
    async def _fetch(self, refs: Sequence[MediaRef], per_item: bool, budget: int | None = None,
                     per_image: int | None = None) -> tuple[list[Any], int]:
        lim = self.limits
        out: list[Any] = [None] * len(refs)
        budget = lim.request_bytes if budget is None else budget
        if refs and budget <= 0:
            raise PayloadTooLarge("media inputs are disabled on this server (--max-media-bytes 0)")
        for r in refs:
            if per_image is not None and r.inline_bytes > per_image:
                raise PayloadTooLarge(f"{r.where}: image of {r.inline_bytes} bytes exceeds the per-image limit "
                                      f"of {per_image} bytes (--max-media-bytes)")
        inline = sum(r.inline_bytes for r in refs)
        if inline > budget:  # decided before a byte of base64 is decoded
            raise PayloadTooLarge(f"the request's images ({inline} bytes) exceed its media budget of {budget} bytes")
        left = budget - inline
        # Files: sizes known from disk; remote: what is left, reserved before each fetch.
        for i, r in enumerate(refs):
            try:
                if r.kind == "data":
                    out[i] = await _maybe_thread(sources.read_data, r, big=r.inline_bytes > 1 * MiB)
                elif r.kind == "file":
                    path, size = sources.file_path(lim.data_dir, r.payload, r.where)
                    if per_image is not None and size > per_image:
                        raise PayloadTooLarge(f"{r.where}: file of {size} bytes exceeds the per-image limit of "
                                              f"{per_image} bytes (--max-media-bytes)")
                    if size > left:
                        raise PayloadTooLarge(f"{r.where}: file of {size} bytes exceeds the request's remaining "
                                              f"media budget of {left} bytes")
                    out[i] = await asyncio.to_thread(sources.read_file, path, left, r.where)
                    left -= len(out[i])
                else:
                    if not lim.allow_remote:
                        raise InvalidInput(f"{r.where}: remote image URLs are disabled; send a data: URI or a "
                                           "file id, or start the server with --allow-remote-media", r.where)
                    cap = left if per_image is None else min(left, per_image)
                    out[i] = await sources.fetch_url(r.payload, cap, timeout=lim.fetch_timeout,
                                                     allow_private=lim.allow_private, where=r.where)
                    left -= len(out[i])
            except PayloadTooLarge:
                raise  # the request's budget: never one item's problem
            except InferdError as e:
                if not per_item:
                    raise
                out[i] = e
        return out, budget - left

    # ---- headers and pixels -------------------------------------------------------------------
    def _check(self, ref: MediaRef, data: bytes) -> Admitted:
        h = images.probe(data, ref.where)
        m = self.limits.max_dimension
        if m > 0 and (h.width > m or h.height > m):
            raise PayloadTooLarge(f"{ref.where}: image is {h.width}x{h.height}; each edge may be at most {m} pixels "
                                  "(--max-image-dimension)")
        return Admitted(ref, data, h)

    @contextlib.asynccontextmanager
    async def admit(self, refs: Sequence[MediaRef], per_item: bool = False, budget: int | None = None,
                    per_image: int | None = None) -> AsyncIterator[Grant]:
        """Fetch, check and reserve `refs`; the reservation lasts until the block ends.
        `budget`/`per_image`: the request's and each image's byte limits where they are not
        the default ones (/read: `MediaLimits.read_budget`)."""
        raw, nbytes = await self._fetch(refs, per_item, budget, per_image)
        grant = Grant(media_bytes=nbytes)
        for r, data in zip(refs, raw):
            if isinstance(data, InferdError):
                grant.items.append(data)
                continue
            try:
                grant.items.append(self._check(r, data))
            except InferdError as e:
                if not per_item:
                    raise
                grant.items.append(e)
        need = sum(a.header.pixels for a in grant.items if isinstance(a, Admitted)) * BYTES_PER_PIXEL
        cap = self.limits.pixel_bytes
        if need > cap:
            self.refused += 1
            raise PayloadTooLarge(f"the request's images decode to {need // BYTES_PER_PIXEL} pixels "
                                  f"({need} bytes at {BYTES_PER_PIXEL} B/pixel), over the decoded-pixel "
                                  f"budget of {cap} bytes")
        await self._reserve(need)
        grant.pixel_bytes = need
        try:
            yield grant
        finally:
            self._release(need)

    async def _reserve(self, need: int) -> None:
        if need == 0:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.wait_timeout
        while self.held + need > self.limits.pixel_bytes:
            if self._freed is None:
                self._freed = asyncio.Event()
            ev = self._freed
            left = deadline - loop.time()
            if left <= 0:
                self.refused += 1
                raise Overloaded("the decoded-pixel budget is held by other requests; retry later", 1000)
            try:
                await asyncio.wait_for(ev.wait(), left)
            except asyncio.TimeoutError:
                continue
        self.held += need

    def _release(self, need: int) -> None:
        if need == 0:
            return
        self.held -= need
        if self._freed is not None:  # wake every waiter; each re-checks what is free now
            self._freed.set()
            self._freed = None


async def _maybe_thread(fn, *args, big: bool):
    return await asyncio.to_thread(fn, *args) if big else fn(*args)


async def decode_all(grant: Grant) -> list[Any]:
    """Decode every admitted image off the event loop; errors stay per item (a corrupt body
    behind a valid header is that image's 400)."""
    def run() -> list[Any]:
        out: list[Any] = []
        for a in grant.items:
            if isinstance(a, InferdError):
                out.append(a)
                continue
            try:
                out.append(a.decode())
            except InferdError as e:
                out.append(e)
        return out

    return await asyncio.to_thread(run)
