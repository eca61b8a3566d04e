import json

import pytest

from inferd.config import is_loopback, load_settings, parse_duration
from inferd.errors import ConfigError


@pytest.mark.parametrize("raw,secs", [(300, 300), ("300", 300), ("5m", 300), ("1h", 3600), ("250ms", 0.25),
                                      ("30s", 30), ("-1", float("inf"))])
def test_durations(raw, secs):
    assert parse_duration(raw) == secs


def test_bad_duration_is_a_config_error():
    with pytest.raises(ConfigError, match="keep_alive"):
        load_settings({"keep_alive": "soon"})


def test_precedence_cli_over_env_over_file(tmp_path, monkeypatch):
    cfg = tmp_path / "inferd.toml"
    cfg.write_text('port = 9001\nparallel = 3\nkeep-alive = "10m"\nmodels = ["a=/x"]\n')
    s = load_settings({}, cfg)
    assert (s.port, s.parallel, s.keep_alive, s.models) == (9001, 3, 600, ["a=/x"])
    monkeypatch.setenv("INFERD_PORT", "9002")
    monkeypatch.setenv("INFERD_MODELS", "b=/y,c=/z")
    s = load_settings({}, cfg)
    assert (s.port, s.parallel, s.models) == (9002, 3, ["b=/y", "c=/z"])
    s = load_settings({"port": 9003, "parallel": None}, cfg)
    assert (s.port, s.parallel) == (9003, 3)


def test_json_config_and_env_config_path(tmp_path, monkeypatch):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"host": "::1", "api_key": "k"}))
    monkeypatch.setenv("INFERD_CONFIG", str(cfg))
    s = load_settings({})
    assert s.host == "::1" and s.api_key.get_secret_value() == "k"


def test_unknown_config_key_is_rejected(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("prot = 1\n")
    with pytest.raises(ConfigError, match="prot"):
        load_settings({}, cfg)


@pytest.mark.parametrize("host,ok", [("127.0.0.1", True), ("localhost", True), ("::1", True),
                                     ("127.0.0.2", True), ("0.0.0.0", False), ("192.168.1.5", False),
                                     ("example.com", False)])
def test_loopback(host, ok):
    assert is_loopback(host) is ok
    s = load_settings({"host": host})
    if ok:
        s.check_bind()
    else:
        with pytest.raises(ConfigError, match="allow-insecure-public-bind"):
            s.check_bind()
        load_settings({"host": host, "allow_insecure_public_bind": True}).check_bind()
