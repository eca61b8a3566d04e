"""ONNX encoder runtimes: embedders (dense, sparse), rerankers (cross-encoder, late
interaction) and token classifiers (model-based chunkers).

Each runtime prepares inputs on the caller's thread (`prepare_*`: tokenization, cheap) and
runs padded batches on its batcher's worker thread (`run_batch`: the forward pass)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferd.errors import ModelLoadFailed
from inferd.models import ModelSpec
from inferd.runtimes.onnx.files import ModelFiles
from inferd.runtimes.onnx.graphs import SPLADE_OUTPUT
from inferd.runtimes.common.prefixes import prefixes_of, task_prefix
from inferd.runtimes.common.pooling import POOLINGS, l2_normalize, maxsim, pool, top_k_sparse
from inferd.runtimes.onnx.session import OnnxSession
from inferd.runtimes.onnx.tokenize import Encoded, TextTokenizer, pad

log = logging.getLogger("inferd.runtimes.onnx")

# A shard of a batch runs as its own concurrent Session.run; below these sizes one more
# shard costs more (a thread hand-off, a smaller matrix product) than it wins.
SHARD_MIN_TOKENS = 192   # padded tokens of one shard
SHARD_MIN_ITEMS = 4


def shards(lengths: Sequence[int], most: int) -> list[slice]:
    """Contiguous slices of a batch (in its order: the batcher sorts by length, so each slice
    pads to its own longest), at most `most` of them, of about equal tokens, each of at
    least SHARD_MIN_ITEMS items and about SHARD_MIN_TOKENS padded tokens or more. Pure."""
    n = len(lengths)
    if n == 0:
        return []
    padded = n * max(lengths)
    k = max(1, min(most, n // SHARD_MIN_ITEMS, padded // SHARD_MIN_TOKENS))
    if k == 1:
        return [slice(0, n)]
    total = sum(lengths)
    cuts, acc, j = [0], 0, 1
    for i, x in enumerate(lengths):
        acc += x
        # cut after item i once the running token sum reaches j/k of the whole
        if j < k and acc * k >= j * total and i + 1 - cuts[-1] >= SHARD_MIN_ITEMS and n - (i + 1) >= SHARD_MIN_ITEMS:
            cuts.append(i + 1)
            j += 1
    cuts.append(n)
    return [slice(a, b) for a, b in zip(cuts, cuts[1:])]


class OnnxEncoder:
    """Shared parts: tokenizer, session, close(). `max_batch_tokens` is a cap this model needs
    on top of the server's batch budget (None: no cap of its own); the composition root wraps
    the encoder in a dynamic batcher with it (inferd/service/loading.py).

    `parallel`: how many shards of one batch may run at once (the loader sets it to the
    runtime's threads). A large batch is cut into shards (`shards`) that run as concurrent
    `Session.run` calls on the one session (onnxruntime allows it; the weights are shared),
    each its own pass over part of the batch, instead of one pass whose every operator is
    split across the threads. On a CPU shared with the HTTP server (the event loop, the
    clients) a split operator waits for its slowest thread, and one descheduled thread stalls
    the whole pass; concurrent shards only slow down the shard that lost its core
    (bench/embeddings.py: 8-20% more requests/s from 32 one-sentence clients on 2 shared cores). Small
    batches, where latency is what counts, stay one pass over all threads."""

    max_batch_tokens: int | None = None
    parallel: int = 1

    def __init__(self, spec: ModelSpec, files: ModelFiles, session: OnnxSession, tokenizer: TextTokenizer):
        self.spec, self.files, self.session, self.tokenizer = spec, files, session, tokenizer
        self.manifest = files.manifest
        self.max_length = tokenizer.max_length
        self.graph_path = str(files.graph or files.safetensors)
        self._pool: ThreadPoolExecutor | None = None

    def forward(self, encs: Sequence[Encoded], output: str) -> tuple[np.ndarray, np.ndarray]:
        ids, mask, types = pad(encs, self.tokenizer.pad_id)
        return self.session.run(ids, mask, types, [output])[output], mask

    def run_batch(self, encs: Sequence[Encoded]) -> list[Any]:
        """One result per input, in order: the batch in one pass, or in concurrent shards."""
        return self.sharded(encs, self.run_pass)

    def run_pass(self, encs: Sequence[Encoded]) -> list[Any]:
        raise NotImplementedError

    def sharded(self, encs: Sequence[Encoded], run: Callable[[Sequence[Encoded]], list[Any]]) -> list[Any]:
        parts = shards([len(e) for e in encs], self.parallel)
        if len(parts) <= 1:
            return run(encs)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.parallel - 1, thread_name_prefix=f"shard-{self.spec.name}")
        futs: list[Future[list[Any]]] = [self._pool.submit(run, encs[p]) for p in parts[1:]]
        try:
            out = list(run(encs[parts[0]]))  # the first shard on the calling (worker) thread
        finally:
            for f in futs:  # every shard has finished before the batch answers, even on failure
                f.exception()
        for f in futs:
            out.extend(f.result())
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self.session = None  # type: ignore[assignment]  # frees the onnxruntime session


class Embedder(OnnxEncoder):
    """Dense (pooled, L2-normalised) or sparse (SPLADE) text embeddings."""

    def __init__(self, spec: ModelSpec, files: ModelFiles, session: OnnxSession, tokenizer: TextTokenizer):
        super().__init__(spec, files, session, tokenizer)
        self.sparse = "sparse" in spec.capabilities
        self.prefixes = prefixes_of(self.manifest)
        self.normalize = bool(self.manifest.get("normalize", True))
        self.top_k = int(self.manifest.get("top_k", 256))
        outs = session.outputs
        if self.sparse:
            if SPLADE_OUTPUT not in outs:
                raise ModelLoadFailed("sparse model graph lacks the SPLADE head")
            self.output, self.pooling = SPLADE_OUTPUT, "splade"
            self.dims = int(files.config.get("vocab_size") or tokenizer.vocab_size)
            return
        pooling = self.manifest.get("pooling")
        if pooling is not None and pooling not in POOLINGS:
            raise ModelLoadFailed(f"unknown pooling {pooling!r} (use one of {', '.join(POOLINGS)})")
        if self.manifest.get("output"):
            self.output = str(self.manifest["output"])
        elif "sentence_embedding" in outs and pooling is None:
            self.output = "sentence_embedding"  # the graph pools itself
        elif "last_hidden_state" in outs:
            self.output = "last_hidden_state"
        else:
            self.output = next(iter(outs))
        if self.output not in outs:
            raise ModelLoadFailed(f"graph has no output {self.output!r} (outputs: {sorted(outs)})")
        self.pooled = len(outs[self.output]) == 2
        self.pooling = "graph" if self.pooled else (pooling or "mean")
        probe = self.run_batch(tokenizer.encode(["probe"]))[0]  # also warms the session up
        self.dims = int(probe.shape[-1])

    def prefix(self, task: str | None) -> str:
        return task_prefix(self.prefixes, task)

    def prepare(self, texts: Sequence[str], task: str | None = None) -> list[Encoded]:
        p = self.prefix(task)
        return self.tokenizer.encode([p + t for t in texts] if p else texts)

    def prepare_ids(self, ids: Sequence[int]) -> Encoded:
        return self.tokenizer.from_ids(ids)

    def run_pass(self, encs: Sequence[Encoded]) -> list[Any]:
        out, mask = self.forward(encs, self.output)
        if self.sparse:
            return [top_k_sparse(row, self.top_k) for row in out]
        vecs = out if self.pooled else pool(out, mask, self.pooling)
        vecs = l2_normalize(vecs) if self.normalize else vecs
        return list(vecs.astype(np.float32))


class CrossEncoder(OnnxEncoder):
    """Scores (query, document) pairs in one pass each; the score is the raw relevance logit
    (for a 2-label head, the logit of label 1 minus label 0)."""

    late_interaction = False

    def __init__(self, spec: ModelSpec, files: ModelFiles, session: OnnxSession, tokenizer: TextTokenizer):
        super().__init__(spec, files, session, tokenizer)
        self.output = str(self.manifest.get("output") or ("logits" if "logits" in session.outputs
                                                           else next(iter(session.outputs))))

    def prepare(self, query: str, docs: Sequence[str]) -> list[Encoded]:
        return self.tokenizer.encode_pairs([query] * len(docs), docs)

    def run_pass(self, encs: Sequence[Encoded]) -> list[Any]:
        logits, _ = self.forward(encs, self.output)
        logits = logits.reshape(len(encs), -1)
        scores = logits[:, 0] if logits.shape[1] == 1 else logits[:, 1] - logits[:, 0]
        return [float(s) for s in scores]

    def combine(self, outputs: list[Any], n_docs: int) -> list[float]:
        return outputs


class LateInteraction(OnnxEncoder):
    """ColBERT-style: token vectors for the query and each document (manifest prefixes such as
    "[Q] "/"[D] " apply), L2-normalised per token, scored by MaxSim."""

    late_interaction = True

    def __init__(self, spec: ModelSpec, files: ModelFiles, session: OnnxSession, tokenizer: TextTokenizer):
        super().__init__(spec, files, session, tokenizer)
        outs = session.outputs
        self.output = str(self.manifest.get("output") or ("last_hidden_state" if "last_hidden_state" in outs
                                                           else next(iter(outs))))
        if len(outs.get(self.output, ())) != 3:
            raise ModelLoadFailed(f"late-interaction output {self.output!r} must be [batch, seq, dim]")
        self.prefixes = prefixes_of(self.manifest)

    def prepare(self, query: str, docs: Sequence[str]) -> list[Encoded]:
        q, d = self.prefixes.get("query", ""), self.prefixes.get("document", "")
        return self.tokenizer.encode([q + query] + [d + x for x in docs])

    def run_pass(self, encs: Sequence[Encoded]) -> list[Any]:
        hidden, mask = self.forward(encs, self.output)
        return [l2_normalize(hidden[i, : int(mask[i].sum())]) for i in range(len(encs))]

    def combine(self, outputs: list[Any], n_docs: int) -> list[float]:
        q = outputs[0]
        return [maxsim(q, d) for d in outputs[1:]]


@dataclass
class Window:
    enc: Encoded
    offsets: list[tuple[int, int]]  # char span of each content token of the window


class TokenClassifier(OnnxEncoder):
    """Token classifier used as a chunker: the probability of the boundary label for each token
    says "a chunk ends after this token". Long texts run as several windows of max_length."""

    def __init__(self, spec: ModelSpec, files: ModelFiles, session: OnnxSession, tokenizer: TextTokenizer):
        super().__init__(spec, files, session, tokenizer)
        self.output = str(self.manifest.get("output") or ("logits" if "logits" in session.outputs
                                                           else next(iter(session.outputs))))
        self.boundary = self._boundary_label(files)

    def _boundary_label(self, files: ModelFiles) -> int:
        want = self.manifest.get("boundary_label")
        id2label = {int(k): str(v) for k, v in (files.config.get("id2label") or {}).items()}
        if isinstance(want, int):
            return want
        if isinstance(want, str):
            for i, name in id2label.items():
                if name == want:
                    return i
            raise ModelLoadFailed(f"boundary_label {want!r} is not among the labels {sorted(id2label.values())}")
        others = [i for i, n in id2label.items() if n.upper() not in ("O", "0", "LABEL_0", "NONE", "NO_SPLIT")]
        return others[0] if len(others) == 1 else 1

    def windows(self, text: str) -> list[Window]:
        ids, offsets = self.tokenizer.encode_untruncated(text)
        pre, suf = self.tokenizer.prefix, self.tokenizer.suffix
        room = max(1, self.max_length - len(pre) - len(suf))
        out = []
        for a in range(0, len(ids), room):
            body = tuple(ids[a:a + room])
            full = pre + body + suf
            out.append(Window(Encoded(full, (0,) * len(full)), offsets[a:a + room]))
        return out

    def run_pass(self, encs: Sequence[Encoded]) -> list[Any]:
        logits, mask = self.forward(encs, self.output)
        z = logits - logits.max(axis=-1, keepdims=True)
        probs = np.exp(z)
        probs = probs[..., self.boundary] / probs.sum(axis=-1)
        n_pre, n_suf = len(self.tokenizer.prefix), len(self.tokenizer.suffix)
        return [probs[i, n_pre: int(mask[i].sum()) - n_suf] for i in range(len(encs))]
