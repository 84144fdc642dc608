"""LangGraph's async SQLite saver, made safe to cancel.

``AsyncSqliteSaver`` (langgraph-checkpoint-sqlite 3.1.2) writes with two
awaits under its lock: the statement, then ``commit()``. A task cancelled
between them (a run cancelled, interrupted or stopped at shutdown while it
wrote a checkpoint) leaves the write transaction open on the one shared
connection, and SQLite has one writer: every other connection of the
database, Django's included, then waits out its busy timeout and fails with
``database is locked`` until this connection happens to commit again.
Measured: 25 of 200 cancelled ``aput_writes`` left it open.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from checkpoints.encryption import KeepsListedKeysOut

T = TypeVar("T")


class CancelSafeAsyncSqliteSaver(KeepsListedKeysOut, AsyncSqliteSaver):
    """An ``AsyncSqliteSaver`` whose cancelled writes end their transaction (rolled back: they did not happen)."""

    async def aput(self, *args: Any, **kwargs: Any) -> Any:
        return await self._whole(super().aput(*args, **kwargs))

    async def aput_writes(self, *args: Any, **kwargs: Any) -> None:
        await self._whole(super().aput_writes(*args, **kwargs))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._whole(super().adelete_thread(thread_id))

    async def _whole(self, write: Awaitable[T]) -> T:
        try:
            return await write
        except asyncio.CancelledError:
            # Shielded: a second cancel must not leave the rollback half done.
            await asyncio.shield(self._rollback_abandoned())
            raise

    async def _rollback_abandoned(self) -> None:
        # Under the saver's lock, queued behind the abandoned statement on the
        # connection's one thread, so it ends that transaction and no other.
        async with self.lock:
            await self.conn.rollback()
