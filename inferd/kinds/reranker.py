"""Rerankers: ONNX cross-encoders (a sequence classifier scoring query + document) or
late-interaction models (ColBERT) declared by their manifest (runtimes/onnx), late-interaction
image rerankers (ColPali: a text graph beside an image graph, runtimes/onnx/colvision.py), or
GGUF cross-encoders on llama.cpp's rank pooling (runtimes/gguf_rerank.py); all batched."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.errors import ModelNotSupported
from inferd.kinds.spec import KindSpec, batched, declared, folder_of, lazy
from inferd.models import ModelKind, ModelSpec, model_ggufs

if TYPE_CHECKING:
    from inferd.runtimes.options import RuntimeOptions
    from inferd.service.handles import EncoderHandle, RerankerRuntime

RANK_POOLING = 4  # llama.cpp's LLAMA_POOLING_TYPE_RANK, as `<arch>.pooling_type` stores it
NO_RANK_HEAD = ("this GGUF does not declare rank pooling (<arch>.pooling_type = 4), so llama.cpp has no "
                "reranking head to run; convert the reranker with its classification head, or say "
                "\"pooling\": \"rank\" in its model_manifest.json if it has one")
_gguf = batched(lazy("inferd.runtimes.gguf_rerank", "load_reranker"))
_text_onnx = batched(lazy("inferd.runtimes.onnx", "load_reranker"))
_colvision = batched(lazy("inferd.runtimes.onnx.colvision", "load"))
# ColVision graphs (runtimes/onnx/colvision.py names them; file names only, no runtime import)
_COLVISION = (("text_model.onnx", "image_model.onnx"), ("onnx/text_model.onnx", "onnx/image_model.onnx"))


def describe(path: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """A GGUF reranker must carry llama.cpp's rank head, which its header says (read here, at
    discovery, so the catalog marks one that does not and loading it is a 400, not a failure)."""
    files = [path] if path.is_file() else model_ggufs(path) if path.is_dir() else []
    if manifest.get("pooling") == "rank" or not files or files[0].suffix != ".gguf":
        return manifest
    from inferd.registry.gguf_meta import NotGGUF, read_metadata  # header only, pure Python

    try:
        meta = read_metadata(files[0])
    except (NotGGUF, OSError) as e:
        return {**manifest, "unsupported": f"unreadable GGUF header: {e}"}
    if meta.get(f"{meta.get('general.architecture')}.pooling_type") != RANK_POOLING:
        return {**manifest, "unsupported": NO_RANK_HEAD}
    return manifest


def capabilities(fmt: str, path: Path, manifest: dict[str, Any]) -> set[str]:
    if manifest.get("unsupported"):
        return {"unsupported"}
    folder = folder_of(path)
    if path.is_dir() and any(all((folder / f).is_file() for f in pair) for pair in _COLVISION):
        return {"late_interaction", "image"}  # ColPali-style: page images scored by MaxSim
    return set() if declared(manifest) & {"late_interaction", "colbert"} else {"cross_encoder"}


def load_onnx(spec: ModelSpec, opts: RuntimeOptions) -> EncoderHandle[Any]:
    """An image reranker's batcher takes queries and page images; a text one's, token sequences."""
    return (_colvision if "image" in spec.capabilities else _text_onnx)(spec, opts)


def load_gguf(spec: ModelSpec, opts: RuntimeOptions) -> EncoderHandle[Any]:
    if spec.manifest.get("unsupported"):
        raise ModelNotSupported(f"reranker '{spec.name}': {spec.manifest['unsupported']}")
    return _gguf(spec, opts)


RERANKER: KindSpec[EncoderHandle[RerankerRuntime]] = KindSpec(
    ModelKind.RERANKER, {"onnx": load_onnx, "gguf": load_gguf},
    folder="rerankers", architectures=("SequenceClassification", "ForRetrieval"), describe=describe, capabilities=capabilities,
    pipeline_tags=("text-classification", "text-ranking"), faces=frozenset({"openai", "antfly"}), observe="batch")
