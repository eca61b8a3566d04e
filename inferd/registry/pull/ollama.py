"""Ollama's registry protocol (the Docker registry v2 shape): GET
`/v2/<namespace>/<model>/manifests/<tag>` gives a config blob and layers, each addressed by
its sha256 digest at `/v2/<namespace>/<model>/blobs/<digest>` (Range supported, usually a
redirect to a CDN). Layers by media type: the GGUF weights, a vision projector, a LoRA
adapter, and small text layers (template, system prompt, params JSON, licence)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

from inferd.errors import InvalidInput, NotFound, PayloadTooLarge, UpstreamFailed
from inferd.net import policy as net
from inferd.net.policy import FetchPolicy
from inferd.registry.pull.names import OLLAMA_HOST, OllamaRef
from inferd.registry.pull.transfer import Progress, Remote

ACCEPT = "application/vnd.docker.distribution.manifest.v2+json"
MT = "application/vnd.ollama.image."
# Layer media type -> file in the model folder (None: read into the manifest, not kept as a file).
LAYER_FILES: dict[str, str | None] = {MT + "model": "model.gguf", MT + "projector": "mmproj-model.gguf",
                                      MT + "adapter": "loras/adapter.gguf", MT + "license": "LICENSE",
                                      MT + "template": None, MT + "system": None, MT + "params": None,
                                      MT + "messages": None}
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_TIMEOUT = (30.0, 60.0)  # connect and the rest, read: httpx.Timeout(30.0, read=60.0) at use (httpx loads on a pull)
MANIFEST_BYTES = 4 << 20      # a manifest is a few KiB; a registry sending more is broken or hostile
MANIFEST_DEADLINE = 60.0      # seconds for the whole manifest fetch


@dataclass(frozen=True)
class Layer:
    media_type: str
    digest: str
    size: int

    @property
    def remote(self) -> Remote:
        return Remote(f"blob {self.digest[:19]}", self.size, sha256=self.digest.split(":", 1)[1])


class Registry:
    """`policy` rules the hosts a pull may reach (inferd/net/policy.py): the configured default
    registry is trusted (it may be a local mirror), a host named in the model reference is
    checked like any URL fetched for a client, and so is every redirect (blobs usually go to a
    CDN). None (the `inferd pull` command: the operator's own request) checks nothing."""

    def __init__(self, default_url: str, insecure: bool = False, policy: FetchPolicy | None = None):
        self.default_url = default_url.rstrip("/")
        self.insecure = insecure
        base = policy or FetchPolicy(allow_private=True)
        self.policy = FetchPolicy(base.allow_private, base.trusted | {net.origin(self.default_url)},
                                  base.max_redirects, base.flag)

    def base(self, ref: OllamaRef) -> str:
        if ref.host == OLLAMA_HOST:
            return self.default_url
        return f"{'http' if self.insecure else 'https'}://{ref.host}"

    def _url(self, ref: OllamaRef, tail: str) -> str:
        return f"{self.base(ref)}/v2/{ref.namespace}/{ref.model}/{tail}"

    def manifest(self, ref: OllamaRef) -> tuple[dict[str, Any], list[Layer], Layer | None]:
        import httpx

        url = self._url(ref, f"manifests/{ref.tag}")
        try:
            with httpx.Client(timeout=httpx.Timeout(_TIMEOUT[0], read=_TIMEOUT[1]), follow_redirects=False) as client:
                status, body = net.get(self.policy, client, url, MANIFEST_BYTES, deadline=MANIFEST_DEADLINE,
                                       where="model", headers={"Accept": ACCEPT}, what="the manifest")
        except (InvalidInput, PayloadTooLarge):
            raise
        except (httpx.HTTPError, TimeoutError) as e:
            raise UpstreamFailed(f"cannot reach the Ollama registry {self.base(ref)}: {e}") from e
        if status == 404:
            raise NotFound(f"model '{ref.served_name}' not found in the registry {self.base(ref)}")
        if status != 200:
            raise UpstreamFailed(f"the registry {self.base(ref)} answered {status} for '{ref.served_name}'")
        try:
            doc = json.loads(body)
            layers = [Layer(str(x["mediaType"]), str(x["digest"]), int(x["size"])) for x in doc.get("layers") or []]
            cfg = doc.get("config")
            config = Layer(str(cfg["mediaType"]), str(cfg["digest"]), int(cfg["size"])) if cfg else None
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise UpstreamFailed(f"the registry sent a malformed manifest for '{ref.served_name}': {e}") from e
        for layer in layers + ([config] if config else []):
            if not _DIGEST.match(layer.digest) or layer.size < 0:
                raise UpstreamFailed(f"the manifest of '{ref.served_name}' has a bad layer digest {layer.digest!r}")
        if not any(x.media_type == MT + "model" for x in layers):
            raise UpstreamFailed(f"'{ref.served_name}' has no model layer (is it an Ollama model?)")
        return doc, layers, config

    def fetcher(self, ref: OllamaRef, layer: Layer) -> Callable[[BinaryIO, int, Progress], None]:
        url = self._url(ref, f"blobs/{layer.digest}")

        def fetch(out: BinaryIO, offset: int, advance: Progress, _tries: int = 3) -> None:
            import httpx

            headers = {"Range": f"bytes={offset}-"} if offset else {}
            got = offset
            try:
                with httpx.Client(timeout=httpx.Timeout(_TIMEOUT[0], read=_TIMEOUT[1]), follow_redirects=False) as client, \
                        net.stream(self.policy, client, url, where="model", headers=headers) as r:
                    if r.status_code == 404:
                        raise NotFound(f"blob {layer.digest} of '{ref.served_name}' not found in the registry")
                    if r.status_code not in (200, 206):
                        raise UpstreamFailed(f"the registry answered {r.status_code} for blob {layer.digest}")
                    if offset and r.status_code == 200:  # Range ignored: start over
                        out.seek(0)
                        out.truncate()
                        got = 0
                    advance(got, layer.size)
                    for chunk in r.iter_bytes(1 << 20):
                        out.write(chunk)
                        got += len(chunk)
                        advance(got, layer.size)
            except httpx.TransportError as e:  # a cut connection: resume where it stopped
                if _tries <= 1:
                    raise UpstreamFailed(f"downloading blob {layer.digest} failed: {e}") from e
                out.flush()
                return fetch(out, got, advance, _tries - 1)
            if got != layer.size:
                if _tries <= 1:
                    raise UpstreamFailed(f"blob {layer.digest}: got {got} of {layer.size} bytes")
                out.flush()
                return fetch(out, got, advance, _tries - 1)

        return fetch


def read_params(text: str) -> dict[str, Any]:
    try:
        params = json.loads(text)
    except ValueError as e:
        raise UpstreamFailed(f"the params layer is not JSON: {e}") from e
    if not isinstance(params, dict):
        raise UpstreamFailed("the params layer is not a JSON object")
    return params
