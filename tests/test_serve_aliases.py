"""openai-server's command forms as aliases of `inferd serve` (issue 27): `inferd local PATH`
and `inferd hf-model REPO [QUANT]` (against the fake Hub), the projector found beside a
single GGUF file, and --mmproj-n-threads / --no-mmproj-gpu reaching the runtime options."""

from __future__ import annotations

import shutil
from pathlib import Path

from inferd.cli import build_parser
from inferd.cli_api import settings_from
from inferd.registry.pull.cli import prepare_serve
from inferd.service.loading import runtime_options
from tests.test_pull_cli import REPO, SHARDS, hub, inferd  # noqa: F401

GGUF = Path(__file__).parent / "fixtures" / "gguf"


def test_local_and_hf_model_are_serve_aliases(hub, tmp_path):  # noqa: F811
    r = inferd("local", str(SHARDS[0]), "--print-path", hub=hub)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(SHARDS[0].resolve())
    r = inferd("hf-model", REPO, "Q4_K_M", "--models-dir", str(tmp_path), "--print-path", hub=hub)
    assert r.returncode == 0, r.stderr
    path = Path(r.stdout.strip())
    assert path == tmp_path / "generators" / "acme" / "tiny-GGUF" / "Q4_K_M"
    # no quant, not a terminal: the same non-interactive pick as `inferd pull`, from the local copy now
    r = inferd("hf-model", REPO, "--models-dir", str(tmp_path), "--print-path", hub=hub)
    assert r.returncode == 0 and Path(r.stdout.strip()) == path
    r = inferd("local", str(tmp_path / "missing.gguf"), hub=hub)
    assert r.returncode == 2 and "no such file" in r.stderr


def _prepared(*argv: str):
    ns = build_parser().parse_args(list(argv))
    settings = settings_from(ns)
    assert prepare_serve(ns, settings) is None
    return settings


def test_a_projector_beside_a_single_gguf_is_found(tmp_path):
    shutil.copy(GGUF / "tiny-llama.gguf", tmp_path / "tiny.gguf")
    s = _prepared("local", str(tmp_path / "tiny.gguf"), "--no-builtins", "--models-dir", "/nonexistent")
    assert s.mmproj == [] and s.models == [f"generator:tiny={tmp_path / 'tiny.gguf'}"]
    shutil.copy(GGUF / "mmproj-tiny.gguf", tmp_path / "mmproj-tiny.gguf")
    s = _prepared("local", str(tmp_path / "tiny.gguf"), "--no-builtins", "--models-dir", "/nonexistent")
    assert s.mmproj == [str(tmp_path / "mmproj-tiny.gguf")]
    from inferd.service import discover_all

    spec = next(x for x in discover_all(s).specs if x.name == "tiny")
    assert "vision" in spec.capabilities and spec.manifest["mmproj"] == str(tmp_path / "mmproj-tiny.gguf")
    # an explicit --mmproj wins
    other = tmp_path / "other" / "proj.gguf"
    other.parent.mkdir()
    shutil.copy(GGUF / "mmproj-tiny.gguf", other)
    s = _prepared("serve", "--gguf", str(tmp_path / "tiny.gguf"), "--mmproj", str(other), "--no-builtins")
    assert s.mmproj == [str(other)]


def test_mmproj_flags_reach_the_runtime(tmp_path):
    s = _prepared("local", str(GGUF / "tiny-llama.gguf"), "--mmproj-n-threads", "3", "--no-mmproj-gpu",
                  "--no-builtins")
    opts = runtime_options(s)
    assert opts.mmproj_threads == 3 and opts.mmproj_gpu is False
    assert runtime_options(_prepared("serve", "--no-builtins")).mmproj_gpu is True


def test_projector_runs_with_the_threads_asked_for(tmp_path):
    from inferd.models import ModelKind
    from inferd.registry.discovery import make_spec
    from inferd.runtimes.llama_cpp import load_generator
    from inferd.runtimes.options import RuntimeOptions

    d = tmp_path / "m"
    d.mkdir()
    shutil.copy(GGUF / "tiny-llama.gguf", d / "model.gguf")
    shutil.copy(GGUF / "mmproj-tiny.gguf", d / "mmproj-tiny.gguf")
    spec = make_spec("tiny", d, "cli", ModelKind.GENERATOR)
    g = load_generator(spec, RuntimeOptions(threads=1, parallel=1, n_ctx=256, mmproj_threads=2, mmproj_gpu=False))
    try:
        assert g.projector is not None and g.projector.n_threads == 2 and g.projector.use_gpu is False
    finally:
        g.close()
