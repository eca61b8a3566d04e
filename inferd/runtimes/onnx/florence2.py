"""Florence-2 readers in the ONNX layout onnx-community's exports use (the one transformers.js
runs): vision_encoder.onnx (pixels -> projected image features), embed_tokens.onnx (ids ->
embeddings), encoder_model.onnx (BART encoder over inputs_embeds), and the decoder as
decoder_model_merged.onnx or decoder_model.onnx + decoder_with_past_model.onnx, fed
inputs_embeds (or input_ids, where an export takes them); preprocessor_config.json (CLIP-style
resize to height x width), tokenizer.json, config.json, generation_config.json.

The encoder reads [image features ; embed(<s> task prompt </s>)], as Florence-2's processor
and model build it (transformers replaces `<image>` placeholders with the features: the same
sequence). Items sharing a prompt share one encoder pass and decode together (greedy) or one
by one (beam search, the model's default of 3 beams). The task token picks the parsing of the
answer: `<loc_N>` bins become boxes in source pixels (florence_tasks.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inferd.errors import InvalidInput, ModelLoadFailed
from inferd.models import ModelSpec
from inferd.runtimes.onnx.decoding import GenConfig, beam_search, greedy
from inferd.runtimes.onnx.florence_tasks import Task, parse, task_of
from inferd.runtimes.onnx.image_prep import ImagePrep
from inferd.runtimes.onnx.vision_seq2seq import _Decoder, _find, _json, _need, _session, load_decoders
from inferd.runtimes.options import RuntimeOptions
from inferd.types import ReadItem, ReadOutput, TextRegion

GRAPHS = ("vision_encoder.onnx", "embed_tokens.onnx", "encoder_model.onnx")
FILES = ("preprocessor_config.json", "tokenizer.json")


class Florence2Reader:
    """OCR, OCR with regions, captions, detection and grounding from one Florence-2 export."""

    max_batch_tokens = 8  # images per batch: one vision pass

    def __init__(self, name: str, folder: Path, threads: int | None = None, max_new_tokens_cap: int = 1024):
        from tokenizers import Tokenizer

        self.name, self.folder, self.family = name, folder, "florence2"
        for f in (*GRAPHS, *FILES):
            if _find(folder, f) is None:
                raise ModelLoadFailed(f"reader '{name}': missing {f} in {folder} (Florence-2 ONNX layout)")
        cfg = _json(folder / "config.json")
        text_cfg = cfg.get("text_config") or {}
        gen = _json(folder / "generation_config.json")
        self.prep = ImagePrep.from_file(_need(folder, "preprocessor_config.json"))
        self.tokenizer = Tokenizer.from_file(str(_need(folder, "tokenizer.json")))
        self.vision, self.embed_tokens, self.encoder = (_session(_need(folder, g), threads) for g in GRAPHS)
        self.decoder, self.with_past, self.merged, self.n_layers = load_decoders(folder, name, threads)
        self.gen = GenConfig.from_json(gen, {**text_cfg, **cfg})
        start = gen.get("decoder_start_token_id", text_cfg.get("decoder_start_token_id", cfg.get("decoder_start_token_id")))
        if start is None:
            raise ModelLoadFailed(f"reader '{name}': no decoder_start_token_id in generation_config.json or config.json")
        self.start_id = int(start)
        self.max_new_cap = max_new_tokens_cap
        # BART's learned positions bound both the encoder input (image tokens + prompt) and the answer.
        self.max_positions = int(text_cfg.get("max_position_embeddings") or 1024)
        pc = _json(_need(folder, "preprocessor_config.json"))
        self.image_tokens = int(pc.get("image_seq_length") or 0)

    # ---- checks (event loop) ---------------------------------------------------------------
    def check(self, item: ReadItem) -> None:
        task = task_of(item.prompt)  # 400 for a task Florence-2 does not have
        if item.max_tokens > self.max_new_cap:
            raise InvalidInput(f"max_tokens may be at most {self.max_new_cap} for reader '{self.name}'", "max_tokens")
        n = len(self.text_ids(task)) + self.image_tokens
        if n > self.max_positions:
            raise InvalidInput(f"the prompt and image are {n} tokens; reader '{self.name}' reads at most "
                               f"{self.max_positions}", "prompt")

    def text_ids(self, task: Task) -> list[int]:
        return self.tokenizer.encode(task.prompt, add_special_tokens=True).ids

    def new_tokens(self, max_tokens: int) -> int:
        return max(1, min(max_tokens, self.max_positions - 1))

    # ---- the batch (worker thread) --------------------------------------------------------------
    def run_batch(self, items: Sequence[ReadItem], num_beams: int | None = None) -> list[Any]:
        results: list[Any] = [None] * len(items)
        pixels: dict[int, np.ndarray] = {}
        for i, it in enumerate(items):
            try:
                pixels[i] = self.prep(it.image)
            except InvalidInput as e:
                results[i] = e
        if not pixels:
            return results
        rows = list(pixels)
        feats = self.vision.run(None, {self.vision.get_inputs()[0].name: np.stack([pixels[i] for i in rows])})[0]
        feat_of = {i: feats[k] for k, i in enumerate(rows)}
        groups: dict[tuple, list[int]] = {}
        tasks = {i: task_of(items[i].prompt) for i in rows}
        for i in rows:
            groups.setdefault((tuple(self.text_ids(tasks[i])), self.new_tokens(items[i].max_tokens)), []).append(i)
        nb = num_beams or self.gen.num_beams
        gen = self.gen if nb == self.gen.num_beams else GenConfig(**{**self.gen.__dict__, "num_beams": nb})
        for (ids, max_new), members in groups.items():
            for i, toks in zip(members, self._decode(ids, np.stack([feat_of[i] for i in members]), members,
                                                     items, gen, max_new)):
                results[i] = self._output(tasks[i], list(ids), toks, items[i].image)
        return results

    def _embed(self, ids: np.ndarray) -> np.ndarray:
        return self.embed_tokens.run(None, {"input_ids": ids.astype(np.int64)})[0]

    def _decode(self, ids: tuple, feats: np.ndarray, members: list[int], items: Sequence[ReadItem], gen: GenConfig,
                max_new: int) -> list[list[int]]:
        n = feats.shape[0]
        text = self._embed(np.asarray([ids] * n, dtype=np.int64))
        embeds = np.concatenate([feats.astype(np.float32), text.astype(np.float32)], axis=1)
        mask = np.ones(embeds.shape[:2], dtype=np.int64)
        hidden = self.encoder.run(None, {"inputs_embeds": embeds, "attention_mask": mask})[0]
        step = _Decoder(self.decoder, self.with_past, hidden, self.n_layers, self.merged, embed=self._embed, mask=mask)

        def gone(rows: list[int]):  # every client of these rows left: stop decoding for nobody
            return lambda: all(items[members[r]].stop is not None and items[members[r]].stop.is_set() for r in rows)

        if gen.num_beams > 1:
            return [beam_search(step, gen, [self.start_id], r, max_new, gone([r])) for r in range(n)]
        return greedy(step, gen, [self.start_id], list(range(n)), max_new, gone(list(range(n))))

    def _output(self, task: Task, text_ids: list[int], toks: list[int], image: Any) -> ReadOutput:
        raw = self.tokenizer.decode(toks, skip_special_tokens=False)
        h, w = image.shape[:2]
        p = parse(task, raw, (w, h))
        regions = [TextRegion(text=r["text"], bbox=tuple(float(v) for v in r["bbox"]),  # type: ignore[arg-type]
                              confidence=1.0, label=r.get("label"),
                              points=[float(v) for v in r.get("quad") or r.get("polygon") or []] or None)
                   for r in p.regions] if p.has_regions else None
        return ReadOutput(text=p.text, regions=regions, prompt_tokens=len(text_ids), completion_tokens=len(toks),
                          tokens=[self.start_id, *toks])

    def close(self) -> None:
        self.vision = self.embed_tokens = self.encoder = self.decoder = self.with_past = None


def load(spec: ModelSpec, opts: RuntimeOptions) -> Florence2Reader:
    if spec.path is None:
        raise ModelLoadFailed(f"reader '{spec.name}' has no model folder")
    return Florence2Reader(spec.name, Path(spec.path), threads=opts.threads)
