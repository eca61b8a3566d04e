"""Images in chat over HTTP on every face, on the tiny llama + tiny mmproj fixtures: the official
openai client (data URI and uploaded file id), the ollama client (`images`), Antfly
/ai/v1/generate; the capability in catalogs; admission answers before any model work."""

from __future__ import annotations

import base64
import io
import shutil

import httpx
import numpy as np
import ollama
import openai
import pytest
from PIL import Image as PILImage

from tests.server import serve

GGUF = "tests/fixtures/gguf"


def png(seed: int, size: int = 48) -> bytes:
    """A picture whose content survives the projector's resize (random noise would average
    to grey): a coloured field with a band, different per seed."""
    rgb = np.zeros((size, size, 3), np.uint8)
    rgb[..., seed % 3] = 255
    rgb[: size // 2, :, (seed + 1) % 3] = 60 * (seed % 4) + 40
    buf = io.BytesIO()
    PILImage.fromarray(rgb).save(buf, format="PNG")
    return buf.getvalue()


def data_uri(seed: int, size: int = 48) -> str:
    return "data:image/png;base64," + base64.b64encode(png(seed, size)).decode()


def image_msg(url: str, text: str = "what is in the picture?") -> list[dict]:
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": text}]}]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    folder = root / "generators" / "tiny-vlm"
    folder.mkdir(parents=True)
    shutil.copy(f"{GGUF}/tiny-llama.gguf", folder / "model.gguf")
    shutil.copy(f"{GGUF}/mmproj-tiny.gguf", folder / "mmproj-tiny.gguf")
    data = tmp_path_factory.mktemp("data")
    with serve(models_dir=str(root), models=[f"tiny={GGUF}/tiny-llama.gguf"], threads=1,
               data_dir=str(data), max_image_dimension=1024) as s:
        s.data_dir = data
        yield s


def client(srv) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)


def chat(srv, messages, **kw):
    return client(srv).chat.completions.create(model="tiny-vlm", messages=messages, max_tokens=10,
                                               temperature=0, extra_body={"ignore_eos": True}, **kw)


def test_catalogs_report_the_vision_capability(srv):
    models = httpx.get(srv.url + "/v1/models").json()["data"]
    vlm = next(m for m in models if m["id"] == "tiny-vlm")
    assert "vision" in vlm["capabilities"]
    ai = httpx.get(srv.url + "/ai/v1/models").json()["generators"]["tiny-vlm"]
    assert "vision" in ai["capabilities"]
    show = httpx.post(srv.url + "/api/show", json={"model": "tiny-vlm"}).json()
    assert "vision" in show["capabilities"]
    plain = next(m for m in models if m["id"] == "tiny")
    assert "vision" not in plain["capabilities"]


def test_an_image_reaches_the_model_through_the_openai_client(srv):
    a = chat(srv, image_msg(data_uri(1))).choices[0].message.content
    again = chat(srv, image_msg(data_uri(1))).choices[0].message.content
    other = chat(srv, image_msg(data_uri(2))).choices[0].message.content
    text_only = chat(srv, [{"role": "user", "content": "what is in the picture?"}]).choices[0].message.content
    assert a == again and a != other and a != text_only


def test_a_follow_up_turn_reuses_the_cached_image(srv):
    first = chat(srv, image_msg(data_uri(5)))
    follow = image_msg(data_uri(5)) + [{"role": "assistant", "content": first.choices[0].message.content},
                                        {"role": "user", "content": "and the colours?"}]
    second = chat(srv, follow)
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 1


def test_an_uploaded_file_id_works_like_a_data_uri(srv):
    up = client(srv).files.create(file=("picture.png", png(1), "image/png"), purpose="vision")
    assert up.id.startswith("file-") and up.bytes == len(png(1))
    by_id = chat(srv, image_msg(up.id)).choices[0].message.content
    as_file_part = chat(srv, [{"role": "user", "content": [{"type": "file", "file": {"file_id": up.id}},
                                                            {"type": "text", "text": "what is in the picture?"}]}])
    assert by_id == chat(srv, image_msg(data_uri(1))).choices[0].message.content
    assert as_file_part.choices[0].message.content == by_id
    r = httpx.post(srv.url + "/v1/chat/completions", json={"model": "tiny-vlm", "messages": image_msg(
        "file-0123456789abcdef01234567")})
    assert r.status_code == 404  # an id that was never uploaded


def test_ollama_images_on_chat_and_generate(srv):
    c = ollama.Client(host=srv.url)
    opts = {"temperature": 0, "num_predict": 10}
    r1 = c.chat(model="tiny-vlm", messages=[{"role": "user", "content": "what is in the picture?",
                                             "images": [png(1)]}], options=opts)
    r2 = c.chat(model="tiny-vlm", messages=[{"role": "user", "content": "what is in the picture?",
                                             "images": [png(2)]}], options=opts)
    assert r1.message.content and r1.message.content != r2.message.content
    g = c.generate(model="tiny-vlm", prompt="what is in the picture?", images=[png(1)], options=opts)
    assert g.response and g.done


def test_antfly_generate_takes_image_parts_and_batch_refuses_them(srv):
    body = {"model": "tiny-vlm", "messages": image_msg(data_uri(1)), "max_tokens": 5}
    r = httpx.post(srv.url + "/ai/v1/generate", json=body, timeout=60)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
    b = httpx.post(srv.url + "/ai/v1/generate/batch", timeout=60, json={"mode": "sync", "requests": [
        {"custom_id": "a", "body": body},
        {"custom_id": "b", "body": {"model": "tiny-vlm", "messages": [{"role": "user", "content": "hi"}],
                                    "max_tokens": 2}}]}).json()
    assert b["data"][0]["error"]["code"] == "UNSUPPORTED_MULTIMODAL" and b["data"][1]["response"] is not None


def test_refusals_come_before_any_model_work(srv):
    loads = srv.service.registry.loads
    # A model without vision: 400 naming what is missing, never a silent drop of the image.
    r = httpx.post(srv.url + "/v1/chat/completions", json={"model": "tiny", "messages": image_msg(data_uri(1))})
    assert r.status_code == 400 and "vision" in r.json()["error"]["message"]
    r = httpx.post(srv.url + "/api/chat", json={"model": "tiny", "stream": False, "messages": [
        {"role": "user", "content": "x", "images": [base64.b64encode(png(1)).decode()]}]})
    assert r.status_code == 400 and "vision" in r.json()["error"]
    # Malformed image data: 400; an image over --max-image-dimension: 413.
    r = httpx.post(srv.url + "/v1/chat/completions", json={"model": "tiny-vlm", "messages": image_msg(
        "data:image/png;base64," + base64.b64encode(b"not an image at all").decode())})
    assert r.status_code == 400
    r = httpx.post(srv.url + "/ai/v1/generate", json={"model": "tiny-vlm", "messages": image_msg(
        data_uri(1, size=1100))})
    assert r.status_code == 413 and r.json()["error"] == "PAYLOAD_TOO_LARGE"
    r = httpx.post(srv.url + "/v1/chat/completions", json={"model": "tiny-vlm", "messages": image_msg(
        "ftp://example.com/x.png")})
    assert r.status_code == 400 and "scheme" in r.json()["error"]["message"]
    r = httpx.post(srv.url + "/v1/chat/completions", json={"model": "tiny-vlm", "messages": image_msg(
        "https://example.com/x.png")})  # remote media is off by default: data stays on the host
    assert r.status_code == 400
    assert srv.service.registry.loads == loads  # nothing was loaded for any of these
