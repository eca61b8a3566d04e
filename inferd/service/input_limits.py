"""Per-request input-count limits, shared by every verb that takes a list of inputs.

`--max-batch-inputs` (default 2048, OpenAI's own limit for embeddings) bounds embeddings
inputs, rerank documents, and extract / rewrite inputs: 10^4 small embeddings inputs once
took 12.7 s and +514 MB for one request. Over the limit is a 413 naming it."""

from __future__ import annotations

from inferd.errors import PayloadTooLarge

DEFAULT_MAX_BATCH_INPUTS = 2048


def check_input_count(n: int, limit: int, what: str = "inputs") -> None:
    """Raise PayloadTooLarge (413) when a request carries more than `limit` of `what`
    (services get `limit` from Settings.max_batch_inputs)."""
    if n > limit:
        raise PayloadTooLarge(f"the request has {n} {what}; the limit is {limit} per request "
                              "(--max-batch-inputs)")
