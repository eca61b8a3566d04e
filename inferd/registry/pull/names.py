"""Model references users type, and the served names pulled models get.

- Hub: `org/repo`, `org/repo:Q4_K_M`, `org/repo:file.gguf`, with an optional `hf.co/`,
  `huggingface.co/` or `https://huggingface.co/` in front. A pulled GGUF is served as
  `org/repo:QUANT`; an ONNX repo as `org/repo`.
- Ollama: `llama3.2`, `llama3.2:1b`, `library/llama3.2:1b`, `registry.ollama.ai/library/llama3.2:1b`,
  `host/namespace/model:tag`. Served as Ollama shortens them: `model:tag` for the default
  registry's library, `namespace/model:tag` for its other namespaces, else in full."""

from __future__ import annotations

import re
from dataclasses import dataclass

HF_PREFIXES = ("https://huggingface.co/", "http://huggingface.co/", "huggingface.co/", "hf.co/")
_REPO = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9_][\w.-]{0,95}$")   # never "." or ".." parts
_PART = re.compile(r"^[a-z0-9][a-z0-9._-]{0,79}$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
OLLAMA_HOST = "registry.ollama.ai"


@dataclass(frozen=True)
class HubRef:
    repo: str
    selector: str | None   # a quant label, a file name, or None (pick)


@dataclass(frozen=True)
class OllamaRef:
    host: str
    namespace: str
    model: str
    tag: str

    @property
    def served_name(self) -> str:
        if self.host == OLLAMA_HOST and self.namespace == "library":
            return f"{self.model}:{self.tag}"
        if self.host == OLLAMA_HOST:
            return f"{self.namespace}/{self.model}:{self.tag}"
        return f"{self.host}/{self.namespace}/{self.model}:{self.tag}"

    @property
    def folder(self) -> str:
        """Folder under generators/ (never a path outside it: parts are validated). Four levels,
        as deep as discovery looks; a host has a dot, which no Hub org has, so no clash."""
        return f"{self.host.replace(':', '_')}/{self.namespace}/{self.model}/{self.tag}"


def is_hub_name(name: str) -> bool:
    return name.lower().startswith(HF_PREFIXES)


def parse_hub(name: str) -> HubRef:
    """`[hf.co/]org/repo[:SELECTOR]` -> HubRef; ValueError if it is not one."""
    s = name.strip()
    for p in HF_PREFIXES:
        if s.lower().startswith(p):
            s = s[len(p):]
            break
    repo, _, sel = s.partition(":")
    if not _REPO.match(repo) or ".." in repo:
        raise ValueError(f"{name!r} is not a Hugging Face repo id (expected org/name[:QUANT|:FILE])")
    if sel and ("\\" in sel or ".." in sel.split("/") or sel.startswith("/")):
        raise ValueError(f"{name!r}: bad quantization or file name {sel!r}")
    if sel.lower() == "latest":  # Ollama's default tag on hf.co names: the automatic pick
        sel = ""
    return HubRef(repo, sel or None)


def parse_ollama(name: str) -> OllamaRef:
    """Ollama's model reference -> OllamaRef; ValueError if malformed."""
    s = name.strip()
    base, _, tag = s.rpartition(":") if ":" in s.rsplit("/", 1)[-1] else (s, "", "")
    tag = tag or "latest"
    parts = base.split("/")
    if len(parts) == 1:
        host, ns, model = OLLAMA_HOST, "library", parts[0]
    elif len(parts) == 2:
        host, ns, model = OLLAMA_HOST, parts[0], parts[1]
    elif len(parts) == 3:
        host, ns, model = parts
    else:
        raise ValueError(f"{name!r} is not an Ollama model name (model[:tag], namespace/model[:tag] "
                         "or host/namespace/model[:tag])")
    if not re.match(r"^[A-Za-z0-9.-]+(:\d+)?$", host) or not _PART.match(ns.lower()) \
            or not _PART.match(model.lower()) or not _TAG.match(tag):
        raise ValueError(f"{name!r} is not a valid Ollama model name")
    return OllamaRef(host.lower(), ns.lower(), model.lower(), tag)


def hub_served_name(repo: str, label: str | None) -> str:
    return f"{repo}:{label}" if label else repo


def aliases(name: str) -> list[str]:
    """Other spellings of `name` a pulled model may be served under, most specific first:
    `hf.co/org/repo:Q4_K_M` -> `org/repo:Q4_K_M`; `registry.ollama.ai/library/x:1b` -> `x:1b`;
    `x` -> `x:latest`; `x:latest` -> `x`."""
    out: list[str] = []
    if is_hub_name(name):
        try:
            ref = parse_hub(name)
            out.append(hub_served_name(ref.repo, ref.selector))
        except ValueError:
            pass
    else:
        try:
            ref2 = parse_ollama(name)
            out.append(ref2.served_name)
        except ValueError:
            pass
    if name.endswith(":latest"):
        out.append(name[: -len(":latest")])
    return [a for a in dict.fromkeys(out) if a != name]
