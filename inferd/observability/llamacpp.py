"""llama-server's `llamacpp:*` metrics (its tools/server README), rendered beside inferd's own at
/metrics so dashboards and scrapers written for llama-server read inferd unchanged. Without
labels, as llama-server has one model: the totals over every generator (loaded or not; the
counters stay monotonic across unloads). Rendered from the engines' GenStats at scrape time."""

from __future__ import annotations

from typing import Any

from inferd.observability.prom import fmt


def _family(lines: list[str], name: str, kind: str, help_: str, value: float) -> None:
    lines += [f"# HELP llamacpp:{name} {help_}", f"# TYPE llamacpp:{name} {kind}", f"llamacpp:{name} {fmt(value)}"]


def render_llamacpp(gen: dict[str, Any], engines: list[Any]) -> str:
    """`gen`: GenStats per generator name; `engines`: the loaded generators' engines."""
    stats = list(gen.values())
    prompt = sum(st.prompt_tokens - st.cached_tokens for st in stats)  # computed, not reused from the cache
    prompt_s = sum(st.prompt_seconds for st in stats)
    predicted = sum(st.generated_tokens for st in stats)
    predicted_s = sum(st.predicted_seconds for st in stats)
    decodes = sum(st.batch.snapshot()[2] for st in stats)
    busy = sum(st.batch.snapshot()[1] for st in stats)  # sequences carried, summed over decodes
    lines: list[str] = []
    _family(lines, "prompt_tokens_total", "counter", "Number of prompt tokens processed.", prompt)
    _family(lines, "prompt_seconds_total", "counter", "Prompt process time in seconds.", round(prompt_s, 6))
    _family(lines, "tokens_predicted_total", "counter", "Number of generation tokens processed.", predicted)
    _family(lines, "tokens_predicted_seconds_total", "counter", "Predict process time in seconds.",
            round(predicted_s, 6))
    _family(lines, "n_decode_total", "counter", "Total number of llama_decode() calls.", decodes)
    _family(lines, "n_tokens_max", "counter", "Largest observed n_tokens.",
            max((st.n_tokens_max for st in stats), default=0))
    _family(lines, "spec_decode_num_draft_tokens_total", "counter", "Total draft tokens generated.",
            sum(st.drafted_tokens for st in stats))
    _family(lines, "spec_decode_num_accepted_tokens_total", "counter", "Total draft tokens accepted.",
            sum(st.accepted_tokens for st in stats))
    _family(lines, "prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.",
            round(prompt / prompt_s, 3) if prompt_s > 0 else 0.0)
    _family(lines, "predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.",
            round(predicted / predicted_s, 3) if predicted_s > 0 else 0.0)
    _family(lines, "n_busy_slots_per_decode", "gauge", "Average number of busy slots per llama_decode() call.",
            round(busy / decodes, 3) if decodes else 0.0)
    _family(lines, "requests_processing", "gauge", "Number of requests processing.",
            sum(getattr(e, "active", 0) for e in engines))
    _family(lines, "requests_deferred", "gauge", "Number of requests deferred.",
            sum(getattr(e, "queued", 0) for e in engines))
    return "\n".join(lines) + "\n"
