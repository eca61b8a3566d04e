"""CLIP / SigLIP-style dual encoders in ONNX: a vision graph (pixel_values -> image embeds)
and a text graph (input_ids[, attention_mask] -> text embeds), both projected into one space
and L2-normalised, so a text and an image of one request compare by cosine.

Folder: vision_model.onnx + text_model.onnx (top level or onnx/), preprocessor_config.json,
tokenizer.json, config.json (text max_position_embeddings). Batches may mix texts
(`Encoded`) and images (`ImageInput`): each kind runs as one pass of its graph."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferd.errors import ModelLoadFailed
from inferd.runtimes.onnx.image_prep import ImagePrep
from inferd.models import ModelSpec
from inferd.runtimes.common.pooling import l2_normalize
from inferd.runtimes.common.prefixes import prefixes_of, task_prefix
from inferd.runtimes.options import RuntimeOptions
from inferd.runtimes.onnx.tokenize import Encoded, TextTokenizer, pad

log = logging.getLogger("inferd.runtimes.onnx")

VISION_NAMES = ("vision_model.onnx", "image_model.onnx", "visual.onnx")
TEXT_NAMES = ("text_model.onnx", "textual.onnx")
IMAGE_COST = 64  # batcher cost of one image (in text-token units: a pass over a small patch grid)


@dataclass(frozen=True)
class ImageInput:
    """One preprocessed image, [3, H, W] float32."""

    pixels: np.ndarray

    def __len__(self) -> int:
        return IMAGE_COST


def dual_encoder_files(folder: Path) -> tuple[Path, Path] | None:
    def find(names):
        for n in names:
            for p in (folder / n, folder / "onnx" / n):
                if p.is_file():
                    return p
        return None

    v, t = find(VISION_NAMES), find(TEXT_NAMES)
    return (v, t) if v and t else None


def _session(path: Path, threads: int | None):
    from inferd.runtimes.onnx.session import open_session

    return open_session(path, threads)


def _output(sess, wanted: tuple[str, ...]) -> str:
    names = [o.name for o in sess.get_outputs()]
    for w in wanted:
        if w in names:
            return w
    two_d = [o.name for o in sess.get_outputs() if len(o.shape) == 2]
    if not two_d:
        raise ModelLoadFailed(f"no pooled [batch, dim] output among {names}")
    return two_d[0]


class ClipEmbedder:
    """Satisfies what EncoderVerbs and the image-embedding service need of an embedder."""

    sparse = False
    max_batch_tokens = None  # the server's token budget; an image costs IMAGE_COST

    def __init__(self, name: str, folder: Path, manifest: dict[str, Any], threads: int | None = None):
        files = dual_encoder_files(folder)
        if files is None:
            raise ModelLoadFailed(f"embedder '{name}': needs vision_model.onnx and text_model.onnx in {folder}")
        for f in ("preprocessor_config.json", "tokenizer.json"):
            if not (folder / f).is_file():
                raise ModelLoadFailed(f"embedder '{name}': missing {f} in {folder}")
        cfg = {}
        if (folder / "config.json").is_file():
            cfg = json.loads((folder / "config.json").read_text())
        max_len = int((cfg.get("text_config") or {}).get("max_position_embeddings") or 77)
        self.name, self.spec_manifest = name, manifest
        self.prep = ImagePrep.from_file(folder / "preprocessor_config.json")
        self.tokenizer = TextTokenizer(str(folder / "tokenizer.json"), max_length=max_len)
        self.max_length = self.tokenizer.max_length
        self.vision, self.text = _session(files[0], threads), _session(files[1], threads)
        self.vision_out = _output(self.vision, ("image_embeds", "image_embeddings", "pooler_output"))
        self.text_out = _output(self.text, ("text_embeds", "text_embeddings", "pooler_output"))
        self.text_inputs = {i.name for i in self.text.get_inputs()}
        self.prefixes = prefixes_of(manifest)
        self.normalize = bool(manifest.get("normalize", True))
        self.dims = int(self.run_batch(self.tokenizer.encode(["probe"]))[0].shape[-1])

    # ---- inputs (any thread) -----------------------------------------------------------------------
    def prefix(self, task: str | None) -> str:
        return task_prefix(self.prefixes, task)

    def prepare(self, texts: Sequence[str], task: str | None = None) -> list[Encoded]:
        p = self.prefix(task)
        return self.tokenizer.encode([p + t for t in texts] if p else texts)

    def prepare_ids(self, ids: Sequence[int]) -> Encoded:
        return self.tokenizer.from_ids(ids)

    def prepare_image(self, rgb: np.ndarray) -> ImageInput:
        return ImageInput(self.prep(rgb))

    # ---- the batch (worker thread) ----------------------------------------------------------------
    def run_batch(self, items: Sequence[Any]) -> list[np.ndarray]:
        out: list[Any] = [None] * len(items)
        imgs = [i for i, x in enumerate(items) if isinstance(x, ImageInput)]
        texts = [i for i, x in enumerate(items) if not isinstance(x, ImageInput)]
        if imgs:
            px = np.stack([items[i].pixels for i in imgs])
            vecs = self.vision.run([self.vision_out], {self.vision.get_inputs()[0].name: px})[0]
            for i, v in zip(imgs, self._finish(vecs)):
                out[i] = v
        if texts:
            ids, mask, _ = pad([items[i] for i in texts], self.tokenizer.pad_id)
            feed = {"input_ids": ids, "attention_mask": mask}
            vecs = self.text.run([self.text_out], {k: v for k, v in feed.items() if k in self.text_inputs})[0]
            for i, v in zip(texts, self._finish(vecs)):
                out[i] = v
        return out

    def _finish(self, vecs: np.ndarray) -> list[np.ndarray]:
        vecs = vecs.reshape(vecs.shape[0], -1).astype(np.float32)
        return list(l2_normalize(vecs) if self.normalize else vecs)

    def close(self) -> None:
        self.vision = self.text = None


def load(spec: ModelSpec, opts: RuntimeOptions) -> ClipEmbedder:
    if spec.path is None:
        raise ModelLoadFailed(f"embedder '{spec.name}' has no model folder")
    folder = Path(spec.path) if Path(spec.path).is_dir() else Path(spec.path).parent
    return ClipEmbedder(spec.name, folder, spec.manifest, threads=opts.threads)
