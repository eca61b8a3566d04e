"""Image preprocessing equal to the Hugging Face image processors (their PIL backend) named
in a model's preprocessor_config.json: ViT/TrOCR (resize to height x width), CLIP (shortest
edge, centre crop), Donut (align long axis, shortest edge, thumbnail, centred zero padding);
then rescale (float64 multiply, as transformers does) and normalize in float32.

Input: RGB uint8 [H, W, 3]. Output: float32 [3, H, W]."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferd.errors import InvalidInput, ModelLoadFailed

IMAGENET_STANDARD = [0.5, 0.5, 0.5]
OPENAI_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
OPENAI_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
_KNOWN = ("ViT", "TrOCR", "Donut", "CLIP", "Siglip", "SigLIP", "DeiT", "BeiT")


@dataclass
class ImagePrep:
    kind: str                          # vit | clip | donut
    height: int
    width: int
    shortest_edge: int | None = None
    crop: tuple[int, int] | None = None
    resample: int = 2
    do_resize: bool = True
    do_rescale: bool = True
    scale: float = 1 / 255
    do_normalize: bool = True
    mean: tuple[float, ...] = tuple(IMAGENET_STANDARD)
    std: tuple[float, ...] = tuple(IMAGENET_STANDARD)
    do_thumbnail: bool = True
    do_align_long_axis: bool = False
    do_pad: bool = True

    @classmethod
    def from_file(cls, path: Path) -> "ImagePrep":
        try:
            cfg = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise ModelLoadFailed(f"cannot read {path}: {e}") from e
        return cls.from_config(cfg)

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> "ImagePrep":
        ptype = str(cfg.get("image_processor_type") or cfg.get("feature_extractor_type") or "")
        if not any(ptype.startswith(k) for k in _KNOWN):
            raise ModelLoadFailed(f"unsupported image processor {ptype!r} (supported: ViT/TrOCR, CLIP/SigLIP, Donut)")
        kind = "donut" if ptype.startswith("Donut") else "clip" if ptype.startswith(("CLIP",)) else "vit"
        size = cfg.get("size")
        if kind == "donut" and isinstance(size, list):
            size = {"width": size[0], "height": size[1]}  # Donut's legacy [width, height]
        if isinstance(size, int):
            size = {"shortest_edge": size} if kind == "clip" else {"height": size, "width": size}
        size = dict(size or {})
        mean = cfg.get("image_mean", OPENAI_CLIP_MEAN if kind == "clip" else IMAGENET_STANDARD)
        std = cfg.get("image_std", OPENAI_CLIP_STD if kind == "clip" else IMAGENET_STANDARD)
        mean = [mean] * 3 if isinstance(mean, (int, float)) else mean
        std = [std] * 3 if isinstance(std, (int, float)) else std
        crop = cfg.get("crop_size")
        if isinstance(crop, int):
            crop = {"height": crop, "width": crop}
        p = cls(kind=kind, height=int(size.get("height") or 0), width=int(size.get("width") or 0),
                shortest_edge=int(size["shortest_edge"]) if size.get("shortest_edge") else None,
                crop=(int(crop["height"]), int(crop["width"])) if crop and cfg.get("do_center_crop", kind == "clip") else None,
                resample=int(cfg.get("resample", 3 if kind == "clip" else 2)),
                do_resize=bool(cfg.get("do_resize", True)), do_rescale=bool(cfg.get("do_rescale", True)),
                scale=float(cfg.get("rescale_factor", 1 / 255)), do_normalize=bool(cfg.get("do_normalize", True)),
                mean=tuple(float(x) for x in mean), std=tuple(float(x) for x in std),
                do_thumbnail=bool(cfg.get("do_thumbnail", True)),
                do_align_long_axis=bool(cfg.get("do_align_long_axis", False)), do_pad=bool(cfg.get("do_pad", True)))
        if p.kind != "clip" and not (p.height and p.width):
            raise ModelLoadFailed(f"preprocessor_config.json: 'size' needs height and width (got {size})")
        if p.kind == "clip" and not p.shortest_edge and not (p.height and p.width):
            raise ModelLoadFailed(f"preprocessor_config.json: 'size' needs shortest_edge (got {size})")
        return p

    @property
    def output_size(self) -> tuple[int, int]:
        if self.crop:
            return self.crop
        return (self.height, self.width)

    # ---- steps (PIL, as transformers' PIL backend) -------------------------------------------
    def _resize(self, img: np.ndarray, h: int, w: int, resample: int | None = None) -> np.ndarray:
        from PIL import Image

        if img.shape[0] == h and img.shape[1] == w:
            # transformers resizes even to the same size; PIL returns a copy then: equal values.
            return img
        return np.asarray(Image.fromarray(img).resize((w, h), resample=self.resample if resample is None else resample))

    def _shortest(self, img: np.ndarray, edge: int) -> np.ndarray:
        h, w = img.shape[:2]
        short, long = (w, h) if w <= h else (h, w)
        new_short, new_long = edge, int(edge * long / short)
        nh, nw = (new_long, new_short) if w <= h else (new_short, new_long)
        return self._resize(img, nh, nw)

    def _donut(self, img: np.ndarray) -> np.ndarray:
        H, W = self.height, self.width
        if self.do_align_long_axis:
            h, w = img.shape[:2]
            if (W < H and w > h) or (W > H and w < h):
                img = np.ascontiguousarray(np.rot90(img, 3, axes=(0, 1)))
        if self.do_resize:
            img = self._shortest(img, min(H, W))
        if self.do_thumbnail:
            h, w = img.shape[:2]
            th, tw = min(h, H), min(w, W)
            if not (th == h and tw == w):
                if h > w:
                    tw = int(w * th / h)
                elif w > h:
                    th = int(h * tw / w)
                img = self._resize(img, th, tw, resample=self.resample or 3)  # transformers: `resample or BICUBIC`
        if self.do_pad:
            h, w = img.shape[:2]
            dh, dw = H - h, W - w
            top, left = dh // 2, dw // 2
            img = np.pad(img, ((top, dh - top), (left, dw - left), (0, 0)), constant_values=0)
        return img

    def __call__(self, rgb: np.ndarray) -> np.ndarray:
        try:
            return self._prepare(rgb)
        except ValueError:  # e.g. Donut's thumbnail of a 1x3000 strip rounds an edge to 0
            h, w = rgb.shape[:2]
            raise InvalidInput(f"image of {w}x{h} pixels cannot be prepared for this model "
                               "(an edge shrinks to nothing); crop or pad it", "images") from None

    def _prepare(self, rgb: np.ndarray) -> np.ndarray:
        img = rgb
        if self.kind == "donut":
            img = self._donut(img)
        elif self.do_resize:
            img = self._shortest(img, self.shortest_edge) if self.shortest_edge else self._resize(img, self.height, self.width)
        if self.crop:
            img = _center_crop(img, *self.crop)
        x = img.astype(np.float64) * self.scale if self.do_rescale else img.astype(np.float64)
        x = x.astype(np.float32)
        if self.do_normalize:
            x = (x - np.asarray(self.mean, dtype=np.float32)) / np.asarray(self.std, dtype=np.float32)
        return np.ascontiguousarray(x.transpose(2, 0, 1), dtype=np.float32)


def _center_crop(img: np.ndarray, ch: int, cw: int) -> np.ndarray:
    h, w = img.shape[:2]
    if h < ch or w < cw:  # pad with zeros first, centred, as transformers does
        nh, nw = max(h, ch), max(w, cw)
        out = np.zeros((nh, nw, img.shape[2]), dtype=img.dtype)
        top, left = -(-(nh - h) // 2), -(-(nw - w) // 2)
        out[top:top + h, left:left + w] = img
        img, h, w = out, nh, nw
    top, left = (h - ch) // 2, (w - cw) // 2
    return img[top:top + ch, left:left + cw]
