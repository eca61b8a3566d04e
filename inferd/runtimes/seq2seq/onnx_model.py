"""A seq2seq export on onnxruntime: one encoder pass for a batch of inputs, then decoder
steps over rows that share a KV cache (self-attention K/V grow by one position per step,
cross-attention K/V are computed once by the first step).

Input and output names are read from the graphs, not assumed: the decoder's token input
contains `input_ids`, the encoder mask input contains `mask`, the encoder states input
contains `hidden`; every other input is a past K/V whose output is the same name with `past`
(`past_key_values`) replaced by `present`. A past is self-attention when the with-past graph
outputs its present (it grows), cross-attention otherwise. The merged layout's
`use_cache_branch` picks the first-step or the with-past body of one graph."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from inferd.errors import ModelLoadFailed
from inferd.runtimes.seq2seq.files import Seq2SeqFiles

log = logging.getLogger("inferd.runtimes.seq2seq")

_NP = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(float)": np.float32,
       "tensor(float16)": np.float16, "tensor(bool)": np.bool_}
_CROSS = re.compile(r"(encoder|cross)", re.IGNORECASE)


def _session(path: Path, threads: int | None) -> ort.InferenceSession:
    from inferd.runtimes.onnx.session import open_session

    return open_session(path, threads)


def present_of(past: str) -> str:
    if past.startswith("past_key_values"):
        return "present" + past[len("past_key_values"):]
    return re.sub(r"^past", "present", past)


def _find(names: list[str], word: str, where: str, prefer: tuple[str, ...] = ()) -> str:
    """The input named like one of `prefer` (exactly), else the first containing `word`."""
    for p in prefer:
        if p in names:
            return p
    hits = [n for n in names if word in n.lower()]
    if not hits:
        raise ModelLoadFailed(f"{where} has no input containing '{word}' (inputs: {names})")
    return hits[0]


@dataclass
class Graph:
    sess: ort.InferenceSession
    ids: str
    mask: str
    hidden: str | None
    pasts: list[str]            # past inputs, in graph order
    logits: str
    types: dict[str, type]
    shapes: dict[str, list]
    outputs: list[str]


def _graph(path: Path, threads: int | None) -> Graph:
    sess = _session(path, threads)
    inputs = [i.name for i in sess.get_inputs()]
    types = {i.name: _NP.get(i.type, np.float32) for i in sess.get_inputs()}
    shapes = {i.name: list(i.shape) for i in sess.get_inputs()}
    ids = _find(inputs, "input_ids", path.name, ("decoder_input_ids", "input_ids"))
    mask = _find([n for n in inputs if n != ids and "decoder" not in n.lower()], "mask", path.name,
                 ("encoder_attention_mask", "attention_mask"))
    hidden = next((n for n in inputs if "hidden" in n.lower() or "encoder_output" in n.lower()), None)
    pasts = [n for n in inputs if n not in (ids, mask, hidden, "use_cache_branch")]
    outs = [o.name for o in sess.get_outputs()]
    logits = next((o for o in outs if "logits" in o.lower()), outs[0])
    return Graph(sess, ids, mask, hidden, pasts, logits, types, shapes, outs)


@dataclass
class DecoderState:
    """The KV cache of a set of decoder rows (row r of every array belongs together)."""

    self_kv: dict[str, np.ndarray]    # past input name -> [rows, heads, steps, dim]
    cross_kv: dict[str, np.ndarray]   # past input name -> [rows, heads, source, dim]
    mask: np.ndarray                  # encoder attention mask [rows, source]
    hidden: np.ndarray | None         # encoder states, kept only when a graph needs them each step

    @property
    def rows(self) -> int:
        return int(self.mask.shape[0])

    def take(self, rows: np.ndarray) -> "DecoderState":
        """Rows reordered (beam search) and dropped (finished or cancelled inputs)."""
        if len(rows) == self.rows and np.array_equal(rows, np.arange(self.rows)):
            return self
        t = lambda a: np.take(a, rows, axis=0)  # noqa: E731
        return DecoderState({k: t(v) for k, v in self.self_kv.items()}, {k: t(v) for k, v in self.cross_kv.items()},
                            t(self.mask), None if self.hidden is None else t(self.hidden))


class OnnxSeq2Seq:
    """encode() -> first() -> step()...; every call runs on the model's worker thread."""

    def __init__(self, files: Seq2SeqFiles, threads: int | None = None):
        self.files = files
        g = files.graphs
        self.encoder = _session(g["encoder"], threads)
        enc_inputs = [i.name for i in self.encoder.get_inputs()]
        self.enc_ids = _find(enc_inputs, "input_ids", g["encoder"].name)
        self.enc_mask = next((n for n in enc_inputs if "mask" in n.lower()), None)
        self.enc_types = {i.name: _NP.get(i.type, np.int64) for i in self.encoder.get_inputs()}
        self.merged = "merged" in g
        if self.merged:
            self.init = self.past = _graph(g["merged"], threads)
            if "use_cache_branch" not in self.init.types:
                raise ModelLoadFailed(f"{g['merged'].name} has no use_cache_branch input")
            self.self_names = [p for p in self.past.pasts if not _CROSS.search(p)]
        else:
            self.init, self.past = _graph(g["init"], threads), _graph(g["past"], threads)
            grown = set(self.past.outputs)
            self.self_names = [p for p in self.past.pasts if present_of(p) in grown]
        self.cross_names = [p for p in self.past.pasts if p not in self.self_names]
        missing = [p for p in self.past.pasts if present_of(p) not in self.init.outputs]
        if missing or not self.self_names or not self.cross_names:
            raise ModelLoadFailed(f"cannot pair the decoder's past inputs with the first step's outputs "
                                  f"(pasts {self.past.pasts}, outputs {self.init.outputs})")
        self.keep_hidden = self.past.hidden is not None
        self.graph_paths = {k: str(v) for k, v in g.items()}

    # ---- encoder -----------------------------------------------------------------------------
    def encode(self, inputs: list[tuple[int, ...]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
        """One pass for every input; padded positions are masked out of cross-attention."""
        width = max(len(x) for x in inputs)
        ids = np.full((len(inputs), width), pad_id, dtype=np.int64)
        mask = np.zeros((len(inputs), width), dtype=np.int64)
        for i, x in enumerate(inputs):
            ids[i, :len(x)] = x
            mask[i, :len(x)] = 1
        feed: dict[str, np.ndarray] = {self.enc_ids: ids.astype(self.enc_types[self.enc_ids])}
        if self.enc_mask:
            feed[self.enc_mask] = mask.astype(self.enc_types[self.enc_mask])
        hidden = self.encoder.run(None, feed)[0]
        return hidden, mask

    # ---- decoder -----------------------------------------------------------------------------
    def _empty_past(self, name: str, rows: int) -> np.ndarray:
        """A zero-length past for the merged graph's first step (its with-past body is not run)."""
        shape = self.past.shapes.get(name) or [None] * 4
        dims = [rows] + [d if isinstance(d, int) else 1 for d in shape[1:]]
        dims[2] = 0
        return np.zeros(dims, dtype=self.past.types.get(name, np.float32))

    def first(self, tokens: np.ndarray, hidden: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, DecoderState]:
        """The first decoder step of every row: the logits of the first generated token, and the
        cache (cross-attention K/V computed here, once)."""
        g = self.init
        feed: dict[str, np.ndarray] = {g.ids: tokens.reshape(-1, 1).astype(g.types[g.ids]),
                                       g.mask: mask.astype(g.types[g.mask])}
        if g.hidden:
            feed[g.hidden] = hidden
        if self.merged:
            feed["use_cache_branch"] = np.array([False])
            for p in g.pasts:
                feed[p] = self._empty_past(p, len(tokens))
        outs = dict(zip(g.outputs, g.sess.run(g.outputs, feed)))
        state = DecoderState({p: outs[present_of(p)] for p in self.self_names},
                             {p: outs[present_of(p)] for p in self.cross_names}, mask,
                             hidden if self.keep_hidden else None)
        return outs[g.logits][:, -1, :], state

    def step(self, tokens: np.ndarray, state: DecoderState) -> tuple[np.ndarray, DecoderState]:
        g = self.past
        feed = {g.ids: tokens.reshape(-1, 1).astype(g.types[g.ids]), g.mask: state.mask.astype(g.types[g.mask]),
                **state.self_kv, **state.cross_kv}
        if g.hidden and state.hidden is not None:
            feed[g.hidden] = state.hidden
        if self.merged:
            feed["use_cache_branch"] = np.array([True])
        names = [g.logits] + [present_of(p) for p in self.self_names]
        res = g.sess.run(names, feed)
        new = DecoderState(dict(zip(self.self_names, res[1:])), state.cross_kv, state.mask, state.hidden)
        return res[0][:, -1, :], new
