"""Graphs from configuration: config.yaml's graphs:/dependencies: and langgraph_json: resolve to one registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from deerflow_site.config import parse_config
from deerflow_site.graph_sources import parse_env_file

pytestmark = pytest.mark.backend_free  # no Django database: the SQLite pass runs it once

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "byo_graphs"


def sources(raw: dict, source: Path):
    return parse_config(raw, source=source).graph_sources()


def test_langgraph_json_graphs_folders_and_env_file_are_read_relative_to_it(tmp_path):
    found = sources({"langgraph_json": str(FIXTURES / "langgraph.json")}, tmp_path / "config.yaml")

    assert found.graphs["lead_agent"] == "runs.demo_agent:graph"  # the built-in graph stays
    assert found.graphs["compiled_agent"] == f"{FIXTURES / 'compiled_graph.py'}:graph"
    assert found.graphs["deps_agent"] == f"{FIXTURES / 'deps_graph.py'}:graph"  # {"path": ...} form
    # A pip requirement in dependencies is not an import folder.
    assert found.dependencies == [str(FIXTURES / "deps")]
    assert found.env == {"BYO_GREETING": "hello from .env"}


def test_config_graphs_are_relative_to_the_config_file_and_win_over_langgraph_json(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "lg.json").write_text(
        json.dumps({"graphs": {"a": "./one.py:graph", "b": "pkg.mod:graph"}, "env": {"K": 1}})
    )
    raw = {
        "langgraph_json": "lg.json",
        "graphs": {"b": "./sub/two.py:builder", "lead_agent": "my.agents:lead"},
        "dependencies": ["./sub"],
    }
    found = sources(raw, tmp_path / "config.yaml")

    assert found.graphs == {
        "lead_agent": "my.agents:lead",  # replaced by the config
        "a": f"{tmp_path / 'one.py'}:graph",
        "b": f"{tmp_path / 'sub' / 'two.py'}:builder",
    }
    assert found.dependencies == [str(tmp_path / "sub")]
    assert found.env == {"K": "1"}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"graphs": {"x": "no_colon"}}, "graphs.x: Value error, must be './path/to/file.py:attr'"),
        ({"graphs": {"x": "./a.py:not-a-name"}}, "is not a Python name"),
        ({"graphs": {"x": "bad module:graph"}}, "neither a .py file path nor a dotted module name"),
        ({"langgraph_json": "missing.json"}, "missing.json does not exist"),
    ],
)
def test_malformed_graph_sources_stop_start_up_naming_the_key(tmp_path, raw, message):
    with pytest.raises(ImproperlyConfigured, match=message.replace(".", r"\.").replace("(", r"\(")):
        sources(raw, tmp_path / "config.yaml")


def test_a_malformed_langgraph_json_is_named(tmp_path):
    (tmp_path / "langgraph.json").write_text('{"graphs": {"x": 3}}')
    with pytest.raises(ImproperlyConfigured, match=r"langgraph\.json.*graphs\.x"):
        sources({"langgraph_json": "langgraph.json"}, tmp_path / "config.yaml")


def test_env_files_accept_export_quotes_and_comments(tmp_path):
    path = tmp_path / ".env"
    path.write_text("# comment\nexport A='one two'\nB=2 # trailing\nnot a line\nC=\"x=y\"\n")
    assert parse_env_file(path) == {"A": "one two", "B": "2", "C": "x=y"}
