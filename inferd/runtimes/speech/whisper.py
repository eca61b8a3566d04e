"""Whisper in CTranslate2 format through faster-whisper, decoding the windows of many requests
in one batch: one encoder pass for the whole batch, one language-detection step, then one
`generate` per prompt length (CTranslate2 needs equal prompt lengths in a batch; prompts of
different languages have equal lengths), and temperature fallback for the windows that need
it, re-run together as a smaller batch.

The decoding rules are faster-whisper's own (the same prompt, suppressed tokens, thresholds,
timestamp splitting and word alignment), so a short clip decodes to exactly what
`WhisperModel.transcribe` gives on the same options. What differs is across windows of a long
file: they are decoded independently (as faster-whisper's BatchedInferencePipeline does), so
one window's text does not condition the next one."""

from __future__ import annotations

import logging
import zlib
from typing import Any
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from inferd.errors import CapabilityMissing, InvalidInput, ModelLoadFailed
from inferd.speech_types import ChunkResult, Chunk, DecodeOptions, Segment, Word

log = logging.getLogger("inferd.runtimes.speech")

PREPEND_PUNCTUATIONS = "\"'“¿([{-"
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"


class WhisperRuntime:
    kind = "whisper"

    def __init__(self, path: Path, threads: int | None = None, compute_type: str = "default", name: str = ""):
        from faster_whisper import WhisperModel

        self.name = name or path.name
        try:
            self.model = WhisperModel(str(path), device="cpu", compute_type=compute_type,
                                      cpu_threads=threads or 0, num_workers=1, local_files_only=True)
        except Exception as e:  # CTranslate2 raises RuntimeError/ValueError for bad folders
            raise ModelLoadFailed(f"CTranslate2 could not load the Whisper model in {path}: {e}") from e
        self.multilingual = bool(self.model.model.is_multilingual)
        self.rate = int(self.model.feature_extractor.sampling_rate)
        tok = self.model.hf_tokenizer
        self.languages = frozenset(c for c in self.model.supported_languages if tok.token_to_id(f"<|{c}|>") is not None)
        self._tokenizers: dict[tuple[str, str], object] = {}
        self._suppress: tuple[int, ...] | None = None

    @property
    def capabilities(self) -> frozenset[str]:
        caps = {"transcribe", "timestamps", "word_timestamps"}
        if self.multilingual:
            caps |= {"translate", "language_detection"}
        return frozenset(caps)

    def check(self, opts: DecodeOptions, language: str | None) -> None:
        """Refuse what this model cannot do, before any audio is decoded."""
        if opts.task == "translate" and not self.multilingual:
            raise CapabilityMissing(f"model '{self.name}' is English-only: it lacks the 'translate' capability "
                                    "(use a multilingual Whisper model to translate)")
        check_language(self.name, language, self.languages, self.multilingual)

    def close(self) -> None:
        self.model = None  # type: ignore[assignment]  # CTranslate2 frees the weights with the object

    # ---- one batch of windows ----------------------------------------------------------------
    def decode_batch(self, chunks: Sequence[Chunk], opts: DecodeOptions) -> list[ChunkResult]:
        from faster_whisper.audio import pad_or_trim

        fe = self.model.feature_extractor
        feats, frames = [], []
        for c in chunks:
            f = fe(c.audio)
            n = min(fe.nb_max_frames, f.shape[-1] - 1)  # the last frame is padding (faster-whisper does the same)
            feats.append(pad_or_trim(f[:, :n]))
            frames.append(max(1, n))
        enc = self.model.encode(np.stack(feats))
        langs = self._languages(chunks, enc)
        prompts = [self._prompt(lang, opts) for lang, _ in langs]
        picked: list[tuple] = [None] * len(chunks)  # type: ignore[list-item]
        by_len: dict[int, list[int]] = {}
        for i, p in enumerate(prompts):
            by_len.setdefault(len(p), []).append(i)
        for idx in by_len.values():
            self._generate(enc, idx, prompts, langs, opts, picked, len(chunks))
        out: list[ChunkResult] = []
        for i, c in enumerate(chunks):
            result, avg_logprob, temperature, ratio = picked[i]
            lang, prob = langs[i]
            no_speech = float(result.no_speech_prob)
            tokens = list(result.sequences_ids[0])
            res = ChunkResult(lang, prob, tokens=tokens)
            skip = (opts.no_speech_threshold is not None and no_speech > opts.no_speech_threshold
                    and not (opts.log_prob_threshold is not None and avg_logprob > opts.log_prob_threshold))
            if not skip:
                tok = self._tokenizer(lang, opts.task)
                seek = int(round(c.offset * fe.sampling_rate / fe.hop_length))
                duration = frames[i] * fe.time_per_frame
                parts = (split_by_timestamps(tokens, tok.timestamp_begin, c.offset, duration) if opts.timestamps
                         else [{"start": c.offset, "end": c.offset + duration, "tokens": tokens}])
                for s in parts:
                    text = tok.decode(s["tokens"])
                    if s["start"] == s["end"] or not text.strip():
                        continue
                    res.segments.append(Segment(start=s["start"], end=s["end"], text=text, tokens=s["tokens"],
                                                temperature=temperature, avg_logprob=float(avg_logprob),
                                                compression_ratio=ratio, no_speech_prob=no_speech, seek=seek,
                                                confidence=float(np.exp(avg_logprob))))
            out.append(res)
        if opts.word_timestamps:
            self._add_words(chunks, enc, out, frames, opts.task)
        return out

    # ---- pieces --------------------------------------------------------------------------------
    def _languages(self, chunks: Sequence[Chunk], enc) -> list[tuple[str, float]]:
        langs = [(c.language or "en", 1.0) for c in chunks]
        if self.multilingual and any(c.language is None for c in chunks):
            found = self.model.model.detect_language(enc)  # one decoder step for the whole batch
            for i, c in enumerate(chunks):
                if c.language is None:
                    token, p = found[i][0]
                    langs[i] = (token[2:-2], float(p))
        return langs

    def _tokenizer(self, language: str, task: str):
        from faster_whisper.tokenizer import Tokenizer

        key = (language, task)
        tok = self._tokenizers.get(key)
        if tok is None:
            tok = Tokenizer(self.model.hf_tokenizer, self.multilingual, task=task, language=language)
            self._tokenizers[key] = tok
        return tok

    def _prompt(self, language: str, opts: DecodeOptions) -> list[int]:
        tok = self._tokenizer(language, opts.task)
        previous = tok.encode(" " + opts.initial_prompt.strip()) if opts.initial_prompt else []
        return self.model.get_prompt(tok, previous, without_timestamps=not opts.timestamps)

    def _suppressed(self) -> tuple[int, ...]:
        if self._suppress is None:
            from faster_whisper.transcribe import get_suppressed_tokens

            self._suppress = tuple(get_suppressed_tokens(self._tokenizer("en", "transcribe"), [-1]))
        return self._suppress

    def _generate(self, enc, idx: list[int], prompts, langs, opts: DecodeOptions, picked: list, batch: int) -> None:
        """Decode windows `idx` (equal prompt lengths), falling back to higher temperatures for
        those whose output is too repetitive or too unlikely; keep each window's choice in `picked`."""
        import ctranslate2

        max_length = self.model.max_length
        candidates: dict[int, list[tuple]] = {i: [] for i in idx}
        pending = list(idx)
        for temperature in opts.temperatures:
            sub = enc if len(pending) == batch else _rows(ctranslate2, enc, pending)
            if temperature > 0:
                kw = {"beam_size": 1, "num_hypotheses": opts.best_of, "sampling_topk": 0,
                      "sampling_temperature": temperature}
            else:
                kw = {"beam_size": opts.beam_size, "patience": 1.0}
            results = self.model.model.generate(
                sub, [prompts[i] for i in pending], length_penalty=1.0, repetition_penalty=1.0,
                no_repeat_ngram_size=0, max_length=max_length, return_scores=True, return_no_speech_prob=True,
                suppress_blank=True, suppress_tokens=list(self._suppressed()), max_initial_timestamp_index=50, **kw)
            still = []
            for i, r in zip(pending, results):
                tokens = r.sequences_ids[0]
                avg_logprob = r.scores[0] * len(tokens) / (len(tokens) + 1)
                text = self._tokenizer(langs[i][0], opts.task).decode(tokens).strip()
                ratio = compression_ratio(text)
                cand = (r, avg_logprob, temperature, ratio)
                candidates[i].append(cand)
                if needs_fallback(opts, ratio, avg_logprob, r.no_speech_prob):
                    still.append(i)
                else:
                    picked[i] = cand
            pending = still
            if not pending:
                return
        for i in pending:
            best = last_resort(candidates[i], opts, ratio_at=3)
            picked[i] = (best[0], best[1], opts.temperatures[-1], best[3])

    def _add_words(self, chunks, enc, out: list[ChunkResult], frames: list[int], task: str) -> None:
        """Word timings from the cross-attention alignment (faster-whisper's), per language."""
        import ctranslate2

        fe = self.model.feature_extractor
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(out):
            if r.segments:
                groups.setdefault(r.language, []).append(i)
        for lang, idx in groups.items():
            sub = enc if len(idx) == len(out) else _rows(ctranslate2, enc, idx)
            segs: list[list[dict[str, Any]]] = [[{"seek": int(round(chunks[i].offset * fe.sampling_rate / fe.hop_length)), "start": s.start,
                      "end": s.end, "tokens": s.tokens} for s in out[i].segments] for i in idx]
            self.model.add_word_timestamps(segs, self._tokenizer(lang, task), sub, [frames[i] for i in idx],
                                           PREPEND_PUNCTUATIONS, APPEND_PUNCTUATIONS, 0.0)
            for i, item in zip(idx, segs):
                for s, d in zip(out[i].segments, item):
                    s.start, s.end = float(d["start"]), float(d["end"])
                    s.words = [Word(w["word"], float(w["start"]), float(w["end"]), float(w["probability"]))
                               for w in d.get("words", [])]


