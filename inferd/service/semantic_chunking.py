"""The built-in `semantic` chunker: sentences embedded with a served dense embedder (through
the encoder service, so its windows share forward passes with other requests' inputs), a
cut where the windows either side of a gap diverge, chunks packed within min/max tokens.
The algorithm is pure and lives in text/semantic.py; this module only embeds."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np

from inferd.errors import InvalidInput, ModelNotSupported
from inferd.models import ModelKind, ModelSpec
from inferd.service.core import Catalog
from inferd.service.encoders import EncoderService
from inferd.text.chunking import Chunk, FixedConfig
from inferd.text.semantic import (SEMANTIC, SemanticConfig, adjacent_similarity, chunks_of, group_spans, plan, sentence_spans,
                                  span_tokens, window_spans)


def is_semantic(spec: ModelSpec) -> bool:
    return spec.format == "builtin" and spec.name == SEMANTIC


class SemanticChunker:
    def __init__(self, catalog: Catalog, encoders: EncoderService):
        self.catalog, self.encoders = catalog, encoders

    def config(self, spec: ModelSpec, cfg: SemanticConfig) -> SemanticConfig:
        """`cfg` checked (400) with its embedder resolved: a name that is not served is a 404,
        a model of another kind or a sparse embedder a 400, before any work (and never a
        fallback to fixed chunking). No name: the embedder the catalog chose at start-up."""
        cfg.check()
        name = cfg.embedder or spec.manifest.get("embedder")
        emb = self.catalog.resolve(name, ModelKind.EMBEDDER)
        if "dense" not in emb.capabilities:
            raise ModelNotSupported(f"embedder '{emb.name}' is not dense; semantic chunking compares dense "
                                    "sentence embeddings")
        return dataclasses.replace(cfg, embedder=emb.name)

    async def chunk(self, text: str, fixed: FixedConfig, cfg: SemanticConfig) -> list[Chunk]:
        """`cfg` from config() (embedder resolved). Admission: each embedding call takes its own."""
        assert cfg.embedder is not None
        units, tokens = await asyncio.to_thread(_units, text)
        n = len(units)
        sims = np.zeros(0)
        if n > 1:
            spans, lefts, rights = window_spans(units, cfg.window)
            vecs = await self._embed(cfg.embedder, [text[a:b] for a, b in spans])
            sims = adjacent_similarity(vecs[lefts], vecs[rights])
        return await asyncio.to_thread(lambda: chunks_of(text, units, plan(tokens, sims, cfg), cfg,
                                                         fixed.separator, fixed.max_chunks))

    async def _embed(self, model: str, texts: list[str]) -> np.ndarray:
        """Dense vectors of `texts`, in requests of at most the server's --max-batch-inputs."""
        step = max(1, self.encoders.max_inputs)
        rows: list[np.ndarray] = []
        for i in range(0, len(texts), step):
            res = await self.encoders.embed(model, texts[i:i + step])
            if res.sparse:  # config() refused sparse embedders; a changed model must not slip through
                raise InvalidInput(f"embedder '{model}' returned sparse vectors", "config.semantic.embedder")
            rows += [np.asarray(v, dtype=np.float32) for v in res.items]
        return np.stack(rows)


def _units(text: str) -> tuple[list[tuple[int, int]], list[int]]:
    units = group_spans(sentence_spans(text))
    return units, span_tokens(text, units)
