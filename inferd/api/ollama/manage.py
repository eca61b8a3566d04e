"""Ollama model management: /api/pull (NDJSON progress), /api/delete, /api/copy,
/api/create, /api/blobs/{digest}. Thin: service/models.py does the work."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from inferd.api.deps import get_service
from inferd.api.streaming import cancel_on_disconnect, ndjson_response
from inferd.errors import InvalidInput
from inferd.service import InferenceService

router = APIRouter(prefix="/api")
_WIRE = ("status", "digest", "total", "completed")   # Ollama's progress fields


class PullBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str | None = None
    name: str | None = None          # older clients
    insecure: bool = False
    stream: bool = True


class DeleteBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str | None = None
    name: str | None = None


class CopyBody(BaseModel):
    source: str = Field(min_length=1, max_length=512)
    destination: str = Field(min_length=1, max_length=512)


class CreateBody(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    model: str | None = None
    name: str | None = None
    from_: str | None = Field(None, alias="from", max_length=4096)
    files: dict[str, str] | None = None
    template: str | None = Field(None, max_length=65536)
    system: str | None = Field(None, max_length=65536)
    parameters: dict[str, Any] | None = None
    quantize: str | None = None
    adapters: dict[str, str] | None = None
    stream: bool = True


def _name(model: str | None, name: str | None) -> str:
    n = model or name
    if not n:
        raise InvalidInput("'model' is required", "model")
    return n


def _wire(e: dict[str, Any]) -> dict[str, Any]:
    return {k: e[k] for k in _WIRE if k in e}


async def _progress(work, events: asyncio.Queue) -> AsyncIterator[dict[str, Any]]:
    """Events as they come, until `work` ends (its error becomes the stream's error line)."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            get = asyncio.ensure_future(events.get())
            await asyncio.wait({get, task}, return_when=asyncio.FIRST_COMPLETED)
            if get.done():
                if "status" in (e := get.result()):
                    yield _wire(e)
                continue
            get.cancel()
            while not events.empty():
                if "status" in (e := events.get_nowait()):
                    yield _wire(e)
            task.result()
            return
    finally:
        if not task.done():  # the client went away: stop the pull (a shared transfer goes on for the others)
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


async def _noop() -> None:
    return None


@router.post("/pull")
async def pull(body: PullBody, request: Request, svc: InferenceService = Depends(get_service)):
    name = _name(body.model, body.name)
    # hub=False: Ollama's `namespace/model` is its own registry's; an `hf.co/...` name still goes
    # to the Hub (the service tells the two apart, so this face parses no names)
    await svc.check_pull(name, hub=False, insecure=body.insecure)  # 403/400 before any byte
    if not body.stream:
        await cancel_on_disconnect(request, svc.pull_model(name, hub=False, insecure=body.insecure))
        return {"status": "success"}
    q: asyncio.Queue = asyncio.Queue()
    work = svc.pull_model(name, q.put_nowait, hub=False, insecure=body.insecure)
    return ndjson_response(_progress(work, q), _noop)


@router.delete("/delete")
async def delete(body: DeleteBody, svc: InferenceService = Depends(get_service)) -> Response:
    await svc.delete_model(_name(body.model, body.name))
    return Response(status_code=200)


@router.post("/copy")
async def copy(body: CopyBody, svc: InferenceService = Depends(get_service)) -> Response:
    await svc.copy_model(body.source, body.destination)
    return Response(status_code=200)


@router.post("/create")
async def create(body: CreateBody, svc: InferenceService = Depends(get_service)):
    name = _name(body.model, body.name)
    if body.quantize:
        raise InvalidInput("quantize is not supported: pull or upload the quantization you want", "quantize")
    if body.adapters:
        raise InvalidInput("adapters are not supported by /api/create; put LoRA files in the model's loras/ "
                           "folder", "adapters")
    params = body.parameters
    if params is not None and not all(isinstance(k, str) for k in params):
        raise InvalidInput("parameters must be an object", "parameters")

    async def work() -> None:
        await svc.create_model(name, source=body.from_, files=body.files, template=body.template,
                               system=body.system, parameters=params)

    if not body.stream:
        await work()
        return {"status": "success"}
    q: asyncio.Queue = asyncio.Queue()

    async def steps() -> None:
        q.put_nowait({"status": "parsing modelfile"})
        await work()
        q.put_nowait({"status": "writing manifest"})
        q.put_nowait({"status": "success"})

    return ndjson_response(_progress(steps(), q), _noop)


@router.head("/blobs/{digest}")
async def has_blob(digest: str, svc: InferenceService = Depends(get_service)) -> Response:
    svc.check_blob(digest)
    return Response(status_code=200)


@router.post("/blobs/{digest}")
async def upload_blob(digest: str, request: Request, svc: InferenceService = Depends(get_service)) -> Response:
    length = request.headers.get("content-length")
    await svc.save_blob(digest, request.stream(), int(length) if length and length.isdigit() else None)
    return JSONResponse({}, status_code=201)
