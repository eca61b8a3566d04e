"""Fields the Antfly spec names that inferd used to parse and drop (issue 27): extract
`inputs[].metadata` comes back on its item."""

from tests.extract_fixtures import extract_srv, post, reference  # noqa: F401

REF = reference("tiny-gliner")


def test_extract_metadata_is_echoed_per_item(extract_srv):
    meta = {"doc": "a-17", "page": 3, "tags": ["x", {"nested": True}]}
    res = post(extract_srv, {"model": "tiny-gliner", "schema": {"entities": REF["labels"]},
                             "inputs": [{"id": "a", "content": REF["texts"][0], "metadata": meta},
                                        {"content": REF["texts"][0]}]})
    assert res.status_code == 200, res.text
    a, b = res.json()["data"]
    assert a["id"] == "a" and a["metadata"] == meta
    assert "metadata" not in b  # none given, none returned


def test_v1_models_lists_context_and_embedding_sizes():
    """openai-server lists each model with its context and embedding dimensions: llama-server's
    `meta` (n_ctx_train, n_embd from the GGUF header; n_ctx once loaded), read by the client."""
    import openai

    from tests.server import serve

    gguf = "tests/fixtures/gguf/tiny-llama.gguf"
    with serve(models=[f"tiny={gguf}", f"embedder:tiny-emb={gguf}"], threads=1, parallel=1) as s:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="x")
        listed = {m.id: m.model_extra["meta"] for m in client.models.list()}
        assert listed == {"tiny": {"n_ctx_train": 256, "n_embd": 64}, "tiny-emb": {"n_ctx_train": 256, "n_embd": 64}}
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        assert client.models.retrieve("tiny").model_extra["meta"]["n_ctx"] == 256


def test_image_parts_without_a_projector(caplog):
    """Default: a 400 naming the capability (GenAIServer: an incompatible model capability is
    a 400). --ignore-images-without-projector: openai-server's behaviour, the image parts are
    dropped with a warning and the answer is the text-only one."""
    import logging

    import httpx

    from tests.server import serve
    from tests.vision_helpers import data_uri
    from PIL import Image

    img = {"type": "image_url", "image_url": {"url": data_uri(Image.new("RGB", (8, 8)))}}
    text = {"type": "text", "text": "describe"}
    ask = {"model": "tiny", "max_tokens": 6, "temperature": 0}
    gguf = "tests/fixtures/gguf/tiny-llama.gguf"
    with serve(models=[f"tiny={gguf}"], threads=1, parallel=1) as s:
        r = httpx.post(s.url + "/v1/chat/completions", json={**ask, "messages": [{"role": "user", "content": [text, img]}]})
        assert r.status_code == 400 and "vision projector" in r.json()["error"]["message"]
    with serve(models=[f"tiny={gguf}"], threads=1, parallel=1, ignore_images_without_projector=True) as s:
        with caplog.at_level(logging.WARNING, "inferd.generation"):
            r = httpx.post(s.url + "/v1/chat/completions",
                           json={**ask, "messages": [{"role": "user", "content": [text, img]}]})
        assert r.status_code == 200, r.text
        assert "ignoring 1 image part" in caplog.text
        plain = httpx.post(s.url + "/v1/chat/completions", json={**ask, "messages": [{"role": "user", "content": [text]}]})
        assert r.json()["choices"][0]["message"] == plain.json()["choices"][0]["message"]
        r = httpx.post(s.url + "/api/chat", json={"model": "tiny", "stream": False, "messages": [
            {"role": "user", "content": "describe", "images": [data_uri(Image.new("RGB", (8, 8))).split(",")[1]]}]})
        assert r.status_code == 200, r.text
