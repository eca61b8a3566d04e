"""GGUF cross-encoder rerankers through llama.cpp's rank pooling (bge-reranker and the like,
converted with their classification head: `{arch}.pooling_type = 4`, tensors cls, cls.output).

Same seam as the ONNX cross-encoders: `prepare` builds each (query, document) pair's tokens
the way llama-server's /rerank does (BOS, query, EOS, SEP, document, EOS, each where the
vocabulary asks for it), `run_batch` packs the pairs into llama.cpp batches (one sequence
each, up to the context and the sequence limit) and reads one score per sequence. The score
is the head's first output, raw (no sigmoid), as llama-server returns it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from inferd.errors import ModelLoadFailed
from inferd.models import ModelSpec
from inferd.runtimes.gguf_embed import gguf_file
from inferd.runtimes.options import RuntimeOptions


@dataclass(frozen=True)
class PairItem:
    tokens: list[int]
    truncated: bool

    def __len__(self) -> int:
        return len(self.tokens)


class GgufReranker:
    late_interaction = False
    max_batch_tokens: int | None = None  # the server's budget; run_batch packs by the context

    def __init__(self, spec: ModelSpec, opts: RuntimeOptions):
        import llama_cpp

        self._lib = llama_cpp
        path = gguf_file(spec)
        self.spec, self.manifest = spec, dict(spec.manifest or {})
        n_ctx = int(self.manifest.get("max_length", 0) or 512)
        # The GGUF's own pooling decides; a manifest "pooling": "rank" forces it (llama-server --reranking).
        pooling = (llama_cpp.LLAMA_POOLING_TYPE_RANK if self.manifest.get("pooling") == "rank"
                   else llama_cpp.LLAMA_POOLING_TYPE_UNSPECIFIED)
        self.llm = llama_cpp.Llama(model_path=str(path), embedding=True, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx,
                                   pooling_type=pooling, n_threads=opts.threads, n_threads_batch=opts.threads,
                                   verbose=False)
        if self.llm.pooling_type() != llama_cpp.LLAMA_POOLING_TYPE_RANK:
            self.llm.close()
            # discovery marks such a file unsupported (kinds/reranker.py); this is for one it could not read
            raise ModelLoadFailed(f"model '{spec.name}': this GGUF does not declare rank pooling")
        self.max_length = n_ctx
        self.n_seq_max = int(self.llm.context_params.n_seq_max)
        vocab = llama_cpp.llama_model_get_vocab(self.llm.model)
        sep = llama_cpp.llama_vocab_sep(vocab)
        eos = llama_cpp.llama_vocab_eos(vocab)
        eos = sep if eos == llama_cpp.LLAMA_TOKEN_NULL else eos  # llama-server's fallback
        self.head = [llama_cpp.llama_vocab_bos(vocab)] if llama_cpp.llama_vocab_get_add_bos(vocab) else []
        self.tail = [eos] if llama_cpp.llama_vocab_get_add_eos(vocab) else []
        self.mid = self.tail + ([sep] if llama_cpp.llama_vocab_get_add_sep(vocab) else [])
        self.graph_path = str(path)
        self._batch = llama_cpp.llama_batch_init(n_ctx, 0, self.n_seq_max)

    def _ids(self, text: str) -> list[int]:
        return list(self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def prepare(self, query: str, docs: Sequence[str]) -> list[PairItem]:
        """Each pair within the context: the document is cut first, the query keeps at least
        half the room (the cross-encoders' "longest first" would cut a long query to nothing)."""
        q = self._ids(query)
        room = self.max_length - len(self.head) - len(self.mid) - len(self.tail)
        out = []
        for d in docs:
            dt = self._ids(d)
            qk = q[: max(room // 2, room - len(dt))]
            dk = dt[: max(0, room - len(qk))]
            out.append(PairItem([*self.head, *qk, *self.mid, *dk, *self.tail], len(qk) + len(dk) < len(q) + len(dt)))
        return out

    def run_batch(self, items: Sequence[PairItem]) -> list[float]:
        scores: list[float] = []
        i = 0
        while i < len(items):
            group: list[PairItem] = []
            n = 0
            while i < len(items) and len(group) < self.n_seq_max and n + len(items[i]) <= self.max_length:
                group.append(items[i])
                n += len(items[i])
                i += 1
            scores += self._decode(group)
        return scores

    def _decode(self, group: list[PairItem]) -> list[float]:
        lib, b, ctx = self._lib, self._batch, self.llm.ctx
        b.n_tokens = 0
        for s, item in enumerate(group):
            for pos, tok in enumerate(item.tokens):
                j = b.n_tokens
                b.token[j], b.pos[j], b.n_seq_id[j], b.logits[j] = tok, pos, 1, True
                b.seq_id[j][0] = s
                b.n_tokens += 1
        lib.llama_memory_clear(lib.llama_get_memory(ctx), True)  # each batch starts from an empty cache
        rc = lib.llama_decode(ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode failed ({rc})")
        return [float(lib.llama_get_embeddings_seq(ctx, s)[0]) for s in range(len(group))]

    def combine(self, outputs: list[Any], n_docs: int) -> list[float]:
        return outputs

    def close(self) -> None:
        self._lib.llama_batch_free(self._batch)
        self.llm.close()


def load_reranker(spec: ModelSpec, opts: RuntimeOptions = RuntimeOptions()) -> GgufReranker:
    return GgufReranker(spec, opts)
