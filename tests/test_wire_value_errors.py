"""Wire values at the edge of what JSON can say (NaN, Infinity, 1e400, 400-digit integers,
a keep-alive past datetime's range, a batch item of the wrong type, a broken manifest): each
is a clear 400 in the face's envelope, or is handled, never a 500 or a failed start-up.
Plus /metrics token counting on the same server."""

import datetime as dt
import shutil
from pathlib import Path

import httpx
import pytest

from inferd.config import parse_duration
from inferd.registry.discovery import discover
from tests.server import serve
from tests.test_http_foundation import assert_envelope

TINY = "tests/fixtures/gguf/tiny-llama.gguf"
HI = [{"role": "user", "content": "hello world"}]
IRIS = Path("inferd/runtimes/tabular/builtin/iris-classifier/tabular_model.json")


@pytest.fixture(scope="module")
def srv():
    with serve(models=[f"tiny={TINY}"], threads=1) as s:
        yield s


def post_raw(srv, path: str, body: str) -> httpx.Response:
    """JSON text as written: Python's parser (and so the server's) reads 1e400 as inf and NaN as nan."""
    return httpx.post(srv.url + path, content=body, headers={"content-type": "application/json"}, timeout=30)


@pytest.mark.parametrize("option", ['"num_predict": 1e400', '"num_ctx": NaN', '"temperature": -Infinity',
                                    '"top_k": 1' + "0" * 400])
def test_ollama_non_finite_or_huge_options_are_400(srv, option):
    r = post_raw(srv, "/api/generate", '{"model": "tiny", "prompt": "hi", "stream": false, "options": {%s}}' % option)
    assert_envelope("ollama", r, 400, "options.")


def test_nan_keep_alive_is_400_not_a_model_that_never_expires(srv):
    assert_envelope("ollama", post_raw(srv, "/api/generate", '{"model": "tiny", "keep_alive": NaN}'), 400,
                    "not a duration")
    with pytest.raises(ValueError):
        parse_duration(float("nan"))


def test_huge_keep_alive_shows_as_forever_in_ps(srv):
    r = httpx.post(srv.url + "/api/generate", json={"model": "tiny", "keep_alive": 1e300}, timeout=30)
    assert r.status_code == 200 and r.json()["done_reason"] == "load"
    ps = httpx.get(srv.url + "/api/ps")
    assert ps.status_code == 200, ps.text  # was a 500: the expiry is beyond datetime's range
    (m,) = [m for m in ps.json()["models"] if m["name"] == "tiny:latest"]
    assert m["expires_at"] == "2318-01-01T00:00:00Z"
    finite = httpx.post(srv.url + "/api/generate", json={"model": "tiny", "keep_alive": "5m"}, timeout=30)
    assert finite.status_code == 200
    (m,) = [m for m in httpx.get(srv.url + "/api/ps").json()["models"] if m["name"] == "tiny:latest"]
    expires = dt.datetime.fromisoformat(m["expires_at"].replace("Z", "+00:00"))
    assert 200 < (expires - dt.datetime.now(dt.timezone.utc)).total_seconds() <= 301


def test_antfly_batch_item_whose_messages_is_not_a_list_fails_alone(srv):
    good = {"model": "tiny", "messages": HI, "max_tokens": 2}
    r = httpx.post(srv.url + "/ai/v1/generate/batch", timeout=60,
                   json={"requests": [{"body": {"model": "tiny", "messages": 5}}, {"body": good}]})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["summary"] == {"total": 2, "succeeded": 1, "failed": 1}
    assert out["data"][0]["error"]["code"] == "INVALID_REQUEST" and out["data"][1]["response"] is not None


def test_metrics_count_generated_tokens(srv):
    r = httpx.post(srv.url + "/v1/completions", json={"model": "tiny", "prompt": "hello", "max_tokens": 3,
                                                     "temperature": 0}, timeout=30).json()
    text = httpx.get(srv.url + "/metrics").text
    counts = {line.split("type=")[1].split('"')[1]: int(line.rsplit(" ", 1)[1])
              for line in text.splitlines() if line.startswith('inferd_tokens_total{model="tiny"')}
    assert counts["completion"] >= r["usage"]["completion_tokens"] == 3
    assert counts["prompt"] >= r["usage"]["prompt_tokens"] > 0


def test_ml_dir_folder_with_a_broken_manifest_is_skipped_not_fatal(tmp_path):
    ml = tmp_path / "ml"
    for name in ("good", "bad"):
        (ml / name).mkdir(parents=True)
        shutil.copy(IRIS, ml / name / "tabular_model.json")
    (ml / "bad" / "model_manifest.json").write_text("{not json")
    found = discover(tmp_path / "models", ml, [])
    assert [s.name for s in found.specs] == ["good"]
    assert any("bad" in p and "invalid JSON" in p for p in found.problems), found.problems
