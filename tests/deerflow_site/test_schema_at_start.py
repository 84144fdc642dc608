"""`serve` on an unmigrated database: migrated once however many servers start, or refused in one line."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from tests.live.server import PYTHON, ROOT, LiveServer, free_port, server_query
from tests.live.support import DATABASE_URL

pytestmark = pytest.mark.live

BACKENDS = [
    pytest.param("sqlite", marks=pytest.mark.sqlite_only),
    pytest.param("postgres", marks=pytest.mark.postgres_only),
]
DUPLICATE_MIGRATIONS_SQL = "SELECT app, name FROM django_migrations GROUP BY app, name HAVING COUNT(*) > 1"


@contextmanager
def empty_database(backend: str) -> Iterator[str | None]:
    """Yield a PostgreSQL URL of a database with no tables (dropped after), or None for SQLite."""
    if backend == "sqlite":
        yield None
        return
    import psycopg

    assert DATABASE_URL
    admin = urlunsplit(urlsplit(DATABASE_URL)._replace(path="/postgres"))
    name = f"deerflow_f_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(DATABASE_URL)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.parametrize("backend", BACKENDS)
def test_servers_started_together_on_an_empty_database_migrate_it_once(tmp_path, backend):
    with empty_database(backend) as url:
        shared = {"database": {"sqlite_dir": str(tmp_path / "data")}}
        servers = [LiveServer(tmp_path / name, config=shared, database_url=url) for name in ("a", "b")]
        try:
            with ThreadPoolExecutor(len(servers)) as pool:
                list(pool.map(LiveServer.start, servers))  # each returns once its server answers /ok
            logs = [server.log() for server in servers]
            assert sum("migrations before serving." in log for log in logs) == 1, logs
            assert server_query(servers[0], DUPLICATE_MIGRATIONS_SQL) == []
            headers = {"x-api-key": servers[0].api_key("alice")}
            for server in servers:
                assert httpx.post(f"{server.url}/threads", json={}, headers=headers).status_code == 200
        finally:
            for server in servers:
                if server.process is not None:
                    server.stop()


@pytest.mark.parametrize("backend", BACKENDS)
def test_with_auto_migrate_false_an_unmigrated_database_is_refused_in_one_line(tmp_path, backend):
    with empty_database(backend) as url:
        server = LiveServer(tmp_path, config={"database": {"auto_migrate": False}}, database_url=url)
        done = subprocess.run(
            [PYTHON, "manage.py", "serve", "--port", str(free_port())],
            cwd=ROOT,
            env=server.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("CommandError: The database lacks ")
    assert line.endswith(
        " migrations and database.auto_migrate is false: run `./.venv/bin/python manage.py migrate` before serving"
    )
