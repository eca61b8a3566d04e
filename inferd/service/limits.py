"""Per-request input-count limits, shared by every verb that takes a list of inputs.

`--max-batch-inputs` (default 2048, OpenAI's own limit for embeddings) bounds embeddings
inputs, rerank documents, and extract / rewrite inputs: 10^4 small embeddings inputs once
took 12.7 s and +514 MB for one request. Over the limit is a 413 naming it."""

from __future__ import annotations

from typing import Any

from inferd.errors import PayloadTooLarge

DEFAULT_MAX_BATCH_INPUTS = 2048


def max_batch_inputs(settings: Any) -> int:
    return int(getattr(settings, "max_batch_inputs", None) or DEFAULT_MAX_BATCH_INPUTS)


def check_input_count(n: int, settings: Any, what: str = "inputs") -> None:
    """Raise PayloadTooLarge (413) when a request carries more than the limit of `what`."""
    limit = max_batch_inputs(settings)
    if n > limit:
        raise PayloadTooLarge(f"the request has {n} {what}; the limit is {limit} per request "
                              "(--max-batch-inputs)")
