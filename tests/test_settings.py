"""One source per setting (issue 28): the option table (inferd/settings_table.py, read from the
fields of Settings) is what the flags, the environment, the config file, the docs, RuntimeOptions
and the cluster config agree with; bad values are refused naming the flag; and the command
modules do not import inferd.cli back."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from inferd import settings_doc
from inferd.cli import SERVE_COMMAND, build_parser, main
from inferd.cli_api import settings_from
from inferd.cluster.config import ModelDeployment
from inferd.cluster.config import parse as parse_cluster
from inferd.config import Settings, load_settings
from inferd.errors import ConfigError
from inferd.runtimes.options import RuntimeOptions
from inferd.service.loading import runtime_options
from inferd.settings_table import GROUPS, OPTIONS, Option, in_scopes
from tests.test_layering import MODULES, imports, resolve

SETTINGS = [o for o in OPTIONS.values() if o.setting]


@pytest.fixture(autouse=True)
def _no_inferd_env(monkeypatch):
    """Defaults are compared: an INFERD_* variable of the shell running the tests must not count."""
    import os

    for k in list(os.environ):
        if k.startswith("INFERD_"):
            monkeypatch.delenv(k)


def _subparser(parser: argparse.ArgumentParser, *path: str) -> argparse.ArgumentParser:
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


def test_every_serve_flag_has_an_option_and_every_option_a_serve_flag():
    serve = _subparser(build_parser(), "serve")
    by_flag = {s: a for a in serve._actions for s in a.option_strings if s not in ("-h", "--help")}
    expected = {f: o for o in in_scopes(SERVE_COMMAND.scopes) for f in o.flags}
    assert set(by_flag) - set(expected) == set(), "serve flags with no Option"
    assert set(expected) - set(by_flag) == set(), "Options serve lacks"
    assert all(by_flag[f].dest == o.name for f, o in expected.items())
    # every setting reaches `serve`; the switches that are not settings are the few command-line ones
    assert {o.name for o in SETTINGS} <= {o.name for o in expected.values()}
    assert {o.name for o in expected.values() if not o.setting} == {"config", "ray", "cluster_config", "hf",
                                                                      "gguf", "print_path"}
    help_text = serve.format_help()
    assert "generation slots per model (default: 4)" in " ".join(help_text.split())


def test_the_table_is_the_settings_model():
    assert {o.name for o in SETTINGS} == set(Settings.model_fields)
    flags = [f for o in OPTIONS.values() for f in o.flags]
    assert len(flags) == len(set(flags)), "a flag declared twice"
    for o in OPTIONS.values():
        assert o.group in GROUPS and o.help and o.scopes and o.flags, o.name
    kinds = {o.name: o.kind for o in SETTINGS}
    assert (kinds["max_memory"], kinds["keep_alive"], kinds["parallel"], kinds["cache_dtype"],
            kinds["models"], kinds["api_key"], kinds["builtins"]) == ("size", "duration", "int", "choice",
                                                                      "list", "secret", "bool")
    assert OPTIONS["parallel"].ge == 1 and OPTIONS["parallel"].le == 256
    assert OPTIONS["cache_dtype"].choices == ("f16", "bf16", "q8_0", "q4_0", "f32")
    assert OPTIONS["builtins"].flags == ("--no-builtins",) and OPTIONS["ctx_size"].flags == ("-c", "--ctx-size")


def test_the_docs_region_is_current():
    text = settings_doc.DOC.read_text()
    assert settings_doc.rewrite(text) == text, "run: python -m inferd.settings_doc --write"
    region = text[text.index(settings_doc.BEGIN):text.index(settings_doc.END)]
    for o in OPTIONS.values():
        assert f"`{o.flags[-1]}" in region and (o.env is None or f"`{o.env}`" in region), o.name
    assert "| `--parallel` | `INFERD_PARALLEL` | `parallel` | `4` |" in region
    assert main_doc(["--check"]) == 0


def test_the_doc_generator_prints_the_tables(capsys):
    assert main_doc([]) == 0
    out = capsys.readouterr().out
    assert out == settings_doc.table() and out.count("### ") == len(GROUPS)
    assert "| `--max-memory` | `INFERD_MAX_MEMORY` | `max_memory` | 75% of RAM |" in out


def main_doc(argv: list[str]) -> int:
    return settings_doc.main(argv)


def test_a_stale_docs_region_is_found_and_rewritten(tmp_path):
    doc = tmp_path / "c.md"
    doc.write_text(f"# t\n\n{settings_doc.BEGIN}\n| old |\n{settings_doc.END}\n\nafter\n")
    assert main_doc(["--check", str(doc)]) == 1
    assert main_doc(["--write", str(doc)]) == 0
    text = doc.read_text()
    assert "| old |" not in text and text.endswith(f"{settings_doc.END}\n\nafter\n") and "`--max-memory`" in text
    assert main_doc(["--check", str(doc)]) == 0
    doc.write_text("no markers")
    with pytest.raises(ValueError, match="settings:begin"):
        settings_doc.rewrite(doc.read_text())


def test_defaults_agree_between_settings_runtime_options_and_the_cluster_config():
    defaults = load_settings({})
    # a runtime built with no options is a runtime of a server started with no flags
    assert RuntimeOptions() == runtime_options(defaults)
    assert ModelDeployment("m", Path("/m")).parallel == defaults.parallel == OPTIONS["parallel"].default
    assert parse_cluster({"models": [{"name": "m", "path": "/m"}]}).models[0].parallel == defaults.parallel
    # no flag carries a default of its own: `serve` with no flags is Settings' defaults
    assert settings_from(build_parser().parse_args(["serve"])).model_dump() == defaults.model_dump()
    for o in SETTINGS:  # the table's default is the field's (a folder's as written: ~ unexpanded)
        held = getattr(defaults, o.name)
        assert (o.default.expanduser() if o.kind == "path" and o.default else o.default) == held, o.name


def _sample(o: Option) -> tuple[Any, Any]:
    """A value unlike the default, as written in env / file, and as Settings holds it."""
    d = o.default
    if o.kind == "bool":
        return str(not d).lower(), not d
    if o.kind == "int":
        v = (d if d is not None else int(o.ge or 0)) + 1
        v = v if o.le is None or v <= o.le else d - 1
        return str(v), v
    if o.kind == "float":
        return str(d + 1.5), d + 1.5
    if o.kind == "size":
        return str(d + 4096), d + 4096
    if o.kind == "duration":
        return "7m", 420.0
    if o.kind == "choice":
        c = next(c for c in o.choices if c != d)
        return c, c
    if o.kind == "list":
        return "a=/x,b=/y", ["a=/x", "b=/y"]
    if o.kind == "path":
        return f"/tmp/inferd-{o.name}", Path(f"/tmp/inferd-{o.name}")
    return f"value-{o.name}", f"value-{o.name}"


def _held(s: Settings, name: str) -> Any:
    v = getattr(s, name)
    return v.get_secret_value() if hasattr(v, "get_secret_value") else v


@pytest.mark.parametrize("o", SETTINGS, ids=lambda o: o.name)
def test_flag_env_and_file_key_reach_the_same_setting(o, monkeypatch, tmp_path):
    raw, want = _sample(o)
    assert _held(load_settings({}), o.name) != want
    monkeypatch.setenv(o.env, raw)
    assert _held(load_settings({}), o.name) == want, o.env
    monkeypatch.delenv(o.env)
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({o.name: raw}))
    assert _held(load_settings({}, cfg), o.name) == want, "config key"
    if o.kind == "bool":
        argv = [o.flags[-1]]
    elif o.repeat:
        argv = [x for item in raw.split(",") for x in (o.flags[-1], item)]
    else:
        argv = [o.flags[-1], raw]
    assert _held(settings_from(build_parser().parse_args(["serve", *argv])), o.name) == want, o.flags


@pytest.mark.parametrize("argv,says", [
    (["--parallel", "0"], "argument --parallel: must be at least 1 (got 0)"),
    (["--parallel", "300"], "argument --parallel: must be at most 256 (got 300)"),
    (["--parallel", "four"], "argument --parallel: not an integer: 'four'"),
    (["--port", "70000"], "argument --port: must be at most 65535"),
    (["--max-memory", "8XB"], "argument --max-memory: not a size: '8XB'"),
    (["--keep-alive", "soon"], "argument --keep-alive: not a duration: 'soon'"),
    (["--media-fetch-timeout", "0"], "argument --media-fetch-timeout: must be more than 0"),
    (["--cache-dtype", "q9"], "argument --cache-dtype: invalid choice: 'q9'"),
])
def test_a_bad_flag_value_is_refused_naming_the_flag(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        main(["serve", *argv])
    assert e.value.code == 2 and says in capsys.readouterr().err


def test_a_bad_env_or_file_value_is_refused_naming_key_flag_and_variable(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("INFERD_PARALLEL", "0")
    assert main(["models", "--no-builtins", "--models-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "parallel (--parallel, INFERD_PARALLEL)" in err and "greater than or equal to 1" in err
    monkeypatch.delenv("INFERD_PARALLEL")
    cfg = tmp_path / "c.toml"
    cfg.write_text('max_body_bytes = "lots"\n')
    with pytest.raises(ConfigError, match=r"max_body_bytes \(--max-body-bytes, INFERD_MAX_BODY_BYTES\): not a size"):
        load_settings({}, cfg)
    with pytest.raises(ConfigError, match="parallel must be at most 256"):
        parse_cluster({"models": [{"name": "m", "path": "/m", "parallel": 300}]})


def test_no_command_module_imports_the_cli_back():
    """`cli -> cluster.cli / registry.pull.cli -> cli` was a circle (function-level imports of
    inferd.cli's private helpers): the command modules reach only inferd.cli_api now (that no
    cycle remains anywhere is test_layering's check)."""
    back = [name for name, path in MODULES.items() if name not in ("inferd.cli", "inferd.__main__")
            and "inferd.cli" in {resolve(i) for i in imports(path)}]
    assert back == []
