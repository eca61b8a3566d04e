"""llama-server's slot save/restore/erase: `POST /slots/{id_slot}?action=save|restore|erase`
(service/slot_files.py). Only with `--slot-save-path` (else 501, as llama-server); `?model=`
names the generator when the server has several."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, Query, Request

from inferd.api.deps import get_service
from inferd.service import InferenceService
from inferd.service.slot_files import slot_action

router = APIRouter()


@router.post("/slots/{id_slot}")
async def slots_action(request: Request, id_slot: int, action: str = Query(...), model: str | None = Query(None),
                       body: dict[str, Any] | None = Body(None),
                       svc: InferenceService = Depends(get_service)) -> dict[str, Any]:
    folder = request.app.state.settings.slot_save_path
    return await slot_action(svc, folder, id_slot, action, (body or {}).get("filename"), model)
