"""Threads for Django's synchronous code, reused across requests and runs.

Django's ASGI handler gives every request a thread of its own (asgiref's
``ThreadSensitiveContext``), started for the request and joined after it;
the run worker does the same per run. The ORM's connections are per thread,
so on SQLite every request and every run opened a new connection (an open,
Django's function registrations, two PRAGMAs) and closed it at the end.

Here each request or run still has one thread to itself for its whole life
(no two ever share one at the same time, which is what thread-sensitive code
relies on), but the thread is drawn from a stock of idle ones and returned
afterwards, keeping its connection: on SQLite ``CONN_MAX_AGE`` is unlimited
(``deerflow_site.databases``), so Django's end-of-request check closes a
connection only when it is unusable or left in a transaction. PostgreSQL's
connections come from its pool either way. Concurrency stays unbounded, as
before: with no idle thread a new one starts; past ``IDLE_MAX`` idle ones,
returned threads are stopped.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext
from django.core.handlers.asgi import ASGIHandler

IDLE_MAX = 16

# Touched only from the event loop's thread.
_idle: list[ThreadPoolExecutor] = []


@contextlib.asynccontextmanager
async def own_sync_thread() -> AsyncIterator[None]:
    """Run the block's thread-sensitive calls on one reused thread that no other block uses meanwhile."""
    executor = _idle.pop() if _idle else ThreadPoolExecutor(max_workers=1, thread_name_prefix="django-sync")
    try:
        async with ThreadSensitiveContext(executor=executor):
            yield
    finally:
        # A call the block abandoned (a cancelled request) may still be running;
        # the executor's single worker makes the next block's calls wait for it.
        if len(_idle) < IDLE_MAX:
            _idle.append(executor)
        else:
            executor.shutdown(wait=False)


class PooledThreadASGIHandler(ASGIHandler):
    """Django's ASGI handler, each request on a reused thread (``own_sync_thread``)."""

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        async with own_sync_thread():
            await self.handle(scope, receive, send)
