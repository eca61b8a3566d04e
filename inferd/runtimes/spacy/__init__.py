"""spaCy pipelines (a folder with meta.json + config.cfg) as entity extractors: entities with
spaCy's own labels, exactly as `nlp(text).ents` gives them (spaCy has no scores: 1.0).

A batch of texts runs through `nlp.pipe` on the model's worker thread; spaCy is never called
from two threads at once. Components that entities do not depend on (tagger, parser,
lemmatizer, and a tok2vec that only they listen to) are disabled: same entities, less work
(en_core_web_sm: about 1.7x the texts per second)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from inferd.errors import ModelLoadFailed
from inferd.extraction_types import Entity, ExtractOptions
from inferd.runtimes.common.spans import Piece, match_labels


class SpacyExtractor:
    zero_shot = False
    capabilities = frozenset({"entities"})

    def __init__(self, folder: Path, name: str):
        try:
            import spacy
        except ImportError as e:
            raise ModelLoadFailed("spaCy is not installed (pip install 'inferd[models]')") from e
        try:
            self.nlp: Any = spacy.load(folder)
        except Exception as e:  # spaCy raises its own types for bad or incompatible pipelines
            raise ModelLoadFailed(f"spaCy could not load {folder}: {e}") from e
        if "ner" not in self.nlp.pipe_names:
            raise ModelLoadFailed(f"the spaCy pipeline at {folder} has no 'ner' component")
        self._only_what_ner_needs()
        self.name = name
        self.labels = list(getattr(self.nlp.get_pipe("ner"), "labels", ()))
        self.max_batch_tokens: int | None = None  # the server's budget applies

    def _only_what_ner_needs(self) -> None:
        keep = {"ner"}
        for name, comp in self.nlp.pipeline:
            if "ner" in (getattr(comp, "listening_components", None) or ()):
                keep.add(name)  # a shared tok2vec / transformer the NER reads
            if self.nlp.get_pipe_meta(name).factory in ("entity_ruler", "span_ruler", "entity_linker"):
                keep.add(name)  # these change doc.ents themselves
        for name in list(self.nlp.pipe_names):
            if name not in keep:
                self.nlp.disable_pipe(name)

    def match_labels(self, labels: Sequence[str]) -> list[str]:
        return match_labels(labels, self.labels, "entity", self.name, "schema.entities")

    def prepare_entities(self, text: str, labels: list[str], options: ExtractOptions) -> list[Piece]:
        # spaCy's own tokenizer runs in the batch; a cost of ~4 characters a token is enough
        # for the batcher to group texts of similar length.
        return [Piece(text, cost=max(1, len(text) // 4), tokens=0)]

    def run_batch(self, pieces: Sequence[Piece]) -> list[list[tuple[str, int, int]]]:
        out = []
        for p, doc in zip(pieces, self.nlp.pipe([p.data for p in pieces], batch_size=max(1, len(pieces)))):
            p.tokens = len(doc)
            out.append([(e.label_, e.start_char, e.end_char) for e in doc.ents])
        return out

    def entities(self, text: str, labels: list[str], options: ExtractOptions, pieces: Sequence[Piece],
                 outs: Sequence[Any]) -> list[Entity]:
        want = set(labels)
        return [Entity(lab, text[a:b], a, b, 1.0) for lab, a, b in outs[0] if lab in want]

    def close(self) -> None:
        self.nlp = None
