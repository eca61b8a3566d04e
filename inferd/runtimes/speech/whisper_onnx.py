"""Whisper exported to ONNX in optimum's layout, on onnxruntime: encoder_model.onnx, then
decoder_model.onnx + decoder_with_past_model.onnx or decoder_model_merged.onnx, with
config.json, generation_config.json, preprocessor_config.json and tokenizer.json.

Decoding follows transformers' WhisperForConditionalGeneration.generate for one 30 s window:
the prompt (<|startofprev|> and the request's prompt, then <|startoftranscript|>, the language
and task tokens, <|notimestamps|> unless timestamps are asked for), the generation config's
begin_suppress_tokens, suppress_tokens and, with timestamps, Whisper's timestamp rules (in
that order, before anything else), greedy or beam search (runtimes/onnx/decoding.py), at most
max_length new tokens. Languages are detected from the first step's language-token logits.
Windows that look wrong (too repetitive, too unlikely) are decoded again at the next
temperature of the request's ladder, sampling best_of candidates, as the CTranslate2 path does.

Word timestamps need the decoder's cross-attention weights, which these exports do not
output: the capability is absent and a request for it is refused."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inferd.errors import CapabilityMissing, ModelLoadFailed
from inferd.runtimes.onnx.decoding import GenConfig, beam_search, greedy, log_softmax
from inferd.runtimes.speech.mel import LogMel
from inferd.runtimes.speech.whisper import (check_language, compression_ratio, last_resort, needs_fallback,
                                            split_by_timestamps)
from inferd.speech_types import Chunk, ChunkResult, DecodeOptions, Segment

log = logging.getLogger("inferd.runtimes.speech")

FILES = ("config.json", "generation_config.json", "preprocessor_config.json", "tokenizer.json")


def graphs(folder: Path) -> dict[str, Path]:
    """The export's graphs ({"encoder", "decoder", "with_past"} or {"encoder", "merged"}), at
    the top level or in onnx/; the split pair wins when both layouts are there. ModelLoadFailed
    names what is missing."""
    def find(name: str) -> Path | None:
        return next((p for p in (folder / name, folder / "onnx" / name) if p.is_file()), None)

    enc = find("encoder_model.onnx")
    if enc is None:
        raise ModelLoadFailed(f"{folder}: a Whisper ONNX export needs encoder_model.onnx")
    first, past, merged = find("decoder_model.onnx"), find("decoder_with_past_model.onnx"), \
        find("decoder_model_merged.onnx")
    if first is not None and past is not None:
        return {"encoder": enc, "decoder": first, "with_past": past}
    if merged is not None:
        return {"encoder": enc, "merged": merged}
    raise ModelLoadFailed(f"{folder}: a Whisper ONNX export needs decoder_model.onnx + "
                          "decoder_with_past_model.onnx, or decoder_model_merged.onnx")


def _json(p: Path) -> dict[str, Any]:
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ModelLoadFailed(f"{p}: {e}") from e
    if not isinstance(data, dict):
        raise ModelLoadFailed(f"{p}: not a JSON object")
    return data


class WhisperOnnxRuntime:
    kind = "whisper-onnx"

    def __init__(self, path: Path, threads: int | None = None, name: str = ""):
        from tokenizers import Tokenizer

        from inferd.runtimes.onnx.session import open_session

        folder = path if path.is_dir() else path.parent
        self.name = name or folder.name
        missing = [f for f in FILES if not (folder / f).is_file()]
        if missing:
            raise ModelLoadFailed(f"{folder}: a Whisper ONNX export needs {', '.join(missing)}")
        g = graphs(folder)
        cfg, gen = _json(folder / "config.json"), _json(folder / "generation_config.json")
        self.mel = LogMel.from_config(_json(folder / "preprocessor_config.json"))
        self.rate = self.mel.rate
        try:
            self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        except Exception as e:  # tokenizers raises its own Exception for bad files
            raise ModelLoadFailed(f"{folder / 'tokenizer.json'}: {e}") from e

        def token(key: str, text: str | None = None) -> int:
            v = gen.get(key, cfg.get(key))
            if v is None and text is not None:
                v = self.tokenizer.token_to_id(text)
            if v is None:
                raise ModelLoadFailed(f"{folder}: no {key} in generation_config.json or config.json")
            return int(v[0] if isinstance(v, list) else v)

        self.sot = token("decoder_start_token_id", "<|startoftranscript|>")
        self.eot = token("eos_token_id", "<|endoftext|>")
        self.no_ts = token("no_timestamps_token_id", "<|notimestamps|>")
        self.ts_begin = self.no_ts + 1
        self.prev_sot = self.tokenizer.token_to_id("<|startofprev|>")
        if gen.get("prev_sot_token_id") is not None:
            self.prev_sot = int(gen["prev_sot_token_id"])
        # transformers' no-speech token: the one before <|notimestamps|> (<|nospeech|>, <|nocaptions|>)
        self.no_speech_id = self.no_ts - 1
        self.lang_ids = {k[2:-2]: int(v) for k, v in (gen.get("lang_to_id") or {}).items()}
        self.task_ids = {k: int(v) for k, v in (gen.get("task_to_id") or {}).items()}
        if not self.lang_ids and gen.get("is_multilingual", True):
            self.lang_ids, self.task_ids = self._specials_of_tokenizer()
        self.multilingual = bool(gen.get("is_multilingual", bool(self.lang_ids))) and bool(self.lang_ids)
        self.languages = frozenset(self.lang_ids) if self.multilingual else frozenset({"en"})
        self.suppress = tuple(int(t) for t in gen.get("suppress_tokens", cfg.get("suppress_tokens")) or ())
        self.begin_suppress = tuple(int(t) for t in
                                    gen.get("begin_suppress_tokens", cfg.get("begin_suppress_tokens")) or ())
        self.max_positions = int(cfg.get("max_target_positions", 448))
        self.max_length = int(gen.get("max_length") or self.max_positions)
        mi = gen.get("max_initial_timestamp_index")
        self.max_initial_ts = None if mi is None else int(mi)
        self.pad = int(gen.get("pad_token_id", cfg.get("pad_token_id", self.eot)) or self.eot)
        self.encoder = open_session(g["encoder"], threads)
        self.enc_input = self.encoder.get_inputs()[0].name
        mels = self.encoder.get_inputs()[0].shape[1]
        if isinstance(mels, int) and mels != self.mel.n_mels:
            raise ModelLoadFailed(f"{g['encoder'].name} takes {mels} mel bins; preprocessor_config.json says "
                                  f"{self.mel.n_mels}")
        if "merged" in g:
            self.first = self.with_past = open_session(g["merged"], threads)
            self.merged = True
        else:
            self.first, self.with_past = open_session(g["decoder"], threads), open_session(g["with_past"], threads)
            self.merged = False
        names = {i.name for i in self.first.get_inputs()}
        if "input_ids" not in names or not any(n.startswith("past_key_values.") for n in
                                               (i.name for i in self.with_past.get_inputs())):
            raise ModelLoadFailed(f"{folder}: the decoder graphs are not optimum's layout (inputs {sorted(names)})")
        self.graph_files = {k: v.name for k, v in g.items()}
        self.rng = np.random.default_rng()

    def _specials_of_tokenizer(self) -> tuple[dict[str, int], dict[str, int]]:
        """Older generation configs lack lang_to_id/task_to_id: Whisper's vocabulary has the
        language tokens between <|startoftranscript|> and <|translate|>."""
        tr, tc = self.tokenizer.token_to_id("<|translate|>"), self.tokenizer.token_to_id("<|transcribe|>")
        if tr is None or tc is None:
            return {}, {}
        langs = {}
        for i in range(self.sot + 1, tr):
            t = self.tokenizer.id_to_token(i) or ""
            if t.startswith("<|") and t.endswith("|>"):
                langs[t[2:-2]] = i
        return langs, {"translate": tr, "transcribe": tc}

    @property
    def capabilities(self) -> frozenset[str]:
        caps = {"transcribe", "timestamps"}
        if self.multilingual:
            caps |= {"translate", "language_detection"}
        return frozenset(caps)

    def check(self, opts: DecodeOptions, language: str | None) -> None:
        if opts.task == "translate" and not (self.multilingual and "translate" in self.task_ids):
            raise CapabilityMissing(f"model '{self.name}' is English-only: it lacks the 'translate' capability "
                                    "(use a multilingual Whisper model to translate)")
        if opts.word_timestamps:
            raise CapabilityMissing(f"model '{self.name}' is a Whisper ONNX export: it lacks the "
                                    "'word_timestamps' capability (its graphs give no cross-attention weights)")
        check_language(self.name, language, self.languages, self.multilingual)

    def close(self) -> None:
        self.encoder = self.first = self.with_past = None  # type: ignore[assignment]

    # ---- the model -----------------------------------------------------------------------------
    def encode(self, audios: Sequence[np.ndarray]) -> np.ndarray:
        feats = np.stack([self.mel(a) for a in audios])
        return self.encoder.run(None, {self.enc_input: feats})[0]

    def decoder(self, hidden: np.ndarray):
        from inferd.runtimes.onnx.vision_seq2seq import _Decoder

        n_layers = sum(1 for i in self.with_past.get_inputs() if i.name.endswith(".decoder.key"))
        return _Decoder(self.first, self.with_past, hidden, n_layers, merged=self.merged)

    def prompt(self, language: str, opts: DecodeOptions) -> list[int]:
        """transformers' decoder_input_ids: prompt_ids (<|startofprev|> + the text, its last
        max_target_positions // 2 - 1 tokens), then the start, language and task tokens."""
        out: list[int] = []
        if opts.initial_prompt and self.prev_sot is not None:
            ids = self.tokenizer.encode(" " + opts.initial_prompt.strip(), add_special_tokens=False).ids
            out = [self.prev_sot, *ids[-(self.max_positions // 2 - 1):]]
        out.append(self.sot)
        if self.multilingual:
            out += [self.lang_ids[language], self.task_ids[opts.task]]
        if not opts.timestamps:
            out.append(self.no_ts)
        return out

    def max_new(self, prompt: Sequence[int]) -> int:
        """Whisper's generate: max_length new tokens after the prompt, within the positions."""
        return max(1, min(self.max_length, self.max_positions - len(prompt)))

    def processor(self, timestamps: bool):
        """WhisperForConditionalGeneration.generate's processors, in its order: begin_suppress,
        suppress, then the timestamp rules (scores are logits in greedy, logprobs in beam search)."""
        begin = list(self.begin_suppress)
        suppress = list(self.suppress)
        ts, eot, no_ts, max_init = self.ts_begin, self.eot, self.no_ts, self.max_initial_ts

        def run(seqs: np.ndarray, begin_index: int, scores: np.ndarray) -> np.ndarray:
            s = scores
            at_begin = seqs.shape[1] == begin_index
            if at_begin and begin:
                s[:, begin] = -np.inf
            if suppress:
                s[:, suppress] = -np.inf
            if not timestamps:
                return s
            s[:, no_ts] = -np.inf
            for k in range(s.shape[0]):
                seq = seqs[k, begin_index:].tolist()
                last = len(seq) >= 1 and seq[-1] >= ts
                penultimate = len(seq) < 2 or seq[-2] >= ts
                if last:
                    if penultimate:
                        s[k, ts:] = -np.inf
                    else:
                        s[k, :eot] = -np.inf
                stamps = [t for t in seq if t >= ts]
                floor = ts
                if stamps:
                    floor = stamps[-1] if last and not penultimate else stamps[-1] + 1
                s[k, ts:floor] = -np.inf
            if at_begin:
                s[:, :ts] = -np.inf
                if max_init is not None:
                    s[:, ts + max_init + 1:] = -np.inf
            lp = log_softmax(s)
            with np.errstate(invalid="ignore"):
                ts_lp = np.logaddexp.reduce(lp[:, ts:], axis=-1)
            text_max = lp[:, :ts].max(axis=-1)
            s[ts_lp > text_max, :ts] = -np.inf
            return s

        return run

    def config(self, opts: DecodeOptions, beams: int) -> GenConfig:
        return GenConfig(eos=(self.eot,), pad=self.pad, num_beams=beams, processor=self.processor(opts.timestamps))

    # ---- one batch of windows -----------------------------------------------------------------
    def detect(self, dec, rows: list[int]) -> dict[int, tuple[str, float]]:
        """transformers' detect_language: the first step's logits over the language tokens."""
        logits, _ = dec.start(np.full((len(rows), 1), self.sot, dtype=np.int64), rows)
        codes = list(self.lang_ids)
        ids = np.array([self.lang_ids[c] for c in codes])
        sub = logits[:, ids].astype(np.float64)
        p = np.exp(sub - sub.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        best = p.argmax(axis=-1)
        return {r: (codes[int(b)], float(p[i, b])) for i, (r, b) in enumerate(zip(rows, best))}

    def decode_batch(self, chunks: Sequence[Chunk], opts: DecodeOptions) -> list[ChunkResult]:
        hidden = self.encode([c.audio for c in chunks])
        dec = self.decoder(hidden)
        langs = {i: (c.language or "en", 1.0) for i, c in enumerate(chunks)}
        unknown = [i for i, c in enumerate(chunks) if c.language is None]
        if self.multilingual and unknown:
            langs.update(self.detect(dec, unknown))
        groups: dict[tuple[int, ...], list[int]] = {}
        for i in range(len(chunks)):
            groups.setdefault(tuple(self.prompt(langs[i][0], opts)), []).append(i)
        picked: dict[int, tuple[list[int], float, float, float, float]] = {}
        for prompt, rows in groups.items():
            self._decode(dec, list(prompt), rows, opts, picked)
        out = []
        for i, c in enumerate(chunks):
            tokens, avg_logprob, no_speech, temperature, ratio = picked[i]
            res = ChunkResult(langs[i][0], langs[i][1], tokens=tokens)
            skip = (opts.no_speech_threshold is not None and no_speech > opts.no_speech_threshold
                    and not (opts.log_prob_threshold is not None and avg_logprob > opts.log_prob_threshold))
            if not skip:
                duration = self.mel.content_frames(len(c.audio)) * self.mel.hop / self.rate
                parts: list[dict[str, Any]] = (split_by_timestamps(tokens, self.ts_begin, c.offset, duration) if opts.timestamps
                         else [{"start": c.offset, "end": c.offset + duration, "tokens": tokens}])
                seek = int(round(c.offset * self.rate / self.mel.hop))
                for s in parts:
                    # an unclosed last segment ends with the audio; one that opened past it (a
                    # timestamp beyond the speech) is empty in time, and dropped as such
                    s["end"] = max(s["end"], s["start"])
                    text = self.text(s["tokens"])
                    if s["start"] == s["end"] or not text.strip():
                        continue
                    res.segments.append(Segment(start=s["start"], end=s["end"], text=text, tokens=s["tokens"],
                                                temperature=temperature, avg_logprob=avg_logprob,
                                                compression_ratio=ratio, no_speech_prob=no_speech, seek=seek,
                                                confidence=float(np.exp(avg_logprob))))
            out.append(res)
        return out

    def text(self, tokens: Sequence[int]) -> str:
        return str(self.tokenizer.decode([t for t in tokens if t < self.eot], skip_special_tokens=False))

    def generate(self, dec, prompt: list[int], rows: list[int], opts: DecodeOptions, temperature: float,
                 ) -> list[tuple[list[int], float]]:
        """One candidate per row, (tokens without EOS, summed logprob of the tokens and the EOS):
        greedy or beam search at temperature 0, the best of best_of samples otherwise."""
        n = self.max_new(prompt)
        if temperature > 0:
            return [self._sample(dec, prompt, r, opts, temperature, n) for r in rows]
        if opts.beam_size > 1:
            cfg = self.config(opts, opts.beam_size)
            seqs = [beam_search(dec, cfg, prompt, r, n) for r in rows]
            return [(self._strip(t), self.score(dec, prompt, r, t, opts.timestamps)) for r, t in zip(rows, seqs)]
        # greedy picks the top of the processed scores: its logprob is max - logsumexp, noted at
        # each step (the generic processors after Whisper's do nothing for this config)
        steps: list[np.ndarray] = []
        proc = self.processor(opts.timestamps)

        def noting(seqs: np.ndarray, begin: int, scores: np.ndarray) -> np.ndarray:
            out = proc(seqs, begin, scores)
            top = out.max(axis=-1)
            steps.append(top - (top + np.log(np.exp(out - top[:, None]).sum(axis=-1))))
            return out

        cfg = GenConfig(eos=(self.eot,), pad=self.pad, processor=noting)
        res = []
        for k, t in enumerate(greedy(dec, cfg, prompt, rows, n)):
            res.append((self._strip(t), float(sum(step[k] for step in steps[:len(t)]))))
        return res

    def _strip(self, tokens: list[int]) -> list[int]:
        return tokens[:-1] if tokens and tokens[-1] == self.eot else tokens

    def _sample(self, dec, prompt: list[int], row: int, opts: DecodeOptions, temperature: float,
                n: int) -> tuple[list[int], float]:
        """best_of sampled candidates of one window; the likeliest wins."""
        k = max(1, opts.best_of)
        proc = self.processor(opts.timestamps)
        p = len(prompt)
        seqs = np.full((k, p + n), self.pad, dtype=np.int64)
        seqs[:, :p] = prompt
        logits, cache = dec.start(seqs[:, :p], [row] * k)
        done = np.zeros(k, dtype=bool)
        total = np.zeros(k)
        ends = np.full(k, p + n)
        cur = p
        while cur < p + n:
            s = proc(seqs[:, :cur], p, logits.astype(np.float32).copy())
            lp = log_softmax(s / temperature)
            probs = np.exp(lp.astype(np.float64))
            probs /= probs.sum(axis=-1, keepdims=True)
            nxt = np.array([self.rng.choice(len(pr), p=pr) for pr in probs])
            nxt = np.where(done, self.pad, nxt)
            total += np.where(done, 0.0, log_softmax(s)[np.arange(k), nxt])
            seqs[:, cur] = nxt
            hit = (nxt == self.eot) & ~done
            ends[hit] = cur
            done |= hit
            cur += 1
            if done.all() or cur >= p + n:
                break
            logits, cache = dec.next(nxt, cache)
        lengths = np.where(done, ends - p, cur - p)
        best = int(np.argmax(total / (lengths + 1)))
        return seqs[best, p:p + int(lengths[best])].tolist(), float(total[best])

    def score(self, dec, prompt: list[int], row: int, tokens: list[int], timestamps: bool) -> float:
        """The summed logprob (of the processed scores) of a beam search's tokens and its EOS,
        from one decoder pass over prompt + tokens."""
        proc = self.processor(timestamps)
        p = len(prompt)
        full = [*prompt, *tokens]
        res, _ = dec.first_pass(np.array([full], dtype=np.int64), [row])
        logits = res["logits"][0]
        seq = np.array([full], dtype=np.int64)
        total = 0.0
        for j in range(p - 1, len(full)):
            nxt = full[j + 1] if j + 1 < len(full) else self.eot
            if j + 1 == len(full) and len(tokens) >= self.max_new(prompt):
                break  # stopped by the length, not by an EOS
            s = proc(seq[:, :j + 1], p, logits[j:j + 1].astype(np.float32))
            v = log_softmax(s)[0, nxt]
            total += float(v) if np.isfinite(v) else 0.0
        return total

    def no_speech(self, dec, prompt: list[int], rows: list[int]) -> list[float]:
        """Whisper's no-speech probability: the no-speech token at the <|startoftranscript|>
        position (a short pass over the prompt up to it)."""
        at = prompt.index(self.sot)
        ids = np.array([prompt[:at + 1]] * len(rows), dtype=np.int64)
        res, _ = dec.first_pass(ids, rows)
        return [float(np.exp(v)) for v in log_softmax(res["logits"][:, at])[:, self.no_speech_id]]

    def _decode(self, dec, prompt: list[int], rows: list[int], opts: DecodeOptions, picked: dict) -> None:
        """Decode `rows` (one shared prompt) down the temperature ladder: a row that decodes too
        repetitive or too unlikely is tried at the next temperature (faster-whisper's rules)."""
        candidates: dict[int, list[tuple]] = {r: [] for r in rows}
        pending = list(rows)
        silence = dict(zip(rows, self.no_speech(dec, prompt, rows)))
        for temperature in opts.temperatures:
            still = []
            for r, (t, logprob) in zip(pending, self.generate(dec, prompt, pending, opts, temperature)):
                avg, ns = logprob / (len(t) + 1), silence[r]
                ratio = compression_ratio(self.text(t).strip())
                cand = (t, avg, ns, temperature, ratio)
                candidates[r].append(cand)
                if needs_fallback(opts, ratio, avg, ns):
                    still.append(r)
                else:
                    picked[r] = cand
            pending = still
            if not pending:
                return
        for r in pending:
            best = last_resort(candidates[r], opts, ratio_at=4)
            picked[r] = (best[0], best[1], best[2], opts.temperatures[-1], best[4])
