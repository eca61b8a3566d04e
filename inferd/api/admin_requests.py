"""The operator's view of what runs now (the console's Operator page): GET /admin/requests
(the requests in flight), POST /admin/requests/{id}/cancel, GET /admin/errors (recent error
responses and error log records). The registry and the log are observability/active.py's;
the API key guards these as every other non-public route."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from inferd.api.deps import get_service
from inferd.api.errors import error_response
from inferd.errors import InvalidInput, NotFound, echo
from inferd.observability.active import ActiveRequests, ErrorLog
from inferd.service import InferenceService

router = APIRouter()


def active_of(svc: InferenceService) -> ActiveRequests:
    return svc.observer.active  # type: ignore[attr-defined]


def errors_of(svc: InferenceService) -> ErrorLog:
    return svc.observer.errors  # type: ignore[attr-defined]


@router.get("/admin/requests")
async def list_requests(svc: InferenceService = Depends(get_service)) -> dict:
    """Each request in flight, oldest first: id (its X-Request-ID), method, route, model,
    client, started, state (queued | running | cancelling), tokens generated so far (null
    for work that is not a generation) and whether Cancel can stop it."""
    return {"requests": active_of(svc).view()}


@router.post("/admin/requests/{rid}/cancel")
async def cancel_request(rid: str, svc: InferenceService = Depends(get_service)):
    reg = active_of(svc)
    if reg.get(rid) is None:
        raise NotFound(f"no active request '{echo(rid)}' (it may have finished)")
    if not reg.cancel(rid):
        return error_response(InvalidInput(f"request '{echo(rid)}' has no work that can be cancelled "
                                           "(not a generation, nor waiting for one)"), "openai", status=409)
    return {"id": rid, "cancelled": True}


@router.get("/admin/errors")
async def recent_errors(svc: InferenceService = Depends(get_service)) -> dict:
    """The last errors, newest first: error responses (time, method, route, path, status, the
    envelope's message, request id) and the server's ERROR log records (logger, message)."""
    return errors_of(svc).view()
