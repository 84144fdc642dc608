"""Shared fixtures: personas with API keys, seeded threads, service URLs."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from deerflow_site.services import api_key_create

REDIS_URL = os.environ.get("REDIS_URL")
DATABASE_URL = os.environ.get("DATABASE_URL")


# Modules that start server processes of their own besides the ``live`` ones (tests/live is all live).
SERVER_MODULES = frozenset(
    {
        "tests/console/test_runs.py",
        "tests/deerflow_site/test_http_limits.py",
        "tests/deerflow_site/test_server_logs.py",
        "tests/runs/test_run_input_validation.py",
        "tests/threads/test_retention_routes.py",
    }
)


@pytest.hookimpl(tryfirst=True)  # before xdist's hook of this name, which reads the group marks
def pytest_collection_modifyitems(config, items):
    """Keep server-starting tests on one xdist worker; skip PostgreSQL-only tests when Django is not on it.

    ``make test`` runs each pass on two workers (``--dist loadgroup``): the
    tests that start servers (each with its pools, up to ~30 PostgreSQL
    connections a cluster) run one after another on one worker, while the
    in-process tests run beside them; two clusters at once would pass
    PostgreSQL's 100 connections. ``pytest_collection_finish`` checks that
    xdist kept the groups.
    """
    for item in items:
        if "live" in item.keywords or item.nodeid.split("::")[0] in SERVER_MODULES:
            item.add_marker(pytest.mark.xdist_group("servers"))
    from django.db import connection

    if connection.vendor == "postgresql":
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL: set DATABASE_URL (the PostgreSQL pass runs it)")
    for item in items:
        if "postgres_only" in item.keywords:
            item.add_marker(skip)


def pytest_collection_finish(session):
    """Refuse a pass whose xdist groups were lost: its server tests would run on both workers at once.

    pytest-xdist's ``--dist loadgroup`` groups by a suffix its own
    ``pytest_collection_modifyitems`` writes into each marked test's node id.
    Both ways it was lost here went without a word: our hook marked the tests
    after xdist's had read the marks (hence ``tryfirst``), and pytest 9.2's
    structured node ids ignore the write (pytest-dev/pytest-xdist#1386, why
    pyproject.toml pins pytest 9.1).
    """
    if not getattr(session.config.option, "loadgroup", False):
        return
    lost = [item.nodeid for item in session.items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
    if lost:
        raise pytest.UsageError(
            f"--dist loadgroup lost the xdist group of {len(lost)} tests (e.g. {lost[0]}); "
            "see pytest-dev/pytest-xdist#1386"
        )


def pytest_sessionfinish(session, exitstatus):
    """Remove the SQLite test database's WAL and shared-memory files, which outlive its deletion.

    Each test process has a database of its own (``test_deerflow_<pid>.db``),
    so the pair left behind would pile up in ``var/`` run after run.
    """
    from django.conf import settings

    name = settings.DATABASES["default"].get("TEST", {}).get("NAME")
    if name:
        for suffix in ("-wal", "-shm", "-journal"):
            Path(name + suffix).unlink(missing_ok=True)


REFILLED_AFTER_FLUSH = frozenset({"django_content_type", "auth_permission"})


def _empty_postgres_tables_by_delete() -> None:
    """Empty the tables between transactional tests with DELETE, not Django's one TRUNCATE.

    After every ``transaction=True`` test Django flushes the test database
    and its ``post_migrate`` handlers write the content types and
    permissions back. On PostgreSQL the ``TRUNCATE`` of the 17 tables takes
    ~280 ms (a new file per table), ``DELETE`` of their few rows ~5 ms; the
    PostgreSQL pass runs hundreds of such tests. The result is the same:
    every table empty but the two the handlers refill with the same rows
    (content types and permissions, which no test writes), in one
    transaction (foreign keys are deferred, so the order does not matter),
    sequences left alone as Django's flush leaves them.
    """
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or allow_cascade or not tables:
            return truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        emptied = [table for table in tables if table not in REFILLED_AFTER_FLUSH]
        return ["SET CONSTRAINTS ALL DEFERRED;", *(f"DELETE FROM {self.quote_name(table)};" for table in emptied)]

    DatabaseOperations.sql_flush = sql_flush


_empty_postgres_tables_by_delete()


@pytest.fixture(scope="session", autouse=True)
def _close_savers_before_the_test_database_goes(django_db_setup, django_db_blocker):
    """Close the savers' own connections so the test database can be dropped."""
    yield
    from checkpoints.runtime import close_sync_resources

    close_sync_resources()


