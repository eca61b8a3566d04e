"""The web console: `/` (for browsers; other clients still get "inferd is running") and
`/ui/...`, static files from inferd/console/static. They are public (the page asks for the
API key and sends it on its own API calls) and carry a strict same-origin CSP."""

from __future__ import annotations

import mimetypes

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, PlainTextResponse, Response

from inferd.console import STATIC
from inferd.errors import NotFound

router = APIRouter()

# Everything the console loads comes from this server; inline script is never needed.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; media-src 'self' blob:; "
       "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache",
           "Referrer-Policy": "no-referrer"}
TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
         ".html": "text/html; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png"}


def _file(rel: str) -> Response:
    root = STATIC.resolve()
    try:
        path = (root / rel).resolve()
        found = root in path.parents and path.is_file()  # no way out of static/
    except (OSError, ValueError):  # a NUL byte, a name longer than the OS allows
        found = False
    if not found:
        raise NotFound(f"no console file '{rel[:200]}'")
    ctype = TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return FileResponse(path, media_type=ctype, headers=HEADERS)


@router.get("/", include_in_schema=False)
@router.head("/", include_in_schema=False)
async def root(request: Request) -> Response:
    if "text/html" in request.headers.get("accept", ""):
        return _file("index.html")
    return PlainTextResponse("inferd is running")


@router.get("/ui", include_in_schema=False)
@router.get("/ui/", include_in_schema=False)
async def index() -> Response:
    return _file("index.html")


@router.get("/ui/{rel:path}", include_in_schema=False)
async def static(rel: str) -> Response:
    return _file(rel)
