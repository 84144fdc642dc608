"""LangGraph's PostgreSQL savers without their per-saver lock when they draw from a pool.

``PostgresSaver`` and ``AsyncPostgresSaver`` (langgraph-checkpoint-postgres
3.2.0) enter one lock per saver (``threading.Lock``, ``asyncio.Lock``)
around every cursor, also when given a connection pool: every checkpoint
read and write of the process then waits for the one before it (request
threads behind each other, runs and reads on the loop likewise), though
each would run on a connection of its own.
A single connection needs the lock (one cursor at a time on it); a pool
does not. Upstream: https://github.com/langchain-ai/langgraph/issues/7259
(measured there ~200 req/s with the lock, ~1,295 without); the fix,
https://github.com/langchain-ai/langgraph/pull/7269, is not released.

What each cursor does is upstream's: a pipeline (or, without pipeline
support, a transaction) when the caller asks for one, a plain cursor
otherwise, binary, rows as dicts. Remove this class when the fix ships.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import AsyncCursor, Cursor
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from checkpoints.encryption import KeepsListedKeysOut


class PooledPostgresSaver(KeepsListedKeysOut, PostgresSaver):
    """``PostgresSaver`` whose cursors on pooled connections run side by side (request threads)."""

    @contextmanager
    def _cursor(self, *, pipeline: bool = False) -> Iterator[Cursor[DictRow]]:
        if not isinstance(self.conn, ConnectionPool):  # one shared connection: upstream's lock holds
            with super()._cursor(pipeline=pipeline) as cursor:
                yield cursor
            return
        with self.conn.connection() as conn:
            if pipeline and self.supports_pipeline:
                with conn.pipeline(), conn.cursor(binary=True, row_factory=dict_row) as cursor:
                    yield cursor
            elif pipeline:
                with conn.transaction(), conn.cursor(binary=True, row_factory=dict_row) as cursor:
                    yield cursor
            else:
                with conn.cursor(binary=True, row_factory=dict_row) as cursor:
                    yield cursor


class PooledAsyncPostgresSaver(KeepsListedKeysOut, AsyncPostgresSaver):
    """``AsyncPostgresSaver`` whose cursors on pooled connections run side by side (runs and reads on the loop)."""

    @asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[AsyncCursor[DictRow]]:
        if not isinstance(self.conn, AsyncConnectionPool):  # one shared connection: upstream's lock holds
            async with super()._cursor(pipeline=pipeline) as cursor:
                yield cursor
            return
        async with self.conn.connection() as conn:
            if pipeline and self.supports_pipeline:
                async with conn.pipeline(), conn.cursor(binary=True, row_factory=dict_row) as cursor:
                    yield cursor
            elif pipeline:
                async with conn.transaction(), conn.cursor(binary=True, row_factory=dict_row) as cursor:
                    yield cursor
            else:
                async with conn.cursor(binary=True, row_factory=dict_row) as cursor:
                    yield cursor
