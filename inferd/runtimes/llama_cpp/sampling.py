"""Per-sequence sampling: a llama.cpp sampler chain built from SamplingParams.

The chain runs in C on the logits row llama_decode left for the sequence, so sampling
costs no Python per vocabulary entry. Order (as llama.cpp's own server does): logit bias,
repetition penalties, top-k, typical-p, top-p, min-p (each only when set), then temperature and
a seeded draw, or greedy at temperature <= 0; `samplers` reorders (or leaves out) the stages
between logit bias and the draw, as llama-server's does (without "temperature" in it, even a
temperature of 0 draws at 1, as there).

A grammar is a separate sampler, used the way llama.cpp's common sampler uses it: masking a
262k-token vocabulary with a grammar costs tens of milliseconds, so the chain first picks
a token freely, the grammar checks just that one, and only if it is refused is the whole
vocabulary masked and the pick redone. Most tokens of a constrained answer pass the check.

llama.cpp's grammar checks code points, not their encoding: with byte-level tokens it lets
an overlong sequence through (E0 96 BD decodes to U+05BD for it; strict UTF-8 refuses it),
so a constrained answer could come out as invalid UTF-8 and not parse. A grammar sampler
therefore also keeps the output a valid UTF-8 prefix, refusing tokens that break it.

A Sampler is built on the request's thread (a bad grammar is a 400 before anything
streams) and afterwards used only by the generation worker."""

from __future__ import annotations

import codecs
import ctypes
import math

import llama_cpp as L
import numpy as np

from inferd.errors import InvalidInput
from inferd.runtimes.llama_cpp.model import LlamaModel
from inferd.types import SAMPLER_STAGES, SamplingParams, TokenLogprob

MAX_TOP_LOGPROBS = 20
MAX_UTF8_RETRIES = 64  # tokens refused for breaking UTF-8 before the grammar's pick is kept anyway
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True)
assert _TOKEN_DATA.itemsize == ctypes.sizeof(L.llama_token_data)


class GrammarDeadEnd(InvalidInput):
    """The grammar allows no token here: this sequence ends with an error, the others go on."""


def _greedy_stages(order: tuple[str, ...], penalties: bool, typical: bool) -> tuple[str, ...]:
    """The stages a greedy pick needs: top-k, top-p and min-p always keep the most likely
    token, so they matter only before a stage that can change which one that is (penalties,
    typical-p, which may drop it). Leaving the others out saves their sort on every token."""
    out: list[str] = []
    for i, name in enumerate(order):
        if name in ("top_k", "top_p", "min_p"):
            later = order[i + 1:]
            if not ((penalties and "penalties" in later) or (typical and "typ_p" in later)):
                continue
        out.append(name)
    return tuple(out)


