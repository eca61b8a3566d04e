"""Browser security: which web pages may talk to inferd (Origin), and under which names (Host).

inferd listens on loopback, but every web page the user opens can send requests there. So,
as Ollama does:

- Origin: a request that carries an `Origin` header (every cross-site fetch and form post a
  browser makes does) is refused with 403 unless that origin is allowed, whatever its method
  or content type; a "simple" form POST gets no preflight, so CORS headers alone would not
  stop it. Allowed by default: `http(s)://localhost`, `127.0.0.1` and `[::1]` on any port,
  and the server's own origin (the page it serves itself). `--cors-origins` adds origins
  (`https://app.example`, `https://app.example:*` for any port, `*` for all). A request
  without Origin (curl, SDKs) is not a browser's cross-site request and passes; one whose
  `Sec-Fetch-Site` says cross-site without an Origin is refused too.
- Host: DNS rebinding points an attacker's name at 127.0.0.1, making the browser treat
  inferd as same-origin with the attacker's page. So `Host` must be an IP literal (which no
  rebinding can use), `localhost` (or `*.localhost`), the bound `--host`, this machine's
  name, or one of `--allowed-hosts` (`*` turns the check off).

Allowed origins get CORS headers (Starlette's CORSMiddleware, inside this guard, answers
preflights and adds them); refused requests get the family's JSON error envelope."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from inferd.api.errors import refuse
from inferd.errors import Forbidden

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def _split_hostport(value: str) -> tuple[str, str]:
    """'host:port' / '[v6]:port' / 'host' -> (host lowercased, port or '')."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[:end + 1], value[end + 2:] if end >= 0 and value[end + 1:end + 2] == ":" else ""
    host, _, port = value.partition(":") if value.count(":") == 1 else (value, "", "")
    return host, port


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
        return True
    except ValueError:
        return False


class OriginPolicy:
    def __init__(self, cors_origins: list[str], allowed_hosts: list[str], bind_host: str):
        self.any_origin = "*" in cors_origins
        self.origins = {o.rstrip("/").lower() for o in cors_origins if o != "*" and not o.endswith(":*")}
        self.origin_prefixes = tuple(o[:-1].lower() for o in cors_origins if o.endswith(":*"))  # "https://x:"
        self.any_host = "*" in allowed_hosts
        bound = _split_hostport(bind_host if not bind_host.count(":") > 1 or bind_host.startswith("[")
                                else f"[{bind_host}]")[0]
        self.hosts = {h.lower().strip() for h in allowed_hosts if h != "*"} | {bound}
        try:
            self.hosts.add(socket.gethostname().lower())
        except OSError:
            pass

    def origin_ok(self, origin: str, host_header: str) -> bool:
        if self.any_origin:
            return True
        o = origin.rstrip("/").lower()
        if o in self.origins or (self.origin_prefixes and o.startswith(self.origin_prefixes)):
            return True
        parts = urlsplit(o)
        if parts.scheme not in ("http", "https") or not parts.netloc or "@" in parts.netloc:
            return False  # "null" (sandboxed frames, file pages), data:, extensions ...
        host, port = _split_hostport(parts.netloc)
        if port and not port.isdigit():
            return False
        if host in LOOPBACK_NAMES:
            return True
        return bool(host_header) and parts.netloc == host_header.lower()  # same origin: our own page

    def host_ok(self, host_header: str) -> bool:
        if self.any_host or not host_header:
            return True
        host, port = _split_hostport(host_header)
        if port and not port.isdigit():
            return False
        return (_is_ip(host) or host == "localhost" or host.endswith(".localhost") or host in self.hosts)


class BrowserGuard:
    """403 for a disallowed Origin or cross-site fetch, 400 for a Host that is not ours."""

    def __init__(self, app: ASGIApp, policy: OriginPolicy):
        self.app, self.policy = app, policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):  # a WebSocket handshake is a browser request too
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        host = headers.get(b"host", b"").decode("latin-1")
        origin = headers.get(b"origin")
        err = None
        if not self.policy.host_ok(host):
            err = Forbidden(f"Host {host[:100]!r} is not allowed: use 127.0.0.1 or localhost, or start inferd "
                            "with --allowed-hosts NAME (protection against DNS rebinding)")
        elif origin is not None:
            o = origin.decode("latin-1")
            if not self.policy.origin_ok(o, host):
                err = Forbidden(f"Origin {o[:100]!r} is not allowed: start inferd with --cors-origins {o[:100]} "
                                "to let that web page use it")
        elif headers.get(b"sec-fetch-site") == b"cross-site" and scope.get("method", "GET") not in ("GET", "HEAD"):
            err = Forbidden("cross-site requests are not allowed (start inferd with --cors-origins to allow a page)")
        if err is not None:
            return await refuse(err, scope, receive, send)
        await self.app(scope, receive, send)
