"""Per-sequence sampling: a llama.cpp sampler chain built from SamplingParams.

The chain runs in C on the logits row llama_decode left for the sequence, so sampling
costs no Python per vocabulary entry. Order (as llama.cpp's own server does): logit bias,
repetition penalties, grammar, then greedy, or top-k, top-p, min-p, temperature and a
seeded draw. A chain is built on the request's thread (so a bad grammar is a 400 before
anything streams) and afterwards used only by the generation worker."""

from __future__ import annotations

import math

import llama_cpp as L
import numpy as np

from inferd.errors import InvalidInput
from inferd.runtimes.llama_cpp.model import LlamaModel
from inferd.types import SamplingParams, TokenLogprob

MAX_TOP_LOGPROBS = 20


class Sampler:
    def __init__(self, model: LlamaModel, params: SamplingParams):
        self.params = params
        self._check(model, params)
        self.chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        try:
            self._build(model, params)
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
        if p.repetition_penalty <= 0:
            raise InvalidInput("repetition_penalty must be > 0", "repetition_penalty")
        if not (0 <= p.top_logprobs <= MAX_TOP_LOGPROBS):
            raise InvalidInput(f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}", "top_logprobs")
        model.check_tokens(list(p.logit_bias), "logit_bias")

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
                arr[i].token, arr[i].bias = tok, b
            self._add(L.llama_sampler_init_logit_bias(model.n_vocab, len(bias), arr))
        if p.repetition_penalty != 1.0 or p.frequency_penalty or p.presence_penalty:
            self._add(L.llama_sampler_init_penalties(model.n_vocab, p.penalty_last_n, p.repetition_penalty,
                                                     p.frequency_penalty, p.presence_penalty))
        if p.grammar is not None:
            g = L.llama_sampler_init_grammar(model.vocab, p.grammar.encode(), p.grammar_root.encode())
            if not g:
                raise InvalidInput("invalid grammar: llama.cpp could not parse it (GBNF expected, "
                                   f"with a '{p.grammar_root}' rule)", "grammar")
            L.llama_sampler_chain_add(self.chain, g)
        if p.greedy:
            self._add(L.llama_sampler_init_greedy())
            return
        if p.top_k > 0:
            self._add(L.llama_sampler_init_top_k(p.top_k))
        if p.top_p < 1.0:
            self._add(L.llama_sampler_init_top_p(p.top_p, 1))
        if p.min_p > 0.0:
            self._add(L.llama_sampler_init_min_p(p.min_p, 1))
        self._add(L.llama_sampler_init_temp(p.temperature))
        seed = L.LLAMA_DEFAULT_SEED if p.seed is None else p.seed & 0xFFFFFFFF
        self._add(L.llama_sampler_init_dist(seed))

    def sample(self, ctx_ptr, row: int) -> int:
        """Pick the next token from batch row `row` and record it (penalties, grammar)."""
        return int(L.llama_sampler_sample(self.chain, ctx_ptr, row))

    def close(self) -> None:
        if self.chain:
            L.llama_sampler_free(self.chain)  # frees every sampler in the chain
            self.chain = None

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
