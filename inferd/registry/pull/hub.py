"""Hugging Face Hub downloads, on `huggingface_hub` (it honours HF_ENDPOINT and HF_TOKEN).

What a pull asks the Hub: the repo's file list with LFS sha256s (`model_info` with blobs),
for each file a HEAD on `resolve/<commit>/<path>` (X-Repo-Commit, X-Linked-Etag,
X-Linked-Size: the bytes we will get), then a GET, with Range when resuming. Every file
comes from the one commit the listing named, so a repo updated mid-pull cannot mix."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from inferd.errors import InferdError, InvalidInput, NotFound, NotImplementedYet, UpstreamFailed
from inferd.kinds import FALLBACK, KINDS, AmbiguousKind, kind_of_architecture, kind_of_format, kinds_of_pipeline
from inferd.models import ModelKind
from inferd.registry.pull import quants
from inferd.registry.pull.names import hub_served_name
from inferd.registry.pull.transfer import Progress, Remote

log = logging.getLogger("inferd.pull")

# Files an ONNX model folder needs besides its graphs (tokenizers, configs, pooling).
_ONNX_SIDE = {"config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
              "vocab.json", "merges.txt", "added_tokens.json", "spiece.model", "sentencepiece.bpe.model",
              "tokenizer.model", "generation_config.json", "preprocessor_config.json", "modules.json",
              "sentence_bert_config.json", "config_sentence_transformers.json", "1_Pooling/config.json"}
_QUANTIZED = re.compile(r"(?i)(_quantized|_int8|_qint8|-i8)$")
_OTHER_VARIANT = re.compile(r"(?i)(_fp16|_q4f16|_q4|_uint8|_quint8|_bnb4|_o[1-4])$")


def _pulls_as(kind: ModelKind, fmt: str) -> bool:
    """Whether the kinds table says a kind can be pulled in `fmt` (KindSpec.pull_formats)."""
    spec = KINDS.get(kind)
    return spec is not None and fmt in spec.pull_formats


@dataclass(frozen=True)
class HubFile:
    path: str
    size: int | None
    sha256: str | None
    git_sha1: str | None


@dataclass
class Listing:
    repo: str
    commit: str
    files: list[HubFile]
    pipeline_tag: str | None = None
    config: dict[str, Any] = field(default_factory=dict)


@dataclass
class Plan:
    """What to fetch and where it goes (`folder` is relative to models_dir)."""

    repo: str
    commit: str
    kind: ModelKind
    format: str
    label: str | None
    files: list[HubFile]
    served_name: str
    folder: str
    groups: list[quants.Group] = field(default_factory=list)

    def dest(self, f: HubFile) -> str:
        # GGUF shards are flattened into the quant folder: llama.cpp finds shard 2..n beside shard 1.
        return f.path.rsplit("/", 1)[-1] if self.format == "gguf" else f.path

    def remote(self, f: HubFile) -> Remote:
        return Remote(f"{self.repo}/{f.path}", f.size, f.sha256, f.git_sha1)


def _safe_label(label: str) -> str:
    """A folder name from a label the Hub's listing gave (never empty, '.' or '..')."""
    return re.sub(r"[^\w.-]", "_", label)[:64].lstrip(".") or "model"


