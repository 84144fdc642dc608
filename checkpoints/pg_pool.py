"""The async PostgreSQL pool the savers and the Store share: a connection lent is always given back.

psycopg_pool 3.3.3 gives a connection back (``putconn``, the end of every
``pool.connection()`` block) under the pool's lock, and hands it to the
first waiting client under that client's condition. A task cancelled while
it waits for either abandons the connection: it is neither in the pool nor
with a client, and the pool still counts it as lent. Cancels arrive exactly
there when a run is cancelled as its checkpoint write ends while other runs
wait for connections. In the finish-line race (``tests/live/test_run_races.py``:
runs cancelled as they finish, 30 at a time, over and over) the server's
pool of ten was empty after 300, 840 and 1,320 runs in 3 of 6 tries; from
then on every run and every state read waited for a connection that never
came, and runs stayed ``running`` for good.

So the return runs in a task of its own that the caller's cancel does not
reach: the caller still gets its ``CancelledError`` at once, and the
connection reaches the pool or the next client a moment later.
"""

from __future__ import annotations

import asyncio

from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool


class ReturningConnectionPool(AsyncConnectionPool[AsyncConnection[DictRow]]):
    """``AsyncConnectionPool`` whose ``putconn`` completes even when its caller is cancelled."""

    def __init__(self, *args, **kwargs) -> None:
        # Returns in flight: referenced here until done (the loop holds tasks weakly).
        self._returns: set[asyncio.Task] = set()
        super().__init__(*args, **kwargs)

    async def putconn(self, conn) -> None:
        returning = asyncio.ensure_future(super().putconn(conn))
        self._returns.add(returning)
        returning.add_done_callback(self._returns.discard)
        await asyncio.shield(returning)

    async def close(self, timeout: float = 5.0) -> None:  # noqa: ASYNC109 (psycopg_pool's signature)
        """Let the returns in flight finish, then close as psycopg_pool does."""
        if self._returns:
            await asyncio.wait(list(self._returns), timeout=timeout)
        await super().close(timeout)
