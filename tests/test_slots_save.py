"""llama-server's slot routes over real HTTP on the tiny fixture: POST /slots/{id}?action=save|
restore|erase with --slot-save-path, filenames confined to that folder, /slots reporting what
each slot holds, and a restored slot's prefix reused token for token."""

from __future__ import annotations

import httpx
import pytest

from tests.chat_fixtures import generator_dir
from tests.server import serve

TEXT = "the other one is here and there " * 12


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("slots")
    generator_dir(d / "models", "tiny")
    generator_dir(d / "models", "tiny2")
    with serve(models_dir=str(d / "models"), parallel=2, threads=1, slot_save_path=str(d / "saved")) as s:
        s.saved = d / "saved"
        yield s


def complete(s, prompt=TEXT, model="tiny", n=8):
    r = httpx.post(s.url + "/v1/completions", json={"model": model, "prompt": prompt, "max_tokens": n,
                                                    "temperature": 0}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def slot_of(s, model, n_tokens):
    rows = [r for r in httpx.get(s.url + "/slots", params={"model": model}).json() if r["tokens_cached"] == n_tokens]
    assert rows, httpx.get(s.url + "/slots").json()
    return rows[0]["id"]


def act(s, i, action, model="tiny", **body):
    return httpx.post(f"{s.url}/slots/{i}", params={"action": action, "model": model}, json=body or None, timeout=60)


def test_save_erase_restore_round_trip(srv):
    first = complete(srv)
    n = first["usage"]["prompt_tokens"] + first["usage"]["completion_tokens"] - 1  # the last token is not decoded
    i = slot_of(srv, "tiny", n)
    r = act(srv, i, "save", filename="conv1.bin")
    assert r.status_code == 200, r.text
    saved = r.json()
    assert saved["id_slot"] == i and saved["filename"] == "conv1.bin" and saved["n_saved"] == n
    assert saved["n_written"] == (srv.saved / "conv1.bin").stat().st_size > 0
    assert saved["timings"]["save_ms"] >= 0
    # erase every slot: nothing of the conversation is cached any more
    for j in (0, 1):
        e = act(srv, j, "erase")
        assert e.status_code == 200 and e.json()["id_slot"] == j
    assert all(row["tokens_cached"] == 0 for row in httpx.get(srv.url + "/slots", params={"model": "tiny"}).json())
    r = act(srv, 1, "restore", filename="conv1.bin")
    assert r.status_code == 200, r.text
    back = r.json()
    assert back == {"id_slot": 1, "filename": "conv1.bin", "n_restored": n, "n_read": saved["n_written"],
                    "timings": back["timings"]}
    row = next(x for x in httpx.get(srv.url + "/slots", params={"model": "tiny"}).json() if x["id"] == 1)
    assert row["tokens_cached"] == n
    again = complete(srv)
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == first["usage"]["prompt_tokens"] - 1
    assert again["choices"][0]["text"] == first["choices"][0]["text"]
    e = act(srv, 1, "erase")
    assert e.json() == {"id_slot": 1, "n_erased": n}


@pytest.mark.parametrize("name", ["../x", "a/b", "/etc/passwd", "..", ".hidden", "", "a\\b", "x" * 300, "tail."])
def test_filenames_outside_the_folder_are_refused(srv, name):
    r = act(srv, 0, "save", filename=name)
    assert r.status_code == 400
    assert "Invalid filename" in r.json()["error"]["message"]
    assert not (srv.saved.parent / "x").exists() and not (srv.saved / "a").exists()


def test_bad_requests(srv):
    assert act(srv, 0, "save").status_code == 400                       # no filename
    assert act(srv, 9, "erase").status_code == 400                      # no such slot
    assert "Invalid slot ID" in act(srv, 9, "erase").json()["error"]["message"]
    assert act(srv, 0, "frobnicate").status_code == 400
    assert act(srv, 0, "restore", filename="missing.bin").status_code == 404
    assert act(srv, 0, "erase", model="nope").status_code == 404
    r = httpx.post(f"{srv.url}/slots/0", params={"action": "erase"})    # two generators: name one
    assert r.status_code == 400 and "?model=" in r.json()["error"]["message"]


def test_a_file_of_another_model_is_refused(srv, tmp_path):
    """A slot file whose content is not a sequence file (or of another model) is a 400, and the
    slot is left empty, never half loaded."""
    srv.saved.mkdir(exist_ok=True)
    (srv.saved / "junk.bin").write_bytes(b"\0" * 4096)
    r = act(srv, 0, "restore", filename="junk.bin")
    assert r.status_code == 400
    row = next(x for x in httpx.get(srv.url + "/slots", params={"model": "tiny"}).json() if x["id"] == 0)
    assert row["tokens_cached"] == 0


def test_without_slot_save_path_it_is_501(tmp_path):
    generator_dir(tmp_path, "tiny")
    with serve(models_dir=str(tmp_path), parallel=1, threads=1) as s:
        r = httpx.post(f"{s.url}/slots/0", params={"action": "save"}, json={"filename": "a.bin"})
        assert r.status_code == 501
        assert "--slot-save-path" in r.json()["error"]["message"]
