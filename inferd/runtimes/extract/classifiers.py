"""ONNX BERT-style heads for extraction: token classifiers (NER with BIO/BILOU tags) and
sequence classifiers (fixed labels, or zero-shot through NLI entailment).

Token classification aggregates as Hugging Face's pipeline does with
`aggregation_strategy="simple"`: each token takes its best label and that label's
probability; consecutive tokens of one entity type form an entity unless a token begins a new
one (B-, and for BILOU also U-/S-); the entity's score is the mean of its tokens' scores.
Long texts run in overlapping windows; each token's scores come from the window where it sits
farthest from an edge.

Zero-shot classification follows the Hugging Face recipe: one (text, "This example is
{label}.") pair per label; single-label: softmax of the entailment logits over the labels;
multi-label (or one label): softmax of [contradiction, entailment] per label."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from inferd.errors import InvalidInput, ModelLoadFailed
from inferd.extraction_types import Entity, ExtractOptions
from inferd.runtimes.common.spans import Piece, match_labels, sigmoid, softmax
from inferd.runtimes.onnx.tokenize import Encoded, TextTokenizer, pad

_BEGIN = ("B-", "U-", "S-")
_INSIDE = ("I-", "L-", "E-")


def split_tag(tag: str) -> tuple[str, str]:
    """-> (B|I, entity type). Tags without a prefix continue (Hugging Face's rule)."""
    for p in _BEGIN:
        if tag.startswith(p):
            return "B", tag[2:]
    for p in _INSIDE:
        if tag.startswith(p):
            return "I", tag[2:]
    return "I", tag


def _id2label(config: dict[str, Any]) -> dict[int, str]:
    labels = {int(k): str(v) for k, v in (config.get("id2label") or {}).items()}
    if not labels:
        raise ModelLoadFailed("config.json has no id2label")
    return labels


class _Head:
    def __init__(self, name: str, session: Any, tokenizer: TextTokenizer, config: dict[str, Any],
                 manifest: dict[str, Any]):
        self.name, self.session, self.tokenizer, self.config, self.manifest = name, session, tokenizer, config, manifest
        self.id2label = _id2label(config)
        outs = session.outputs
        self.output = str(manifest.get("output") or ("logits" if "logits" in outs else next(iter(outs))))
        self.max_batch_tokens: int | None = None  # the server's budget applies

    def _forward(self, encs: Sequence[Encoded]) -> tuple[np.ndarray, np.ndarray]:
        ids, mask, types = pad(encs, self.tokenizer.pad_id)
        return self.session.run(ids, mask, types, [self.output])[self.output], mask

    def close(self) -> None:
        self.session = None


class TokenClassifierExtractor(_Head):
    """Entities with the model's fixed labels."""

    zero_shot = False
    capabilities = frozenset({"entities"})

    def __init__(self, *a: Any, **kw: Any):
        super().__init__(*a, **kw)
        self.types = list(dict.fromkeys(split_tag(t)[1] for t in self.id2label.values()
                                        if t.upper() not in ("O", "OUTSIDE")))

    def match_labels(self, labels: Sequence[str]) -> list[str]:
        return match_labels(labels, self.types, "entity", self.name, "schema.entities")

    def prepare_entities(self, text: str, labels: list[str], options: ExtractOptions) -> list[Piece]:
        ids, offsets = self.tokenizer.encode_untruncated(text)
        pre, suf = self.tokenizer.prefix, self.tokenizer.suffix
        room = max(2, self.tokenizer.max_length - len(pre) - len(suf))
        step = max(1, room - room // 4)
        pieces, a = [], 0
        while True:
            body = tuple(ids[a:a + room])
            full = pre + body + suf
            pieces.append(Piece((Encoded(full, (0,) * len(full)), a, len(body)), cost=len(full), tokens=len(full)))
            if a + room >= len(ids):
                break
            a += step
        return pieces

    def run_batch(self, pieces: Sequence[Piece]) -> list[np.ndarray]:
        logits, _ = self._forward([p.data[0] for p in pieces])
        n_pre = len(self.tokenizer.prefix)
        return [softmax(logits[i, n_pre:n_pre + p.data[2]].astype(np.float64)) for i, p in enumerate(pieces)]

    def entities(self, text: str, labels: list[str], options: ExtractOptions, pieces: Sequence[Piece],
                 outs: Sequence[np.ndarray]) -> list[Entity]:
        _, offsets = self.tokenizer.encode_untruncated(text)
        n = len(offsets)
        probs = np.zeros((n, len(self.id2label)))
        best = np.full(n, -1)
        for p, pr in zip(pieces, outs):
            a, k = p.data[1], p.data[2]
            for j in range(k):
                centrality = min(j, k - 1 - j)
                if centrality > best[a + j]:
                    best[a + j], probs[a + j] = centrality, pr[j]
        want = {lab.lower(): lab for lab in labels}
        out: list[Entity] = []
        group: list[tuple[int, str, float]] = []  # (token, tag, score)

        def flush() -> None:
            if not group:
                return
            etype = split_tag(group[0][1])[1]
            if group[0][1].upper() not in ("O", "OUTSIDE") and etype.lower() in want:
                a, b = offsets[group[0][0]][0], offsets[group[-1][0]][1]
                out.append(Entity(want[etype.lower()], text[a:b], a, b, float(np.mean([g[2] for g in group]))))

        for t in range(n):
            c = int(probs[t].argmax())
            tag, score = self.id2label[c], float(probs[t, c])
            if group:
                bi, etype = split_tag(tag)
                if not (etype == split_tag(group[-1][1])[1] and bi != "B"):
                    flush()
                    group = []
            group.append((t, tag, score))
        flush()
        return [e for e in out if e.score >= options.threshold] if options.threshold > 0 else out


class SequenceClassifier(_Head):
    """Fixed labels (softmax, or sigmoid for multi-label) or zero-shot NLI."""

    capabilities = frozenset({"classifications"})

    def __init__(self, *a: Any, **kw: Any):
        super().__init__(*a, **kw)
        label2id = {v: k for k, v in self.id2label.items()}
        self.entail = next((i for lab, i in label2id.items() if lab.lower().startswith("entail")), None)
        self.zero_shot = self.entail is not None and not self.manifest.get("fixed_labels")
        if self.zero_shot:
            self.capabilities = frozenset({"classifications", "zero_shot"})
            self.contra: int = next((i for lab, i in label2id.items() if lab.lower().startswith("contra")),
                                    -1 if self.entail == 0 else 0)
        self.template = str(self.manifest.get("hypothesis_template", "This example is {}."))
        self.labels = [self.id2label[i] for i in sorted(self.id2label)]

    def match_classes(self, c: Any) -> list[str]:
        param = "schema.classifications"
        if self.zero_shot:
            if not c.labels:
                raise InvalidInput(f"classification '{c.name}' needs labels: '{self.name}' is a zero-shot "
                                   "classifier", param)
            return list(c.labels)
        return match_labels(c.labels, self.labels, "class", self.name, param) if c.labels else list(self.labels)

    def prepare_classify(self, text: str, labels: list[str]) -> list[Piece]:
        if self.zero_shot:
            encs = self.tokenizer.encode_pairs([text] * len(labels), [self.template.format(lab) for lab in labels])
        else:
            encs = self.tokenizer.encode([text])
        return [Piece(e, cost=len(e), tokens=len(e)) for e in encs]

    def run_batch(self, pieces: Sequence[Piece]) -> list[np.ndarray]:
        logits, _ = self._forward([p.data for p in pieces])
        return [np.asarray(row, dtype=np.float64) for row in logits.reshape(len(pieces), -1)]

    def scores(self, labels: list[str], multi_label: bool, outs: Sequence[np.ndarray]) -> list[float]:
        if self.zero_shot:
            rows = np.stack(outs)
            entail, contra = int(self.entail or 0), int(self.contra or 0)  # both set for zero-shot models
            if multi_label or len(labels) == 1:
                return softmax(rows[:, np.array([contra, entail])])[:, 1].tolist()
            return softmax(rows[:, entail]).tolist()
        row = outs[0]
        probs = sigmoid(row) if multi_label else softmax(row)
        index = {v: k for k, v in self.id2label.items()}
        return [float(probs[index[lab]]) for lab in labels]
