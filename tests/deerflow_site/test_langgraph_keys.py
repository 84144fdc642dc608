"""Every langgraph.json key is accounted for: served, listed as a build setting, warned about or refused."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from deerflow_site.config import parse_config
from deerflow_site.langgraph_keys import KEYS

pytestmark = pytest.mark.backend_free

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "byo_graphs"

# The key paths of LangGraph's langgraph.json schema (libs/cli/schemas/schema.json
# at langgraph f09cfe8): top-level keys, and the sub-keys of the sections this
# server treats key by key.
SCHEMA_KEYS = [
    "python_version", "pip_config_file", "_INTERNAL_docker_tag", "api_version", "auth", "base_image",
    "checkpointer", "checkpointer.path", "checkpointer.serde", "checkpointer.ttl", "dependencies",
    "dockerfile_lines", "encryption", "env", "graphs", "http", "http.app", "http.configurable_headers",
    "http.cors", "http.disable_a2a", "http.disable_assistants", "http.disable_mcp", "http.disable_meta",
    "http.disable_runs", "http.disable_store", "http.disable_threads", "http.disable_ui",
    "http.disable_webhooks", "http.enable_custom_route_auth", "http.logging_headers", "http.middleware_order",
    "http.mount_prefix", "image_distro", "keep_pkg_tools", "pip_installer", "source", "store", "store.index",
    "store.ttl", "ui", "webhooks", "webhooks.env_prefix", "webhooks.headers", "webhooks.url", "node_version",
]  # fmt: skip


def project(tmp_path: Path, data: dict) -> Path:
    (tmp_path / "agent.py").write_text("graph = None\n")
    path = tmp_path / "langgraph.json"
    path.write_text(json.dumps({"graphs": {"agent": "./agent.py:graph"}, **data}))
    return path


def load(tmp_path: Path, data: dict):
    project(tmp_path, data)
    return parse_config({"langgraph_json": "langgraph.json"}, source=tmp_path / "config.yaml").graph_sources()


def test_every_key_of_langgraphs_schema_has_a_treatment_here():
    assert sorted(set(SCHEMA_KEYS) - set(KEYS)) == []


def test_the_docs_table_says_what_each_key_does_here():
    text = (ROOT / "docs" / "graphs.md").read_text()
    rows = dict(re.findall(r"^\| `([^`]+)` \| ([^|]+) \|", text, flags=re.M))
    words = {"honoured": "honoured", "build": "build setting", "warn": "warning", "refuse": "start-up error"}
    assert {key: words[entry.treatment] in rows.get(key, "") for key, entry in KEYS.items()} == dict.fromkeys(
        KEYS, True
    )


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (
            {"auth": {"path": "./auth.py:auth", "allow_langsmith_api_keys": True}},
            "auth.allow_langsmith_api_keys: LangSmith API keys cannot be checked here",
        ),
        ({"checkpointer": {"path": "./saver.py:make"}}, "checkpointer.path: checkpoints are stored in the database"),
        ({"webhooks": {"url": {"require_https": True}}}, "webhooks.url: this URL policy cannot be enforced here"),
    ],
)
def test_a_key_whose_promise_would_be_broken_stops_start_up_naming_it(tmp_path, data, named):
    with pytest.raises(ImproperlyConfigured, match=re.escape(named)) as refused:
        load(tmp_path, data)
    assert str(refused.value).count("\n") == 0


def test_a_missing_capability_is_a_warning_naming_the_key_and_what_happens_instead(tmp_path, caplog):
    data = {"checkpointer": {"serde": {"pickle_fallback": True}}}
    with caplog.at_level(logging.WARNING, logger="deerflow_site.graph_sources"):
        found = load(tmp_path, data)
    assert set(found.graphs) == {"lead_agent", "agent"}
    said = "\n".join(record.getMessage() for record in caplog.records)
    assert "checkpointer.serde: not applied" in said


def test_a_key_set_to_its_default_asks_for_nothing_and_is_not_reported(tmp_path, caplog):
    data = {"http": {"disable_store": False, "app": None}, "store": {"ttl": {}}, "auth": None}
    with caplog.at_level(logging.WARNING, logger="deerflow_site.graph_sources"):
        load(tmp_path, data)
    assert caplog.records == []


def test_the_schema_reference_editors_read_is_accepted_without_a_word(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="deerflow_site.graph_sources"):
        found = load(tmp_path, {"$schema": "https://langgra.ph/schema.json"})
    assert caplog.records == [] and found.not_applicable == []


def test_an_unknown_key_is_a_warning_naming_the_closest_one(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="deerflow_site.graph_sources"):
        load(tmp_path, {"grahps": {}, "http": {"cros": {}}})
    said = "\n".join(record.getMessage() for record in caplog.records)
    assert "grahps: not a langgraph.json key (did you mean 'graphs'?)" in said
    assert "http.cros: not a langgraph.json key (did you mean 'cors'?)" in said


def test_build_settings_and_package_requirements_are_accepted_and_listed_once(tmp_path, caplog):
    data = {"python_version": "3.12", "dockerfile_lines": ["RUN true"], "dependencies": [".", "langchain-openai"]}
    with caplog.at_level(logging.WARNING, logger="deerflow_site.graph_sources"):
        found = load(tmp_path, data)
    assert caplog.records == []
    assert found.not_applicable == ["python_version", "dockerfile_lines", "dependencies: langchain-openai"]


def test_the_sdk_suites_and_our_fixture_projects_load_without_a_word(caplog):
    with caplog.at_level(logging.WARNING, logger="deerflow_site.graph_sources"):
        found = parse_config(
            {"langgraph_json": str(FIXTURES / "langgraph.json")}, source=ROOT / "c.yaml"
        ).graph_sources()
    assert caplog.records == []
    assert found.not_applicable == ["dependencies: some-pip-requirement"]


def test_the_banner_lists_the_build_settings_it_accepted(tmp_path):
    path = project(tmp_path, {"python_version": "3.12", "base_image": "langchain/langgraph-api"})
    (tmp_path / "config.yaml").write_text(f"langgraph_json: {path}\n")
    script = "import django; django.setup(); from deerflow_site.banner import startup_banner; print(*startup_banner(), sep='\\n')"
    shown = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={"DJANGO_SETTINGS_MODULE": "deerflow_site.settings", "DEERFLOW_CONFIG": str(tmp_path / "config.yaml"),
             "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout  # fmt: skip
    assert f"project     {path}" in shown
    assert "not applicable here (build settings): python_version, base_image" in shown


@pytest.mark.parametrize(
    ("prefix", "named"),
    [
        ("tenant", "http.mount_prefix must be a path like '/my-deployment'"),
        ("/tenant/", "http.mount_prefix must be a path like '/my-deployment'"),
        ("/api", "would shadow this server's own /api routes"),
        ("/admin/x", "would shadow this server's own /admin/x routes"),
    ],
)
def test_a_mount_prefix_that_is_not_a_free_path_stops_start_up_in_one_line(tmp_path, prefix, named):
    with pytest.raises(ImproperlyConfigured, match=re.escape(named)) as refused:
        load(tmp_path, {"http": {"mount_prefix": prefix}})
    assert str(refused.value).count("\n") == 0


def test_logging_headers_take_the_configurable_headers_shape(tmp_path):
    assert load(tmp_path, {"http": {"logging_headers": {"includes": ["X-Request-*"]}}}).logging_headers == {
        "includes": ["x-request-*"],
        "excludes": [],
    }
    with pytest.raises(ImproperlyConfigured, match="http.logging_headers must be an object"):
        load(tmp_path, {"http": {"logging_headers": ["x-request-id"]}})