class Sampler:
    def __init__(self, model: LlamaModel, params: SamplingParams):
        self.params = params
        self.n_vocab = model.n_vocab
        self.grammar = None
        self._model = model
        self._utf8_tail = b""  # an incomplete UTF-8 sequence at the end of the output so far
        self.accepted = 0
        self._check(model, params)
        self.chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        try:
            self._build(model, params)
            if params.grammar is not None:
                self.grammar = L.llama_sampler_init_grammar(model.vocab, params.grammar.encode(),
                                                            params.grammar_root.encode())
                if not self.grammar:
                    raise InvalidInput("invalid grammar: llama.cpp could not parse it (GBNF expected, "
                                       f"with a '{params.grammar_root}' rule)", "grammar")
                self._cand = np.zeros(self.n_vocab, dtype=_TOKEN_DATA)
                self._ids = np.arange(self.n_vocab, dtype=np.int32)
                self._one = np.zeros(1, dtype=_TOKEN_DATA)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _check(model: LlamaModel, p: SamplingParams) -> None:
        if not (0.0 < p.top_p <= 1.0):
            raise InvalidInput("top_p must be in (0, 1]", "top_p")
        if p.top_k < 0:
            raise InvalidInput("top_k must be >= 0", "top_k")
        if not (0.0 <= p.min_p <= 1.0):
            raise InvalidInput("min_p must be in [0, 1]", "min_p")
        if not (0.0 < p.typical_p <= 1.0):
            raise InvalidInput("typical_p must be in (0, 1]", "typical_p")
        unknown = [n for n in p.samplers or () if n not in SAMPLER_STAGES]
        if unknown:
            raise InvalidInput(f"unknown sampler {unknown[0]!r}: one of {', '.join(SAMPLER_STAGES)}", "samplers")
        if p.repetition_penalty <= 0:
            raise InvalidInput("repetition_penalty must be > 0", "repetition_penalty")
        if not (0 <= p.top_logprobs <= MAX_TOP_LOGPROBS):
            raise InvalidInput(f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}", "top_logprobs")
        model.check_tokens(list(p.logit_bias), "logit_bias")
        if p.grammar is not None and p.ignore_eos and not p.grammar_endless:
            # Once the grammar is complete only end-of-generation may follow; banning it leaves
            # llama.cpp's grammar nothing to accept, and it aborts the process.
            raise InvalidInput("ignore_eos cannot be combined with a grammar", "ignore_eos")

    def _add(self, smpl) -> None:
        if not smpl:
            raise InvalidInput("llama.cpp refused a sampler setting")
        L.llama_sampler_chain_add(self.chain, smpl)

    def _build(self, model: LlamaModel, p: SamplingParams) -> None:
        bias = dict(p.logit_bias)
        if p.ignore_eos:
            for t in model.eog_tokens:
                bias[t] = -math.inf
        if bias:
            arr = (L.llama_logit_bias * len(bias))()
            for i, (tok, b) in enumerate(bias.items()):
                arr[i].token = L.llama_token(tok)
                arr[i].bias = b
            self._add(L.llama_sampler_init_logit_bias(model.n_vocab, len(bias), arr))
        order = SAMPLER_STAGES if p.samplers is None else p.samplers
        penalties = p.repetition_penalty != 1.0 or p.frequency_penalty or p.presence_penalty
        if p.greedy and "temperature" in order:
            order = _greedy_stages(order[:order.index("temperature") + 1], bool(penalties), p.typical_p < 1.0)
        for name in order:  # a stage named twice runs twice, as in llama.cpp
            if name == "penalties" and penalties:
                self._add(L.llama_sampler_init_penalties(model.n_vocab, p.penalty_last_n, p.repetition_penalty,
                                                         p.frequency_penalty, p.presence_penalty))
            elif name == "top_k" and p.top_k > 0:
                self._add(L.llama_sampler_init_top_k(p.top_k))
            elif name == "typ_p" and p.typical_p < 1.0:
                self._add(L.llama_sampler_init_typical(p.typical_p, 1))
            elif name == "top_p" and p.top_p < 1.0:
                self._add(L.llama_sampler_init_top_p(p.top_p, 1))
            elif name == "min_p" and p.min_p > 0.0:
                self._add(L.llama_sampler_init_min_p(p.min_p, 1))
            elif name == "temperature":
                if p.greedy:  # temperature <= 0 keeps the most likely token; no later stage changes one
                    self._add(L.llama_sampler_init_greedy())
                    return
                self._add(L.llama_sampler_init_temp(p.temperature))
        seed = L.LLAMA_DEFAULT_SEED if p.seed is None else p.seed & 0xFFFFFFFF
        self._add(L.llama_sampler_init_dist(seed))

    def sample(self, ctx_ptr, row: int) -> int:
        """Pick the next token from batch row `row` and record it (penalties, grammar).

        With a grammar, only a token the grammar allows is ever accepted: llama.cpp aborts
        the process when told to accept one it refuses. A sequence for which the grammar
        allows no token at all (a dead end the static check could not see) raises
        `GrammarDeadEnd`, which ends that sequence alone."""
        if self.grammar is None:
            return int(L.llama_sampler_sample(self.chain, ctx_ptr, row))
        logits = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx_ptr, row), (self.n_vocab,))
        tok = self._apply(self.chain, logits)
        if not self._allowed(tok):  # refused: mask the whole vocabulary, pick again
            tok = self._apply(self.chain, logits, grammar_first=True)
            if not self._allowed(tok):
                raise GrammarDeadEnd("the grammar allows no token of this model at this point of the output "
                                     f"(after {self.accepted} tokens)", "grammar")
        tail = self._utf8_next(tok)
        banned: list[int] = []
        while tail is None and len(banned) < MAX_UTF8_RETRIES:  # breaks UTF-8: refuse it, pick again
            banned.append(tok)
            other = self._apply(self.chain, logits, grammar_first=True, banned=banned)
            if not self._allowed(other):
                break  # nothing else is allowed: keep the grammar's pick
            tok, tail = other, self._utf8_next(other)
        self._utf8_tail = tail or b""
        L.llama_sampler_accept(self.grammar, tok)
        L.llama_sampler_accept(self.chain, tok)
        self.accepted += 1
        return tok

    def force(self, tok: int) -> bool:
        """Record `tok` as the next output without sampling it (penalties and grammar advance
        as if it had been sampled). False, and nothing recorded, when the grammar refuses it:
        accepting a refused token would abort the process."""
        if self.grammar is not None:
            if not self._allowed(tok):
                return False
            self._utf8_tail = self._utf8_next(tok) or b""
            L.llama_sampler_accept(self.grammar, tok)
        L.llama_sampler_accept(self.chain, tok)
        self.accepted += 1
        return True

    def _allowed(self, tok: int) -> bool:
        """Whether the grammar, in its current state, allows `tok` (a one-candidate apply)."""
        if not 0 <= tok < self.n_vocab:
            return False
        one = self._one
        one["id"], one["logit"], one["p"] = tok, 0.0, 0.0
        self._run(self.grammar, one)
        return bool(np.isfinite(one["logit"][0]))

    def _utf8_next(self, tok: int) -> bytes | None:
        """The incomplete tail after appending `tok`, or None if the output would not be
        valid UTF-8 (an end-of-generation token adds nothing)."""
        data = self._utf8_tail + self._model.piece(tok)
        try:
            _, used = codecs.utf_8_decode(data, "strict", False)
        except UnicodeDecodeError:
            return None
        return data[used:]

    def _apply(self, smpl, logits: np.ndarray, grammar_first: bool = False, banned: list[int] | None = None) -> int:
        cand = self._cand
        cand["id"] = self._ids  # samplers sort and cut the array in place: refill it each time
        cand["logit"] = logits
        cand["p"] = 0.0
        if banned:
            cand["logit"][banned] = -np.inf
        arr = L.llama_token_data_array(data=cand.ctypes.data_as(L.llama_token_data_p), size=self.n_vocab,
                                       selected=-1, sorted=False)
        if grammar_first:
            L.llama_sampler_apply(self.grammar, ctypes.byref(arr))
        L.llama_sampler_apply(smpl, ctypes.byref(arr))
        if not 0 <= arr.selected < arr.size:
            return -1  # nothing selectable (every candidate masked): the caller refuses it
        return int(cand["id"][arr.selected])

    @staticmethod
    def _run(smpl, one: np.ndarray) -> None:
        arr = L.llama_token_data_array(data=one.ctypes.data_as(L.llama_token_data_p), size=1, selected=-1,
                                       sorted=False)
        L.llama_sampler_apply(smpl, ctypes.byref(arr))

    def close(self) -> None:
        if self.chain:
            L.llama_sampler_free(self.chain)  # frees every sampler in the chain
            self.chain = None
        if self.grammar:
            L.llama_sampler_free(self.grammar)
            self.grammar = None

    def __del__(self) -> None:  # a request dropped before it reached the worker
        try:
            self.close()
        except Exception:
            pass


def token_logprob(model: LlamaModel, logits: np.ndarray, token: int, top_n: int) -> TokenLogprob:
    """Log-probability of `token` under the model's raw distribution, plus the `top_n` best."""
    x = logits.astype(np.float64, copy=False)
    mx = float(x.max())
    lse = mx + math.log(float(np.exp(x - mx).sum()))
    top: list[tuple[int, str, bytes, float]] = []
    if top_n > 0:
        idx = np.argpartition(-x, top_n - 1)[:top_n]
        idx = idx[np.argsort(-x[idx], kind="stable")]
        for t in idx.tolist():
            b = model.piece(t)
            top.append((t, b.decode("utf-8", "replace"), b, float(x[t] - lse)))
    b = model.piece(token)
    return TokenLogprob(token=token, text=b.decode("utf-8", "replace"), bytes=b,
                        logprob=float(x[token] - lse), top=top)
