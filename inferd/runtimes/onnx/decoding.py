"""Greedy and beam search over an encoder-decoder with a KV cache, in numpy, following
transformers' `generate` step for step (its logits processors, its vectorised beam search
with length penalty and early stopping), so that token ids equal the reference.

`Step` is the model: `start(ids [rows, t]) -> (logits [rows, V], cache)` runs the prompt,
`next(tokens [rows], cache) -> (logits, cache)` one more token, `reorder(cache, rows)`
selects rows (beam search)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


class Step(Protocol):
    def start(self, ids: np.ndarray, rows: Sequence[int]) -> tuple[np.ndarray, Any]: ...
    def next(self, tokens: np.ndarray, cache: Any) -> tuple[np.ndarray, Any]: ...
    def reorder(self, cache: Any, rows: np.ndarray) -> Any: ...


@dataclass
class GenConfig:
    eos: tuple[int, ...]
    pad: int
    num_beams: int = 1
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    forced_bos: int | None = None
    forced_eos: int | None = None
    no_repeat_ngram_size: int = 0
    min_new_tokens: int = 0
    repetition_penalty: float = 1.0
    suppress: tuple[int, ...] = field(default_factory=tuple)
    # A model's own logits processors, run before the generic ones (transformers puts Whisper's
    # first): (seqs [rows, cur], prompt_len, scores [rows, V]) -> scores
    processor: Callable[[np.ndarray, int, np.ndarray], np.ndarray] | None = None

    @classmethod
    def from_json(cls, g: dict[str, Any], cfg: dict[str, Any]) -> "GenConfig":
        def pick(k, default=None):
            return g.get(k, cfg.get(k, default))

        eos = pick("eos_token_id", 2)
        eos = tuple(eos) if isinstance(eos, list) else (int(eos),)
        pad = pick("pad_token_id")
        return cls(eos=eos, pad=int(pad if pad is not None else eos[0]), num_beams=int(pick("num_beams", 1) or 1),
                   length_penalty=float(pick("length_penalty", 1.0)), early_stopping=pick("early_stopping", False),
                   forced_bos=pick("forced_bos_token_id"), forced_eos=pick("forced_eos_token_id"),
                   no_repeat_ngram_size=int(pick("no_repeat_ngram_size", 0) or 0),
                   min_new_tokens=int(pick("min_new_tokens", 0) or 0),
                   repetition_penalty=float(pick("repetition_penalty", 1.0) or 1.0),
                   suppress=tuple(pick("suppress_tokens") or ()))


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float32)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def process(cfg: GenConfig, seqs: np.ndarray, cur: int, prompt_len: int, max_len: int, scores: np.ndarray) -> np.ndarray:
    """transformers' logits processors, in its order, on scores [rows, V] given the rows'
    tokens so far (seqs[:, :cur])."""
    s = scores.copy()
    if cfg.processor is not None:
        s = cfg.processor(seqs[:, :cur], prompt_len, s)
    if cfg.repetition_penalty != 1.0:
        for r in range(s.shape[0]):
            ids = np.unique(seqs[r, :cur])
            v = s[r, ids]
            s[r, ids] = np.where(v < 0, v * cfg.repetition_penalty, v / cfg.repetition_penalty)
    if cfg.no_repeat_ngram_size > 0 and cur + 1 >= cfg.no_repeat_ngram_size:
        n = cfg.no_repeat_ngram_size
        for r in range(s.shape[0]):
            toks = seqs[r, :cur].tolist()
            prefix = tuple(toks[cur - n + 1:]) if n > 1 else ()
            banned = {toks[i + n - 1] for i in range(cur - n + 1) if tuple(toks[i:i + n - 1]) == prefix}
            if banned:
                s[r, list(banned)] = -np.inf
    if cfg.min_new_tokens and cur - prompt_len < cfg.min_new_tokens:
        s[:, list(cfg.eos)] = -np.inf
    if cfg.suppress:
        s[:, list(cfg.suppress)] = -np.inf
    if cfg.forced_bos is not None and cur == 1:
        s[:] = -np.inf
        s[:, cfg.forced_bos] = 0
    if cfg.forced_eos is not None and cur == max_len - 1:
        s[:] = -np.inf
        s[:, cfg.forced_eos] = 0
    return s


def greedy(step: Step, cfg: GenConfig, prompt: Sequence[int], rows: Sequence[int], max_new: int,
           cancelled: Callable[[], bool] = lambda: False) -> list[list[int]]:
    """Greedy decoding of len(rows) sequences sharing one prompt. Returns each row's
    generated tokens (after the prompt), ending with EOS when it stopped on its own."""
    n, p = len(rows), len(prompt)
    max_len = p + max_new
    seqs = np.full((n, max_len), cfg.pad, dtype=np.int64)
    seqs[:, :p] = prompt
    logits, cache = step.start(seqs[:, :p], rows)
    done = np.zeros(n, dtype=bool)
    ends = np.full(n, max_len)
    cur = p
    while cur < max_len:
        scores = process(cfg, seqs, cur, p, max_len, logits)
        nxt = scores.argmax(axis=-1)
        nxt = np.where(done, cfg.pad, nxt)
        seqs[:, cur] = nxt
        hit = np.isin(nxt, cfg.eos) & ~done
        ends[hit] = cur + 1
        done |= hit
        cur += 1
        if done.all() or cur >= max_len or cancelled():
            break
        logits, cache = step.next(nxt, cache)
    return [seqs[r, p:ends[r] if done[r] else cur].tolist() for r in range(n)]


def beam_search(step: Step, cfg: GenConfig, prompt: Sequence[int], row: int, max_new: int,
                cancelled: Callable[[], bool] = lambda: False) -> list[int]:
    """transformers' beam search (`_beam_search`, batch of one) with num_beams beams."""
    nb, p = cfg.num_beams, len(prompt)
    max_len = p + max_new
    k = max(2, 1 + len(cfg.eos)) * nb
    running = np.full((nb, max_len), cfg.pad, dtype=np.int64)
    running[:, :p] = prompt
    finished = running.copy()
    run_scores = np.zeros(nb, dtype=np.float32)
    run_scores[1:] = -1e9
    fin_scores = np.full(nb, -1e9, dtype=np.float32)
    fin_done = np.zeros(nb, dtype=bool)
    fin_len = np.full(nb, p)
    heuristic_open = True
    top_mask = np.arange(k) < nb
    logits, cache = step.start(running[:, :p], [row] * nb)
    cur = p
    while True:
        logp = process(cfg, running, cur, p, max_len, log_softmax(logits))
        acc = (logp + run_scores[:, None]).reshape(-1)
        vocab = logp.shape[-1]
        top = _topk(acc, k)
        top_vals, src, tok = acc[top], top // vocab, top % vocab
        cand = running[src].copy()
        cand[:, cur] = tok
        hits = np.isin(tok, cfg.eos) | (cur + 1 >= max_len)
        # the best unfinished candidates carry on
        run_lp = top_vals + hits.astype(np.float32) * -1e9
        keep = _topk(run_lp, nb)
        running, run_scores, parents = cand[keep], run_lp[keep], src[keep]
        # the best finished ones join the hypotheses
        sc = top_vals / float((cur + 1 - p) ** cfg.length_penalty)
        if fin_done.all() and cfg.early_stopping is True:
            sc = sc - 1e9
        if not heuristic_open:
            sc = sc - 1e9
        sc = sc + (~(hits & top_mask)).astype(np.float32) * -1e9
        m_seqs = np.concatenate([finished, cand])
        m_scores = np.concatenate([fin_scores, sc.astype(np.float32)])
        m_done = np.concatenate([fin_done, hits & top_mask])
        m_len = np.concatenate([fin_len, np.full(k, cur + 1)])
        sel = _topk(m_scores, nb)
        finished, fin_scores, fin_done, fin_len = m_seqs[sel], m_scores[sel], m_done[sel], m_len[sel]
        cur += 1
        if cfg.early_stopping == "never" and cfg.length_penalty > 0.0:
            best_len = max_len - p
        else:
            best_len = cur - p
        best_possible = run_scores[0] / float(best_len ** cfg.length_penalty)
        worst = np.where(fin_done, fin_scores.min(), -1e9)
        heuristic_open = heuristic_open and bool(np.any(best_possible > worst))
        still = heuristic_open and not (fin_done.all() and cfg.early_stopping is True) and not hits.all()
        if not still or cancelled():
            break
        cache = step.reorder(cache, parents)
        logits, cache = step.next(running[:, cur - 1], cache)
    best = int(np.argmax(fin_scores)) if fin_done.any() else 0
    return finished[best, p:fin_len[best]].tolist()


def _topk(x: np.ndarray, k: int) -> np.ndarray:
    """Indexes of the k largest values, largest first (ties: lower index first, as torch's CPU topk)."""
    k = min(k, x.shape[0])
    part = np.argpartition(-x, k - 1)[:k]
    return part[np.lexsort((part, -x[part]))]
