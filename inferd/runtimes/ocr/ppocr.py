"""PP-OCR readers (text detection + direction classification + recognition, ONNX) on the
pipeline pieces of the `rapidocr` package: its DB text detector, its 0/180 line classifier
and its CTC recogniser, with the package's own pre- and post-processing. Model files are
always given by path, so the package never downloads anything.

What inferd adds is the batch: each image is detected on its own (images differ in size),
then the text lines of EVERY image in the batch are classified and recognised together, in
batches of `rec_batch_num` lines, so concurrent requests share recognition passes. Lines come
back in reading order (top to bottom, then left to right, rapidocr's ordering) with their
box in source pixels and the recogniser's confidence."""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inferd.errors import InvalidInput, ModelLoadFailed
from inferd.types import ReadItem, ReadOutput, TextRegion

log = logging.getLogger("inferd.runtimes.ocr")

# The models inside the rapidocr 3.10 wheel (PP-OCRv6 small det + rec, mobile 0/180 classifier).
PACKAGE_MODELS = {"det": "PP-OCRv6_det_small.onnx", "rec": "PP-OCRv6_rec_small.onnx",
                  "cls": "ch_ppocr_mobile_v2.0_cls_mobile.onnx"}


def package_models() -> dict[str, Path] | None:
    """The det/rec/cls models that ship inside the rapidocr wheel, found without importing it
    (cheap enough for the built-in provider)."""
    import importlib.util

    spec = importlib.util.find_spec("rapidocr")
    if spec is None or not spec.submodule_search_locations:
        return None
    d = Path(list(spec.submodule_search_locations)[0]) / "models"
    files = {k: d / v for k, v in PACKAGE_MODELS.items()}
    return files if all(p.is_file() for p in files.values()) else None


def folder_models(folder: Path) -> dict[str, Path]:
    """det/rec/cls graphs (and an optional character list) of a `readers/<name>/` folder:
    files whose names contain `det`, `rec`, `cls`; keys from `*.txt`."""
    out: dict[str, Path] = {}
    for p in sorted([*folder.glob("*.onnx"), *folder.glob("onnx/*.onnx")]):
        low = p.name.lower()
        for part in ("det", "rec", "cls"):
            if part in low and part not in out:
                out[part] = p
    keys = sorted(folder.glob("*.txt"))
    if keys:
        out["keys"] = keys[0]
    missing = [k for k in ("det", "rec") if k not in out]
    if missing:
        raise ModelLoadFailed(f"PP-OCR reader in {folder}: no {' or '.join(missing)} graph (*det*.onnx, *rec*.onnx)")
    return out


READ_BATCH_IMAGES = 8  # images per batch: detection one by one, recognition of all their lines together


class PPOCR:
    family = "ppocr"
    takes_prompt = False
    max_batch_tokens = READ_BATCH_IMAGES  # the batcher's cost of an image is 1

    def __init__(self, name: str, files: dict[str, Path], threads: int | None = None, text_score: float = 0.5,
                 rec_batch_num: int = 6):
        try:
            from rapidocr import RapidOCR
        except ImportError as e:  # opencv / shapely / pyclipper missing
            raise ModelLoadFailed(f"reader '{name}' needs the rapidocr package and its dependencies: {e}") from e
        params: dict[str, Any] = {"Global.log_level": "warning", "Global.text_score": text_score,
                                  "Global.use_cls": "cls" in files, "Det.model_path": str(files["det"]),
                                  "Rec.model_path": str(files["rec"]), "Rec.rec_batch_num": rec_batch_num}
        if "cls" in files:
            params["Cls.model_path"] = str(files["cls"])
        if "keys" in files:
            params["Rec.rec_keys_path"] = str(files["keys"])
        if threads:
            params["EngineConfig.onnxruntime.intra_op_num_threads"] = threads
            params["EngineConfig.onnxruntime.inter_op_num_threads"] = 1
        try:
            self.engine: Any = RapidOCR(params=params)
            # Load the three sessions now (the package loads them lazily, on first use).
            self.engine._load_det_model()
            if "cls" in files:
                self.engine._load_cls_model()
            self.engine._load_rec_model()
        except Exception as e:  # the package raises plain exceptions for bad graphs
            raise ModelLoadFailed(f"reader '{name}': {e}") from e
        self.name = name
        self.use_cls = "cls" in files

    def check(self, item: ReadItem) -> None:
        if item.prompt:
            raise InvalidInput(f"reader '{self.name}' (PP-OCR) takes no prompt", "prompt")

    # ---- the batch (worker thread) ----------------------------------------------------------------
    def _detect(self, rgb: np.ndarray) -> tuple[Any, list[np.ndarray], dict[str, Any]]:
        e = self.engine
        img = np.ascontiguousarray(rgb[..., ::-1])  # the package works in BGR, as OpenCV does
        img, record = e.preprocess_img(img)
        if e.cfg.Global.use_vertical_padding:
            from rapidocr.utils.process_img import apply_vertical_padding

            img, record = apply_vertical_padding(img, record, e.width_height_ratio, e.min_height)
        else:
            record["padding_1"] = {"top": 0, "left": 0}
        det = e.text_det(img)
        if det.boxes is None or len(det.boxes) == 0:
            return None, [], record
        return det.boxes, e.crop_text_regions(img, det.boxes), record

    def run_batch(self, items: Sequence[ReadItem]) -> list[ReadOutput]:
        from rapidocr.ch_ppocr_rec import TextRecInput
        from rapidocr.utils.process_img import map_boxes_to_original

        e = self.engine
        dets: list[Any] = []
        for it in items:
            try:
                dets.append(self._detect(it.image))
            except Exception as exc:  # noqa: BLE001 - the package rejects some shapes (e.g. 1x3000)
                h, w = it.image.shape[:2]
                log.info("PP-OCR could not prepare a %dx%d image: %r", w, h, exc)
                dets.append(InvalidInput(f"image of {w}x{h} pixels cannot be read (too thin for the text "
                                         "detector); crop or pad it", "images"))
        crops = [c for d in dets if not isinstance(d, InvalidInput) for c in d[1]]
        txts: list[str] = []
        scores: list[float] = []
        if crops:
            if self.use_cls:
                crops = e.text_cls(crops).img_list
            rec = e.text_rec(TextRecInput(img=crops, return_word_box=False))
            txts, scores = list(rec.txts or []), list(rec.scores or [])
        out: list[Any] = []
        at = 0
        for it, det in zip(items, dets):
            if isinstance(det, InvalidInput):  # this image's error; the batch's other images go on
                out.append(det)
                continue
            boxes, cs, record = det
            mine = list(zip(txts[at:at + len(cs)], scores[at:at + len(cs)]))
            at += len(cs)
            regions: list[TextRegion] = []
            if boxes is not None:
                h, w = it.image.shape[:2]
                pts = map_boxes_to_original(copy.deepcopy(np.asarray(boxes, dtype=np.float32)), record, h, w)
                for quad, (text, score) in zip(pts, mine):
                    if float(score) < e.text_score or not str(text).strip():
                        continue
                    xs, ys = quad[:, 0], quad[:, 1]
                    regions.append(TextRegion(text=str(text), confidence=round(float(score), 6), label="text_line",
                                              bbox=(float(xs.min()), float(ys.min()), float(xs.max()), float(ys.max()))))
            out.append(ReadOutput(text="\n".join(r.text for r in regions), regions=regions))
        return out

    def close(self) -> None:
        self.engine = None
