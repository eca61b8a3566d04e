"""Shared helpers for the thin route modules."""

from __future__ import annotations

from fastapi import Request

from inferd.service import InferenceService


def get_service(request: Request) -> InferenceService:
    return request.app.state.service
