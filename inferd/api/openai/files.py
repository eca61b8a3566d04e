"""OpenAI `/v1/files`: upload, list, retrieve, content, delete. Thin: FileStore does the work
(on a worker thread, as it touches the disk)."""

from __future__ import annotations

import asyncio

from typing import Literal

from fastapi import APIRouter, File, Form, Query, Request, UploadFile
from fastapi.responses import FileResponse

from inferd.errors import InvalidInput
from inferd.storage.files import FileStore

router = APIRouter()


def store_of(request: Request) -> FileStore:
    """One store per app, made from its settings on first use."""
    st = request.app.state
    if getattr(st, "files", None) is None:
        s = st.settings
        st.files = FileStore.for_data_dir(s.data_dir, max_file_bytes=s.max_file_bytes,
                                          max_total_bytes=s.max_files_total_bytes)
    return st.files


async def read_audio(request: Request, file_id: str, limit: int, where: str) -> bytes:
    """A stored audio file named by its `file-...` id in a speech request."""
    return await asyncio.to_thread(store_of(request).read_audio, file_id, limit, where)


@router.post("/v1/files")
async def upload(request: Request, file: UploadFile = File(...), purpose: str = Form(...)) -> dict:
    store = store_of(request)
    return await asyncio.to_thread(store.create, file.file, file.filename or "upload", purpose, file.size)


@router.get("/v1/files")
async def list_files(request: Request, purpose: str | None = None, limit: int = Query(10000, ge=1, le=10000),
                     order: Literal["asc", "desc"] = "desc", after: str | None = None) -> dict:
    """OpenAI's cursor page: newest first by default; `after` is the last id of the previous page."""
    files = await asyncio.to_thread(store_of(request).list, purpose)
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
async def retrieve(request: Request, file_id: str) -> dict:
    return await asyncio.to_thread(store_of(request).get, file_id)


@router.get("/v1/files/{file_id}/content")
async def content(request: Request, file_id: str) -> FileResponse:
    store = store_of(request)
    meta = await asyncio.to_thread(store.get, file_id)
    return FileResponse(store.root / meta["id"], media_type=meta["content_type"], filename=meta["filename"])


@router.delete("/v1/files/{file_id}")
async def delete(request: Request, file_id: str) -> dict:
    return await asyncio.to_thread(store_of(request).delete, file_id)
