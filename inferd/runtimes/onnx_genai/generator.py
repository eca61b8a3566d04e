"""OgaGenerator: a generator in onnxruntime-genai's layout (genai_config.json, model.onnx(+.data),
tokenizer.json), served by onnxruntime-genai. It gives the service what it needs to prepare a
request (tokenizing, the chat template, a checked sampler) and the scheduler
(scheduling/genai.py) what it steps: `lanes` (lanes.py), `piece`, `is_eog`.

Tokenizing uses the `tokenizers` library on the folder's tokenizer.json (the reference
tokenizer: add-special and parse-special can be chosen per call, which onnxruntime-genai's own
tokenizer does not offer); onnxruntime-genai decodes and samples.

Everything a request asks for that onnxruntime-genai cannot do is refused here, by name, with
a 400 (InvalidInput): never silently dropped."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inferd.errors import InvalidInput, ModelLoadFailed, NotImplementedYet
from inferd.models import ModelSpec
from inferd.runtimes.onnx_genai.lanes import Lanes, Turn
from inferd.runtimes.onnx_genai.pieces import TokenBytes
from inferd.runtimes.options import RuntimeOptions
from inferd.types import Image, SamplingParams

log = logging.getLogger("inferd.onnx_genai")

CONFIG = "genai_config.json"
DYNAMIC_BATCH = 100  # onnxruntime-genai's default engine.dynamic_batching.max_batch_size

# SamplingParams fields onnxruntime-genai has no equivalent of: (field, default, request name).
# The truncations only matter when sampling (greedy decoding takes the top token whatever they say).
UNSUPPORTED = (("frequency_penalty", 0.0, "frequency_penalty"), ("presence_penalty", 0.0, "presence_penalty"),
               ("logprobs", False, "logprobs"))
UNSUPPORTED_SAMPLED = (("min_p", 0.0, "min_p"), ("typical_p", 1.0, "typical_p"), ("samplers", None, "samplers"))


def is_genai_folder(path: Path) -> bool:
    return path.is_dir() and (path / CONFIG).is_file()


def _token_text(v: Any) -> str:
    if isinstance(v, dict):
        return str(v.get("content") or "")
    return str(v or "")


class OgaGenerator:
    """One loaded onnxruntime-genai model. `n_seq` is the engine's batch size (its slots)."""

    media_marker: str | None = None

    def __init__(self, spec: ModelSpec, opts: RuntimeOptions,
                 grammar_to_lark: Callable[[str, str], str] | None = None):
        try:
            import onnxruntime_genai as og
            from tokenizers import Tokenizer
        except ImportError as e:
            raise NotImplementedYet(f"model '{spec.name}': ONNX generators need onnxruntime-genai "
                                  "(pip install -e '.[genai]')") from e
        assert spec.path is not None
        self.name, self.path, self.og = spec.name, spec.path, og
        self._to_lark = grammar_to_lark
        folder = spec.path
        try:
            cfg = json.loads((folder / CONFIG).read_text())
            tok_file = folder / "tokenizer.json"
            if not tok_file.is_file():
                raise NotImplementedYet(f"model '{spec.name}': {folder} has no tokenizer.json (inferd reads "
                                        "the Hugging Face tokenizer of an ONNX generator)")
            self.tok = Tokenizer.from_file(str(tok_file))
            self.tok_plain = Tokenizer.from_file(str(tok_file))  # special tokens read as text
            self.tok_plain.encode_special_tokens = True
            self._pieces = TokenBytes(self.tok, json.loads(tok_file.read_text()))
            tcfg_file = folder / "tokenizer_config.json"
            tcfg = json.loads(tcfg_file.read_text()) if tcfg_file.is_file() else {}
        except (OSError, ValueError) as e:
            raise ModelLoadFailed(f"model '{spec.name}': cannot read {folder}: {e}") from e
        m = cfg.get("model") or {}
        self.dynamic = "dynamic_batching" in (cfg.get("engine") or {})
        ctx = int(m.get("context_length") or (cfg.get("search") or {}).get("max_length") or 2048)
        self.n_ctx_seq = min(ctx, opts.n_ctx) if opts.n_ctx else ctx
        self.n_batch = opts.n_batch
        eos = m.get("eos_token_id")
        self._eos = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        self._vocab = int(m.get("vocab_size") or self.tok.get_vocab_size(with_added_tokens=True))
        template = tcfg.get("chat_template")
        jinja = folder / "chat_template.jinja"
        if not template and jinja.is_file():
            template = jinja.read_text()
        self.chat_template: str | None = template if isinstance(template, str) else None
        self.bos_text, self.eos_text = _token_text(tcfg.get("bos_token")), _token_text(tcfg.get("eos_token"))
        bos = m.get("bos_token_id")
        self._bos = int(bos) if isinstance(bos, int) and bos >= 0 else None
        self.size_bytes = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
        try:
            config = og.Config(str(folder))
            overlay: dict[str, Any] = {"search": {"max_length": self.n_ctx_seq}}
            if opts.threads:
                overlay["model"] = {"decoder": {"session_options": {"intra_op_num_threads": opts.threads}}}
            config.overlay(json.dumps(overlay))
            self.model = og.Model(config)
            # static engines: enough of them that each of the --parallel slots can start at once
            self.lanes = Lanes(og, self.model, self.dynamic, self._vocab, max_batches=max(1, opts.parallel))
        except RuntimeError as e:
            raise ModelLoadFailed(f"model '{spec.name}': onnxruntime-genai cannot load {folder}: {e}") from e
        # the engine's batch: the static one set above, or the model's dynamic_batching limit
        dyn = (cfg.get("engine") or {}).get("dynamic_batching") or {}
        self.n_seq = int(dyn.get("max_batch_size") or DYNAMIC_BATCH) if self.dynamic else max(1, opts.parallel)

    # ---- what the service prepares a request with -----------------------------------------
    @property
    def n_vocab(self) -> int:
        return self._vocab

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        t = self.tok if parse_special else self.tok_plain
        return list(t.encode(text, add_special_tokens=add_special).ids)

    def tokenize_rendered(self, text: str) -> list[int]:
        """A rendered chat prompt: the template writes BOS itself where the model wants one."""
        has_bos = bool(self.bos_text) and text.startswith(self.bos_text)
        return self.tokenize(text, add_special=not has_bos, parse_special=True)

    def detokenize(self, tokens: list[int]) -> str:
        return str(self.tok.decode(list(tokens), skip_special_tokens=False))

    def token_bytes(self, token: int) -> bytes:
        return self._pieces.bytes_of(int(token))

    @property
    def fim_tokens(self) -> dict[str, int]:
        return {}

    @property
    def bos_token(self) -> int | None:
        return self._bos

    def check_tokens(self, tokens: list[int], param: str = "prompt") -> None:
        bad = next((t for t in tokens if not 0 <= int(t) < self._vocab), None)
        if bad is not None:
            raise InvalidInput(f"token id {bad} is not in model '{self.name}''s vocabulary (0 to {self._vocab - 1})",
                               param)

    def make_sampler(self, params: SamplingParams) -> Turn:
        """The request's Turn, or a 400 naming what onnxruntime-genai cannot honour."""
        for attr, default, name in UNSUPPORTED + (UNSUPPORTED_SAMPLED if params.temperature > 0 else ()):
            if getattr(params, attr) != default:
                raise InvalidInput(f"{name} is not supported by ONNX generators (onnxruntime-genai) such as "
                                   f"model '{self.name}'", name)
        if params.logit_bias:
            raise InvalidInput(f"logit_bias is not supported by ONNX generators (onnxruntime-genai) such as "
                               f"model '{self.name}'", "logit_bias")
        guidance = None
        if params.grammar is not None:
            if self._to_lark is None:
                raise InvalidInput(f"grammar-constrained output is not supported by model '{self.name}'", "grammar")
            guidance = ("lark_grammar", self._to_lark(params.grammar, params.grammar_root))
        return Turn(params, guidance)

    def warm_up(self) -> None:
        """One token at load, on the worker thread: onnxruntime sizes its buffers on the first run."""
        tok = self._bos if self._bos is not None else 0
        lane = self.lanes.start([tok], Turn(SamplingParams(temperature=0.0)), 1)
        for _ in range(4):
            events, _passes = self.lanes.step()
            if any(fin is not None for ln, _t, fin in events if ln is lane):
                break
        self.lanes.stop(lane)

    def set_adapters(self, adapters: Any) -> None:
        if adapters:
            raise InvalidInput(f"LoRA adapters are not supported by ONNX generators such as model '{self.name}'",
                               "lora")

    def load_adapter(self, path: str) -> None:
        self.set_adapters([path])

    # llama-server's slot files (/slots/{id}?action=save|restore): onnxruntime-genai keeps no
    # sequence state between requests, so there is nothing to save or restore (erase is a no-op).
    def save_seq_file(self, seq: int, path: str, tokens: list[int]) -> int:
        raise InvalidInput(f"slot save is not supported by ONNX generators such as model '{self.name}'", "action")

    def load_seq_file(self, seq: int, path: str) -> tuple[int, list[int]]:
        raise InvalidInput(f"slot restore is not supported by ONNX generators such as model '{self.name}'",
                           "action")

    def seq_rm(self, seq: int, p0: int, p1: int) -> bool:
        return True

    def tokenize_multimodal(self, text: str, images: list[Image]) -> tuple[list[int], dict[int, Any]]:
        raise InvalidInput(f"model '{self.name}' cannot read images")

    # ---- what the scheduler steps -------------------------------------------------------------
    def piece_decoder(self) -> Callable[[int], bytes]:
        """token -> its raw bytes, for the scheduler's TextOut (which joins partial UTF-8 across
        tokens and replaces invalid bytes, as for GGUF generators). Not onnxruntime-genai's
        TokenizerStream: it drops the bytes of an invalid sequence and the text that follows."""
        return self._pieces.bytes_of

    def is_eog(self, token: int) -> bool:
        return token in self._eos

    def close(self) -> None:
        """After the scheduler's worker ended (it closed the engine, its owner thread)."""
        self.model = None


def load_generator(spec: ModelSpec, opts: RuntimeOptions,
                   grammar_to_lark: Callable[[str, str], str] | None = None) -> OgaGenerator:
    return OgaGenerator(spec, opts, grammar_to_lark)