class Hub:
    def __init__(self, endpoint: str | None = None, token: str | None = None):
        try:
            from huggingface_hub import HfApi, constants
        except ImportError as e:
            raise NotImplementedYet("downloading from the Hub needs huggingface_hub: pip install -e '.[models]'") from e

        self.endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
        self.token = token or os.environ.get("HF_TOKEN") or None
        self.api = HfApi(endpoint=self.endpoint, token=self.token)

    # ---- errors ----------------------------------------------------------------------------
    def _translate(self, e: Exception, repo: str, what: str) -> Exception:
        from huggingface_hub import errors as hf

        if isinstance(e, hf.GatedRepoError):
            return UpstreamFailed(f"repository '{repo}' is gated: accept its licence on the Hub and set HF_TOKEN")
        if isinstance(e, hf.RepositoryNotFoundError):
            return NotFound(f"repository '{repo}' not found on {self.endpoint} (a private repo needs HF_TOKEN)")
        if isinstance(e, hf.RevisionNotFoundError):
            return NotFound(f"revision not found in '{repo}': {e}")
        if isinstance(e, hf.EntryNotFoundError):
            return NotFound(f"{what} not found in '{repo}'")
        if isinstance(e, hf.OfflineModeIsEnabled):
            return UpstreamFailed("HF_HUB_OFFLINE is set: unset it to download from the Hub")
        if isinstance(e, hf.HfHubHTTPError):
            status = getattr(e.response, "status_code", "?")
            return UpstreamFailed(f"the Hub answered {status} for {what} of '{repo}'")
        return UpstreamFailed(f"cannot reach {self.endpoint} for {what} of '{repo}': {e}")

    # ---- listing and planning ---------------------------------------------------------------
    def listing(self, repo: str, revision: str | None = None) -> Listing:
        try:
            info = self.api.model_info(repo, revision=revision, files_metadata=True)
        except Exception as e:  # huggingface_hub's and the HTTP client's errors, made clear
            raise self._translate(e, repo, "the file list") from e
        files = [HubFile(s.rfilename, s.size, s.lfs.sha256 if s.lfs else None, None if s.lfs else s.blob_id)
                 for s in info.siblings or []]
        cfg = info.config if isinstance(info.config, dict) else {}
        return Listing(repo, info.sha or revision or "main", files, info.pipeline_tag, cfg)

    def plan(self, listing: Listing, selector: str | None = None, kind: ModelKind | None = None,
             choose: quants.Chooser | None = None, prefer_quantized: bool = True) -> Plan:
        ggufs = [f for f in listing.files if f.path.lower().endswith(".gguf")]
        if any(not quants.is_mmproj(f.path) for f in ggufs):
            return self._plan_gguf(listing, selector, kind, choose)
        if any(f.path.endswith(".onnx") for f in listing.files):
            if selector:
                raise InvalidInput(f"'{listing.repo}' is an ONNX repo: it has no quantizations to choose "
                                   f"(got ':{selector}')", "model")
            return self._plan_onnx(listing, kind, prefer_quantized)
        raise NotFound(f"repository '{listing.repo}' has no GGUF or ONNX model files")

    def _plan_gguf(self, listing: Listing, selector: str | None, kind: ModelKind | None,
                   choose: quants.Chooser | None) -> Plan:
        sizes = {f.path: f for f in listing.files}
        groups = quants.group_files([quants.GFile(f.path, f.size or 0) for f in listing.files])
        if selector:
            group = quants.select(groups, selector)
            if group is None:
                have = ", ".join(g.label for g in groups)
                raise NotFound(f"no quantization or file '{selector}' in '{listing.repo}' (it has: {have})")
        else:
            group = choose(groups, listing.repo) if choose else quants.auto_pick(groups)
        chosen = [sizes[f.path] for f in group.files]
        mm = quants.pick_mmproj([quants.GFile(f.path, f.size or 0) for f in listing.files], group)
        if mm is not None:
            chosen.append(sizes[mm.path])
        # the kind the pipeline tag names, among those pulled as GGUF; else what GGUF alone makes
        kind = kind or next((k for k in kinds_of_pipeline(listing.pipeline_tag) if _pulls_as(k, "gguf")), None)
        if kind is None or not _pulls_as(kind, "gguf"):
            kind = kind_of_format("gguf") or ModelKind.GENERATOR
        label = _safe_label(group.label)
        return Plan(listing.repo, listing.commit, kind, "gguf", group.label, chosen,
                    hub_served_name(listing.repo, group.label), f"{kind.plural}/{listing.repo}/{label}", groups)

    def _plan_onnx(self, listing: Listing, kind: ModelKind | None, prefer_quantized: bool) -> Plan:
        side = [f for f in listing.files if f.path in _ONNX_SIDE]
        graphs = [f for f in listing.files if f.path.endswith(".onnx") and f.path.count("/") <= 1]
        components: dict[str, list[HubFile]] = {}
        for g in graphs:
            folder, _, name = g.path.rpartition("/")
            stem = _OTHER_VARIANT.sub("", _QUANTIZED.sub("", name[: -len(".onnx")]))
            components.setdefault(f"{folder}/{stem}", []).append(g)
        chosen: list[HubFile] = []
        for variants in components.values():
            quant = [v for v in variants if _QUANTIZED.search(v.path[: -len(".onnx")])]
            plain = [v for v in variants if not _QUANTIZED.search(v.path[: -len(".onnx")])
                     and not _OTHER_VARIANT.search(v.path[: -len(".onnx")])]
            pick = (quant if prefer_quantized and quant else plain or quant or variants)[0]
            chosen.append(pick)
            data = {pick.path + "_data", pick.path + ".data", pick.path[: -len(".onnx")] + ".onnx_data"}
            chosen += [f for f in listing.files if f.path in data]
        kind = kind or self._onnx_kind(listing)
        if not _pulls_as(kind, "onnx"):  # a generator: inferd runs those from GGUF
            kinds = KINDS.get(kind)
            runs = " or ".join(f.upper() for f in kinds.pull_formats) if kinds and kinds.pull_formats else "no pull"
            raise NotImplementedYet(f"'{listing.repo}' is an ONNX {kind.value}; inferd runs {kind.plural} from {runs}")
        return Plan(listing.repo, listing.commit, kind, "onnx", None, side + chosen, listing.repo,
                    f"{kind.plural}/{listing.repo}")

    @staticmethod
    def _onnx_kind(listing: Listing) -> ModelKind:
        """What the kinds table makes of an ONNX repo: the kind its config.json architectures
        mark (WhisperForConditionalGeneration: a transcriber), else the kind its pipeline tag
        names, else an embedder. A token classifier may be a chunker or an extractor: the
        caller must say which."""
        arch = " ".join(listing.config.get("architectures") or [])
        try:
            kind = kind_of_architecture(arch)
            if kind is None:
                by_tag = kinds_of_pipeline(listing.pipeline_tag)
                if len(by_tag) > 1:
                    raise AmbiguousKind(str(listing.pipeline_tag), by_tag)
                kind = by_tag[0] if by_tag else FALLBACK
        except AmbiguousKind as e:
            raise InvalidInput(f"'{listing.repo}' is not one kind: {e}; say which with --kind", "kind") from e
        return kind

    # ---- transfer ----------------------------------------------------------------------------
    def fetcher(self, plan: Plan, f: HubFile) -> Callable[[BinaryIO, int, Progress], None]:
        """The byte source of one planned file for Transfers.get."""

        def fetch(out: BinaryIO, offset: int, advance: Progress) -> None:
            from huggingface_hub import get_hf_file_metadata, hf_hub_url
            from huggingface_hub.file_download import http_get
            from huggingface_hub.utils import build_hf_headers

            url = hf_hub_url(plan.repo, f.path, revision=plan.commit, endpoint=self.endpoint)
            try:
                meta = get_hf_file_metadata(url, token=self.token, endpoint=self.endpoint)
            except Exception as e:
                raise self._translate(e, plan.repo, f"'{f.path}'") from e
            if meta.commit_hash and meta.commit_hash != plan.commit:
                raise UpstreamFailed(f"'{f.path}' resolved to commit {meta.commit_hash}, not {plan.commit}")
            if f.size is not None and meta.size is not None and meta.size != f.size:
                raise UpstreamFailed(f"'{f.path}': the Hub lists {f.size} bytes but serves {meta.size}")
            if f.sha256 and meta.etag and re.fullmatch(r"[0-9a-f]{64}", meta.etag) and meta.etag != f.sha256:
                raise UpstreamFailed(f"'{f.path}': the Hub's listing and file disagree on its sha256")
            try:
                http_get(meta.location or url, out, resume_size=offset, headers=build_hf_headers(token=self.token),
                         expected_size=f.size, displayed_filename=f.path, tqdm_class=_reporter(advance))
            except Exception as e:
                if isinstance(e, InferdError):
                    raise
                raise self._translate(e, plan.repo, f"'{f.path}'") from e

        return fetch


def _reporter(advance: Progress) -> type:
    """A tqdm stand-in for huggingface_hub's http_get that forwards progress to `advance`
    (our own bars and events draw it; http_get's own bar would be a second one)."""

    class Reporter:
        def __init__(self, *_, total: int | None = None, initial: int = 0, **__: Any):
            self.n, self.total = initial, total
            advance(self.n, self.total)

        def update(self, k: int = 1) -> None:
            self.n += k
            advance(self.n, self.total)

        def close(self) -> None:
            pass

        def __enter__(self) -> "Reporter":
            return self

        def __exit__(self, *exc: Any) -> None:
            pass

    return Reporter


def plan_summary(groups: Sequence[quants.Group]) -> list[str]:
    return quants.describe(groups)