def _rows(ctranslate2, enc, idx: list[int]):
    """Encoder output rows `idx` as a new StorageView (CPU: a copy of a few MB at most)."""
    return ctranslate2.StorageView.from_array(np.ascontiguousarray(np.asarray(enc)[idx]))


def check_language(name: str, language: str | None, languages: Any, multilingual: bool) -> None:
    """A requested language the model has no token for is a 400 (English-only models: 'en')."""
    if language is None or language in languages:
        return
    if not multilingual:
        raise InvalidInput(f"model '{name}' is English-only: language must be 'en' or 'auto', not '{language}'",
                           "language")
    raise InvalidInput(f"unknown language '{language}' (use an ISO 639-1 code such as 'en', or 'auto')", "language")


def compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


def last_resort(candidates: list[Any], opts: Any, ratio_at: int) -> Any:
    """Every temperature failed: the likeliest candidate (average log-probability at index 1)
    whose compression ratio (at `ratio_at`) is under the threshold, else the likeliest of all.
    Both Whisper paths (CTranslate2, ONNX) keep their candidates as tuples of their own."""
    ok = [c for c in candidates
          if opts.compression_ratio_threshold is None or c[ratio_at] <= opts.compression_ratio_threshold]
    return max(ok or candidates, key=lambda c: c[1])


