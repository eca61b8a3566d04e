"""ColVision late-interaction rerankers in ONNX (ColPali: PaliGemma + a projection): a text
query becomes one vector per token, a page image one vector per position of its prompt (its
image tokens, one per patch, and the few text tokens after them), each L2-normalised by the
graph; the score is ColBERT's MaxSim, as `ColPaliProcessor.score_retrieval` computes it: for
each query token the best dot product over the image's vectors, summed.

Folder: text_model.onnx (input_ids, attention_mask -> embeddings [b, s, d]), image_model.onnx
(the same plus pixel_values [b, 3, H, W]), tokenizer.json, preprocessor_config.json (the
SigLIP resize and normalisation, runtimes/onnx/image_prep.py), processor_config.json (the
prompts the processor builds), config.json. scripts/make_tiny_colvision.py makes one.

The prompts are ColPaliProcessor's, built here in numpy/tokenizers terms:
    query: <bos> + query_prefix + query + augmentation_token x 10 + "\\n"
    image: image_token x image_seq_length + <bos> + visual_prompt_prefix + "\\n"
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferd.errors import CapabilityMissing, ModelLoadFailed
from inferd.models import ModelSpec
from inferd.runtimes.common.pooling import maxsim
from inferd.runtimes.onnx.image_prep import ImagePrep
from inferd.runtimes.onnx.tokenize import Encoded, TextTokenizer, pad
from inferd.runtimes.options import RuntimeOptions

log = logging.getLogger("inferd.runtimes.onnx")

TEXT_GRAPH, IMAGE_GRAPH = "text_model.onnx", "image_model.onnx"
QUERY_AUGMENTATION = 10  # ColPaliProcessor appends its augmentation token this many times


def colvision_files(folder: Path) -> tuple[Path, Path] | None:
    """(text graph, image graph) of a ColVision folder (top level or onnx/), or None."""
    def find(name: str) -> Path | None:
        return next((p for p in (folder / name, folder / "onnx" / name) if p.is_file()), None)

    t, v = find(TEXT_GRAPH), find(IMAGE_GRAPH)
    return (t, v) if t and v else None


@dataclass(frozen=True)
class PageInput:
    """One preprocessed page image, [3, H, W] float32; costs its prompt's positions."""

    pixels: np.ndarray
    positions: int

    def __len__(self) -> int:
        return self.positions


class ColVisionReranker:
    """What the image-rerank service needs of a late-interaction image reranker: `prepare_query`,
    `prepare_image`, a batched `run_batch` over both (per item its [n, d] vectors) and `score`."""

    late_interaction = True
    max_batch_tokens: int | None = None

    def __init__(self, name: str, folder: Path, threads: int | None = None):
        from inferd.runtimes.onnx.session import open_session

        files = colvision_files(folder)
        if files is None:
            raise ModelLoadFailed(f"reranker '{name}': needs {TEXT_GRAPH} and {IMAGE_GRAPH} in {folder}")
        for f in ("tokenizer.json", "preprocessor_config.json", "processor_config.json"):
            if not (folder / f).is_file():
                raise ModelLoadFailed(f"reranker '{name}': missing {f} in {folder}")
        try:
            proc = json.loads((folder / "processor_config.json").read_text())
            cfg = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() else {}
        except ValueError as e:
            raise ModelLoadFailed(f"reranker '{name}': {e}") from e
        text_cfg = (cfg.get("vlm_config") or {}).get("text_config") or {}
        self.name = name
        self.tokenizer = TextTokenizer(str(folder / "tokenizer.json"),
                                       max_length=int(text_cfg.get("max_position_embeddings") or 512))
        self.max_length = self.tokenizer.max_length
        self.prep = ImagePrep.from_file(folder / "preprocessor_config.json")
        bos = str(proc.get("bos_token", "<bos>"))
        self.query_prefix = bos + str(proc.get("query_prefix", "Question: "))
        self.query_suffix = str(proc.get("query_augmentation_token", "<pad>")) * QUERY_AUGMENTATION + "\n"
        seq = int(proc.get("image_seq_length") or 0)
        if seq <= 0:
            raise ModelLoadFailed(f"reranker '{name}': processor_config.json needs image_seq_length")
        image_prompt = str(proc.get("image_token", "<image>")) * seq + bos + str(
            proc.get("visual_prompt_prefix", "Describe the image.")) + "\n"
        self.image_ids = np.asarray(self.tokenizer.encode([image_prompt])[0].ids, dtype=np.int64)
        self.text = open_session(files[0], threads, spin=False)
        self.vision = open_session(files[1], threads, spin=False)
        self.dims = int(self.text.get_outputs()[0].shape[-1] or 0) or None

    # ---- inputs (any thread) -----------------------------------------------------------------------
    def prepare_query(self, query: str) -> Encoded:
        return self.tokenizer.encode([self.query_prefix + query + self.query_suffix])[0]

    def prepare_image(self, rgb: np.ndarray) -> PageInput:
        return PageInput(self.prep(rgb), len(self.image_ids))

    def prepare(self, query: str, docs: Sequence[str]) -> list[Encoded]:
        """The text rerank verbs (/v1/rerank, /ai/v1/rerank) bring text documents: not this model's."""
        raise CapabilityMissing(f"reranker '{self.name}' is a late-interaction image reranker (ColPali): its "
                                "documents are page images; send them to /ai/v1/rerank_multimodal as image parts")

    # ---- the batch (worker thread) ----------------------------------------------------------------
    def run_batch(self, items: Sequence[Any]) -> list[np.ndarray]:
        """Per item its vectors, [positions, dim]: the query's tokens or the page's prompt."""
        out: list[Any] = [None] * len(items)
        pages = [i for i, x in enumerate(items) if isinstance(x, PageInput)]
        texts = [i for i, x in enumerate(items) if not isinstance(x, PageInput)]
        if pages:
            n = len(pages)
            ids = np.broadcast_to(self.image_ids, (n, len(self.image_ids)))
            feed = {"input_ids": np.ascontiguousarray(ids), "attention_mask": np.ones_like(ids),
                    "pixel_values": np.stack([items[i].pixels for i in pages])}
            vecs = self.vision.run(None, feed)[0]
            for k, i in enumerate(pages):
                out[i] = np.asarray(vecs[k], dtype=np.float32)
        if texts:
            # right padding: with the mask, the pads change nothing of the real tokens' vectors
            ids, mask, _ = pad([items[i] for i in texts], self.tokenizer.pad_id)
            vecs = self.text.run(None, {"input_ids": ids, "attention_mask": mask})[0]
            for k, i in enumerate(texts):
                out[i] = np.asarray(vecs[k, : int(mask[k].sum())], dtype=np.float32)
        return out

    @staticmethod
    def score(query: np.ndarray, pages: Sequence[np.ndarray]) -> float:
        """MaxSim of the query against all vectors of a document's pages (one page: its own)."""
        return maxsim(query, np.concatenate(list(pages)) if len(pages) > 1 else pages[0])

    def close(self) -> None:
        self.text = self.vision = None


def load(spec: ModelSpec, opts: RuntimeOptions) -> ColVisionReranker:
    if spec.path is None:
        raise ModelLoadFailed(f"reranker '{spec.name}' has no model folder")
    folder = Path(spec.path) if Path(spec.path).is_dir() else Path(spec.path).parent
    return ColVisionReranker(spec.name, folder, threads=opts.threads)