@pytest.fixture
async def runtime():
    """This process's runtime (savers, bridge, worker) as the ASGI app builds it; shut down after the test."""
    from deerflow_site import lifecycle

    await lifecycle.startup()
    try:
        yield
    finally:
        await lifecycle.shutdown()


@pytest.fixture
def redis_url() -> str:
    if not REDIS_URL:
        pytest.skip("needs Redis: set REDIS_URL")
    return REDIS_URL


class Persona:
    """A user with an API key and a client that sends it."""

    def __init__(self, username: str) -> None:
        self.user, self.key = api_key_create(username=username)
        self.client = APIClient(HTTP_X_API_KEY=self.key)


@pytest.fixture
def owner(db) -> Persona:
    return Persona(f"owner-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def other(db) -> Persona:
    return Persona(f"other-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def anonymous() -> APIClient:
    return APIClient()


# The session's server lives through every server test of a pass: with the default pool size (10 a
# pool, three pools) it held 24-26 PostgreSQL connections beside each cluster the other tests start.
API_SERVER_POOL_SIZE = 4


@pytest.fixture(scope="session")
def api_server(tmp_path_factory):
    """A real server process on this pass's backend (SQLite, or PostgreSQL with DATABASE_URL)."""
    from contextlib import ExitStack

    from tests.live.server import LiveServer, fresh_postgres_database

    with ExitStack() as stack:
        database_url = stack.enter_context(fresh_postgres_database(DATABASE_URL)) if DATABASE_URL else None
        config = {"database": {"postgres_pool_size": API_SERVER_POOL_SIZE}}
        server = LiveServer(tmp_path_factory.mktemp("live"), config=config, database_url=database_url).setup().start()
        try:
            yield server
        finally:
            server.stop()


BYO_GRAPHS = Path(__file__).resolve().parent / "fixtures" / "byo_graphs"


@pytest.fixture
def byo_graphs(settings, tmp_path):
    """Serve tests/fixtures/byo_graphs/langgraph.json beside the built-in graph, as ``langgraph_json:`` does."""
    from checkpoints.graphs import graph_cache
    from deerflow_site.config import parse_config

    found = parse_config({"langgraph_json": str(BYO_GRAPHS / "langgraph.json")}, source=tmp_path / "c.yaml")
    sources = found.graph_sources()
    settings.DEERFLOW = {
        **settings.DEERFLOW,
        "GRAPHS": sources.graphs,
        "GRAPH_DEPENDENCIES": sources.dependencies,
        "GRAPH_ENV": sources.env,
    }
    yield sources
    graph_cache.clear()


@pytest.fixture
async def closing_savers():
    """Close this loop's async savers after an async test that executed runs on it.

    Ask for it before ``runtime`` (teardown runs in reverse): the runtime stops
    its runs first, so no run still finishing writes through savers closed under
    it (its finalize then waited out SQLite's busy timeout in the flaky order).
    """
    yield
    from checkpoints.runtime import aclose_async_resources

    await aclose_async_resources()


@pytest.fixture
def unfrozen_mode():
    """Unfreeze the process's mode and cadence for one test, then restore exactly what was frozen.

    Savers built meanwhile may be wrapped for another mode, so they are
    closed and rebuilt on next use.
    """
    from checkpoints import modes
    from checkpoints.runtime import close_sync_resources

    saved_mode, saved_frequency = modes.frozen_settings()
    modes._reset_for_tests()
    close_sync_resources()
    yield
    modes._reset_for_tests()
    close_sync_resources()
    if saved_mode is not None:
        modes.freeze_channel_mode(saved_mode)
    if saved_frequency is not None:
        modes.freeze_snapshot_frequency(saved_frequency)
