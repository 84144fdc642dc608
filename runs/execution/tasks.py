"""Start the worker's tasks on the serving loop, each in a context of its own."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from typing import Any


def spawn(coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task:
    """Run ``coro`` as a task named ``name`` in a fresh context (call on the loop).

    Never inherit a request's asgiref thread context: it leaks one database
    connection per run once the request ends.
    """
    return asyncio.get_running_loop().create_task(coro, name=name, context=contextvars.Context())