def needs_fallback(opts: Any, ratio: float, avg_logprob: float, no_speech_prob: float) -> bool:
    """Whisper's temperature fallback rule (faster-whisper's): retry hotter when the text
    repeats itself (compression ratio) or is unlikely (average log-probability), unless the
    window is silence, where no temperature will find words."""
    fallback = (opts.compression_ratio_threshold is not None and ratio > opts.compression_ratio_threshold) \
        or (opts.log_prob_threshold is not None and avg_logprob < opts.log_prob_threshold)
    if (opts.no_speech_threshold is not None and no_speech_prob > opts.no_speech_threshold
            and opts.log_prob_threshold is not None and avg_logprob < opts.log_prob_threshold):
        return False
    return fallback


def split_by_timestamps(tokens: list[int], ts_begin: int, offset: float, duration: float,
                        precision: float = 0.02) -> list[dict[str, Any]]:
    """Segments from one window's tokens. Two timestamp tokens in a row close a segment and
    open the next (Whisper's output format); without timestamps the window is one segment."""
    cuts = [i for i in range(1, len(tokens)) if tokens[i] >= ts_begin and tokens[i - 1] >= ts_begin]
    single_end = len(tokens) >= 2 and tokens[-2] < ts_begin <= tokens[-1]
    if not cuts:
        stamps = [t for t in tokens if t >= ts_begin]
        end = duration
        if stamps and stamps[-1] != ts_begin:
            end = (stamps[-1] - ts_begin) * precision
        return [{"start": offset, "end": offset + end, "tokens": tokens}]
    if single_end:
        cuts.append(len(tokens))
    out: list[dict[str, Any]] = []
    last = 0
    for cut in cuts:
        part = tokens[last:cut]
        out.append({"start": offset + (part[0] - ts_begin) * precision,
                    "end": offset + (part[-1] - ts_begin) * precision, "tokens": part})
        last = cut
    tail = tokens[last:]
    if not single_end and any(t < ts_begin for t in tail):
        # An unclosed last segment: faster-whisper would re-decode from its start in the next
        # window; this window is decoded once, so keep it, ending where the window ends.
        start = (tail[0] - ts_begin) * precision if tail[0] >= ts_begin else out[-1]["end"] - offset
        out.append({"start": offset + start, "end": offset + duration, "tokens": tail})
    return out
