"""A loaded rewriter: tokenizer, generation defaults and a backend (ONNX decoder steps, or a
CTranslate2 Translator that decodes whole batches itself)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from inferd.errors import InvalidInput
from inferd.runtimes.onnx.tokenize import Encoded, TextTokenizer
from inferd.runtimes.seq2seq.decoding import DecodeParams
from inferd.runtimes.seq2seq.files import Seq2SeqFiles, architecture, input_limit

log = logging.getLogger("inferd.runtimes.seq2seq")

MAX_BEAMS = 16


def _eos(v: Any) -> tuple[int, ...]:
    if v is None:
        return ()
    return tuple(int(x) for x in v) if isinstance(v, list) else (int(v),)


class GenerationDefaults:
    """generation_config.json over config.json over transformers' defaults."""

    def __init__(self, config: dict[str, Any], generation: dict[str, Any]):
        def get(key: str, default: Any = None) -> Any:
            for src in (generation, config):
                if src.get(key) is not None:
                    return src[key]
            return default

        self.decoder_start = int(get("decoder_start_token_id", get("pad_token_id", 0)))
        self.eos = _eos(get("eos_token_id"))
        self.pad = int(get("pad_token_id", 0))
        self.max_length = int(get("max_length", 20))
        self.num_beams = int(get("num_beams", 1))
        self.do_sample = bool(get("do_sample", False))
        self.temperature = float(get("temperature", 1.0))
        self.top_p = float(get("top_p", 1.0))
        self.top_k = int(generation.get("top_k") or 0)  # only when the model asks for it
        self.length_penalty = float(get("length_penalty", 1.0))
        self.early_stopping = get("early_stopping", False)
        self.no_repeat_ngram_size = int(get("no_repeat_ngram_size", 0) or 0)
        self.min_length = int(get("min_length", 0) or 0)
        fb, fe = get("forced_bos_token_id"), get("forced_eos_token_id")
        self.forced_bos = None if fb is None else int(fb)
        self.forced_eos = None if fe is None else int(_eos(fe)[0])


class Rewriter:
    """Tokenize, choose decoding parameters, detokenize. `backend` runs the model."""

    def __init__(self, name: str, files: Seq2SeqFiles, backend: Any, max_new_tokens_cap: int = 1024):
        self.name, self.files, self.backend = name, files, backend
        self.tokenizer = TextTokenizer(str(files.tokenizer))
        self.max_length = input_limit(files, self.tokenizer.file_max_length)
        self.tokenizer.set_max_length(self.max_length)
        self.defaults = GenerationDefaults(files.config, files.generation)
        if not self.defaults.eos:
            log.warning("rewriter %s: no eos_token_id in its config; it stops only at max_tokens", name)
        # Decoders with a learned position table (BART, Marian, Pegasus) cannot go past it;
        # T5's relative positions have no such end.
        positions = files.config.get("max_position_embeddings") if files.layout != "ctranslate2" else None
        self.cap = min(max_new_tokens_cap, int(positions) - 1) if positions else max_new_tokens_cap
        self.architecture = architecture(files.folder, files.manifest)
        self.kind = files.layout
        self.vocab_size = self.tokenizer.vocab_size

    def prepare(self, texts: Sequence[str]) -> list[Encoded]:
        return self.tokenizer.encode(list(texts))

    def params(self, o: Any) -> DecodeParams:
        """The search for one request (`o`: max_tokens, num_beams, num_return_sequences,
        temperature, top_p, seed; None = the model's default); bad values are a 400, never ignored."""
        d = self.defaults
        sampling = d.do_sample if o.temperature is None else o.temperature > 0
        beams = o.num_beams if o.num_beams is not None else (1 if sampling and o.temperature else d.num_beams)
        if not 1 <= beams <= MAX_BEAMS:
            raise InvalidInput(f"num_beams must be between 1 and {MAX_BEAMS}", "num_beams")
        n = o.num_return_sequences if o.num_return_sequences is not None else 1
        if not 1 <= n <= beams:
            raise InvalidInput(f"num_return_sequences ({n}) must be between 1 and num_beams ({beams})",
                               "num_return_sequences")
        if sampling and beams > 1:
            raise InvalidInput("sampling (temperature > 0) works with num_beams 1 only; set temperature 0 "
                               "for beam search", "num_beams")
        if o.top_p is not None and not 0 < o.top_p <= 1:
            raise InvalidInput("top_p must be in (0, 1]", "top_p")
        if o.temperature is not None and o.temperature < 0:
            raise InvalidInput("temperature must be >= 0", "temperature")
        if o.max_tokens is not None:
            if not 1 <= o.max_tokens <= self.cap:
                raise InvalidInput(f"max_tokens must be between 1 and {self.cap}", "max_tokens")
            max_length = 1 + o.max_tokens
        else:
            max_length = min(d.max_length, 1 + self.cap)
        return DecodeParams(
            decoder_start=d.decoder_start, eos=d.eos, max_length=max_length, num_beams=beams, num_return=n,
            do_sample=sampling, temperature=(o.temperature if o.temperature else d.temperature) if sampling else 1.0,
            top_p=(o.top_p if o.top_p is not None else d.top_p) if sampling else 1.0,
            top_k=d.top_k if sampling else 0, seed=o.seed, length_penalty=d.length_penalty,
            early_stopping=d.early_stopping, no_repeat_ngram_size=d.no_repeat_ngram_size, forced_bos=d.forced_bos,
            forced_eos=d.forced_eos, min_length=d.min_length)

    def text(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.tok.decode(list(tokens), skip_special_tokens=True)

    def close(self) -> None:
        self.backend = None
