"""Turn the ``database:`` section (or ``DATABASE_URL``) into Django's DATABASES entry.

Django's ``default`` database is the single source of truth for where data
lives: the LangGraph savers and Store are built from this same entry at run
time (``checkpoints.runtime``), so checkpoints and thread metadata cannot end
up in different databases, and the test runner's renamed test database is
followed by every store alike.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

from core.db import MEMORY_SQLITE_NAME
from deerflow_site.config import DEFAULT_POSTGRES_POOL_SIZE, DatabaseConfig


def parse_postgres_url(url: str, *, pool_size: int = DEFAULT_POSTGRES_POOL_SIZE) -> dict[str, Any]:
    """Parse ``postgresql://user:pass@host:port/db?opt=v`` into Django settings.

    ``pool_size`` caps Django's pool and, read back from these settings by
    ``checkpoints.backend``, each of the savers' two.
    """
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql"}:
        raise ImproperlyConfigured(
            f"database.postgres_url / DATABASE_URL must be a postgresql:// URL, got scheme {parts.scheme!r}"
        )
    name = unquote(parts.path.lstrip("/"))
    if not name:
        raise ImproperlyConfigured("database.postgres_url / DATABASE_URL names no database")
    options = dict(parse_qsl(parts.query))
    return {
        "ENGINE": "deerflow_site.postgresql",  # Django's, its pool checked by core.db.check_pooled
        "NAME": name,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        "CONN_MAX_AGE": 0,
        # The pool checks each connection at checkout instead (core.db.check_pooled,
        # set by the engine): a connection the server closed (restart,
        # pg_terminate_backend) is replaced instead of failing the request that
        # drew it (one 500 per pooled connection), and one it sent nothing
        # costs no round trip.
        "CONN_HEALTH_CHECKS": False,
        # One psycopg pool per process for the ORM. Background runs give their
        # connection back explicitly (see runs.execution); without the pool a
        # process leaks one idle server connection per run.
        "OPTIONS": {**options, "pool": {"min_size": 1, "max_size": pool_size, "timeout": 10}},
    }


def database_settings(config: DatabaseConfig) -> dict[str, Any]:
    """Return Django's ``default`` database for the configured backend."""
    url = os.environ.get("DATABASE_URL") or (config.postgres_url if config.backend == "postgres" else "")
    if url:
        return parse_postgres_url(url, pool_size=config.postgres_pool_size)
    if config.backend == "postgres":
        raise ImproperlyConfigured(
            "database.backend is postgres but neither database.postgres_url nor DATABASE_URL is set"
        )
    sqlite_options = {
        # IMMEDIATE: 38/40 concurrent read-then-write transactions failed with
        # "database is locked" under the default DEFERRED mode (runtime spike).
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # Kept open by the thread that opened it (core.sync_threads reuses
    # request and run threads); Django's end-of-request check still closes a
    # connection left unusable or in a transaction.
    if config.backend == "memory":
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": MEMORY_SQLITE_NAME,
            "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
            "CONN_MAX_AGE": None,
        }
    path = config.sqlite_path
    path.parent.mkdir(parents=True, exist_ok=True)
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        "OPTIONS": sqlite_options,
        "CONN_MAX_AGE": None,
        # Tests use a real file too: the LangGraph savers open their own
        # connection to the same database, which ":memory:" would not allow.
        # One per test process, so two test runs on one checkout (a developer's
        # and an editor's, or parallel sessions) never delete each other's.
        "TEST": {"NAME": str(path.with_name(f"test_deerflow_{os.getpid()}.db"))},
    }


_memory_keeper = None


def prepare_memory_database() -> None:
    """Hold the shared in-memory database open for the process, migrate it and bootstrap.

    With ``database.backend: memory`` nothing survives the process, so the
    server process itself creates the tables and the first admin and key.
    """
    global _memory_keeper
    if _memory_keeper is not None:
        return
    import sqlite3

    from django.core.management import call_command

    _memory_keeper = sqlite3.connect(MEMORY_SQLITE_NAME, uri=True, check_same_thread=False)
    call_command("migrate", interactive=False, verbosity=0)
    call_command("bootstrap")
