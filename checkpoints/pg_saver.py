"""LangGraph's PostgreSQL savers without their per-saver lock when they draw from a pool, and with
every channel value sealed when a sealing serializer is configured (``SealsPrimitives``).

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
from typing import Any

from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from psycopg import AsyncCursor, Cursor
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from checkpoints.encryption import KeepsListedKeysOut


class _Primitive:
    """A channel value upstream would keep inline in the ``checkpoints`` row, steered into a blob."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class SealsPrimitives:
    """With a sealing serializer, primitive channel values go to blobs, sealed like every other value.

    Upstream keeps a string, number or bool channel value (a title, a
    counter) inline in the ``checkpoints`` row's JSONB, outside the
    serializer: with ``LANGGRAPH_AES_KEY`` or custom blob handlers it would
    stay readable there. Each is handed to upstream's ``put`` wrapped, so its
    split sends it to the blobs, and unwrapped when the blob is serialized;
    reads need nothing (a blob is read as any other). A value unchanged
    since an earlier checkpoint is written at its version too (the upsert
    does nothing when the blob exists): one stored inline before sealing
    began would otherwise be found in neither place. ``manage.py
    encrypt_checkpoints`` moves the values stored inline before into sealed
    blobs (``checkpoints.encryption``).
    """

    def put(self, config, checkpoint, metadata, new_versions):
        steered, versions = self._steered(checkpoint, new_versions)
        return super().put(config, steered, metadata, versions)  # type: ignore[misc]

    async def aput(self, config, checkpoint, metadata, new_versions):
        steered, versions = self._steered(checkpoint, new_versions)
        return await super().aput(config, steered, metadata, versions)  # type: ignore[misc]

    def _steered(self, checkpoint: Any, new_versions: Any) -> tuple[Any, Any]:
        if not isinstance(self.serde, EncryptedSerializer):  # type: ignore[attr-defined]
            return checkpoint, new_versions
        values = checkpoint["channel_values"]
        primitive = [k for k, v in values.items() if isinstance(v, str | int | float | bool)]
        if not primitive:
            return checkpoint, new_versions
        steered = {**checkpoint, "channel_values": {**values, **{k: _Primitive(values[k]) for k in primitive}}}
        current = checkpoint["channel_versions"]
        versions = {**{k: current[k] for k in primitive if k in current}, **new_versions}
        return steered, versions

    def _dump_blobs(self, thread_id, checkpoint_ns, values, versions):
        plain = {k: v.value if isinstance(v, _Primitive) else v for k, v in values.items()}
        return super()._dump_blobs(thread_id, checkpoint_ns, plain, versions)  # type: ignore[misc]


class PooledPostgresSaver(KeepsListedKeysOut, SealsPrimitives, PostgresSaver):
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


class PooledAsyncPostgresSaver(KeepsListedKeysOut, SealsPrimitives, AsyncPostgresSaver):
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
