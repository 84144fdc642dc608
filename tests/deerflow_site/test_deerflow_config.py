"""A DeerFlow ``config.yaml`` loads unchanged: variables, version, legacy sections, numbers, run events."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.core.exceptions import ImproperlyConfigured

from deerflow_site.config import CONFIG_VERSION, WARN_OUTDATED, load_config, parse_config

pytestmark = pytest.mark.backend_free

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "deerflow_config.yaml"
SOURCE = Path("config.yaml")


@pytest.fixture
def deerflow_env(monkeypatch, tmp_path):
    monkeypatch.setenv("DEERFLOW_FIXTURE_SQLITE_DIR", str(tmp_path))
    monkeypatch.setenv("DEERFLOW_FIXTURE_MODE", "delta")
    monkeypatch.delenv("DEERFLOW_FIXTURE_UNSET_API_KEY", raising=False)
    monkeypatch.setenv("DEERFLOW_CONFIG", str(FIXTURE))
    return tmp_path


def test_a_deerflow_config_file_loads_unchanged(deerflow_env, caplog):
    with caplog.at_level(logging.WARNING):
        config = load_config()
    database = config.database
    assert (database.backend, database.sqlite_path) == ("sqlite", deerflow_env / "deerflow.db")
    assert database.checkpoint_channel_mode == "delta"
    assert database.checkpoint_delta.snapshot_frequency == 12
    assert database.checkpoint_graph_cache.accessor_graph_max == 32
    assert (database.checkpoint_cache.max_entries, database.checkpoint_cache.ttl_seconds) == (256, 3600)
    assert (config.run_events.backend, config.run_events.max_trace_content) == ("db", 4096)
    assert config.run_events.track_token_usage is False
    assert config.stream_bridge.stream_ttl_seconds == 7200
    assert WARN_OUTDATED % (30, CONFIG_VERSION) in caplog.text
    assert "checkpointer: is deprecated — use `database` instead. Read as database: backend: sqlite" in caplog.text
    assert "checkpointer.connection_string checkpoints.db is not used" in caplog.text


def test_a_missing_variable_is_an_error_naming_it_and_the_key(deerflow_env, monkeypatch):
    monkeypatch.delenv("DEERFLOW_FIXTURE_MODE")
    with pytest.raises(ImproperlyConfigured) as caught:
        load_config()
    assert (
        "database.checkpoint_channel_mode: Environment variable DEERFLOW_FIXTURE_MODE not found "
        "for config value $DEERFLOW_FIXTURE_MODE"
    ) in str(caught.value)


def test_a_missing_variable_stops_manage_py_in_one_line(deerflow_env, monkeypatch):
    monkeypatch.delenv("DEERFLOW_FIXTURE_SQLITE_DIR")
    monkeypatch.delenv("DATABASE_URL", raising=False)
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=os.environ, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    # Before it, DeerFlow's outdated-version warning: the version is read before the variables.
    assert done.stderr.strip().splitlines()[-1:] == [
        f"Configuration error: Invalid configuration in {FIXTURE}: database.sqlite_dir: Environment variable "
        "DEERFLOW_FIXTURE_SQLITE_DIR not found for config value ${DEERFLOW_FIXTURE_SQLITE_DIR}"
    ]


@pytest.mark.parametrize("reference", ["$DEERFLOW_TEST_URL", "${DEERFLOW_TEST_URL}"])
def test_both_variable_forms_resolve_whole_values(monkeypatch, reference):
    monkeypatch.setenv("DEERFLOW_TEST_URL", "redis://cache:6379/3")
    config = parse_config({"redis": {"url": reference}}, source=SOURCE)
    assert config.redis.url == "redis://cache:6379/3"


def test_a_variable_inside_a_value_is_left_as_written(monkeypatch):
    monkeypatch.setenv("DEERFLOW_TEST_HOST", "cache")
    config = parse_config({"redis": {"url": "redis://$DEERFLOW_TEST_HOST:6379/0"}}, source=SOURCE)
    assert config.redis.url == "redis://$DEERFLOW_TEST_HOST:6379/0"


@pytest.mark.parametrize(
    ("raw", "warned"),
    [
        ({"config_version": CONFIG_VERSION - 4}, True),
        ({"config_version": "not a number"}, True),
        ({"config_version": CONFIG_VERSION}, False),
        ({"config_version": CONFIG_VERSION + 1}, False),
        ({}, False),
    ],
)
def test_an_outdated_config_version_gets_deerflows_warning(raw, warned, caplog):
    with caplog.at_level(logging.WARNING):
        parse_config(raw, source=SOURCE)
    assert ("is outdated — the latest version is" in caplog.text) is warned


def test_the_example_config_carries_the_version_this_server_reads():
    example = yaml.safe_load((ROOT / "config.example.yaml").read_text())
    assert example["config_version"] == CONFIG_VERSION
    parse_config(example, source=ROOT / "config.example.yaml")


@pytest.mark.parametrize("section", ["checkpointer", "store"])
def test_a_legacy_section_alone_becomes_the_database_with_a_deprecation_warning(section, caplog):
    legacy = {"type": "postgres", "connection_string": "postgresql://u@db.example/deer"}
    with caplog.at_level(logging.WARNING):
        database = parse_config({section: legacy, "database": {"sqlite_dir": "/x"}}, source=SOURCE).database
    assert (database.backend, database.postgres_url) == ("postgres", "postgresql://u@db.example/deer")
    assert f"{section}: is deprecated — use `database` instead" in caplog.text


def test_a_legacy_section_that_agrees_with_database_is_only_a_warning(caplog):
    raw = {"checkpointer": {"type": "memory"}, "store": {"type": "memory"}, "database": {"backend": "memory"}}
    with caplog.at_level(logging.WARNING):
        assert parse_config(raw, source=SOURCE).database.backend == "memory"
    assert caplog.text.count("is deprecated — use `database` instead") == 2


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        (
            {
                "checkpointer": {"type": "postgres", "connection_string": "postgresql://elsewhere/db"},
                "database": {"backend": "sqlite"},
            },
            "checkpointer:/store: (backend: postgres, postgres_url: postgresql://elsewhere/db) name another database "
            "than database: (backend: sqlite)",
        ),
        (
            {
                "checkpointer": {"type": "postgres", "connection_string": "postgresql://a/db"},
                "database": {"backend": "postgres", "postgres_url": "postgresql://b/db"},
            },
            "name another database than database: (backend: postgres, postgres_url: postgresql://b/db)",
        ),
        (
            {"checkpointer": {"type": "sqlite"}, "store": {"type": "memory"}},
            "checkpointer: and store: name different databases",
        ),
        ({"checkpointer": {"type": "mysql"}}, "checkpointer.type: Input should be 'memory', 'sqlite' or 'postgres'"),
        ({"store": {"connection_string": "x.db"}}, "store.type: Field required"),
        ({"checkpointer": {"type": "postgres"}}, "checkpointer.connection_string: a postgres checkpointer needs one"),
    ],
)
def test_a_legacy_section_that_cannot_mean_anything_here_is_one_line_saying_what_to_write(raw, said):
    with pytest.raises(ImproperlyConfigured) as caught:
        parse_config(raw, source=SOURCE)
    assert said in str(caught.value)
    assert "\n" not in str(caught.value)


def test_numbers_are_read_as_deerflow_reads_them_but_true_is_not_one():
    config = parse_config(
        {"database": {"checkpoint_delta": {"snapshot_frequency": "10"}}, "runs": {"capacity": "8"}}, source=SOURCE
    )
    assert (config.database.checkpoint_delta.snapshot_frequency, config.runs.capacity) == (10, 8)
    for bad in (True, "ten", 2.5):
        with pytest.raises(ImproperlyConfigured, match="runs.capacity: Input should be a valid integer"):
            parse_config({"runs": {"capacity": bad}}, source=SOURCE)


def test_a_number_from_a_variable_is_a_number(monkeypatch):
    monkeypatch.setenv("DEERFLOW_TEST_FREQUENCY", "7")
    config = parse_config(
        {"database": {"checkpoint_delta": {"snapshot_frequency": "$DEERFLOW_TEST_FREQUENCY"}}}, source=SOURCE
    )
    assert config.database.checkpoint_delta.snapshot_frequency == 7


def test_run_events_defaults_are_deerflows():
    run_events = parse_config({}, source=SOURCE).run_events
    assert (run_events.backend, run_events.max_trace_content, run_events.track_token_usage) == ("memory", 10240, True)


def test_a_run_events_backend_not_offered_is_refused_naming_the_supported_ones():
    with pytest.raises(ImproperlyConfigured) as caught:
        parse_config({"run_events": {"backend": "jsonl"}}, source=SOURCE)
    assert "run_events.backend: Value error, 'jsonl' is not offered here" in str(caught.value)
    assert "write db or memory" in str(caught.value)


def test_an_unknown_run_events_key_is_a_warning_as_deerflow_ignores_it(caplog):
    with caplog.at_level(logging.WARNING):
        parse_config({"run_events": {"max_trace_contents": 1}}, source=SOURCE)
    assert "unknown key run_events.max_trace_contents (did you mean run_events.max_trace_content?)" in caplog.text
