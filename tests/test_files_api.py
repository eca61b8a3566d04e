"""/v1/files through the official openai client and raw HTTP: CRUD, content sniffing, limits,
quota, bad ids, restart, and that a half-written upload is never listed."""

from __future__ import annotations

import io
import json
import struct
import wave
import zlib

import httpx
import openai
import pytest

from tests.server import serve


def png(w: int = 2, h: int = 2, seed: int = 0) -> bytes:
    """A real (decodable) RGB PNG."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\x00" + bytes((seed + x * 40 + y * 90) % 256 for x in range(w * 3)) for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def wav(n: int = 800) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(8000)
        w.writeframes(b"\x01\x00" * n)
    return buf.getvalue()


@pytest.fixture
def srv(tmp_path):
    with serve(data_dir=str(tmp_path / "data"), max_file_bytes=64 * 1024, max_files_total_bytes=100 * 1024) as s:
        yield s


def client(s) -> openai.OpenAI:
    return openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)


def test_crud_through_openai_client(srv, tmp_path):
    c = client(srv)
    data = png(seed=3)
    f = c.files.create(file=("cat.png", data, "image/png"), purpose="vision")
    assert f.id.startswith("file-") and len(f.id) == 29
    assert (f.object, f.bytes, f.filename, f.purpose, f.status) == ("file", len(data), "cat.png", "vision", "processed")
    assert f.created_at > 1_700_000_000
    assert (tmp_path / "data" / "files" / f.id).read_bytes() == data
    meta = json.loads((tmp_path / "data" / "files" / f"{f.id}.json").read_text())
    assert meta["content_type"] == "image/png" and meta["bytes"] == len(data)

    a = c.files.create(file=("tone.wav", wav(), "application/octet-stream"), purpose="user_data")
    got = c.files.retrieve(f.id)
    assert (got.id, got.bytes, got.filename) == (f.id, len(data), "cat.png")
    assert {x.id for x in c.files.list()} == {f.id, a.id}
    assert [x.id for x in c.files.list(purpose="user_data")] == [a.id]
    assert c.files.content(f.id).content == data
    r = httpx.get(f"{srv.url}/v1/files/{a.id}/content")
    assert r.headers["content-type"] == "audio/wav" and r.content == wav()

    # OpenAI's cursor pages: the client follows `after` through has_more.
    assert [x.id for x in c.files.list(limit=1, order="asc")] == [f.id, a.id]       # auto-paginates
    page = httpx.get(f"{srv.url}/v1/files", params={"limit": 1}).json()
    assert (page["has_more"], page["data"][0]["id"]) == (True, page["first_id"])
    assert httpx.get(f"{srv.url}/v1/files", params={"limit": 0}).status_code == 400
    assert httpx.get(f"{srv.url}/v1/files", params={"order": "sideways"}).status_code == 400

    d = c.files.delete(f.id)
    assert (d.id, d.object, d.deleted) == (f.id, "file", True)
    assert not (tmp_path / "data" / "files" / f.id).exists()
    with pytest.raises(openai.NotFoundError):
        c.files.retrieve(f.id)
    with pytest.raises(openai.NotFoundError):
        c.files.delete(f.id)
    assert [x.id for x in c.files.list()] == [a.id]


def test_content_type_is_sniffed_not_trusted(srv):
    up = lambda name, data, ctype: httpx.post(f"{srv.url}/v1/files", data={"purpose": "vision"},  # noqa: E731
                                              files={"file": (name, data, ctype)})
    r = up("x.txt", png(), "text/plain")          # a PNG sent as text is still a PNG
    assert r.status_code == 200 and json.loads(r.text)["filename"] == "x.txt"
    assert httpx.get(f"{srv.url}/v1/files/{r.json()['id']}/content").headers["content-type"] == "image/png"
    r = up("evil.png", b"#!/bin/sh\necho hi\n" * 4, "image/png")   # text claiming to be a PNG
    assert r.status_code == 400, r.text
    assert "unsupported file type" in r.json()["error"]["message"]
    r = up("a.jpg", b"\xff\xd8\xff\xe0" + b"\x00" * 60, "image/png")
    assert r.status_code == 200
    assert httpx.get(f"{srv.url}/v1/files/{r.json()['id']}").json()["content_type"] == "image/jpeg"


def test_bad_requests(srv):
    r = httpx.post(f"{srv.url}/v1/files", data={"purpose": "nonsense"}, files={"file": ("a.png", png(), "image/png")})
    assert r.status_code == 400 and r.json()["error"]["param"] == "purpose"
    r = httpx.post(f"{srv.url}/v1/files", data={"purpose": "vision"})
    assert r.status_code == 400 and "'file' is required" in r.json()["error"]["message"]
    for bad in ["file-..", "..%2F..%2Fetc%2Fpasswd", "%2e%2e", "file-0123456789abcdef0123456X", "file-../x",
                "file-0123456789abcdef01234567.json"]:
        for path in (f"/v1/files/{bad}", f"/v1/files/{bad}/content"):
            r = httpx.get(srv.url + path)
            assert r.status_code == 404, (path, r.status_code)
            assert r.json()["error"]["type"] == "not_found_error"
        assert httpx.delete(f"{srv.url}/v1/files/{bad}").status_code == 404


def test_size_limit_and_quota(srv):
    c = client(srv)
    big = png() + b"\x00" * (64 * 1024)           # over --max-file-bytes (64 KiB)
    with pytest.raises(openai.APIStatusError) as e:
        c.files.create(file=("big.png", big, "image/png"), purpose="vision")
    assert e.value.status_code == 413 and "--max-file-bytes" in e.value.message
    part = png() + b"\x00" * (40 * 1024)          # 40 KiB each: two fit the 100 KiB quota, a third does not
    ids = [c.files.create(file=(f"{i}.png", part, "image/png"), purpose="vision").id for i in range(2)]
    with pytest.raises(openai.APIStatusError) as e:
        c.files.create(file=("3.png", part, "image/png"), purpose="vision")
    assert e.value.status_code == 413 and "quota" in e.value.message
    c.files.delete(ids[0])                         # deleting makes room again
    assert c.files.create(file=("3.png", part, "image/png"), purpose="vision").bytes == len(part)


def test_files_survive_restart_and_partials_are_never_listed(tmp_path):
    data_dir = tmp_path / "data"
    with serve(data_dir=str(data_dir)) as s:
        f = client(s).files.create(file=("a.png", png(seed=9), "image/png"), purpose="vision")
    files = data_dir / "files"
    # What a crash leaves behind: a temp file mid-write, and bytes whose metadata never landed.
    (files / ".tmp-file-00000000000000000000beef").write_bytes(b"\x89PNG half")
    (files / "file-0000000000000000000dead0").write_bytes(png())
    with serve(data_dir=str(data_dir)) as s:
        c = client(s)
        assert [x.id for x in c.files.list()] == [f.id]
        assert c.files.content(f.id).content == png(seed=9)
        assert httpx.get(f"{s.url}/v1/files/file-0000000000000000000dead0").status_code == 404
    assert not (files / ".tmp-file-00000000000000000000beef").exists()


def test_an_uploaded_image_is_read_by_file_id(tmp_path):
    """End to end with the readers: upload through the openai client, reference the id."""
    from tests.test_media_admission import PNG
    from tests.vision_helpers import read_images, reader_models

    with serve(models_dir=str(reader_models(tmp_path)), data_dir=str(tmp_path / "data")) as s:
        f = client(s).files.create(file=("page.png", PNG, "image/png"), purpose="vision")
        r = read_images(s, f.id)
        assert r.status_code == 200, r.text
        client(s).files.delete(f.id)
        assert read_images(s, f.id).status_code == 404


def test_upload_with_the_file_field_alone(srv):
    # openai-server: "POST /v1/files (multipart/form-data, field file)"; no purpose is sent.
    data = png(seed=3)
    r = httpx.post(f"{srv.url}/v1/files", files={"file": ("p.png", data, "image/png")})
    assert r.status_code == 200, r.text
    f = r.json()
    assert (f["purpose"], f["bytes"], f["filename"]) == ("user_data", len(data), "p.png")
    assert httpx.get(f"{srv.url}/v1/files/{f['id']}/content").content == data
