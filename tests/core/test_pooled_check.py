"""``core.db.check_pooled``: a pooled PostgreSQL connection is checked at checkout without a round trip.

A connection the server closed while it sat in the pool is found out (its
socket has the server's farewell to read) and fails the check, so the pool
replaces it; one the server sent nothing passes without a query. The live
proof that no request fails after every connection was terminated is
tests/live/test_outage_recovery.py.
"""

from __future__ import annotations

import os
import select

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from core.db import _heard_while_idle, acheck_pooled, check_pooled

pytestmark = pytest.mark.postgres_only


def terminate(pid: int) -> None:
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone() == (True,)


def last_statement_at(pid: int):
    """When the backend last changed state (a statement starts and ends it), seen from another connection."""
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as admin:
        return admin.execute("SELECT state_change FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()[0]


def wait_readable(conn: psycopg.Connection) -> None:
    """Wait (up to 10 s) for the server's farewell to reach the socket: an event, not a fixed delay."""
    readable, _, _ = select.select([conn.pgconn.socket], [], [], 10)
    assert readable, "the terminated backend's socket never became readable"


def test_a_connection_the_server_closed_fails_the_check_and_a_live_one_passes_without_a_query():
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as live:
        live.execute("SELECT 1")
        before = last_statement_at(live.info.backend_pid)
        assert not _heard_while_idle(live)
        check_pooled(live)
        assert last_statement_at(live.info.backend_pid) == before  # no statement was sent
        ConnectionPool.check_connection(live)  # psycopg_pool's own check sends one
        assert last_statement_at(live.info.backend_pid) > before
    dead = psycopg.connect(os.environ["DATABASE_URL"], autocommit=True)
    terminate(dead.info.backend_pid)
    wait_readable(dead)
    assert _heard_while_idle(dead)
    with pytest.raises(psycopg.OperationalError):
        check_pooled(dead)
    dead.close()
    assert _heard_while_idle(dead)  # closed: never handed out


def test_a_pool_replaces_the_connections_the_server_closed():
    with ConnectionPool(os.environ["DATABASE_URL"], min_size=2, max_size=2, check=check_pooled, open=True) as pool:
        pool.wait()
        with pool.connection() as first, pool.connection() as second:
            pids = {first.info.backend_pid, second.info.backend_pid}
        for pid in pids:
            terminate(pid)
        for conn in (first, second):  # closed: the server's farewell reached each one in the pool
            wait_readable(conn)
        for _ in range(4):
            with pool.connection() as conn:  # each checkout finds a dead one out and gets a fresh one
                assert conn.execute("SELECT 1").fetchone() == (1,)
                assert conn.info.backend_pid not in pids


async def test_the_async_check_finds_a_closed_connection_out():
    conn = await psycopg.AsyncConnection.connect(os.environ["DATABASE_URL"], autocommit=True)
    await acheck_pooled(conn)  # alive: passes
    terminate(conn.info.backend_pid)
    readable, _, _ = select.select([conn.pgconn.socket], [], [], 10)
    assert readable
    with pytest.raises(psycopg.OperationalError):
        await acheck_pooled(conn)
    await conn.close()


@pytest.mark.django_db
def test_the_orm_pool_checks_with_it():
    from django.db import connection

    assert connection.pool is not None and connection.pool._check is check_pooled
