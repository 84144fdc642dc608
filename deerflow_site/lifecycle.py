"""Process start-up and shutdown for the ASGI server.

daphne implements no ASGI lifespan, so under daphne these run from Twisted
hooks (``install_twisted_hooks``); under uvicorn/hypercorn the lifespan
wrapper in ``asgi.py`` calls the same functions. Shutdown is mandatory:
aiosqlite's worker thread is not a daemon, and an unclosed connection kept
daphne hanging on SIGTERM for more than 15 s (runtime spike).
"""

from __future__ import annotations

import asyncio
import logging

logger = logging.getLogger(__name__)

_started: asyncio.Future | None = None


async def startup() -> None:
    """Build the loop's runtime once: savers, Stores and run machinery."""
    global _started
    if _started is None:
        _started = asyncio.ensure_future(_startup())
    await asyncio.shield(_started)


async def _startup() -> None:
    from checkpoints.runtime import async_resources
    from runs.execution.runtime import start_worker

    await async_resources()
    worker = await start_worker()
    logger.info("runtime started (worker %s)", worker.worker_id)


async def shutdown() -> None:
    """Close what startup built, in reverse order: runs first, then the savers they use."""
    global _started
    from checkpoints.runtime import aclose_async_resources
    from runs.execution.runtime import stop_worker

    await stop_worker()
    await aclose_async_resources()
    _started = None
    logger.info("runtime stopped")


def install_twisted_hooks() -> None:
    """Start the runtime when daphne's reactor runs; close it before shutdown."""
    import sys

    if "twisted.internet.reactor" not in sys.modules:
        return  # not under daphne
    from twisted.internet import defer, reactor

    reactor.callWhenRunning(lambda: asyncio.ensure_future(startup()))
    reactor.addSystemEventTrigger(
        "before", "shutdown", lambda: defer.Deferred.fromFuture(asyncio.ensure_future(shutdown()))
    )
