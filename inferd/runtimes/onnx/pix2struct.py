"""Pix2Struct readers (DocVQA, ChartQA, screen and document parsing) in optimum's ONNX layout:
encoder_model.onnx (flattened_patches, attention_mask -> last_hidden_state), decoder_model.onnx
+ decoder_with_past_model.onnx or decoder_model_merged.onnx, preprocessor_config.json,
tokenizer.json, config.json, generation_config.json.

Preprocessing is transformers' Pix2StructImageProcessor in numpy: a VQA model has the question
rendered as a header above the image (its prompt is read from pixels, not tokens); the image is
normalised by its own mean and std, resized (bilinear, antialiased, as torch's interpolate) to
the largest grid of patches that fits `max_patches`, cut into patches flattened with their
1-based row and column ids, and padded to max_patches rows (mask 0 for padding)."""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inferd.errors import InvalidInput, ModelLoadFailed
from inferd.models import ModelSpec
from inferd.runtimes.onnx.decoding import GenConfig, beam_search, greedy
from inferd.runtimes.onnx.vision_seq2seq import _Decoder, _find, _json, _need, _session, load_decoders
from inferd.runtimes.options import RuntimeOptions
from inferd.types import ReadItem, ReadOutput


def _aa_weights(n_in: int, n_out: int) -> np.ndarray:
    """[n_out, n_in] weights of torch's bilinear antialiased interpolation (align_corners=False):
    a triangle filter widened by the downscale factor, each row normalised (PIL's scheme)."""
    scale = n_in / n_out
    support = scale if scale >= 1.0 else 1.0
    inv = 1.0 / scale if scale >= 1.0 else 1.0
    w = np.zeros((n_out, n_in), dtype=np.float64)
    for i in range(n_out):
        centre = scale * (i + 0.5)
        lo = max(int(centre - support + 0.5), 0)
        hi = min(int(centre + support + 0.5), n_in)
        x = (np.arange(lo, hi) - centre + 0.5) * inv
        f = np.clip(1.0 - np.abs(x), 0.0, None)
        total = f.sum()
        w[i, lo:hi] = f / total if total else f
    return w


class Pix2StructPrep:
    def __init__(self, cfg: dict[str, Any], font: bytes | None):
        ps = cfg.get("patch_size") or {"height": 16, "width": 16}
        self.ph, self.pw = int(ps["height"]), int(ps["width"])
        self.max_patches = int(cfg.get("max_patches") or 2048)
        self.is_vqa = bool(cfg.get("is_vqa", False))
        self.do_normalize = bool(cfg.get("do_normalize", True))
        self.font = font

    def header(self, rgb: np.ndarray, text: str) -> np.ndarray:
        """render_text + render_header of transformers' processor: the question in 36 px black
        on white, padded by 5, wrapped at 80 characters, stacked above the image at a common width."""
        from PIL import Image, ImageDraw, ImageFont

        wrapped = "\n".join(textwrap.TextWrapper(width=80).wrap(text=text))
        # Pillow's built-in font goes through truetype() too: load_default's own object lays text
        # out differently from the processor's truetype(bytes, encoding="UTF-8").
        raw = self.font if self.font else ImageFont.load_default(36).font_bytes  # type: ignore[union-attr]
        font = ImageFont.truetype(io.BytesIO(raw), encoding="UTF-8", size=36)
        _, _, w, h = ImageDraw.Draw(Image.new("RGB", (1, 1))).textbbox((0, 0), wrapped, font=font)
        head = Image.new("RGB", (int(w) + 10, int(h) + 10), "white")
        ImageDraw.Draw(head).text((5, 5), wrapped, fill="black", font=font)
        img = Image.fromarray(rgb)
        new_w = max(head.width, img.width)
        new_h = int(img.height * (new_w / img.width))
        head_h = int(head.height * (new_w / head.width))
        out = Image.new("RGB", (new_w, new_h + head_h), "white")
        out.paste(head.resize((new_w, head_h)), (0, 0))
        out.paste(img.resize((new_w, new_h)), (0, head_h))
        return np.array(out).astype(np.uint8)

    def __call__(self, rgb: np.ndarray, question: str | None) -> tuple[np.ndarray, np.ndarray]:
        if self.is_vqa:
            rgb = self.header(rgb, question or "")
        x = np.ascontiguousarray(rgb.transpose(2, 0, 1)).astype(np.float32)  # CHW, as the processor reduces it
        if self.do_normalize:
            mean, std = np.mean(x), np.std(x)
            x = (x - mean) / max(std, 1.0 / math.sqrt(np.prod(x.shape)))
        _, H, W = x.shape
        ph, pw, mp = self.ph, self.pw, self.max_patches
        scale = (mp * (ph / H) * (pw / W)) ** 0.5
        rows = max(min(int(scale * H / ph), mp), 1)
        cols = max(min(int(scale * W / pw), mp), 1)
        wh, ww = _aa_weights(H, rows * ph).astype(np.float32), _aa_weights(W, cols * pw).astype(np.float32)
        y = np.einsum("oh,chw,pw->cop", wh, x, ww, optimize=True).astype(np.float32)  # [C, rows*ph, cols*pw]
        patches = y.reshape(3, rows, ph, cols, pw).transpose(1, 3, 2, 4, 0).reshape(rows * cols, ph * pw * 3)
        r_ids = np.repeat(np.arange(rows, dtype=np.float32) + 1, cols)[:, None]
        c_ids = np.tile(np.arange(cols, dtype=np.float32) + 1, rows)[:, None]
        flat = np.zeros((mp, 2 + ph * pw * 3), dtype=np.float32)
        flat[:rows * cols] = np.concatenate([r_ids, c_ids, patches], axis=1)
        return flat, (flat.sum(axis=-1) != 0).astype(np.float32)


