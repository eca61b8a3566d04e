"""Text into sentences and clauses, before phonemisation. Pure functions.

espeak's espeak_TextToPhonemes drops punctuation (the library's clause terminator is not
exported by the build we load), yet a Piper voice was trained on phonemes with the
punctuation kept: a comma is a short pause, a question mark a rising end. So the text is cut
here at punctuation that ends a clause (followed by a space or the end of the text: "3.50"
and "e.g" stay whole), each clause is phonemised on its own and its mark is put back after
its phonemes, which is the phoneme string Piper's own phonemiser produces.

Sentences (ended by . ! ? or a blank line) are the unit of synthesis: each is synthesised
as one utterance, and a stream sends each as soon as it is ready."""

from __future__ import annotations

import re
from dataclasses import dataclass

# A clause ends at one of these followed by a space or the end; the marks are kept.
_CLAUSE_END = re.compile(r"([.!?,;:\u2026]+)(?=\s|$)|(\n\s*\n)")
_SENTENCE_MARKS = frozenset(".!?")
# The longest utterance synthesised at once, in characters (about 25 s of speech).
MAX_SENTENCE_CHARS = 400
# A full stop after these is not the end of a sentence ("Dr. Smith", "e.g. this").
_ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e",
                            "mt", "ft", "approx", "dept", "inc", "ltd", "co", "jan", "feb", "mar", "apr", "jun",
                            "jul", "aug", "sep", "sept", "oct", "nov", "dec"})


@dataclass(frozen=True)
class Clause:
    text: str     # words, without the closing mark
    mark: str     # the closing punctuation as Piper writes it after the phonemes ("", ".", ", ", "?")


def _mark(raw: str) -> str:
    """The one mark a run of punctuation stands for: an ellipsis is a pause inside the
    sentence (", "), "?!" its first sentence mark ("?"), else its first mark; clause marks are
    followed by a space as in Piper's phoneme strings."""
    if raw.startswith("..") or raw.startswith("\u2026"):
        return ", "
    for c in raw:
        if c in _SENTENCE_MARKS:
            return c
    return raw[0] + " "


def sentences(text: str) -> list[list[Clause]]:
    """The text as sentences, each a list of clauses (empty clauses dropped)."""
    out: list[list[Clause]] = []
    cur: list[Clause] = []
    pos = 0
    for m in _CLAUSE_END.finditer(text):
        words = " ".join(text[pos:m.start()].split())
        if m.group(2):  # a blank line: the paragraph ends the sentence
            mark = "."
        else:
            mark = _mark(m.group(1))
            last = words.rsplit(" ", 1)[-1].lower()
            if m.group(1) == "." and last in _ABBREVIATIONS:
                continue  # "Dr. Smith": the clause runs on, the dot stays with its word
        pos = m.end()
        if words:
            cur.append(Clause(words, mark))
        elif cur and mark in _SENTENCE_MARKS:  # a mark after a clause's own ("well, ."): it ends the sentence
            cur[-1] = Clause(cur[-1].text, mark)
        if mark in _SENTENCE_MARKS and cur:
            out.append(cur)
            cur = []
    rest = " ".join(text[pos:].split())
    if rest:
        cur.append(Clause(rest, ""))
    if cur:
        out.append(cur)
    return [part for s in out for part in _bounded(s)]


def _bounded(sentence: list[Clause]) -> list[list[Clause]]:
    """A sentence longer than MAX_SENTENCE_CHARS cut at its clauses, and a clause longer than
    that cut at spaces: synthesis time and memory grow with the utterance, and a stream's
    first audio waits for its whole first sentence."""
    clauses = [piece for c in sentence for piece in _split_clause(c)]
    out: list[list[Clause]] = [[]]
    size = 0
    for c in clauses:
        if out[-1] and size + len(c.text) > MAX_SENTENCE_CHARS:
            out.append([])
            size = 0
        out[-1].append(c)
        size += len(c.text) + 1
    return out


def _split_clause(c: Clause) -> list[Clause]:
    if len(c.text) <= MAX_SENTENCE_CHARS:
        return [c]
    pieces, cur = [], ""
    words = [w[i:i + MAX_SENTENCE_CHARS] for w in c.text.split(" ") for i in range(0, len(w), MAX_SENTENCE_CHARS)]
    for word in words:
        if cur and len(cur) + 1 + len(word) > MAX_SENTENCE_CHARS:
            pieces.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}" if cur else word
    pieces.append(cur)
    return [Clause(p, ", ") for p in pieces[:-1]] + [Clause(pieces[-1], c.mark)]
