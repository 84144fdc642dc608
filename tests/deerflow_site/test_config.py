"""The YAML configuration: DeerFlow's keys, defaults, bounds, messages and warnings."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from checkpoints.backend import backend_of
from deerflow_site.config import (
    WARN_LEGACY_AND_NESTED,
    WARN_LEGACY_CARRIED,
    WARN_LEGACY_IGNORED,
    DatabaseConfig,
    load_config,
    parse_config,
)
from deerflow_site.databases import database_settings, parse_postgres_url

SOURCE = Path("config.yaml")


def test_defaults_match_deerflow_except_the_embedded_backend():
    config = parse_config({}, source=SOURCE).database
    assert config.backend == "sqlite"
    assert config.checkpoint_channel_mode == "full"
    assert config.checkpoint_delta.snapshot_frequency == 10
    assert config.checkpoint_graph_cache.accessor_graph_max == 64
    assert config.checkpoint_cache.type == "memory"
    assert config.checkpoint_cache.max_entries == 128
    assert config.checkpoint_cache.ttl_seconds == 86400
    assert config.checkpoint_cache.key_prefix == ""
    assert config.checkpoint_cache.redis_url is None


@pytest.mark.parametrize(
    ("database", "key", "message"),
    [
        (
            {"checkpoint_channel_mode": "partial"},
            "database.checkpoint_channel_mode",
            "Input should be 'full' or 'delta'",
        ),
        (
            {"checkpoint_delta": {"snapshot_frequency": 0}},
            "database.checkpoint_delta.snapshot_frequency",
            "greater than or equal to 1",
        ),
        (
            {"checkpoint_delta": {"snapshot_frequency": True}},
            "database.checkpoint_delta.snapshot_frequency",
            "valid integer",
        ),
        (
            {"checkpoint_graph_cache": {"accessor_graph_max": 0}},
            "database.checkpoint_graph_cache.accessor_graph_max",
            "greater than or equal to 1",
        ),
        ({"checkpoint_cache": {"type": "disk"}}, "database.checkpoint_cache.type", "'memory' or 'redis'"),
        (
            {"checkpoint_cache": {"max_entries": -1}},
            "database.checkpoint_cache.max_entries",
            "greater than or equal to 0",
        ),
        (
            {"checkpoint_cache": {"ttl_seconds": -5}},
            "database.checkpoint_cache.ttl_seconds",
            "greater than or equal to 0",
        ),
        ({"backend": "mysql"}, "database.backend", "'memory', 'sqlite' or 'postgres'"),
        ({"postgres_pool_size": 1}, "database.postgres_pool_size", "greater than or equal to 2"),
    ],
)
def test_bad_value_stops_startup_naming_the_key(database, key, message):
    with pytest.raises(ImproperlyConfigured) as excinfo:
        parse_config({"database": database}, source=SOURCE)
    assert f"{key}: " in str(excinfo.value)
    assert message in str(excinfo.value)


def test_unknown_keys_under_database_are_ignored():
    config = parse_config({"database": {"echo_sql": True, "pool_size": 3}}, source=SOURCE).database
    assert not hasattr(config, "echo_sql")


def test_legacy_flat_key_is_carried_forward_with_warning(caplog):
    with caplog.at_level(logging.WARNING):
        config = DatabaseConfig.model_validate({"checkpoint_delta_snapshot_frequency": 7})
    assert config.checkpoint_delta.snapshot_frequency == 7
    assert WARN_LEGACY_CARRIED % 7 in caplog.text


def test_nested_key_wins_over_legacy_key_with_warning(caplog):
    with caplog.at_level(logging.WARNING):
        config = DatabaseConfig.model_validate(
            {"checkpoint_delta_snapshot_frequency": 7, "checkpoint_delta": {"snapshot_frequency": 3}}
        )
    assert config.checkpoint_delta.snapshot_frequency == 3
    assert WARN_LEGACY_AND_NESTED in caplog.text


def test_legacy_key_ignored_when_nested_object_given(caplog):
    from deerflow_site.config import CheckpointDeltaConfig

    with caplog.at_level(logging.WARNING):
        config = DatabaseConfig.model_validate(
            {"checkpoint_delta_snapshot_frequency": 7, "checkpoint_delta": CheckpointDeltaConfig(snapshot_frequency=4)}
        )
    assert config.checkpoint_delta.snapshot_frequency == 4
    assert WARN_LEGACY_IGNORED in caplog.text


def test_legacy_key_is_validated_like_the_nested_one():
    with pytest.raises(ImproperlyConfigured, match="database.checkpoint_delta.snapshot_frequency"):
        parse_config({"database": {"checkpoint_delta_snapshot_frequency": -1}}, source=SOURCE)


def test_cache_redis_url_falls_back_through_env(monkeypatch):
    cache = parse_config({}, source=SOURCE).database.checkpoint_cache
    monkeypatch.delenv("DEER_FLOW_CHECKPOINT_CACHE_REDIS_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    assert cache.resolved_redis_url() == "redis://localhost:6379/0"
    monkeypatch.setenv("REDIS_URL", "redis://r2:6379/1")
    assert cache.resolved_redis_url() == "redis://r2:6379/1"
    monkeypatch.setenv("DEER_FLOW_CHECKPOINT_CACHE_REDIS_URL", "redis://r1:6379/2")
    assert cache.resolved_redis_url() == "redis://r1:6379/2"


def test_named_file_is_loaded_and_a_missing_named_file_is_an_error(tmp_path, monkeypatch):
    path = tmp_path / "c.yaml"
    path.write_text("database:\n  checkpoint_channel_mode: delta\n")
    monkeypatch.setenv("DEERFLOW_CONFIG", str(path))
    assert load_config().database.checkpoint_channel_mode == "delta"
    monkeypatch.setenv("DEERFLOW_CONFIG", str(tmp_path / "missing.yaml"))
    with pytest.raises(ImproperlyConfigured, match="does not exist"):
        load_config()


def test_invalid_yaml_is_reported(tmp_path, monkeypatch):
    path = tmp_path / "c.yaml"
    path.write_text("database: [unclosed\n")
    monkeypatch.setenv("DEERFLOW_CONFIG", str(path))
    with pytest.raises(ImproperlyConfigured, match="Invalid YAML"):
        load_config()


def test_database_url_selects_postgres_for_everything(monkeypatch, tmp_path):
    monkeypatch.setenv("DATABASE_URL", "postgresql://u:p%40ss@db.example:6543/deer?sslmode=disable")
    settings = database_settings(DatabaseConfig(sqlite_dir=str(tmp_path)))
    assert settings["ENGINE"] == "deerflow_site.postgresql"
    assert (settings["NAME"], settings["USER"], settings["PASSWORD"]) == ("deer", "u", "p@ss")
    assert (settings["HOST"], settings["PORT"]) == ("db.example", "6543")
    assert settings["OPTIONS"]["sslmode"] == "disable"


def test_the_pool_size_caps_djangos_pool_and_reaches_the_savers(monkeypatch, tmp_path):
    monkeypatch.setenv("DATABASE_URL", "postgresql://u@db.example:6543/deer")
    default = database_settings(DatabaseConfig(sqlite_dir=str(tmp_path)))
    assert default["OPTIONS"]["pool"]["max_size"] == backend_of(default).pool_size == 10
    # checkpoints.runtime sizes both savers' pools by the backend's pool_size.
    small = database_settings(DatabaseConfig(sqlite_dir=str(tmp_path), postgres_pool_size=3))
    assert small["OPTIONS"]["pool"]["max_size"] == backend_of(small).pool_size == 3


def test_sqlite_backend_puts_everything_in_one_file(monkeypatch, tmp_path):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    settings = database_settings(DatabaseConfig(sqlite_dir=str(tmp_path)))
    assert settings["NAME"] == str(tmp_path / "deerflow.db")


@pytest.mark.parametrize("url", ["mysql://x/y", "postgresql://host:5432/"])
def test_bad_database_url_is_rejected(url):
    with pytest.raises(ImproperlyConfigured):
        parse_postgres_url(url)


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"cros": {"allow_origins": ["http://127.0.0.1:3000"]}}, "unknown key cros (did you mean cors?)"),
        ({"grahps": {"agent": "./agent.py:graph"}}, "unknown key grahps (did you mean graphs?)"),
        (
            {"cors": {"allow_origin": ["http://x.test"]}},
            "unknown key cors.allow_origin (did you mean cors.allow_origins?)",
        ),
        (
            {"runs": {"webhooks": {"max_attempt": 2}}},
            "unknown key runs.webhooks.max_attempt (did you mean runs.webhooks.max_attempts?)",
        ),
        ({"limits": {"zzz": 1}}, "unknown key limits.zzz (valid keys here: max_body_bytes,"),
    ],
)
def test_an_unknown_key_of_our_sections_is_an_error_naming_the_closest_valid_one(raw, named):
    with pytest.raises(ImproperlyConfigured) as caught:
        parse_config(raw, source=SOURCE)
    assert named in str(caught.value)


def test_an_unknown_key_under_database_is_a_warning_as_deerflow_ignores_it(caplog):
    with caplog.at_level(logging.WARNING):
        config = parse_config({"database": {"checkpoint_chanel_mode": "delta"}}, source=SOURCE)
    assert config.database.checkpoint_channel_mode == "full"
    assert "unknown key database.checkpoint_chanel_mode (did you mean database.checkpoint_channel_mode?)" in caplog.text


def test_deerflow_sections_we_do_not_read_and_the_legacy_cadence_key_load_without_a_word(caplog):
    raw = {
        "config_version": 5,
        "models": [{"name": "gpt-4", "use": "langchain_openai:ChatOpenAI"}],
        "sandbox": {"use": "deerflow.sandbox.local:LocalSandboxProvider"},
        "tools": [],
        "database": {"checkpoint_delta_snapshot_frequency": 4},
    }
    with caplog.at_level(logging.WARNING):
        config = parse_config(raw, source=SOURCE)
    assert config.database.checkpoint_delta.snapshot_frequency == 4
    assert "unknown key" not in caplog.text
