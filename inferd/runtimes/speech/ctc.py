"""CTC speech models (Wav2Vec2, HuBERT) exported to ONNX, on onnxruntime, greedy CTC decoding.

Folder: `model.onnx` (input `input_values` [batch, samples], optional `attention_mask`; output
logits [batch, frames, vocab]), `vocab.json` (token -> id, as Wav2Vec2CTCTokenizer saves it),
`preprocessor_config.json` (Wav2Vec2FeatureExtractor: sampling_rate, do_normalize,
return_attention_mask, padding_value) and `config.json` (pad_token_id: the CTC blank).

Decoding: argmax per frame, merge repeats, drop blanks, `|` is the space between words; a
word's time is the span of the frames that emitted it. Models without an attention_mask
input (group-norm feature extractors, e.g. wav2vec2-base) see zero padding as audio, so their
windows are batched only with windows of equal length; the others are padded and masked."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from inferd.errors import CapabilityMissing, InvalidInput, ModelLoadFailed
from inferd.speech_types import Chunk, ChunkResult, DecodeOptions, Segment, Word

_SPECIAL = {"<s>", "</s>", "<unk>", "<pad>"}


class CtcRuntime:
    kind = "ctc"
    multilingual = False

    def __init__(self, path: Path, threads: int | None = None, name: str = "", language: str = "en"):
        import onnxruntime as ort

        self.name = name or path.name
        self.language = language
        graph = path / "model.onnx" if path.is_dir() else path
        folder = graph.parent
        if not graph.is_file() and (folder / "onnx" / "model.onnx").is_file():
            graph = folder / "onnx" / "model.onnx"
        try:
            vocab: dict[str, int] = json.loads((folder / "vocab.json").read_text())
            pre = _read(folder / "preprocessor_config.json")
            cfg = _read(folder / "config.json")
        except (OSError, ValueError) as e:
            raise ModelLoadFailed(f"CTC model in {folder}: {e}") from e
        self.id_to_token = {int(i): t for t, i in vocab.items()}
        self.blank = int(cfg.get("pad_token_id", vocab.get("<pad>", 0)))
        self.delimiter = str(cfg.get("word_delimiter_token") or "|")
        self.rate = int(pre.get("sampling_rate", 16000))
        self.normalize = bool(pre.get("do_normalize", True))
        self.padding_value = float(pre.get("padding_value", 0.0))
        # The feature encoder's convolutions: how many frames a window of n samples makes.
        self.convs = list(zip(cfg.get("conv_kernel") or [], cfg.get("conv_stride") or []))
        so = ort.SessionOptions()
        if threads:
            so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(str(graph), so, providers=["CPUExecutionProvider"])
        except Exception as e:
            raise ModelLoadFailed(f"onnxruntime could not load {graph}: {e}") from e
        names = {i.name for i in self.session.get_inputs()}
        if "input_values" not in names:
            raise ModelLoadFailed(f"{graph}: a CTC graph needs an input_values input (has {sorted(names)})")
        self.masked = "attention_mask" in names and bool(pre.get("return_attention_mask", True))
        self._mask_input = "attention_mask" in names
        self.output = self.session.get_outputs()[0].name

    @property
    def capabilities(self) -> frozenset[str]:
        return frozenset({"transcribe", "timestamps", "word_timestamps"})

    def check(self, opts: DecodeOptions, language: str | None) -> None:
        if opts.task == "translate":
            raise CapabilityMissing(f"model '{self.name}' is a CTC model: it lacks the 'translate' capability")
        if language is not None and language != self.language:
            raise InvalidInput(f"model '{self.name}' transcribes '{self.language}' only, not '{language}'",
                               "language")
        if opts.initial_prompt:
            raise InvalidInput(f"model '{self.name}' is a CTC model: it takes no prompt", "prompt")

    def close(self) -> None:
        self.session = None  # type: ignore[assignment]

    def logits(self, waves: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Per-window logits [frames, vocab], batched where padding cannot change them."""
        out: list[np.ndarray | None] = [None] * len(waves)
        groups: dict[int, list[int]] = {}
        for i, w in enumerate(waves):
            groups.setdefault(0 if self.masked else len(w), []).append(i)
        for idx in groups.values():
            longest = max(len(waves[i]) for i in idx)
            x = np.full((len(idx), longest), self.padding_value, dtype=np.float32)
            mask = np.zeros((len(idx), longest), dtype=np.int64)
            for row, i in enumerate(idx):
                x[row, : len(waves[i])] = self._prepare(waves[i])
                mask[row, : len(waves[i])] = 1
            feed: dict[str, np.ndarray] = {"input_values": x}
            if self._mask_input:
                feed["attention_mask"] = mask
            y = self.session.run([self.output], feed)[0]
            for row, i in enumerate(idx):
                frames = self._frames(len(waves[i]), y.shape[1], longest)
                out[i] = y[row, :frames]
        return out  # type: ignore[return-value]

    def _frames(self, samples: int, out_frames: int, longest: int) -> int:
        """Frames that belong to a window of `samples` inside a batch padded to `longest`."""
        if samples == longest:
            return out_frames
        if self.convs:
            n = samples
            for k, s in self.convs:
                n = (n - k) // s + 1
            return max(1, min(out_frames, n))
        return max(1, int(round(out_frames * samples / longest)))

    def _prepare(self, w: np.ndarray) -> np.ndarray:
        w = w.astype(np.float32)
        if self.normalize:  # Wav2Vec2FeatureExtractor: zero mean, unit variance per input
            w = (w - w.mean()) / np.sqrt(w.var() + 1e-7)
        return w

    def decode_batch(self, chunks: Sequence[Chunk], opts: DecodeOptions) -> list[ChunkResult]:
        results = []
        for c, lg in zip(chunks, self.logits([c.audio for c in chunks])):
            ids = lg.argmax(-1)
            step = len(c.audio) / self.rate / max(1, len(ids))  # seconds per frame
            tokens, words, cur, start, last = greedy(ids, self.blank), [], "", None, 0
            text_parts: list[str] = []
            for frame, tid in _emissions(ids, self.blank):
                tok = self.id_to_token.get(int(tid), "")
                if tok in _SPECIAL:  # <s>, </s>, <unk>: not text, and not a word break either
                    continue
                if tok == self.delimiter:
                    if cur and start is not None:
                        words.append(Word(" " + cur, c.offset + start * step, c.offset + (last + 1) * step, 1.0))
                        text_parts.append(cur)
                    cur, start = "", None
                    continue
                if start is None:
                    start = frame
                cur += tok
                last = frame
            if cur and start is not None:
                words.append(Word(" " + cur, c.offset + start * step, c.offset + (last + 1) * step, 1.0))
                text_parts.append(cur)
            res = ChunkResult(self.language, 1.0, tokens=tokens)
            if text_parts:
                res.segments.append(Segment(start=c.offset, end=c.offset + len(c.audio) / self.rate,
                                            text=" " + " ".join(text_parts), tokens=tokens,
                                            words=words if opts.word_timestamps else None))
            results.append(res)
        return results


def greedy(ids: np.ndarray, blank: int) -> list[int]:
    """CTC greedy decoding: merge repeated ids, then drop blanks."""
    return [int(t) for _, t in _emissions(ids, blank)]


def _emissions(ids: np.ndarray, blank: int):
    prev = None
    for frame, t in enumerate(ids.tolist()):
        if t != prev and t != blank:
            yield frame, t
        prev = t


def _read(p: Path) -> dict:
    return json.loads(p.read_text()) if p.is_file() else {}
