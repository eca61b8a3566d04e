"""Piper (VITS) voices on onnxruntime: an `.onnx` graph plus its `.onnx.json` config.

Text -> sentences and clauses (text.py) -> IPA phonemes from espeak-ng (espeak.py), each
clause's punctuation put back after its phonemes -> ids from the config's phoneme_id_map:
BOS "^", then every phoneme followed by the pad "_", then EOS "$" (a phoneme the map lacks
is dropped) -> the graph: `input` int64[b, n] (padded with the pad id), `input_lengths`
int64[b], `scales` float[3] (noise_scale, length_scale, noise_w) and, for a voice with
several speakers, `sid` int64[b] -> float audio [b, 1, 1, t] at the config's sample rate.
Each utterance is peak-normalised (to PEAK), as piper-tts does by default.

A batch pads every utterance to the longest, so the audio of the shorter ones would trail
into noise: the runtime adds the graph's per-phoneme frame counts (the output of its one
Ceil node, the rounded durations, zero on padding) as a second output at load and cuts each
utterance's audio at its own frames x the hop (samples per frame, measured on the batch's
longest utterance). A graph without that node runs one utterance at a time."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inferd.errors import InvalidInput, ModelLoadFailed
from inferd.runtimes.tts import espeak
from inferd.runtimes.tts.text import sentences
from inferd.runtimes.tts.types import OPENAI_VOICES, Utterance, speaker_index
from inferd.runtimes.tts.voice import describe, read_config, voice_files

log = logging.getLogger("inferd.tts")

BOS, EOS, PAD = "^", "$", "_"
_DURATIONS = "inferd_durations"   # the output name given to the Ceil node's frame counts
PEAK = 0.95


class PiperVoice:
    """One loaded Piper voice. `prepare` (any thread) turns text into utterances;
    `synthesize_batch` (the scheduler's one worker thread) runs the graph."""

    def __init__(self, path: Path, threads: int = 0, name: str = "piper", max_batch: int = 8):
        import onnxruntime as ort

        self.name = name
        self.onnx_path, config_path = voice_files(path)
        self.config = read_config(path)
        self.id_map: dict[str, list[int]] = self.config["phoneme_id_map"]
        if self.config.get("phoneme_type", "espeak") != "espeak":
            raise ModelLoadFailed(f"{config_path}: phoneme_type {self.config.get('phoneme_type')!r} is not "
                                  "supported (only espeak phonemes)")
        if not all(s in self.id_map for s in (BOS, EOS, PAD)):
            raise ModelLoadFailed(f"{config_path}: phoneme_id_map lacks {BOS!r}, {EOS!r} or {PAD!r}")
        info = describe(self.config, name)
        self.voices: tuple[str, ...] = tuple(info["voices"])
        self.sample_rate: int = info["sample_rate"]
        self.language: str = info["language"]
        self.speakers: dict[str, int] = dict(self.config.get("speaker_id_map") or {})
        inf = self.config.get("inference") or {}
        self.scales = (float(inf.get("noise_scale", 0.667)), float(inf.get("length_scale", 1.0)),
                       float(inf.get("noise_w", 0.8)))
        self.espeak_voice = str((self.config.get("espeak") or {}).get("voice") or "en-us")
        espeak.check_voice(self.espeak_voice)
        so = ort.SessionOptions()
        if threads:
            so.intra_op_num_threads = threads
        graph, self.batched = self._graph(max_batch)
        self.sess = ort.InferenceSession(graph, so, providers=["CPUExecutionProvider"])
        names = {i.name for i in self.sess.get_inputs()}
        if not {"input", "input_lengths", "scales"} <= names:
            raise ModelLoadFailed(f"{self.onnx_path}: not a Piper graph (inputs: {sorted(names)})")
        self.has_sid = "sid" in names
        self.max_batch = max_batch if self.batched else 1
        self.size_bytes = self.onnx_path.stat().st_size

    def _graph(self, max_batch: int) -> tuple[bytes | str, bool]:
        """The graph with its frame counts as a second output, or the file as it is (unbatched)."""
        if max_batch <= 1:
            return str(self.onnx_path), False
        try:
            import onnx
        except ImportError:
            return str(self.onnx_path), False
        model = onnx.load(str(self.onnx_path))
        ceil = [n for n in model.graph.node if n.op_type == "Ceil"]
        if len(ceil) != 1:
            log.info("%s: no single Ceil node; utterances run one at a time", self.onnx_path.name)
            return str(self.onnx_path), False
        model.graph.node.append(onnx.helper.make_node("Identity", [ceil[0].output[0]], [_DURATIONS]))
        model.graph.output.append(onnx.helper.make_tensor_value_info(_DURATIONS, onnx.TensorProto.FLOAT, None))
        return model.SerializeToString(), True

    # ---- text -> utterances (any thread; espeak serialises itself) -----------------------------
    def speaker(self, voice: str | None) -> int | None:
        """The speaker id of `voice`; InvalidInput naming the voices when it is none of them."""
        sid = speaker_index(voice, self.speakers, self.voices[0])
        if sid is None:
            raise InvalidInput(f"unknown voice '{voice}' for model '{self.name}' (use one of "
                               f"{', '.join(self.voices)}, or an OpenAI voice name: {', '.join(OPENAI_VOICES)})",
                               "voice")
        return sid if self.has_sid else None

    def phoneme_ids(self, phonemes: str) -> tuple[int, ...]:
        ids = [*self.id_map[BOS], *self.id_map[PAD]]
        for ch in phonemes:
            got = self.id_map.get(ch)
            if got is not None:
                ids += got
                ids += self.id_map[PAD]
        ids += self.id_map[EOS]
        return tuple(ids)

    def prepare(self, text: str, voice: str | None, speed: float = 1.0) -> list[Utterance]:
        """The utterances of `text`, one per sentence; `speed` 2.0 speaks twice as fast."""
        sid = self.speaker(voice)
        noise, length, noise_w = self.scales
        scales = (noise, length / speed, noise_w)
        out = []
        for sent in sentences(text):
            phonemes = espeak.phonemize(self.espeak_voice, [c.text for c in sent])
            joined = "".join(p + c.mark for p, c in zip(phonemes, sent)).strip()
            if joined:
                out.append(Utterance(self.phoneme_ids(joined), sid, scales, sum(len(c.text) for c in sent)))
        return out

    # ---- the graph (the scheduler's worker thread) ----------------------------------------------
    def synthesize_batch(self, items: Sequence[Utterance]) -> list[np.ndarray]:
        """Mono float32 audio of each utterance; all share one `key` (the scheduler groups them)."""
        if len(items) > 1 and not self.batched:
            return [a for it in items for a in self.synthesize_batch([it])]
        n = max(len(u.ids) for u in items)
        x = np.full((len(items), n), self.id_map[PAD][0], dtype=np.int64)
        for i, u in enumerate(items):
            x[i, :len(u.ids)] = u.ids
        feed: dict[str, Any] = {"input": x, "input_lengths": np.array([len(u.ids) for u in items], np.int64),
                                "scales": np.array(items[0].scales, np.float32)}
        if self.has_sid:
            feed["sid"] = np.array([u.speaker or 0 for u in items], np.int64)
        outs = self.sess.run(None, feed)
        audio = outs[0].reshape(len(items), -1)
        if len(items) == 1:
            return [_normalized(audio[0])]
        frames = outs[1].reshape(len(items), -1).sum(axis=1)
        hop = audio.shape[1] / max(float(frames.max()), 1.0)
        return [_normalized(audio[i, : int(round(frames[i] * hop))]) for i in range(len(items))]

    def close(self) -> None:
        self.sess = None  # type: ignore[assignment]


def _normalized(audio: np.ndarray) -> np.ndarray:
    """Each utterance peak-normalised, as Piper's own synthesis does by default (the raw
    output peaks anywhere from 0.3 to over 1), to PEAK: lossy encoders overshoot a full-scale peak."""
    peak = float(np.abs(audio).max()) if audio.size else 0.0
    out = audio * (PEAK / peak) if peak > 1e-8 else np.zeros_like(audio)
    return np.ascontiguousarray(out, dtype=np.float32)


def load_piper(path: Path, threads: int = 0, name: str = "piper", max_batch: int = 8) -> PiperVoice:
    return PiperVoice(path, threads=threads, name=name, max_batch=max_batch)
