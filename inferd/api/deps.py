"""Shared helpers for the thin route modules."""

from __future__ import annotations

from fastapi import Request

from inferd.service import InferenceService


async def get_service(request: Request) -> InferenceService:
    # async on purpose: FastAPI runs a plain `def` dependency in its thread pool, one thread
    # hop (and GIL handoff) per request, which was the largest per-request cost of a small
    # embedding request (bench/embeddings.py).
    return request.app.state.service
