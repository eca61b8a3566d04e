"""A draft model for speculative decoding: a second, smaller GGUF generator loaded with one
sequence per target slot and the target's context per sequence. It must share the target's
vocabulary token for token (drafts are target token ids), else the request is a 400."""

from __future__ import annotations

from inferd.errors import InvalidInput
from inferd.models import ModelSpec
from inferd.runtimes.llama_cpp.generator import LlamaGenerator
from inferd.runtimes.options import RuntimeOptions


def same_vocab(a: LlamaGenerator, b: LlamaGenerator) -> str | None:
    """None when both tokenize alike; else why not. Every token's bytes are compared (a
    262k vocabulary takes a fraction of a second, once per draft load)."""
    ma, mb = a.model, b.model
    if ma.n_vocab != mb.n_vocab:
        return f"{mb.n_vocab} tokens vs the target's {ma.n_vocab}"
    if (ma.bos, ma.eos) != (mb.bos, mb.eos):
        return "different BOS/EOS tokens"
    for t in range(ma.n_vocab):
        if ma.piece(t, special=True) != mb.piece(t, special=True):
            return f"token {t} differs"
    return None


def load_draft(dspec: ModelSpec, target: LlamaGenerator, opts: RuntimeOptions) -> LlamaGenerator:
    draft = LlamaGenerator(dspec, n_seq=target.n_seq, n_threads=opts.threads, n_ctx=target.n_ctx_seq,
                           n_batch=target.n_batch, cache_dtype=target.cache_dtype, n_gpu_layers=opts.n_gpu_layers,
                           swa_full=True)  # a draft rolls back over several one-token decodes
    why = same_vocab(target, draft)
    if why is not None:
        draft.close()
        raise InvalidInput(f"draft_model: '{dspec.name}' does not share the vocabulary of '{target.name}' ({why}); "
                           "accepted: \"ngram\" or a generator with the same vocabulary", "draft_model")
    return draft
