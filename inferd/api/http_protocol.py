"""uvicorn's HTTP protocol, answering unparseable requests in our JSON error envelope.

A request line or header uvicorn's parser cannot read (`Content-Length: 1e20`, a bad chunk
size, a stray byte) never reaches the app: uvicorn answers a plain-text 400 itself. Clients
of every face expect a JSON error body, so this subclass writes the family's envelope
(chosen by the path, when the parser got that far) instead. Passed to uvicorn as `http=`."""

from __future__ import annotations

import json

from inferd.api.errors import error_body, family_of
from inferd.errors import InvalidInput

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - httptools missing: uvicorn's own h11 protocol
    HttpToolsProtocol = None  # type: ignore[assignment,misc]


def _body(path: str, msg: str) -> bytes:
    err = InvalidInput(f"malformed HTTP request ({msg.rstrip('.')}): check the request line, Content-Length "
                       "and other headers")
    _, body, _ = error_body(err, family_of(path))
    return json.dumps(body).encode()


if HttpToolsProtocol is not None:
    class JsonErrorHttpToolsProtocol(HttpToolsProtocol):  # type: ignore[misc,valid-type]
        def send_400_response(self, msg: str) -> None:
            url = getattr(self, "url", b"") or b"/"
            data = _body(url.split(b"?", 1)[0].decode("latin-1", "replace"), msg)
            content = [b"HTTP/1.1 400 Bad Request\r\n"]
            for name, value in self.server_state.default_headers:
                content.extend([name, b": ", value, b"\r\n"])
            content.extend([b"content-type: application/json\r\n",
                            b"content-length: " + str(len(data)).encode("ascii") + b"\r\n",
                            b"connection: close\r\n", b"\r\n", data])
            self.transport.write(b"".join(content))
            self.transport.close()


def http_protocol():
    """What to pass as uvicorn's `http` setting."""
    return JsonErrorHttpToolsProtocol if HttpToolsProtocol is not None else "auto"
