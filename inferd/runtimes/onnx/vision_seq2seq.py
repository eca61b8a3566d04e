"""Vision encoder-decoder readers (TrOCR, Donut) exported to ONNX in the optimum layout:
encoder_model.onnx, decoder_model.onnx + decoder_with_past_model.onnx, preprocessor_config.json,
tokenizer.json, generation_config.json (config.json names the architecture).

A batch of images runs the encoder once; the decoder then runs per group of items sharing
a prompt: greedy rows together (one decoder pass per token for the whole group), beam search
per item with its beams as rows. The decoder's self-attention cache grows by one position per
step; the cross-attention cache is computed once, from the first pass."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inferd.errors import InvalidInput, ModelLoadFailed
from inferd.models import ModelSpec
from inferd.runtimes.options import RuntimeOptions
from inferd.runtimes.onnx.decoding import GenConfig, beam_search, greedy
from inferd.runtimes.onnx.image_prep import ImagePrep
from inferd.types import ReadItem, ReadOutput

log = logging.getLogger("inferd.runtimes.onnx")

REQUIRED = ("encoder_model.onnx", "preprocessor_config.json", "tokenizer.json")


def _session(path: Path, threads: int | None):
    from inferd.runtimes.onnx.session import open_session

    return open_session(path, threads)


def _find(folder: Path, name: str) -> Path | None:
    for p in (folder / name, folder / "onnx" / name):
        if p.is_file():
            return p
    return None


def _need(folder: Path, name: str) -> Path:
    p = _find(folder, name)
    if p is None:
        raise ModelLoadFailed(f"missing {name} in {folder}")
    return p

def load_decoders(folder: Path, name: str, threads: int | None) -> tuple[Any, Any, bool, int]:
    """optimum's decoder graphs in `folder`: (first-pass graph, with-past graph, merged?, decoder
    layers). The split pair wins when both forms are there; the merged graph serves as both."""
    first, past, merged = (_find(folder, f) for f in ("decoder_model.onnx", "decoder_with_past_model.onnx",
                                                        "decoder_model_merged.onnx"))
    if first is not None and past is not None:
        decoder, with_past, is_merged = _session(first, threads), _session(past, threads), False
    elif merged is not None:
        decoder = with_past = _session(merged, threads)
        is_merged = True
    else:
        raise ModelLoadFailed(f"reader '{name}': needs decoder_model.onnx + decoder_with_past_model.onnx, or "
                              f"decoder_model_merged.onnx, in {folder}")
    n_layers = sum(1 for i in with_past.get_inputs() if i.name.endswith(".decoder.key"))
    return decoder, with_past, is_merged, n_layers


class _Decoder:
    """The `Step` of decoding.py over the decoder graphs, for one encoder batch: either
    decoder_model (first pass) + decoder_with_past_model (one token more), or one merged graph
    (`use_cache_branch` false for the first pass, with empty past inputs, true after; its
    with-past branch returns placeholders for the cross-attention cache, which is kept from
    the first pass)."""

    def __init__(self, first, with_past, hidden: np.ndarray, n_layers: int, merged: bool = False,
                 embed: Callable[[np.ndarray], np.ndarray] | None = None, mask: np.ndarray | None = None):
        self.first, self.with_past, self.hidden, self.n, self.merged = first, with_past, hidden, n_layers, merged
        # Florence-2's exports take the token embeddings (embed_tokens.onnx) in place of ids;
        # Pix2Struct's encoder rows have padding, so their mask is not all ones.
        self.embed = embed
        self.mask = mask if mask is not None else np.ones(hidden.shape[:2], dtype=np.int64)
        self.past_shapes = {i.name: i.shape for i in with_past.get_inputs() if i.name.startswith("past_key_values.")}
        self.first_inputs = {i.name for i in first.get_inputs()}
        self.past_inputs = {i.name for i in with_past.get_inputs()}
        self.first_out = [o.name for o in first.get_outputs()]
        self.past_out = [o.name for o in with_past.get_outputs()]

    def start(self, ids: np.ndarray, rows: Sequence[int]):
        out, hidden = self.first_pass(ids, rows)
        cache = {k.replace("present.", "past_key_values."): v for k, v in out.items() if k.startswith("present.")}
        cache["__hidden"], cache["__mask"] = hidden, self.mask[list(rows)]
        return out["logits"][:, -1, :], cache

    def first_pass(self, ids: np.ndarray, rows: Sequence[int]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The first decoder graph on ids [rows, t]: every output (logits at each position), and
        the rows' encoder states."""
        hidden, mask = self.hidden[list(rows)], self.mask[list(rows)]
        feed = {**self._tokens(ids.astype(np.int64), self.first_inputs), "encoder_hidden_states": hidden}
        if "encoder_attention_mask" in self.first_inputs:
            feed["encoder_attention_mask"] = mask
        if "decoder_attention_mask" in self.first_inputs:  # optimum's Pix2Struct decoders: no padding, all ones
            feed["decoder_attention_mask"] = np.ones(ids.shape, dtype=np.int64)
        if self.merged:  # the no-past branch: past inputs must exist, empty along the sequence
            feed["use_cache_branch"] = np.array([False])
            for name, shape in self.past_shapes.items():
                # batch, then the graph's fixed sizes (heads, head dim, a fixed encoder length), 0 for the rest
                dims = [ids.shape[0] if i == 0 else (d if isinstance(d, int) else 0) for i, d in enumerate(shape)]
                feed[name] = np.zeros(dims, dtype=np.float32)
        out = dict(zip(self.first_out, self.first.run(self.first_out, {k: v for k, v in feed.items()
                                                                        if k in self.first_inputs})))
        return out, hidden

    def _tokens(self, ids: np.ndarray, inputs: set[str]) -> dict[str, np.ndarray]:
        if "inputs_embeds" in inputs and self.embed is not None:
            return {"inputs_embeds": self.embed(ids)}
        return {"input_ids": ids}

    def next(self, tokens: np.ndarray, cache: dict[str, np.ndarray]):
        hidden = cache["__hidden"]
        feed = self._tokens(tokens.reshape(-1, 1).astype(np.int64), self.past_inputs)
        if "encoder_hidden_states" in self.past_inputs:
            feed["encoder_hidden_states"] = hidden
        if "encoder_attention_mask" in self.past_inputs:
            feed["encoder_attention_mask"] = cache["__mask"]
        for k, v in cache.items():
            if k in self.past_inputs:
                feed[k] = v
        if "decoder_attention_mask" in self.past_inputs:  # the past and this token
            past = next(v for k, v in cache.items() if k.endswith(".decoder.key"))
            feed["decoder_attention_mask"] = np.ones((past.shape[0], past.shape[2] + 1), dtype=np.int64)
        if self.merged:
            feed["use_cache_branch"] = np.array([True])
        out = dict(zip(self.past_out, self.with_past.run(self.past_out, feed)))
        new = dict(cache)
        for k, v in out.items():
            if k.startswith("present.") and ".encoder." not in k:  # the cross cache never changes
                new[k.replace("present.", "past_key_values.")] = v
        return out["logits"][:, -1, :], new

    def reorder(self, cache: dict[str, np.ndarray], rows: np.ndarray):
        return {k: v[rows] for k, v in cache.items()}


