"""How every Redis client of the process connects: timeouts, one retry, a name.

redis-py's defaults cut two ways. Its 5 s socket timeout is shorter than the
blocking reads we issue (channels-redis ``BZPOPMIN`` waits 5 s, the stream
bridge's ``XREAD BLOCK`` up to ``READ_BLOCK_SECONDS``), so the first 5 s of
silence raised ``TimeoutError`` and killed WebSockets, SSE streams and the
cancel listener. And ``from_url`` clients never retry, so after a Redis
restart the first command on each pooled connection failed.

So: plain commands keep a bounded timeout; a read that blocks is bounded by
its block time plus that same margin (channels-redis: as its socket timeout;
the stream bridge's tails: as an ``asyncio.timeout``, see ``keep_cancelled``);
every client retries once, after a short
backoff, on ``ConnectionError`` (not on timeouts, which would double a slow
call), and pings a connection idle longer than ``HEALTH_CHECK_SECONDS``
before reusing it. Each client is named ``deerflow-<role>-<host>-<pid>``, so
``CLIENT LIST`` tells which process holds which connection.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")

# Plain commands (XADD, ZADD, MGET…) answer in well under a millisecond
# locally; 5 s only trips on a dead or wedged server.
COMMAND_TIMEOUT_SECONDS = 5.0
CONNECT_TIMEOUT_SECONDS = 5.0
# The longest XREAD BLOCK the stream bridge issues; longer waits are sliced.
READ_BLOCK_SECONDS = 10.0
# A pooled connection idle this long is PINGed (and reconnected) before use.
HEALTH_CHECK_SECONDS = 30
# One retry after a dropped connection: enough to reconnect after a restart,
# few enough that a dead Redis fails a request in ~2 connect attempts.
RETRIES = 1
RETRY_BACKOFF_SECONDS = (0.05, 0.5)  # (base, cap) of the exponential backoff


def client_name(role: str) -> str:
    """Return the ``CLIENT SETNAME`` of this process's ``role`` connections."""
    return f"deerflow-{role}-{socket.gethostname()}-{os.getpid()}"


def blocking_timeout(block_seconds: float) -> float:
    """Return how long a read that blocks ``block_seconds`` may take before Redis counts as not answering."""
    return block_seconds + COMMAND_TIMEOUT_SECONDS


def connection_kwargs(
    role: str,
    *,
    socket_timeout: float | None = COMMAND_TIMEOUT_SECONDS,
    retries: int = RETRIES,
    asynchronous: bool = True,
) -> dict[str, Any]:
    """Return redis-py connection-pool kwargs (``from_url(url, **kwargs)``, channels-redis ``hosts``)."""
    from redis.asyncio.retry import Retry as AsyncRetry
    from redis.backoff import ExponentialBackoff
    from redis.exceptions import ConnectionError
    from redis.retry import Retry as SyncRetry

    retry_class: type[AsyncRetry] | type[SyncRetry] = AsyncRetry if asynchronous else SyncRetry
    base, cap = RETRY_BACKOFF_SECONDS
    return {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": CONNECT_TIMEOUT_SECONDS
        if socket_timeout is None
        else min(socket_timeout, CONNECT_TIMEOUT_SECONDS),
        "retry": retry_class(ExponentialBackoff(cap=cap, base=base), retries, supported_errors=(ConnectionError,)),
        "health_check_interval": HEALTH_CHECK_SECONDS,
        "client_name": client_name(role),
    }


async def keep_cancelled(command: Awaitable[T]) -> T:
    """Await a redis-py command; if its task was cancelled meanwhile, raise that even when redis-py returned.

    A connection with a socket timeout sends each command under
    ``asyncio.wait_for``, which on Python 3.11 returns the inner result when
    the cancel lands as the send completes (CPython gh-86296; redis-py issue
    #2028): the command runs to its end and the cancel is gone. The cancel is
    still counted on the task (``Task.cancelling()``), so it is raised here,
    once the command answered. A blocking read cannot wait that long: see
    ``RedisStreamBridge``, whose tail connections have no socket timeout.
    """
    task = asyncio.current_task()
    asked = task.cancelling() if task is not None else 0
    result = await command
    if task is not None and task.cancelling() > asked:
        raise asyncio.CancelledError
    return result
