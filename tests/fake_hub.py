"""Local stand-ins for the Hugging Face Hub and an Ollama registry: real HTTP servers on
loopback serving the endpoints `huggingface_hub` and inferd's Ollama client call, with
faults to inject (a connection cut mid-file, corrupted bytes) and a log of requests.

Hub endpoints (what huggingface_hub 2.x sends):
  GET  /api/models/<org>/<name>[/revision/<rev>]?blobs=True   -> info with siblings + lfs sha256
  HEAD /<org>/<name>/resolve/<rev>/<path>   -> X-Repo-Commit, ETag / X-Linked-Etag, X-Linked-Size
  GET  same, honouring Range (206 + Content-Range)
  unknown repo: 404 with X-Error-Code: RepoNotFound; unknown file: EntryNotFound
Ollama registry:
  GET /v2/<ns>/<model>/manifests/<tag>, GET /v2/<ns>/<model>/blobs/sha256:<hex> (Range)"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse


_SUMS: dict[tuple[int, str], tuple[bytes, str]] = {}


def _memo(data: bytes, kind: str) -> str:
    """Hashes of served bytes, computed once (a real Hub stores them; a benchmark's 256 MiB
    repo would otherwise be hashed on every listing and HEAD)."""
    hit = _SUMS.get((id(data), kind))
    if hit is not None and hit[0] is data:
        return hit[1]
    digest = hashlib.sha256(data).hexdigest() if kind == "sha256" else \
        hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    _SUMS[(id(data), kind)] = (data, digest)
    return digest


def git_sha1(data: bytes) -> str:
    return _memo(data, "git")


def sha256(data: bytes) -> str:
    return _memo(data, "sha256")


@dataclass
class Repo:
    files: dict[str, bytes]
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    pipeline_tag: str | None = None
    config: dict | None = None
    lfs: set[str] | None = None      # paths stored in LFS (default: every .gguf/.onnx)

    def is_lfs(self, path: str) -> bool:
        return path in self.lfs if self.lfs is not None else path.endswith((".gguf", ".onnx"))


@dataclass
class Faults:
    cut: dict[str, int] = field(default_factory=dict)        # path -> bytes sent before the connection drops (once)
    corrupt: set[str] = field(default_factory=set)           # paths whose bytes are served with one byte flipped
    fail: dict[str, int] = field(default_factory=dict)       # path -> next N GETs answer 500
    delay: dict[str, float] = field(default_factory=dict)    # path -> seconds to sleep per 64 KiB sent


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class FakeHub:
    def __init__(self):
        self.repos: dict[str, Repo] = {}
        self.ollama: dict[tuple[str, str, str], dict] = {}   # (ns, model, tag) -> manifest
        self.blobs: dict[str, bytes] = {}                    # digest -> bytes
        self.faults = Faults()
        self.log: list[tuple[str, str, str | None]] = []     # (method, path, Range)
        self._lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def do_HEAD(self):
                hub._handle(self, head=True)

            def do_GET(self):
                hub._handle(self, head=False)

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ---- content ----------------------------------------------------------------------------
    def add_repo(self, repo: str, files: dict[str, bytes], **kw) -> Repo:
        self.repos[repo] = Repo(files, **kw)
        return self.repos[repo]

    def add_ollama(self, name: str, tag: str, layers: list[tuple[str, bytes]], config: dict | None = None,
                   namespace: str = "library") -> dict:
        def blob(mt: str, data: bytes) -> dict:
            d = "sha256:" + hashlib.sha256(data).hexdigest()
            self.blobs[d] = data
            return {"mediaType": mt, "digest": d, "size": len(data)}
        cfg = json.dumps(config or {"model_format": "gguf", "model_family": "llama", "model_type": "1M",
                                    "file_type": "F32"}).encode()
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                    "config": blob("application/vnd.docker.container.image.v1+json", cfg),
                    "layers": [blob(mt, data) for mt, data in layers]}
        self.ollama[(namespace, name, tag)] = manifest
        return manifest

    def gets(self, suffix: str) -> list[str | None]:
        """The Range headers of the GETs of paths ending with `suffix` (None: no Range)."""
        with self._lock:
            return [rng for m, p, rng in self.log if m == "GET" and p.endswith(suffix)]

    # ---- serving ----------------------------------------------------------------------------
    def _reply(self, h, status: int, body: bytes = b"", headers: dict | None = None, head: bool = False) -> None:
        h.send_response(status)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if not head:
            h.wfile.write(body)

    def _json(self, h, obj, status: int = 200, headers: dict | None = None) -> None:
        self._reply(h, status, json.dumps(obj).encode(), {"Content-Type": "application/json", **(headers or {})})

    def _handle(self, h, head: bool) -> None:
        path = unquote(urlparse(h.path).path)
        with self._lock:
            self.log.append(("HEAD" if head else "GET", path, h.headers.get("Range")))
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path)
        if m:
            return self._info(h, m.group(1))
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if m:
            return self._resolve(h, m.group(1), m.group(2), m.group(3), head)
        m = re.fullmatch(r"/v2/([^/]+)/([^/]+)/manifests/([^/]+)", path)
        if m:
            man = self.ollama.get((m.group(1), m.group(2), m.group(3)))
            if man is None:
                return self._json(h, {"errors": [{"code": "MANIFEST_UNKNOWN", "message": "manifest unknown"}]}, 404)
            return self._json(h, man, headers={"Content-Type": man["mediaType"]})
        m = re.fullmatch(r"/v2/([^/]+)/([^/]+)/blobs/(sha256:[0-9a-f]{64})", path)
        if m:
            data = self.blobs.get(m.group(3))
            if data is None:
                return self._json(h, {"errors": [{"code": "BLOB_UNKNOWN"}]}, 404)
            return self._send_bytes(h, m.group(3), data, {}, head)
        self._json(h, {"error": "not found"}, 404)

    def _info(self, h, repo: str) -> None:
        r = self.repos.get(repo)
        if r is None:
            return self._json(h, {"error": "Repository not found"}, 401, {"X-Error-Code": "RepoNotFound"})
        sib = []
        for p, data in r.files.items():
            s = {"rfilename": p, "size": len(data), "blobId": git_sha1(data)}
            if r.is_lfs(p):
                s["lfs"] = {"sha256": sha256(data), "size": len(data), "pointerSize": 134}
                s["blobId"] = hashlib.sha1(p.encode()).hexdigest()  # the pointer's id, not the content's
            sib.append(s)
        self._json(h, {"id": repo, "modelId": repo, "sha": r.commit, "private": False, "tags": ["gguf"],
                       "pipeline_tag": r.pipeline_tag, "config": r.config or {}, "siblings": sib})

    def _resolve(self, h, repo: str, rev: str, fpath: str, head: bool) -> None:
        r = self.repos.get(repo)
        if r is None:
            return self._json(h, {"error": "Repository not found"}, 401, {"X-Error-Code": "RepoNotFound"})
        if rev not in (r.commit, "main"):
            return self._json(h, {"error": "Revision not found"}, 404, {"X-Error-Code": "RevisionNotFound"})
        data = r.files.get(fpath)
        if data is None:
            return self._json(h, {"error": "Entry not found"}, 404, {"X-Error-Code": "EntryNotFound"})
        headers = {"X-Repo-Commit": r.commit}
        if r.is_lfs(fpath):
            sha = sha256(data)
            headers.update({"ETag": f'"{sha}"', "X-Linked-Etag": f'"{sha}"', "X-Linked-Size": str(len(data))})
        else:
            headers["ETag"] = f'"{git_sha1(data)}"'
        self._send_bytes(h, fpath, data, headers, head)

    def _send_bytes(self, h, key: str, data: bytes, headers: dict, head: bool) -> None:
        if not head and self.faults.fail.get(key) and key not in self.faults.cut:  # a cut comes first
            self.faults.fail[key] -= 1
            return self._json(h, {"error": "internal"}, 500)
        if not head and key in self.faults.corrupt:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        start, status = 0, 200
        rng = h.headers.get("Range")
        if rng and not head:
            m = re.fullmatch(r"bytes=(\d+)-", rng.strip())
            start = int(m.group(1)) if m else 0
            if start >= len(data):
                return self._reply(h, 416, b"", {"Content-Range": f"bytes */{len(data)}"})
            status = 206
            headers = {**headers, "Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"}
        body = data[start:]
        h.send_response(status)
        for k, v in {**headers, "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if head:
            return
        cut = self.faults.cut.pop(key, None) if not head else None
        if cut is not None:
            h.wfile.write(body[:cut])
            h.wfile.flush()
            h.close_connection = True
            import socket
            try:
                h.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        delay = self.faults.delay.get(key)
        if delay:
            import time
            for i in range(0, len(body), 65536):
                h.wfile.write(body[i:i + 65536])
                h.wfile.flush()
                time.sleep(delay)
            return
        h.wfile.write(body)
