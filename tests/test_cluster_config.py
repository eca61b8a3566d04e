"""The cluster config file's validation (cluster/config.py): every bad entry is a
ConfigError that names it (the CLI prints it and exits 2), never a bare traceback. No Ray."""

from __future__ import annotations

import pytest

from inferd.cli import main
from inferd.cluster.config import load, parse
from inferd.errors import ConfigError


def test_a_good_entry_parses():
    c = parse({"models": [{"name": "chat", "path": "/m/chat.gguf", "num_replicas": 2, "num_cpus": 0.5,
                           "memory": "1GiB", "resources": {"node_b": 1}, "parallel": 2}]})
    m = c.models[0]
    assert (m.num_replicas, m.num_cpus, m.memory, m.resources, m.parallel) == (2, 0.5, 1 << 30, {"node_b": 1.0}, 2)


@pytest.mark.parametrize("entry,word", [
    ({"num_replicas": "two"}, "num_replicas"),
    ({"num_replicas": 0}, "num_replicas"),
    ({"num_cpus": "lots"}, "num_cpus"),
    ({"num_cpus": -1}, "num_cpus"),
    ({"parallel": "x"}, "parallel"),
    ({"parallel": 0}, "parallel"),
    ({"threads": True}, "threads"),
    ({"resources": {"gpu": "many"}}, "resources"),
    ({"autoscaling": {"min": "a", "max": 2}}, "min"),
    ({"max_replicas_per_node": "one"}, "max_replicas_per_node"),
    ({"max_queued_requests": [1]}, "max_queued_requests"),
])
def test_a_bad_number_is_a_config_error_naming_it(entry, word):
    with pytest.raises(ConfigError, match=word):
        parse({"models": [{"name": "chat", "path": "/m/chat.gguf", **entry}]})


@pytest.mark.parametrize("text", ["[1, 2]", '"models"', "3"])
def test_a_json_file_that_is_not_an_object_is_a_config_error(tmp_path, text):
    p = tmp_path / "cluster.json"
    p.write_text(text)
    with pytest.raises(ConfigError, match="models"):
        load(p)


def test_the_cli_reports_a_bad_config_and_exits_2(tmp_path, capsys):
    p = tmp_path / "cluster.toml"
    p.write_text('[[models]]\nname = "chat"\npath = "/m/chat.gguf"\nnum_replicas = "two"\n')
    assert main(["serve", "--ray", "127.0.0.1:1", "--cluster-config", str(p), "--no-builtins"]) == 2
    assert "num_replicas" in capsys.readouterr().err


def test_replica_metrics_escape_label_values():
    from inferd.cluster.ingress import load_totals, replica_metrics

    rows = [{"model": 'we"ird\\name', "replica": "r1", "node": None, "running": 1, "waiting": 0, "slots": 4,
             "slots_free": 3},
            {"model": 'we"ird\\name', "replica": "r2", "node": "n2", "running": 2, "waiting": 1, "slots": 4,
             "slots_free": 2}]
    lines = replica_metrics(rows).splitlines()
    assert 'inferd_replica_running{model="we\\"ird\\\\name",replica="r1",node=""} 1' in lines
    assert 'inferd_replica_running{model="we\\"ird\\\\name",replica="r2",node="n2"} 2' in lines
    t = load_totals(rows)
    assert (t["running"], t["waiting"], t["slots"], t["slots_free"], t["replicas"]) == (3, 1, 8, 5, 2)
