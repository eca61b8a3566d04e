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
        r = httpx.post(url + "/v1/completions", json={"model": "tiny", "prompt": "a", "max_tokens": 2,
                                                          "ignore_eos": True}, timeout=60)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2
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


# ---- the native prefetch (model.py): the built-in chat model's parse, begun before discovery ----
TINY = __import__("pathlib").Path(__file__).parent / "fixtures" / "gguf" / "tiny-llama.gguf"


def test_a_prefetched_model_is_taken_once_by_the_load_of_its_file():
    from inferd.runtimes.llama_cpp import model

    where = []

    def locate():
        where.append(__import__("threading").current_thread().name)
        return TINY

    model.prefetch(locate, 0)
    first = model.open_model(TINY, 0)
    second = model.open_model(TINY, 0)  # nothing left to take: a load of its own
    try:
        assert where == ["prefetch"] and first is not second and first.n_vocab == second.n_vocab > 0
    finally:
        first.close()
        second.close()


def test_a_prefetch_of_another_file_or_a_failed_locate_is_not_taken_and_is_dropped(tmp_path):
    from inferd.runtimes.llama_cpp import model

    other = tmp_path / "other.gguf"
    other.write_bytes(TINY.read_bytes())
    model.prefetch(lambda: other, 0)

    def refuse():
        raise RuntimeError("not installed")

    model.prefetch(refuse, 0)
    m = model.open_model(TINY, 0)  # neither is this file: a load of its own
    m.close()
    pending = list(model._prefetches)
    assert len(pending) == 1 and pending[0].path.result() == other  # the failed one is forgotten
    model.drop_prefetched()
    assert model._prefetches == []
    kept = pending[0].model.result(30)
    deadline = time.time() + 10
    while kept.ptr is not None and time.time() < deadline:  # closed once ready
        time.sleep(0.05)
    assert kept.ptr is None


@pytest.mark.slow
def test_auto_on_the_built_ins_loads_gemma_then_smollm2_and_answers_from_the_prefetched_parse():
    with child_server(None, "--preload", "auto", "--log-level", "info", builtins=True) as (url, _proc):
        deadline = time.time() + 60
        while len(loaded(url)) < 2 and time.time() < deadline:
            time.sleep(0.1)
        assert sorted(loaded(url)) == ["gemma-3-270m", "smollm2-135m-instruct"]
        r = httpx.post(url + "/v1/completions", json={"model": "gemma-3-270m", "prompt": "The capital of France is",
                                                     "max_tokens": 3, "temperature": 0, "ignore_eos": True},
                       timeout=60)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
        metrics = httpx.get(url + "/metrics", timeout=10).text
        assert 'inferd_model_loads_total{model="gemma-3-270m"} 1' in metrics
