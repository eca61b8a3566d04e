"""The outbound-fetch policy: the one set of rules for every URL the server fetches on a
client's behalf (image URLs with --allow-remote-media, registry hosts named in /api/pull).

- Schemes: http and https only.
- Addresses: the host is resolved once; every address it resolves to must be global unicast
  (no loopback, private, link-local, multicast, unspecified, reserved, or IPv4-mapped forms of
  them) unless private addresses are allowed by a flag. The connection is then made to the
  checked address (the URL's host replaced by it, the Host header and TLS server name kept),
  so a second DNS answer cannot swap in another address (DNS rebinding).
- Redirects are never followed by the HTTP client: each hop is resolved and checked like the
  first one, at most `max_redirects` of them.
- Origins the operator configured (--ollama-registry, HF_ENDPOINT) are trusted: they may be on
  loopback (a local mirror); a redirect away from them is checked like any other URL.
- Deadlines and sizes: `fetch` (async) and `get` (blocking) bound the whole fetch, DNS and
  connection and every byte, by one deadline (a server sending a byte a second is cut at
  it), and refuse a body over the caller's byte budget as soon as it passes it.

Refusals are InvalidInput naming the request field (`where`), bodies over budget
PayloadTooLarge; what the caller does with a network failure is its own (a media URL's is
the client's 400, a registry's an upstream failure)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, urljoin, urlsplit

from inferd.errors import InvalidInput, PayloadTooLarge

SCHEMES = ("http", "https")
MAX_REDIRECTS = 3


def is_public(addr: str) -> bool:
    """A global unicast address (what a fetch on a client's behalf may reach by default)."""
    try:
        ip = ipaddress.ip_address(addr.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is not None and not is_public(str(embedded)):
            return False
    return ip.is_global and not (ip.is_multicast or ip.is_unspecified or ip.is_reserved or ip.is_loopback
                                 or ip.is_link_local or ip.is_private)


def origin(url: str) -> str:
    """scheme://host:port of a URL, with the scheme's default port made explicit."""
    p = urlsplit(url)
    port = p.port or (443 if p.scheme == "https" else 80)
    return f"{p.scheme.lower()}://{(p.hostname or '').lower()}:{port}"


@dataclass(frozen=True)
class Target:
    """Where one hop connects: `url` has the checked address in place of the host; `headers`
    and `extensions` keep the original Host and TLS server name (the certificate check)."""

    original: str
    url: str
    headers: dict[str, str]
    extensions: dict[str, Any]


@dataclass(frozen=True)
class FetchPolicy:
    allow_private: bool = False
    trusted: frozenset[str] = frozenset()      # origins (see `origin`) exempt from the address rules
    max_redirects: int = MAX_REDIRECTS
    flag: str = "--allow-private-media-urls"   # the flag a refusal names

    # ---- one hop ------------------------------------------------------------------------------
    def _parts(self, url: str, where: str) -> SplitResult:
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises on a bad port
        except ValueError:
            raise InvalidInput(f"{where}: malformed URL", where) from None
        if parts.scheme.lower() not in SCHEMES or not parts.hostname:
            raise InvalidInput(f"{where}: only http(s) URLs with a host can be fetched", where)
        if parts.username or parts.password:
            raise InvalidInput(f"{where}: URLs with credentials are not fetched", where)
        return parts

    def _exempt(self, url: str) -> bool:
        return self.allow_private or origin(url) in self.trusted

    def _decide(self, url: str, parts: SplitResult, infos: list, where: str) -> Target:
        addrs = [str(i[4][0]) for i in infos]
        if not addrs:
            raise InvalidInput(f"{where}: cannot resolve host {parts.hostname!r}", where)
        for a in addrs:
            if not is_public(a):
                raise InvalidInput(f"{where}: refusing to fetch from {parts.hostname!r}: it resolves to a "
                                   f"private or loopback address, or another non-public one (see {self.flag})",
                                   where)
        return pin(url, addrs[0])

    def resolve(self, url: str, where: str) -> Target:
        """Check one hop (blocking DNS): the Target to connect to."""
        parts = self._parts(url, where)
        if self._exempt(url):
            return Target(url, url, {}, {})
        try:
            infos = socket.getaddrinfo(parts.hostname, parts.port or 0, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            raise InvalidInput(f"{where}: cannot resolve host {parts.hostname!r}", where) from None
        return self._decide(url, parts, infos, where)

    async def aresolve(self, url: str, where: str) -> Target:
        parts = self._parts(url, where)
        if self._exempt(url):
            return Target(url, url, {}, {})
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(parts.hostname, parts.port or 0,
                                                                 type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            raise InvalidInput(f"{where}: cannot resolve host {parts.hostname!r}", where) from None
        return self._decide(url, parts, infos, where)

    def redirect(self, current: str, location: str | None, hops: int, where: str) -> str:
        if hops >= self.max_redirects:
            raise InvalidInput(f"{where}: more than {self.max_redirects} redirects", where)
        if not location:
            raise InvalidInput(f"{where}: a redirect without a Location", where)
        return urljoin(current, location)


def pin(url: str, addr: str) -> Target:
    parts = urlsplit(url)
    host = f"[{addr}]" if ":" in addr else addr
    netloc = host + (f":{parts.port}" if parts.port else "")
    target = parts._replace(netloc=netloc).geturl()
    host_header = (parts.hostname or addr) + (f":{parts.port}" if parts.port else "")
    return Target(url, target, {"Host": host_header}, {"sni_hostname": parts.hostname or addr})


# ---- fetching ---------------------------------------------------------------------------------
async def fetch(policy: FetchPolicy, url: str, limit: int, *, deadline: float, where: str,
                what: str = "the file", accept: str = "*/*") -> bytes:
    """GET `url` under `policy`: at most `limit` bytes, the whole fetch (every hop, DNS,
    connection and body) within `deadline` seconds. Failures are the client's 400 (413 over
    the budget)."""
    import httpx

    try:
        async with asyncio.timeout(deadline):
            async with httpx.AsyncClient(follow_redirects=False, timeout=deadline) as client:
                for hops in range(policy.max_redirects + 1):
                    t = await policy.aresolve(url, where)
                    async with client.stream("GET", t.url, headers={"Accept": accept, **t.headers},
                                             extensions=t.extensions) as resp:
                        if resp.is_redirect:
                            url = policy.redirect(url, resp.headers.get("location"), hops, where)
                            continue
                        if resp.status_code != 200:
                            raise InvalidInput(f"{where}: fetching {what} failed with HTTP {resp.status_code}", where)
                        _check_declared(resp.headers.get("content-length"), limit, where, what)
                        buf = bytearray()
                        async for chunk in resp.aiter_bytes():
                            buf += chunk
                            if len(buf) > limit:
                                raise _too_large(where, what, limit)
                        return bytes(buf)
                raise InvalidInput(f"{where}: more than {policy.max_redirects} redirects", where)
    except (TimeoutError, httpx.TimeoutException):
        raise InvalidInput(f"{where}: fetching {what} took longer than {deadline:g}s (--media-fetch-timeout)",
                           where) from None
    except httpx.HTTPError as e:
        raise InvalidInput(f"{where}: fetching {what} failed: {type(e).__name__}", where) from None


@contextlib.contextmanager
def stream(policy: FetchPolicy, client: Any, url: str, *, where: str,
           headers: dict[str, str] | None = None) -> Iterator[Any]:
    """A blocking GET under `policy` with `client` (an httpx.Client that does not follow
    redirects): each redirect checked, the response of the last hop yielded unread."""
    for hops in range(policy.max_redirects + 1):
        t = policy.resolve(url, where)
        with client.stream("GET", t.url, headers={**(headers or {}), **t.headers}, extensions=t.extensions,
                           follow_redirects=False) as resp:
            if resp.is_redirect:
                url = policy.redirect(url, resp.headers.get("location"), hops, where)
                continue
            yield resp
            return
    raise InvalidInput(f"{where}: more than {policy.max_redirects} redirects", where)


def get(policy: FetchPolicy, client: Any, url: str, limit: int, *, deadline: float, where: str,
        headers: dict[str, str] | None = None, what: str = "the document") -> tuple[int, bytes]:
    """A small blocking GET (a manifest): (status, body) with the body bounded by `limit`
    bytes and the whole fetch by `deadline` seconds (checked between reads, each read
    bounded by the client's own timeout)."""
    end = time.monotonic() + deadline
    with stream(policy, client, url, where=where, headers=headers) as resp:
        if resp.status_code != 200:
            return resp.status_code, b""
        _check_declared(resp.headers.get("content-length"), limit, where, what)
        buf = bytearray()
        for chunk in resp.iter_bytes():
            buf += chunk
            if len(buf) > limit:
                raise _too_large(where, what, limit)
            if time.monotonic() > end:
                raise TimeoutError(f"fetching {what} took longer than {deadline:g}s")
        return resp.status_code, bytes(buf)


def _check_declared(declared: str | None, limit: int, where: str, what: str) -> None:
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"{where}: {what} ({declared} bytes) exceeds the budget of {limit} bytes")


def _too_large(where: str, what: str, limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"{where}: {what} exceeds the budget of {limit} bytes")
