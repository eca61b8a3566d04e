"""Search for seq2seq decoders, one object per request input: greedy, sampling and beam
search, with the logits processors generation_config.json asks for. Pure numpy, so it runs
on any backend that yields next-token logits for a set of decoder rows.

Semantics follow transformers' `generate` (v5) step for step, so that the same model gives the
same tokens: processors see the decoder input (decoder start token included); beam search
keeps 2 x num_beams candidates per step, only the best num_beams may finish, a finished
hypothesis scores sum(logprobs) / generated_length ** length_penalty, and a request stops
when its early-stopping heuristic says no running beam can beat the worst finished one, or
at max_length. Scores are float32, as in torch."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

NEG = np.float32(-1.0e9)  # transformers' "impossible" beam score


@dataclass(frozen=True)
class DecodeParams:
    """Everything one input's search needs; built by the service from the request and the
    model's generation_config.json."""

    decoder_start: int
    eos: tuple[int, ...]
    max_length: int                   # decoder length, start token included (transformers' max_length)
    num_beams: int = 1
    num_return: int = 1
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    no_repeat_ngram_size: int = 0
    forced_bos: int | None = None
    forced_eos: int | None = None
    min_length: int = 0


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float32, copy=False)
    m = np.max(x, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, np.float32(0))
    s = x - m
    return s - np.log(np.sum(np.exp(s), axis=-1, keepdims=True))


def process(p: DecodeParams, seqs: list[list[int]], scores: np.ndarray) -> np.ndarray:
    """generation_config's logits processors, in transformers' order (in place on a copy)."""
    scores = np.array(scores, dtype=np.float32)
    cur_len = len(seqs[0])
    n = p.no_repeat_ngram_size
    if n and cur_len >= n:
        for r, seq in enumerate(seqs):
            prefix = seq[cur_len + 1 - n:]
            banned = {seq[i + n - 1] for i in range(cur_len - n + 1) if seq[i:i + n - 1] == prefix}
            if banned:
                scores[r, list(banned)] = -np.inf
    if p.min_length and cur_len < p.min_length:
        scores[:, list(p.eos)] = -np.inf
    if p.forced_bos is not None and cur_len == 1:
        scores[:] = -np.inf
        scores[:, p.forced_bos] = 0.0
    if p.forced_eos is not None and cur_len == p.max_length - 1:
        scores[:] = -np.inf
        scores[:, p.forced_eos] = 0.0
    return scores


def _topk(x: np.ndarray, k: int) -> np.ndarray:
    """Indexes of the k largest values, largest first (stable for ties, like torch on CPU)."""
    return np.argsort(-x, kind="stable")[:k]


class Search:
    """One input's search. `rows` decoder rows are live; step() takes their next-token logits
    and returns, for each new row, the index of its parent row (beam reordering and finished
    rows leaving), or [] once the input is done."""

    def __init__(self, p: DecodeParams):
        self.p = p
        self.done = False
        self.seqs: list[list[int]] = [[p.decoder_start]]
        self.results: list[list[int]] = []   # generated tokens (start token excluded), best first

    @property
    def rows(self) -> int:
        return 0 if self.done else len(self.seqs)

    def next_tokens(self) -> list[int]:
        return [s[-1] for s in self.seqs]

    def step(self, logits: np.ndarray) -> list[int]:
        raise NotImplementedError

    def stop(self) -> None:
        """Max length reached or the client left: keep what there is."""
        self.done = True


class Greedy(Search):
    """Greedy or sampled decoding of one row (transformers' `_sample`)."""

    def __init__(self, p: DecodeParams):
        super().__init__(p)
        self.rng = np.random.default_rng(p.seed) if p.do_sample else None

    def step(self, logits: np.ndarray) -> list[int]:
        scores = process(self.p, self.seqs, logits)[0]
        if self.rng is None:
            tok = int(np.argmax(scores))
        else:
            tok = self._sample(scores)
        seq = self.seqs[0]
        seq.append(tok)
        if tok in self.p.eos or len(seq) >= self.p.max_length:
            self.done = True
            self.results = [seq[1:]]
            return []
        return [0]

    def _sample(self, scores: np.ndarray) -> int:
        p = self.p
        s = scores / np.float32(p.temperature) if p.temperature != 1.0 else scores
        if p.top_k and p.top_k < s.shape[-1]:
            kth = np.sort(s)[-p.top_k]
            s = np.where(s < kth, -np.inf, s)
        if p.top_p < 1.0:  # TopPLogitsWarper: drop the low tail whose mass is <= 1 - top_p
            order = np.argsort(s, kind="stable")
            probs = np.exp(log_softmax(s[order]))
            remove = np.cumsum(probs) <= (1 - p.top_p)
            remove[-1] = False
            s = s.copy()
            s[order[remove]] = -np.inf
        probs = np.exp(log_softmax(s).astype(np.float64))
        probs /= probs.sum()
        assert self.rng is not None
        return int(self.rng.choice(len(probs), p=probs))

    def stop(self) -> None:
        if not self.done:
            self.results = [self.seqs[0][1:]]
        self.done = True