def token2json(seq: str) -> dict[str, str]:
    """Donut's `<s_key>value</s_key>` markup -> flat fields (`menu.nm`); repeated groups split
    by `<sep/>` get indexes (`menu.0.nm`)."""
    out: dict[str, str] = {}

    def walk(s: str, prefix: str) -> None:
        while True:
            m = re.search(r"<s_(.+?)>", s)
            if m is None:
                break
            key = m.group(1)
            end = re.search(rf"</s_{re.escape(key)}>", s[m.end():])
            if end is None:
                s = s[m.end():]
                continue
            inner = s[m.end():m.end() + end.start()]
            name = f"{prefix}{key}"
            if "<s_" in inner:
                parts = inner.split("<sep/>")
                if len(parts) > 1:
                    for i, part in enumerate(parts):
                        walk(part, f"{name}.{i}.")
                else:
                    walk(inner, f"{name}.")
            else:
                val = inner.replace("<sep/>", " ").strip()
                if val:
                    out[name] = val
            s = s[m.end() + end.end():]

    walk(seq, "")
    return out


class VisionSeq2Seq:
    """TrOCR-style (no prompt) and Donut-style (task prompt, <s_key> fields) readers."""

    max_batch_tokens = 8  # images per batch (the batcher's cost of an image is 1): one encoder pass

    def __init__(self, name: str, folder: Path, threads: int | None = None, max_new_tokens_cap: int = 1024):
        from tokenizers import Tokenizer

        self.name, self.folder = name, folder
        for f in REQUIRED:
            if _find(folder, f) is None and not (folder / f).is_file():
                raise ModelLoadFailed(f"reader '{name}': missing {f} in {folder}")
        cfg = _json(folder / "config.json")
        gen = _json(folder / "generation_config.json")
        self.family = "donut" if (cfg.get("encoder") or {}).get("model_type") == "donut-swin" else "trocr"
        self.prep = ImagePrep.from_file(folder / "preprocessor_config.json")
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        encoder = _find(folder, "encoder_model.onnx")
        if encoder is None:
            raise ModelLoadFailed(f"reader '{name}': missing encoder_model.onnx in {folder}")
        self.encoder: Any = _session(encoder, threads)
        self.decoder, self.with_past, self.merged, self.n_layers = load_decoders(folder, name, threads)
        self.gen = GenConfig.from_json(gen, {**(cfg.get("decoder") or {}), **cfg})
        start = gen.get("decoder_start_token_id", cfg.get("decoder_start_token_id"))
        if start is None:
            raise ModelLoadFailed(f"reader '{name}': no decoder_start_token_id in generation_config.json or config.json")
        self.start_id = int(start)
        self.max_new_cap = max_new_tokens_cap
        # Learned decoder positions: a sequence can never be longer than this.
        self.max_positions = int((cfg.get("decoder") or {}).get("max_position_embeddings") or 1 << 30)
        self.takes_prompt = self.family == "donut"

    # ---- checks (event loop, before any model work) -----------------------------------------
    def check(self, item: ReadItem) -> None:
        if item.prompt and not self.takes_prompt:
            raise InvalidInput(f"reader '{self.name}' ({self.family}) takes no prompt", "prompt")
        if item.max_tokens > self.max_new_cap:
            raise InvalidInput(f"max_tokens may be at most {self.max_new_cap} for reader '{self.name}'", "max_tokens")
        n = len(self.prompt_ids(item.prompt))
        if n >= self.max_positions:
            raise InvalidInput(f"the prompt is {n} tokens; reader '{self.name}' holds at most {self.max_positions}",
                               "prompt")

    def new_tokens(self, prompt: Sequence[int], max_tokens: int) -> int:
        """max_tokens, cut to what the decoder's positions leave after the prompt (as a
        generation stops at the model's max length)."""
        return max(1, min(max_tokens, self.max_positions - len(prompt)))

    def prompt_ids(self, prompt: str | None) -> list[int]:
        if not prompt:
            return [self.start_id]
        ids = self.tokenizer.encode(prompt, add_special_tokens=False).ids
        return ids or [self.start_id]

    # ---- the batch (worker thread) ----------------------------------------------------------------
    def run_batch(self, items: Sequence[ReadItem], num_beams: int | None = None) -> list[Any]:
        """One output per item; an image that cannot be prepared is its own InvalidInput and
        the rest of the batch goes on."""
        prepared: list[Any] = []
        for it in items:
            try:
                prepared.append(self.prep(it.image))
            except InvalidInput as e:
                prepared.append(e)
        ok = [i for i, x in enumerate(prepared) if not isinstance(x, InvalidInput)]
        results: list[Any] = list(prepared)
        if ok:
            outs = self._run([items[i] for i in ok], [prepared[i] for i in ok], num_beams)
            for i, o in zip(ok, outs):
                results[i] = o
        return results

    def _run(self, items: Sequence[ReadItem], pixels_list: list[np.ndarray], num_beams: int | None) -> list[ReadOutput]:
        pixels = np.stack(pixels_list)
        hidden = self.encoder.run(None, {self.encoder.get_inputs()[0].name: pixels})[0]
        step = _Decoder(self.decoder, self.with_past, hidden, self.n_layers, self.merged)
        nb = num_beams or self.gen.num_beams
        gen = self.gen if nb == self.gen.num_beams else GenConfig(**{**self.gen.__dict__, "num_beams": nb})
        results: list[list[int] | None] = [None] * len(items)
        prompts = [self.prompt_ids(it.prompt) for it in items]
        groups: dict[tuple, list[int]] = {}
        for i, it in enumerate(items):
            groups.setdefault((tuple(prompts[i]), self.new_tokens(prompts[i], it.max_tokens)), []).append(i)

        def gone(rows: list[int]):  # every client of these rows left: stop decoding for nobody
            return lambda: all(items[r].stop is not None and items[r].stop.is_set() for r in rows)

        for (prompt, max_new), rows in groups.items():
            if nb > 1:
                for r in rows:
                    results[r] = beam_search(step, gen, prompt, r, max_new, gone([r]))
            else:
                for r, toks in zip(rows, greedy(step, gen, prompt, rows, max_new, gone(rows))):
                    results[r] = toks
        return [self._output(prompts[i], results[i] or []) for i in range(len(items))]

    def _output(self, prompt: list[int], toks: list[int]) -> ReadOutput:
        text = self.tokenizer.decode(toks, skip_special_tokens=True).strip()
        fields = None
        if self.family == "donut":
            raw = self.tokenizer.decode(toks, skip_special_tokens=False)
            fields = token2json(raw) or None
        return ReadOutput(text=text, fields=fields, prompt_tokens=len(prompt), completion_tokens=len(toks),
                          tokens=list(prompt) + list(toks))

    def close(self) -> None:
        self.encoder = self.decoder = self.with_past = None


def load(spec: ModelSpec, opts: RuntimeOptions) -> VisionSeq2Seq:
    if spec.path is None:
        raise ModelLoadFailed(f"reader '{spec.name}' has no model folder")
    return VisionSeq2Seq(spec.name, Path(spec.path), threads=opts.threads)


def _json(p: Path) -> dict[str, Any]:
    if not p.is_file():
        return {}
    try:
        return json.loads(p.read_text())
    except ValueError as e:
        raise ModelLoadFailed(f"{p}: invalid JSON ({e})") from e