def _font(folder: Path) -> bytes | None:
    """A .ttf in the model folder (the hub processor's Arial.TTF from ybelkada/fonts, which it
    downloads at run time); else None: Pillow's built-in font, and the rendered header differs."""
    for p in sorted([*folder.glob("*.ttf"), *folder.glob("*.TTF")]):
        return p.read_bytes()
    return None


def _np_type(t: str):
    return {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_}.get(t, np.float32)


class Pix2StructReader:
    max_batch_tokens = 8  # images per batch: one encoder pass

    def __init__(self, name: str, folder: Path, threads: int | None = None, max_new_tokens_cap: int = 1024):
        from tokenizers import Tokenizer

        self.name, self.folder, self.family = name, folder, "pix2struct"
        for f in ("encoder_model.onnx", "preprocessor_config.json", "tokenizer.json"):
            if _find(folder, f) is None:
                raise ModelLoadFailed(f"reader '{name}': missing {f} in {folder} (Pix2Struct ONNX layout)")
        cfg = _json(folder / "config.json")
        gen = _json(folder / "generation_config.json")
        pc = _json(_need(folder, "preprocessor_config.json"))
        self.prep = Pix2StructPrep({**pc, "is_vqa": pc.get("is_vqa", cfg.get("is_vqa", False))}, _font(folder))
        self.tokenizer = Tokenizer.from_file(str(_need(folder, "tokenizer.json")))
        self.encoder: Any = _session(_need(folder, "encoder_model.onnx"), threads)
        self.decoder, self.with_past, self.merged, self.n_layers = load_decoders(folder, name, threads)
        self.gen = GenConfig.from_json(gen, {**(cfg.get("text_config") or {}), **cfg})
        start = gen.get("decoder_start_token_id", cfg.get("decoder_start_token_id"))
        self.start_id = int(start if start is not None else self.gen.pad)
        self.max_new_cap = max_new_tokens_cap
        types = {i.name: i.type for i in self.encoder.get_inputs()}
        self.enc_mask_type = _np_type(types.get("attention_mask", "tensor(float)"))
        dec_types = {i.name: i.type for i in self.decoder.get_inputs()}
        self.dec_mask_type = _np_type(dec_types.get("encoder_attention_mask", "tensor(int64)"))

    def check(self, item: ReadItem) -> None:
        if self.prep.is_vqa and not item.prompt:
            raise InvalidInput(f"reader '{self.name}' (Pix2Struct VQA) needs a question in 'prompt'", "prompt")
        if item.prompt and not self.prep.is_vqa:
            raise InvalidInput(f"reader '{self.name}' (Pix2Struct, not a VQA model) takes no prompt", "prompt")
        if item.max_tokens > self.max_new_cap:
            raise InvalidInput(f"max_tokens may be at most {self.max_new_cap} for reader '{self.name}'", "max_tokens")

    def run_batch(self, items: Sequence[ReadItem], num_beams: int | None = None) -> list[Any]:
        results: list[Any] = [None] * len(items)
        prepared: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for i, it in enumerate(items):
            try:
                prepared[i] = self.prep(it.image, it.prompt)
            except (ValueError, OSError):  # an edge that shrinks to nothing, a header PIL cannot draw
                h, w = it.image.shape[:2]
                results[i] = InvalidInput(f"image of {w}x{h} pixels cannot be prepared for this model", "images")
        if not prepared:
            return results
        rows = list(prepared)
        patches = np.stack([prepared[i][0] for i in rows])
        mask = np.stack([prepared[i][1] for i in rows])
        hidden = self.encoder.run(None, {"flattened_patches": patches,
                                         "attention_mask": mask.astype(self.enc_mask_type)})[0]
        step = _Decoder(self.decoder, self.with_past, hidden, self.n_layers, self.merged,
                        mask=mask.astype(self.dec_mask_type))
        nb = num_beams or self.gen.num_beams
        gen = self.gen if nb == self.gen.num_beams else GenConfig(**{**self.gen.__dict__, "num_beams": nb})
        by_len: dict[int, list[int]] = {}
        for k, i in enumerate(rows):
            by_len.setdefault(max(1, items[i].max_tokens), []).append(k)

        def gone(ks: list[int]):
            return lambda: all(items[rows[k]].stop is not None and items[rows[k]].stop.is_set() for k in ks)

        for max_new, ks in by_len.items():
            outs = [beam_search(step, gen, [self.start_id], k, max_new, gone([k])) for k in ks] if nb > 1 \
                else greedy(step, gen, [self.start_id], ks, max_new, gone(ks))
            for k, toks in zip(ks, outs):
                results[rows[k]] = ReadOutput(text=self.tokenizer.decode(toks, skip_special_tokens=True).strip(),
                                              prompt_tokens=1, completion_tokens=len(toks),
                                              tokens=[self.start_id, *toks])
        return results

    def close(self) -> None:
        self.encoder = self.decoder = self.with_past = None


def load(spec: ModelSpec, opts: RuntimeOptions) -> Pix2StructReader:
    if spec.path is None:
        raise ModelLoadFailed(f"reader '{spec.name}' has no model folder")
    return Pix2StructReader(spec.name, Path(spec.path), threads=opts.threads)
