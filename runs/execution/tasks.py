"""Start the worker's tasks on the serving loop, each in a context of its own."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any


def spawn(coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task:
    """Run ``coro`` as a task named ``name`` in a fresh context (call on the loop).

    Never inherit a request's asgiref thread context: it leaks one database
    connection per run once the request ends.
    """
    return asyncio.get_running_loop().create_task(coro, name=name, context=contextvars.Context())


async def repeat_every(
    seconds: float, action: Callable[[], Awaitable[object]], *, logger: logging.Logger, failure: str
) -> None:
    """Await ``action`` every ``seconds`` until cancelled; a failed pass is logged as ``failure`` and retried next period."""
    while True:
        await asyncio.sleep(seconds)
        try:
            await action()
        except Exception:
            logger.exception(failure)
