"""`inferd serve --preload` (issue 31's cold start): which models `auto` names, and a real
server that has its generator loaded before any request asks for it."""

from __future__ import annotations

import time

import httpx
import pytest

from inferd.cli import preload_names
from inferd.errors import ConfigError
from inferd.models import ModelKind, ModelSpec
from tests.chat_fixtures import generator_dir
from tests.child_server import child_server


def spec(name, kind=ModelKind.GENERATOR, source="builtin"):
    return ModelSpec(name=name, kind=kind, format="gguf", path=None, source=source)


BUILTINS = [spec("all-MiniLM-L6-v2", ModelKind.EMBEDDER), spec("smollm2-135m-instruct"), spec("gemma-3-270m")]


def test_auto_is_the_built_in_generators_gemma_first():
    assert preload_names(["auto"], BUILTINS) == ["gemma-3-270m", "smollm2-135m-instruct"]


def test_auto_is_nothing_once_the_operator_configures_a_generator():
    assert preload_names(["auto"], [*BUILTINS, spec("mine", source="models_dir")]) == []


@pytest.mark.parametrize("asked,want", [(["none"], []), ([], []), (["mine", "gemma-3-270m"], ["mine", "gemma-3-270m"])])
def test_none_and_names(asked, want):
    assert preload_names(asked, BUILTINS) == want


def test_auto_or_none_inside_a_list_is_refused():
    with pytest.raises(ConfigError, match="stand alone"):
        preload_names(["auto", "gemma-3-270m"], BUILTINS)


def loaded(url):
    return [m["name"].removesuffix(":latest") for m in httpx.get(url + "/api/ps", timeout=10).json()["models"]]


def test_a_preloaded_generator_is_loaded_without_a_request_and_serves_the_first_one(tmp_path):
    generator_dir(tmp_path, "tiny")
    with child_server(tmp_path, "--preload", "tiny") as (url, _proc):
        deadline = time.time() + 30
        while "tiny" not in loaded(url) and time.time() < deadline:
            time.sleep(0.1)
        assert loaded(url) == ["tiny"]
        r = httpx.post(url + "/v1/completions", json={"model": "tiny", "prompt": "a", "max_tokens": 2}, timeout=60)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1
        metrics = httpx.get(url + "/metrics", timeout=10).text
        assert 'inferd_model_loads_total{model="tiny"} 1' in metrics  # the preload was the only load


def test_without_preload_nothing_loads_before_a_request(tmp_path):
    generator_dir(tmp_path, "tiny")
    with child_server(tmp_path, "--preload", "none") as (url, _proc):
        time.sleep(1.0)
        assert loaded(url) == []


def test_an_unknown_preload_name_stops_the_start(tmp_path):
    with pytest.raises(RuntimeError, match="preload"):
        with child_server(tmp_path, "--preload", "no-such-model"):
            pass
