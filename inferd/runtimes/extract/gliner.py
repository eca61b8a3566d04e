"""GLiNER span models exported to ONNX (gliner's own `export_to_onnx`): zero-shot entities for
any labels, and relations by GLiNER's multitask recipe.

What gliner does, reproduced on onnxruntime + tokenizers (tests compare with gliner itself):
- the text is split into words by `\\w+(?:[-_]\\w+)*|\\S` (its whitespace splitter), each with
  its character span;
- the encoder reads `<<ENT>> label1 <<ENT>> label2 ... <<SEP>> word1 word2 ...` as pre-split
  words; `words_mask` gives the first sub-token of each text word its 1-based word number;
- the graph scores every span of up to `max_width` words against every label: logits
  [batch, words, width, labels]; sigmoid > threshold are candidates;
- a greedy search keeps the best candidates that do not overlap (flat_ner), or that nest
  (nested, multi-label: one span may carry several labels).
Long texts run as windows of at most `max_len` words that also fit the encoder; windows
overlap, and their candidates are merged (same span and label: best score) before the one
greedy search, so entities are found in the whole text, in character offsets of the original.

Relations (GLiNER multitask): for each relation type and each distinct entity text, the label
"<entity text> <> <relation>" is looked for in "<prompt> \\n <text>" among the entities' spans
(gliner's `input_spans`); an entity found for it is the relation's target, the labelled one
its source.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferd.errors import InvalidInput, ModelLoadFailed, PayloadTooLarge
from inferd.extraction_types import Entity, ExtractOptions, Relation, RelationSpec
from inferd.runtimes.common.spans import Piece, greedy_spans, sigmoid

WORD = re.compile(r"\w+(?:[-_]\w+)*|\S")
REL_PROMPT = "Extract relationships between entities from the text: "  # gliner.multitask's prompt
REL_SEP = " \n "
# Relation labels are entity texts x relation types; past this many, one input would cost
# hundreds of forward passes.
MAX_RELATION_LABELS = 512
# Distinct (span, label) candidates above the threshold kept for one text: each costs ~150
# bytes, and a low threshold on a long text with many labels would ask for millions.
MAX_SPAN_CANDIDATES = 500_000


@dataclass
class _Window:
    ids: np.ndarray           # token ids of prompt + window words, specials included
    words_mask: np.ndarray
    n_words: int
    word_map: np.ndarray      # the window's words, as indexes into the whole text's words
    n_labels: int
    label_offset: int         # this group's first label, as an index into all labels


def split_words(text: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in WORD.finditer(text)]


class GlinerExtractor:
    """capabilities: entities, zero_shot (+ relations when the manifest says so)."""

    zero_shot = True

    def __init__(self, folder: Path, manifest: dict[str, Any], session: Any, name: str):
        from tokenizers import Tokenizer

        self.name, self.session, self.manifest = name, session, manifest
        cfg_path = folder / "gliner_config.json"
        try:
            cfg = json.loads(cfg_path.read_text())
        except (OSError, ValueError) as e:
            raise ModelLoadFailed(f"{cfg_path}: unreadable ({e})") from e
        if cfg.get("span_mode") == "token_level" or cfg.get("labels_encoder") or cfg.get("labels_decoder") \
                or cfg.get("relations_layer"):
            raise ModelLoadFailed("only uni-encoder span GLiNER models are served (this one is token-level, "
                                  "bi-encoder, decoder or relex)")
        if cfg.get("words_splitter_type", "whitespace") != "whitespace":
            raise ModelLoadFailed(f"words splitter {cfg['words_splitter_type']!r} is not supported (whitespace only)")
        if cfg.get("subtoken_pooling", "first") != "first":
            raise ModelLoadFailed(f"subtoken pooling {cfg['subtoken_pooling']!r} is not supported (first only)")
        self.max_width = int(cfg.get("max_width", 12))
        self.max_words = int(manifest.get("max_words") or cfg.get("max_len", 384))
        enc_cfg = cfg.get("encoder_config") or {}
        self.max_tokens = int(manifest.get("max_length") or min(int(enc_cfg.get("max_position_embeddings", 512)), 512))
        tok = folder / str(manifest.get("tokenizer", "tokenizer.json"))
        if not tok.is_file():
            raise ModelLoadFailed(f"{folder}: no tokenizer.json")
        self.tok = Tokenizer.from_file(str(tok))
        self.tok.no_truncation()
        self.tok.no_padding()
        self.ent, self.sep = cfg.get("ent_token", "<<ENT>>"), cfg.get("sep_token", "<<SEP>>")
        for t in (self.ent, self.sep):
            if self.tok.token_to_id(t) is None:
                raise ModelLoadFailed(f"the tokenizer lacks GLiNER's {t} token")
        self.pad_id = next((i for t in ("[PAD]", "<pad>") if (i := self.tok.token_to_id(t)) is not None), 0)
        self.max_batch_tokens: int | None = None  # the server's budget applies
        caps = {"entities", "zero_shot"}
        if "relations" in (manifest.get("capabilities") or []):
            caps.add("relations")
        self.capabilities = frozenset(caps)

    # ---- entities ------------------------------------------------------------------------------
    def match_labels(self, labels: Sequence[str]) -> list[str]:
        return list(labels)  # zero-shot: any label

    def _windows(self, words: list[str], labels: list[str], lead: int = 0) -> list[Piece]:
        """Pieces for all label groups x word windows of one text. The first `lead` words (the
        relation prompt) begin every window, so each window reads the instruction."""
        pieces: list[Piece] = []
        if len(words) <= lead:
            return pieces
        n_specials = self.tok.num_special_tokens_to_add(False)
        word_tokens = [len(e.ids) for e in self.tok.encode_batch(words, add_special_tokens=False)]
        lead_tokens = sum(word_tokens[:lead])
        # Room the text keeps beside the labels: all of it when short, else a quarter window.
        text_room = min(sum(word_tokens[lead:]), self.max_tokens // 4)
        for g, group in self._label_groups(labels, reserve=n_specials + lead_tokens + text_room):
            prompt = [x for lab in group for x in (self.ent, lab)] + [self.sep]
            prompt_tokens = len(self.tok.encode(prompt, is_pretokenized=True, add_special_tokens=False).ids)
            budget = max(1, self.max_tokens - prompt_tokens - n_specials - lead_tokens)
            room = max(1, self.max_words - lead)
            start = lead
            while True:
                end, used = start, 0
                while end < len(words) and end - start < room and (used + word_tokens[end] <= budget or end == start):
                    used += word_tokens[end]
                    end += 1
                pieces.append(self._piece(prompt, words, lead, start, end, len(group), g))
                if end >= len(words):
                    break
                # Overlap by a quarter window (at least max_width words): an entity cut by one
                # window's edge lies whole inside the next.
                overlap = min(max(self.max_width, (end - start) // 4), end - start - 1)
                start = max(start + 1, end - overlap)
        return pieces

    def _label_groups(self, labels: list[str], reserve: int = 0) -> list[tuple[int, list[str]]]:
        """All labels in one prompt, as gliner does, unless the prompt and `reserve` tokens
        (specials, a lead-in, room for text) overflow the encoder's window: then consecutive
        groups, each with its own passes."""
        sizes = [len(e.ids) for e in self.tok.encode_batch([[self.ent, lab] for lab in labels], is_pretokenized=True,
                                                            add_special_tokens=False)]
        groups: list[tuple[int, list[str]]] = []
        start, used = 0, 1  # 1: the <<SEP>> token
        for i, n in enumerate(sizes):
            if i > start and used + n > self.max_tokens - reserve:
                groups.append((start, labels[start:i]))
                start, used = i, 1
            used += n
        groups.append((start, labels[start:]))
        return groups

    def _piece(self, prompt: list[str], words: list[str], lead: int, a: int, b: int, n_labels: int,
               g: int) -> Piece:
        enc = self.tok.encode(prompt + words[:lead] + words[a:b], is_pretokenized=True)
        mask, prev, seen = [], None, 0
        for wid in enc.word_ids:
            if wid is None:
                mask.append(0)
            else:
                first = wid != prev
                seen += first
                mask.append(seen - len(prompt) if first and seen > len(prompt) else 0)
            prev = wid
        if len(enc.ids) > self.max_tokens:
            raise InvalidInput(f"a label prompt does not fit model '{self.name}''s window of {self.max_tokens} "
                               "tokens with any text: use shorter labels (or fewer entity texts for relations)",
                               "schema")
        ids = np.asarray(enc.ids, dtype=np.int64)
        word_map = np.concatenate([np.arange(lead), np.arange(a, b)]).astype(np.int64)
        w = _Window(ids, np.asarray(mask, dtype=np.int64), len(word_map), word_map, n_labels, g)
        return Piece(w, cost=len(ids), tokens=len(ids))

    def prepare_entities(self, text: str, labels: list[str], options: ExtractOptions) -> list[Piece]:
        words = [text[s:e] for s, e in split_words(text)]
        return self._windows(words, labels)

    def run_batch(self, pieces: Sequence[Piece]) -> list[np.ndarray]:
        ws: list[_Window] = [p.data for p in pieces]
        B, S = len(ws), max(len(w.ids) for w in ws)
        L, K = max(w.n_words for w in ws), self.max_width
        ids = np.full((B, S), self.pad_id, dtype=np.int64)
        att = np.zeros((B, S), dtype=np.int64)
        wm = np.zeros((B, S), dtype=np.int64)
        span_idx = np.zeros((B, L * K, 2), dtype=np.int64)
        span_mask = np.zeros((B, L * K), dtype=bool)
        starts = np.repeat(np.arange(L), K)
        ends = starts + np.tile(np.arange(K), L)
        for i, w in enumerate(ws):
            ids[i, :len(w.ids)], att[i, :len(w.ids)], wm[i, :len(w.ids)] = w.ids, 1, w.words_mask
            n = w.n_words * K
            span_idx[i, :n, 0], span_idx[i, :n, 1] = starts[:n], ends[:n]
            span_mask[i, :n] = ends[:n] <= w.n_words - 1
        lengths = np.asarray([[w.n_words] for w in ws], dtype=np.int64)
        (logits,) = self.session.run(["logits"], {"input_ids": ids, "attention_mask": att, "words_mask": wm,
                                                  "text_lengths": lengths, "span_idx": span_idx,
                                                  "span_mask": span_mask})
        return [np.array(logits[i, :w.n_words, :, :w.n_labels]) for i, w in enumerate(ws)]

    def _spans(self, pieces: Sequence[Piece], outs: Sequence[np.ndarray], threshold: float, flat: bool,
               multi_label: bool, allowed: set[tuple[int, int]] | None = None) -> list[tuple[int, int, int, float]]:
        """Candidates of every window and label group, in text words and global label
        indexes, merged (best score per span and label), then the greedy search."""
        best: dict[tuple[int, int, int], float] = {}
        for p, logits in zip(pieces, outs):
            w: _Window = p.data
            probs = sigmoid(logits.astype(np.float64))
            for s, k, c in zip(*np.nonzero(probs > threshold)):
                if s + k + 1 > w.n_words:
                    continue
                a, b = int(w.word_map[s]), int(w.word_map[s + k])
                if b - a != k:
                    continue  # a span across the lead-in's end in a later window: not a span of the text
                key = (a, b, w.label_offset + int(c))
                if allowed is not None and key[:2] not in allowed:
                    continue
                score = float(probs[s, k, c])
                if score > best.get(key, -1.0):
                    best[key] = score
            if len(best) > MAX_SPAN_CANDIDATES:
                raise PayloadTooLarge(f"more than {MAX_SPAN_CANDIDATES} candidate spans score above "
                                      f"options.threshold ({threshold}) in one input: raise the threshold, "
                                      "or send shorter texts or fewer labels")
        cands = [(s, e, c, sc) for (s, e, c), sc in best.items()]
        cands.sort(key=lambda x: (x[0], x[1] - x[0], x[2]))  # gliner's candidate order: start, width, label
        return greedy_spans(cands, flat, multi_label)

    def entities(self, text: str, labels: list[str], options: ExtractOptions, pieces: Sequence[Piece],
                 outs: Sequence[np.ndarray]) -> list[Entity]:
        words = split_words(text)
        flat = options.flat_ner
        out = []
        for s, e, c, score in self._spans(pieces, outs, options.threshold, flat, multi_label=not flat):
            a, b = words[s][0], words[e][1]
            out.append(Entity(labels[c], text[a:b], a, b, score))
        return out

    # ---- relations (multitask recipe) --------------------------------------------------------------
    def _relation_labels(self, entities: list[Entity], relations: Sequence[RelationSpec]) -> list[tuple[str, str]]:
        texts = list(dict.fromkeys(e.text for e in entities))
        return [(t, r.type) for r in relations for t in texts]

    def prepare_relations(self, text: str, entities: list[Entity], relations: Sequence[RelationSpec],
                          options: ExtractOptions) -> list[Piece]:
        pairs = self._relation_labels(entities, relations)
        if not pairs:
            return []
        if len(pairs) > MAX_RELATION_LABELS:
            raise PayloadTooLarge(f"relations: {len(pairs)} (entity text, relation type) pairs in one input; the "
                                  f"limit is {MAX_RELATION_LABELS} (ask for fewer entity labels or relation types)")
        prompt = REL_PROMPT + REL_SEP + text
        words = [prompt[s:e] for s, e in split_words(prompt)]
        return self._windows(words, [f"{t} <> {r}" for t, r in pairs], lead=len(split_words(REL_PROMPT + REL_SEP)))

    def relations(self, text: str, entities: list[Entity], relations: Sequence[RelationSpec],
                  options: ExtractOptions, pieces: Sequence[Piece], outs: Sequence[np.ndarray]) -> list[Relation]:
        pairs = self._relation_labels(entities, relations)
        if not pairs:
            return []
        by_type = {r.type: r for r in relations}
        prompt = REL_PROMPT + REL_SEP + text
        words = split_words(prompt)
        shift = len(REL_PROMPT) + len(REL_SEP)
        found: list[Relation] = []
        starts = {a: i for i, (a, _) in enumerate(words)}
        ends = {b: i for i, (_, b) in enumerate(words)}
        allowed = {(starts[x.start + shift], ends[x.end + shift]) for x in entities
                   if x.start + shift in starts and x.end + shift in ends}
        for s, e, c, score in self._spans(pieces, outs, options.threshold, True, False, allowed):
            a, b = words[s][0] - shift, words[e][1] - shift
            src_text, rel = pairs[c]
            spec = by_type[rel]
            src = next((i for i, x in enumerate(entities) if x.text == src_text
                        and (spec.source is None or x.label.lower() == spec.source.lower())), None)
            tgt = next((i for i, x in enumerate(entities) if (x.start, x.end) == (a, b)
                        and (spec.target is None or x.label.lower() == spec.target.lower())), None)
            if src is not None and tgt is not None and src != tgt:
                found.append(Relation(rel, src, tgt, score))
        return found

    def close(self) -> None:
        self.session = None
