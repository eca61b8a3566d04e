"""Adding a kind touches only its own files: a toy kind, a "counter" whose runtime returns the
length of each text, is defined here (its kind name, leaf runtime, loader, KindSpec and route)
and registered in the kinds table for the test with one `monkeypatch.setitem(KINDS, ...)`.
A real server then discovers its model folder, lists it in the catalogs it declares (and not
in the others), loads it on the first request, runs it through the shared dynamic batcher and
shows it in /load and /metrics; nothing under inferd/ names it. docs/architecture-kinds.md
walks through this file as the example of adding a kind."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from inferd.kinds import KINDS, kind_dirs, listed_in, parse_kind
from inferd.kinds.spec import KindSpec, batched
from inferd.models import ModelKind, ModelSpec
from inferd.runtimes.options import RuntimeOptions
from tests.server import serve

if TYPE_CHECKING:
    from inferd.service.handles import EncoderHandle

# ---- the toy kind: everything it is, in one place ----------------------------------------------
COUNTER_KIND = ModelKind("counter")  # a new kind name: no edit of inferd/models.py
ROUTE = "/ai/v1/count"


class CountRuntime:
    """The leaf runtime (what would live in inferd/runtimes/counter/): one "forward pass" over a
    batch of texts gives each one's length, in characters or, if the model folder says so, in
    bytes of UTF-8 (so the folder's contents matter to what the model computes)."""

    max_batch_tokens: int | None = None  # no cap of its own: the server's token budget applies

    def __init__(self, unit: str):
        self.unit, self.closed = unit, False

    def run_batch(self, items: Sequence[str]) -> list[int]:
        return [len(t.encode()) if self.unit == "bytes" else len(t) for t in items]

    def close(self) -> None:
        self.closed = True


def load_counter(spec: ModelSpec, opts: RuntimeOptions) -> CountRuntime:
    assert spec.path is not None
    return CountRuntime(json.loads((spec.path / "counter.json").read_text())["unit"])


def capabilities(fmt: str, path: Path, manifest: dict[str, Any]) -> set[str]:
    return {"count_" + json.loads((path / "counter.json").read_text())["unit"]}


COUNTER: KindSpec[EncoderHandle[CountRuntime]] = KindSpec(
    COUNTER_KIND, {"count": batched(load_counter)}, folder="counters", capabilities=capabilities,
    faces=frozenset({"openai", "antfly"}), catalog=lambda s: {"unit": sorted(s.capabilities)[0][len("count_"):]},
    observe="batch", routes=(f"{__name__}:router",))

# ---- its route module (what would be inferd/api/antfly/count.py) -------------------------------
router = APIRouter()


class CountRequest(BaseModel):
    model: str
    input: list[str] = Field(min_length=1, max_length=64)


@router.post(ROUTE)
async def count(req: CountRequest, request: Request) -> dict:
    svc = request.app.state.service
    async with svc.registry.use(req.model, COUNTER) as handle:  # typed: EncoderHandle[CountRuntime]
        counts = await handle.scheduler.submit(req.input, [max(1, len(t)) for t in req.input])
    return {"model": req.model, "unit": handle.runtime.unit, "counts": counts}


# ---- the tests ---------------------------------------------------------------------------------
@pytest.fixture
def counter_kind(monkeypatch):
    """The whole registration: one entry in the kinds table."""
    monkeypatch.setitem(KINDS, COUNTER_KIND, COUNTER)


def models_dir(tmp_path: Path) -> Path:
    for name, unit in (("chars", "characters"), ("team/bytes", "bytes")):
        folder = tmp_path / "counters" / name
        folder.mkdir(parents=True)
        (folder / "model_manifest.json").write_text(json.dumps({"format": "count"}))
        (folder / "counter.json").write_text(json.dumps({"unit": unit}))
    return tmp_path


def test_the_table_knows_a_registered_kind(counter_kind):
    assert parse_kind("counters") is COUNTER_KIND and kind_dirs()["counters"] is COUNTER_KIND
    assert COUNTER_KIND in listed_in("openai") and COUNTER_KIND in listed_in("antfly")
    assert COUNTER_KIND not in listed_in("ollama")
    assert ModelKind("counter") is COUNTER_KIND and COUNTER_KIND == "counter"


def test_a_kind_defined_outside_inferd_is_discovered_listed_loaded_and_observed(counter_kind, tmp_path):
    with serve(models_dir=str(models_dir(tmp_path))) as s:
        # discovery: both folders, with the capabilities the kind's rule read from their files
        found = {spec.name: spec for spec in s.service.models(COUNTER_KIND)}
        assert set(found) == {"chars", "team/bytes"}
        assert found["team/bytes"].capabilities == {"count_bytes"} and found["chars"].format == "count"

        # catalogs: the faces it declares list it, the others do not
        openai = {m["id"]: m for m in httpx.get(s.url + "/v1/models").json()["data"]}
        assert openai["chars"]["kind"] == "counter" and openai["chars"]["capabilities"] == ["count_characters"]
        antfly = httpx.get(s.url + "/ai/v1/models").json()
        types = {m["id"]: m["type"] for m in antfly["data"]}
        assert types["chars"] == types["team/bytes"] == "counter" and set(antfly["counters"]) == {"chars", "team/bytes"}
        assert antfly["counters"]["team/bytes"] == {"capabilities": ["count_bytes"], "inputs": ["text"],
                                                   "format": "count", "unit": "bytes", "loaded": False}
        assert httpx.get(s.url + "/api/tags").json()["models"] == []
        assert httpx.get(s.url + "/v1/models/chars").json()["kind"] == "counter"

        # nothing loaded yet; the first request loads it and runs it through the batcher
        assert "chars" not in httpx.get(s.url + "/load").json()["models"]
        r = httpx.post(s.url + ROUTE, json={"model": "team/bytes", "input": ["héllo", "", "abc"]})
        assert r.status_code == 200, r.text
        assert r.json() == {"model": "team/bytes", "unit": "bytes", "counts": [6, 0, 3]}
        r = httpx.post(s.url + ROUTE, json={"model": "chars", "input": ["héllo"]})
        assert r.json()["counts"] == [5]

        # the observer sees it as a batched model
        load = httpx.get(s.url + "/load").json()["models"]
        assert load["chars"] == {"kind": "counter", "running": 0, "waiting": 0, "slots": 1, "slots_free": 1}
        metrics = httpx.get(s.url + "/metrics").text
        assert 'inferd_model_loaded{model="team/bytes"} 1' in metrics
        # token costs are the texts' lengths, at least 1: 5 + 1 + 3
        assert 'inferd_encoder_tokens_total{model="team/bytes"} 9' in metrics
        state = {m["name"]: m for m in httpx.get(s.url + "/admin/models").json()["models"]}
        assert state["chars"]["loaded"] and state["chars"]["kind"] == "counter"

        # its errors are the server's: an unknown model is a 404, another kind's name a 400
        r = httpx.post(s.url + ROUTE, json={"model": "nope", "input": ["x"]})
        assert r.status_code == 404 and "nope" in r.json()["message"]
        assert httpx.post(s.url + ROUTE, json={"model": "chars", "input": []}).status_code == 400


def test_without_the_registration_the_same_folder_is_nothing(tmp_path):
    """Everything above came from the one table entry: unregistered, the folder is not a model
    and the route does not exist."""
    assert COUNTER_KIND not in KINDS
    with serve(models_dir=str(models_dir(tmp_path))) as s:
        assert s.service.models() == [] or all(m.kind is not COUNTER_KIND for m in s.service.models())
        assert httpx.get(s.url + "/ai/v1/models").json().get("counters") is None
        assert httpx.post(s.url + ROUTE, json={"model": "chars", "input": ["x"]}).status_code == 404


def test_nothing_under_inferd_names_the_toy_kind():
    root = Path(__file__).resolve().parent.parent / "inferd"
    marks = (ROUTE, '"counters"', "CountRuntime", "COUNTER_KIND")  # (the kinds docstring may cite this file)
    named = [f"{p.relative_to(root)}: {m}" for p in root.rglob("*.py") for m in marks if m in p.read_text()]
    assert not named, named
    assert not hasattr(ModelKind, "COUNTER")
