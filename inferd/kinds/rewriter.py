"""Rewriters: seq2seq models (question and query generation, paraphrase, translation) on
onnxruntime (an encoder + decoder export, batched by scheduling/seq2seq.py) or CTranslate2
(batched translate_batch calls). Found as `rewriters/<name>/`; its architecture is shown in
/ai/v1/models."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.errors import ModelLoadFailed
from inferd.kinds.spec import KindSpec, architectures
from inferd.models import ModelKind, ModelSpec

if TYPE_CHECKING:
    from inferd.runtimes.options import RuntimeOptions
    from inferd.service.handles import RewriterHandle

log = logging.getLogger("inferd.service.rewriting")


def load_rewriter(spec: ModelSpec, opts: RuntimeOptions | None = None) -> RewriterHandle:
    """(REWRITER, onnx | ctranslate2) -> a rewriter with its scheduler (runs on a worker thread)."""
    from inferd.runtimes.options import RuntimeOptions
    from inferd.runtimes.seq2seq.files import locate
    from inferd.runtimes.seq2seq.model import Rewriter
    from inferd.scheduling.batcher import Batcher
    from inferd.scheduling.seq2seq import Seq2SeqScheduler
    from inferd.service.handles import RewriterHandle
    from inferd.service.rewriting import MAX_NEW_TOKENS

    opts = opts or RuntimeOptions(threads=1)
    if spec.path is None:
        raise ModelLoadFailed(f"model '{spec.name}' has no files")
    folder = Path(spec.path)
    files = locate(folder, dict(spec.manifest or {}), opts.prefer_quantized)
    threads, budget = opts.threads, opts.max_batch_tokens
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())  # weights, mapped
    if files.layout == "ctranslate2":
        from tokenizers import Tokenizer

        from inferd.runtimes.seq2seq.ct2 import Ct2Seq2Seq

        tk = Tokenizer.from_file(str(files.tokenizer))
        ct2 = Ct2Seq2Seq(files, tk.id_to_token, tk.token_to_id, threads)
        rw = Rewriter(spec.name, files, ct2, MAX_NEW_TOKENS)

        def run(items: list[Any]) -> list[Any]:
            """One translate_batch per group of inputs with the same options, in input order."""
            out: list[Any] = [None] * len(items)
            groups: dict[tuple, list[int]] = {}
            for i, (_, p, _) in enumerate(items):
                groups.setdefault(ct2.key(p), []).append(i)
            for idx in groups.values():
                hyps = ct2.run([items[i][0] for i in idx], items[idx[0]][1], [items[i][2] for i in idx])
                for i, h in zip(idx, hyps):
                    out[i] = h
            return out

        sched: Any = Batcher(run, max_tokens=budget, max_items=opts.max_batch_size, name=spec.name)
    else:
        from inferd.runtimes.seq2seq import decoding
        from inferd.runtimes.seq2seq.onnx_model import OnnxSeq2Seq

        backend = OnnxSeq2Seq(files, threads)
        rw = Rewriter(spec.name, files, backend, MAX_NEW_TOKENS)
        sched = Seq2SeqScheduler(backend, decoding, rw.tokenizer.pad_id, max_rows=opts.max_batch_size, max_tokens=budget,
                                 name=spec.name)
    log.info("rewriter %s: %s layout (%s), input limit %d tokens", spec.name, files.layout,
             ", ".join(p.name for p in files.graphs.values()), rw.max_length)
    return RewriterHandle(rw, sched, size, ct2=files.layout == "ctranslate2")


def describe(path: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    if path.is_dir() and "architecture" not in manifest:
        archs = architectures(path)  # shown in /ai/v1/models (T5ForConditionalGeneration, ...)
        if archs:
            return {**manifest, "architecture": archs[0]}
    return manifest


REWRITER: KindSpec[RewriterHandle] = KindSpec(
    ModelKind.REWRITER, {"onnx": load_rewriter, "ctranslate2": load_rewriter}, folder="rewriters",
    architectures=("ConditionalGeneration",), describe=describe,
    pipeline_tags=("text2text-generation", "summarization", "translation"),
    catalog=lambda s: {"architecture": s.manifest.get("architecture")})
