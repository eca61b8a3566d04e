"""Stored responses on disk: they survive a restart (a second server on the same data dir
serves and continues them), the count and age bounds evict the oldest, a database that is not
ours or is damaged stops the start with a message naming the file (never silent loss), and
a server that stores nothing leaves no file behind."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time

import httpx
import pytest

from inferd.api.app import create_app
from inferd.config import load_settings
from inferd.errors import ConfigError, NotFound
from inferd.storage.responses import ResponseStore, StoreCorrupt
from tests.chat_fixtures import generator_dir
from tests.server import serve
from tests.test_conformance_openai import check

ENDLESS = 'root ::= ([a-z]{4} " ")+ "zzzzzzzz."'


def response(i: int, created: float | None = None) -> dict:
    return {"id": f"resp_{i:032x}", "object": "response", "created_at": created or time.time(), "output": []}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    generator_dir(d, "tiny", n_ctx=1024)
    return d


def create(s, **body):
    r = httpx.post(s.url + "/v1/responses", json={"model": "tiny", "max_output_tokens": 4, "grammar": ENDLESS,
                                                  **body}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_a_stored_response_survives_a_restart_and_can_be_continued(models, tmp_path):
    data = tmp_path / "data"
    with serve(models_dir=str(models), data_dir=str(data), threads=1, parallel=2) as s:
        first = create(s, input="remember me", instructions="sys")
    assert (data / "responses.sqlite3").exists()
    with serve(models_dir=str(models), data_dir=str(data), threads=1, parallel=2) as s:
        got = httpx.get(f"{s.url}/v1/responses/{first['id']}")
        assert got.status_code == 200 and got.json() == first
        items = httpx.get(f"{s.url}/v1/responses/{first['id']}/input_items").json()
        assert items["data"][0]["content"] == [{"type": "input_text", "text": "remember me"}]
        second = create(s, input="and now?", previous_response_id=first["id"])
        assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"]


def test_count_bound_evicts_the_oldest(models, tmp_path):
    with serve(models_dir=str(models), data_dir=str(tmp_path), threads=1, responses_max_count=3) as s:
        ids = [create(s, input=f"n{i}", max_output_tokens=1)["id"] for i in range(5)]
        codes = [httpx.get(f"{s.url}/v1/responses/{i}").status_code for i in ids]
    assert codes == [404, 404, 200, 200, 200]


def test_age_bound_drops_old_rows_on_write_on_read_and_at_open(tmp_path):
    path = tmp_path / "responses.sqlite3"
    store = ResponseStore(path, max_count=100, max_age=3600)
    store.put(response(1, time.time() - 7200), [], [])  # older than the bound: gone with its own write
    store.put(response(2, time.time() - 60), [], [])
    store.put(response(3), [], [])
    assert store.count() == 2
    with pytest.raises(NotFound):
        store.get(response(1)["id"])
    store.close()
    tight = ResponseStore(path, max_count=100, max_age=30)  # a tighter bound at the next start
    assert tight.count() == 1 and tight.get(response(3)["id"])["id"] == response(3)["id"]
    with pytest.raises(NotFound):
        tight.get(response(2)["id"])
    tight.close()
    smaller = ResponseStore(path, max_count=1, max_age=0)  # 0: no age bound
    assert smaller.count() == 1
    smaller.close()


def test_wal_mode_and_atomic_replace(tmp_path):
    store = ResponseStore(tmp_path / "r.sqlite3")
    store.put(response(7), [{"id": "msg_1"}], [{"role": "user", "content": "x"}])
    store.put({**response(7), "status": "completed"}, [{"id": "msg_1"}], [])
    assert store.get(response(7)["id"])["status"] == "completed" and store.count() == 1
    store.close()
    db = sqlite3.connect(tmp_path / "r.sqlite3")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


def test_no_file_until_the_first_stored_response(models, tmp_path):
    with serve(models_dir=str(models), data_dir=str(tmp_path), threads=1) as s:
        create(s, input="x", store=False, max_output_tokens=1)
        assert httpx.get(f"{s.url}/v1/responses/resp_{'0' * 32}").status_code == 404
    assert not (tmp_path / "responses.sqlite3").exists()


def test_a_failed_write_is_a_clear_error_never_a_silent_loss(models, tmp_path):
    with serve(models_dir=str(models), data_dir=str(tmp_path), threads=1) as s:
        (tmp_path / "responses.sqlite3").mkdir()  # after the start: the first write cannot create the file
        r = httpx.post(s.url + "/v1/responses", json={"model": "tiny", "input": "x", "max_output_tokens": 2},
                       timeout=60)
        assert r.status_code == 500 and r.json()["error"]["code"] == "storage_failed"
        assert "responses.sqlite3" in r.json()["error"]["message"]
        with httpx.stream("POST", s.url + "/v1/responses", timeout=60, json={
                "model": "tiny", "input": "x", "max_output_tokens": 2, "grammar": ENDLESS, "stream": True}) as st:
            evs = [json.loads(x[6:]) for x in st.iter_lines() if x.startswith("data: ")]
        assert [e["type"] for e in evs[-2:]] == ["error", "response.incomplete"]
        assert evs[-2]["code"] == "storage_failed" and evs[-1]["response"]["store"] is False
        for e in evs:
            check("ResponseStreamEvent", e)
        assert [e["sequence_number"] for e in evs] == list(range(len(evs)))
        assert create(s, input="y", store=False, max_output_tokens=1)["store"] is False  # unstored still work


@pytest.mark.parametrize("damage", ["garbage", "foreign", "header"])
def test_a_corrupt_database_stops_the_start_naming_the_file(tmp_path, damage):
    path = tmp_path / "responses.sqlite3"
    if damage == "garbage":
        path.write_bytes(b"this is not a database\n" * 200)
    elif damage == "foreign":
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE notes (x)")
        db.commit()
        db.close()
    else:  # a real store whose header page was overwritten
        store = ResponseStore(path)
        for i in range(50):
            store.put(response(i), [], [{"role": "user", "content": "x" * 500}])
        store.close()
        raw = bytearray(path.read_bytes())
        raw[0:100] = b"\x00" * 100
        path.write_bytes(bytes(raw))
    before = path.read_bytes()
    settings = load_settings({"models_dir": "/nonexistent", "ml_dir": "/nonexistent", "builtins": False,
                              "data_dir": str(tmp_path)})
    with pytest.raises(StoreCorrupt) as e:
        create_app(settings)
    assert str(path) in str(e.value)
    assert path.read_bytes() == before  # nothing overwritten


def test_the_cli_refuses_to_start_on_a_corrupt_database(tmp_path):
    (tmp_path / "responses.sqlite3").write_bytes(b"\x01" * 4096)
    p = subprocess.run([sys.executable, "-m", "inferd", "serve", "--no-builtins", "--models-dir", str(tmp_path / "m"),
                        "--data-dir", str(tmp_path), "--port", "0"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert str(tmp_path / "responses.sqlite3") in p.stderr


def test_bounds_flags_reach_the_settings():
    s = load_settings({"responses_max_count": 5, "responses_max_age": "7d"})
    assert s.responses_max_count == 5 and s.responses_max_age == 7 * 86400
    with pytest.raises(ConfigError, match="responses_max_count"):
        load_settings({"responses_max_count": 0})
