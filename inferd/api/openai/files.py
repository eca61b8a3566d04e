"""OpenAI `/v1/files`: upload, list, retrieve, content, delete. Thin: the service's file store
does the work (InferenceService.upload_file, ...; on a worker thread, as it touches the disk)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, File, Form, Query, UploadFile
from fastapi.responses import FileResponse

from inferd.api.deps import get_service
from inferd.errors import InvalidInput
from inferd.service import InferenceService

router = APIRouter()
# openai-server uploads with the `file` field alone; OpenAI requires a purpose. Without one a
# file is OpenAI's general-purpose `user_data` (chat messages may use it as an image or audio).
DEFAULT_PURPOSE = "user_data"


@router.post("/v1/files")
async def upload(file: UploadFile = File(...), purpose: str = Form(DEFAULT_PURPOSE),
                 svc: InferenceService = Depends(get_service)) -> dict:
    return await svc.upload_file(file.file, file.filename or "upload", purpose, file.size)


@router.get("/v1/files")
async def list_files(purpose: str | None = None, limit: int = Query(10000, ge=1, le=10000),
                     order: Literal["asc", "desc"] = "desc", after: str | None = None,
                     svc: InferenceService = Depends(get_service)) -> dict:
    """OpenAI's cursor page: newest first by default; `after` is the last id of the previous page."""
    files = await svc.list_files(purpose)
    if order == "asc":
        files.reverse()
    if after is not None:
        ids = [f["id"] for f in files]
        if after not in ids:
            raise InvalidInput(f"'after': no file with id '{after}' in this listing", "after")
        files = files[ids.index(after) + 1:]
    page = files[:limit]
    return {"object": "list", "data": page, "has_more": len(files) > limit,
            "first_id": page[0]["id"] if page else None, "last_id": page[-1]["id"] if page else None}


@router.get("/v1/files/{file_id}")
async def retrieve(file_id: str, svc: InferenceService = Depends(get_service)) -> dict:
    return await svc.file_info(file_id)


@router.get("/v1/files/{file_id}/content")
async def content(file_id: str, svc: InferenceService = Depends(get_service)) -> FileResponse:
    path, meta = await svc.file_content(file_id)
    return FileResponse(path, media_type=meta["content_type"], filename=meta["filename"])


@router.delete("/v1/files/{file_id}")
async def delete(file_id: str, svc: InferenceService = Depends(get_service)) -> dict:
    return await svc.delete_file(file_id)
