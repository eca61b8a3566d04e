"""llama-server's `timings` object, from an engine Usage. Shared by the native /completion and
the OpenAI face's responses (llama-server puts the same object on both)."""

from __future__ import annotations

from typing import Any

from inferd.types import Usage


def _rate(n: int, ms: float) -> tuple[float, float]:
    """(ms per token, tokens per second); 0 for both when nothing was timed (one token has
    no gap to measure, and llama-server's division by zero is no number a client can read)."""
    if n <= 0 or ms <= 0:
        return 0.0, 0.0
    return ms / n, 1e3 * n / ms


def llama_timings(u: Usage) -> dict[str, Any]:
    """cache_n: prompt tokens reused from the KV cache; prompt_n: prompt tokens computed;
    predicted_n: tokens generated. prompt_ms runs from admission to the first token,
    predicted_ms from the first token to the last."""
    prompt_n = max(0, u.prompt_tokens - u.cached_prompt_tokens)
    prompt_ms, predicted_ms = u.prompt_seconds * 1e3, u.generation_seconds * 1e3
    p_tok, p_sec = _rate(prompt_n, prompt_ms)
    g_tok, g_sec = _rate(u.completion_tokens, predicted_ms)
    return {"cache_n": u.cached_prompt_tokens, "prompt_n": prompt_n, "prompt_ms": round(prompt_ms, 3),
            "prompt_per_token_ms": p_tok, "prompt_per_second": p_sec, "predicted_n": u.completion_tokens,
            "predicted_ms": round(predicted_ms, 3), "predicted_per_token_ms": g_tok, "predicted_per_second": g_sec}