class Beam(Search):
    """transformers' vectorised beam search (`_beam_search`), for one input."""

    def __init__(self, p: DecodeParams):
        super().__init__(p)
        k = p.num_beams
        self.seqs = [[p.decoder_start] for _ in range(k)]
        self.run_scores = np.array([0.0] + [NEG] * (k - 1), dtype=np.float32)
        self.fin_seqs: list[list[int]] = [[] for _ in range(k)]
        self.fin_scores = np.full(k, NEG, dtype=np.float32)
        self.fin_flags = np.zeros(k, dtype=bool)
        self.heuristic_open = True
        self.cur_len = 1

    def step(self, logits: np.ndarray) -> list[int]:
        p, k = self.p, self.p.num_beams
        vocab = logits.shape[-1]
        logp = process(p, self.seqs, log_softmax(logits))
        acc = (logp + self.run_scores[:, None]).reshape(-1)
        keep = max(2, 1 + len(p.eos)) * k
        idx = _topk(acc, keep)
        top = acc[idx]
        parents, toks = idx // vocab, idx % vocab
        cand = [self.seqs[b] + [int(t)] for b, t in zip(parents, toks)]
        hits = np.array([c[-1] in p.eos or len(c) >= p.max_length for c in cand])
        # running beams for the next step: the best k candidates that did not finish
        run_lp = top + hits.astype(np.float32) * NEG
        nxt = _topk(run_lp, k)
        # finished beams: the best of the old finished and the candidates that just finished
        norm = top / np.float32((self.cur_len + 1 - 1) ** p.length_penalty)
        if p.early_stopping is True and self.fin_flags.all():
            norm = norm + NEG
        if not self.heuristic_open:
            norm = norm + NEG
        just = hits & (np.arange(keep) < k)
        norm = norm + (~just).astype(np.float32) * NEG
        merged = np.concatenate([self.fin_scores, norm])
        pick = _topk(merged, k)
        all_seqs = self.fin_seqs + cand
        all_flags = np.concatenate([self.fin_flags, just])
        self.fin_seqs = [all_seqs[i] for i in pick]
        self.fin_scores, self.fin_flags = merged[pick], all_flags[pick]
        self.seqs = [cand[i] for i in nxt]
        self.run_scores = run_lp[nxt]
        self.cur_len += 1
        if p.early_stopping == "never" and p.length_penalty > 0.0:
            hyp = p.max_length - 1
        else:
            hyp = self.cur_len - 1
        best = self.run_scores[0] / np.float32(hyp ** p.length_penalty)
        worst = np.where(self.fin_flags, self.fin_scores.min(), NEG)
        self.heuristic_open = bool(self.heuristic_open and np.any(best > worst))
        open_beam = not (self.fin_flags.all() and p.early_stopping is True)
        if not (self.heuristic_open and open_beam and not hits.all()):
            self._finish()
            return []
        return [int(parents[i]) for i in nxt]

    def _finish(self) -> None:
        self.done = True
        out = []
        for s, f in zip(self.fin_seqs[: self.p.num_return], self.fin_flags[: self.p.num_return]):
            out.append(s[1:] if f else [])
        self.results = out

    def stop(self) -> None:
        if self.done:
            return
        # Cut short (client gone, or the server's step limit): the best finished, else running.
        if self.fin_flags.any():
            self._finish()
            self.results = [r for r in self.results if r] or [self.seqs[0][1:]]
        else:
            self.done = True
            self.results = [s[1:] for s in self.seqs[: self.p.num_return]]


def make_search(p: DecodeParams) -> Search:
    return Beam(p) if p.num_beams > 1 else Greedy(p)


@dataclass
class StepPlan:
    """How a set of searches maps onto decoder rows after one step."""

    parents: np.ndarray                        # new row -> old row
    tokens: np.ndarray                         # next decoder input token of each new row
    spans: list[tuple[int, int]] = field(default_factory=list)  # rows of each search (end exclusive)


def plan_step(searches: list[Search], spans: list[tuple[int, int]], logits: np.ndarray) -> StepPlan:
    """Advance every live search with its rows' logits and lay out the surviving rows."""
    parents: list[int] = []
    tokens: list[int] = []
    new_spans = []
    for s, (a, b) in zip(searches, spans):
        if s.done or a == b:
            new_spans.append((len(parents), len(parents)))
            continue
        keep = s.step(logits[a:b])
        start = len(parents)
        parents.extend(a + i for i in keep)
        if keep:
            tokens.extend(s.next_tokens())
        new_spans.append((start, len(parents)))
    return StepPlan(np.array(parents, dtype=np.int64), np.array(tokens, dtype=np.int64), new_spans)
