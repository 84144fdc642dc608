"""Process start-up and shutdown for the ASGI server.

The server (``manage.py serve``: uvicorn) sends ASGI lifespan events, and
the lifespan handler in ``asgi.py`` calls these: start-up before the first
connection, shutdown once the last request has ended. Shutdown is
mandatory: aiosqlite's worker thread is not a daemon, and an unclosed
connection kept the server hanging on SIGTERM for more than 15 s (runtime
spike).
"""

from __future__ import annotations

import asyncio
import fcntl
import gc
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from core.db import MEMORY_SQLITE_NAME

logger = logging.getLogger(__name__)

# "deerflow" read as a number: the PostgreSQL advisory lock a starting server
# holds while it migrates. Session-level, so a process that dies releases it.
MIGRATION_LOCK_KEY = int.from_bytes(b"deerflow", "big")
LOCK_SQL = "SELECT pg_try_advisory_lock(%s)"
UNLOCK_SQL = "SELECT pg_advisory_unlock(%s)"
# A process waiting for the lock asks again this often, never waiting inside a
# statement: LangGraph's setup() runs CREATE INDEX CONCURRENTLY, which waits
# for every open statement, a blocked pg_advisory_lock too (a deadlock, seen).
LOCK_POLL_SECONDS = 0.2

_started: asyncio.Future | None = None
_heap_frozen = False


async def startup(*, claim: bool | None = None) -> None:
    """Build the loop's runtime once: savers, Stores, the stream bridge and the run worker.

    The ASGI app awaits this on lifespan start-up (and before its first
    request of any kind, for a server that sends no lifespan events);
    ``run_workers`` calls it with ``claim=True``. Handlers never do: they
    find the runtime built.
    """
    global _started
    if _started is None:
        _started = asyncio.ensure_future(_startup(claim))
    elif _started.get_loop() is not asyncio.get_running_loop():
        # The runtime's tasks and connections live on that loop: serving from another one would hang.
        raise RuntimeError("the runtime was started on another event loop; shut it down there first")
    elif _started.done() and _started.exception() is None:
        return
    await asyncio.shield(_started)


async def _startup(claim: bool | None) -> None:
    # The runtime's modules (savers, graphs, the worker) load when the runtime starts, not with this module.
    from checkpoints.graphs import log_graph_problems
    from checkpoints.runtime import async_resources
    from core.bridge_runtime import start_bridge
    from runs.execution.runtime import start_worker

    # A broken graph is named here; the others serve. Off the loop: importing
    # and compiling users' graphs must not hold up requests arriving meanwhile.
    await asyncio.to_thread(log_graph_problems)
    await async_resources()
    start_bridge()
    worker = await start_worker(claim=claim)
    _freeze_startup_heap()
    logger.info("runtime started (worker %s)", worker.worker_id)


def _freeze_startup_heap() -> None:
    """Take what start-up built out of the cyclic collector's reach, once per process.

    Django, the URL conf and its views, the compiled graphs and the savers
    live as long as the process, yet every full collection walked them all:
    measured in a server process serving a 200-turn thread, 98-156 ms per full
    collection with the whole event loop stopped, against about 1 ms once
    they are frozen (``gc.freeze``; reference counting still frees them).
    """
    global _heap_frozen
    if _heap_frozen:
        return
    from importlib import import_module

    from django.conf import settings

    import_module(settings.ROOT_URLCONF)  # the views and serializers, imported on the first request otherwise
    gc.collect()
    gc.freeze()
    _heap_frozen = True


async def shutdown() -> None:
    """Close what startup built, in reverse order: runs first, then the bridge and savers they use."""
    global _started
    # Imported as startup() imports them, for the same reason.
    from checkpoints.runtime import aclose_async_resources
    from core.bridge_runtime import aclose_bridge
    from runs.execution.runtime import stop_worker

    await stop_worker()
    await aclose_bridge()
    await aclose_async_resources()
    _started = None
    logger.info("runtime stopped")


def arm_stop_deadline(seconds: float, *, worker_id: str) -> threading.Timer:
    """End the process ``seconds`` from now if its stop has not: fail its runs as shut down, say so, exit 1.

    Every wait of the stop is bounded, but not every dependency honours a
    cancel (see ``runs.execution.worker.stop_tasks``), and a thread stuck in
    a sync call holds the interpreter's exit: a timer thread does not depend
    on the event loop or on what it waits for.
    """
    timer = threading.Timer(seconds, _stop_deadline_passed, kwargs={"seconds": seconds, "worker_id": worker_id})
    timer.name = "stop-deadline"
    timer.daemon = True  # a stop that ends in time exits without waiting for it
    timer.start()
    return timer


def _stop_deadline_passed(*, seconds: float, worker_id: str) -> None:
    # Imported as startup() imports the runtime (this runs on the deadline's timer thread).
    from runs.execution.worker import runs_fail_shut_down

    logger.error("the stop took more than %.0f s: failing this process's runs as shut down and exiting", seconds)
    try:
        for run_id in runs_fail_shut_down(worker_id=worker_id):
            logger.warning("run %s failed as shut down at the stop's deadline", run_id)
    except Exception:
        logger.exception("failing the runs at the stop's deadline failed; orphan recovery ends them")
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


class SchemaOutdated(Exception):
    """The database lacks migrations and ``database.auto_migrate`` is false."""


def schema_migrate_at_start(*, auto_migrate: bool, command: str) -> int:
    """Apply the migrations the database lacks, one starting process at a time; return how many were applied.

    Several servers started together on a fresh database each find it
    unmigrated: the first to take the lock migrates, the others wait for it
    and then find nothing left to apply (two ``migrate`` at once on
    PostgreSQL end in "relation already exists" in one of them). With
    ``auto_migrate`` false an outdated schema is refused, naming ``command``.
    """
    if connection.settings_dict["NAME"] == MEMORY_SQLITE_NAME:
        return 0  # the process holding the in-memory database migrates it (prepare_memory_database)
    # The runtime's modules load when the runtime starts, not with this module (see startup()).
    from checkpoints.runtime import store_vector_table_lacking

    try:
        # A Store index configured after the database was migrated needs its vector table
        # (created by migrate's post_migrate setup, as LangGraph's other tables are).
        lacking = len(_unapplied()) + store_vector_table_lacking()
        if not lacking:
            return 0
        if not auto_migrate:
            raise SchemaOutdated(
                f"The database lacks {lacking} migrations and database.auto_migrate is false: "
                f"run `{command} migrate` before serving"
            )
        with _migration_lock():
            pending = len(_unapplied()) + store_vector_table_lacking()
            if pending:
                call_command("migrate", interactive=False, verbosity=0)
        return pending
    finally:
        connection.close()


def _unapplied() -> list:
    executor = MigrationExecutor(connection)
    return executor.migration_plan(executor.loader.graph.leaf_nodes())


def _try_advisory_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(LOCK_SQL, [MIGRATION_LOCK_KEY])
        return cursor.fetchone()[0]


@contextmanager
def _migration_lock() -> Iterator[None]:
    """Hold the database's migration lock: an advisory lock on PostgreSQL, a lock file beside SQLite's file."""
    if connection.vendor == "postgresql":
        while not _try_advisory_lock():
            time.sleep(LOCK_POLL_SECONDS)
        try:
            yield
        finally:
            with connection.cursor() as cursor:
                cursor.execute(UNLOCK_SQL, [MIGRATION_LOCK_KEY])
        return
    # Not BEGIN IMMEDIATE: Django's SQLite schema editor refuses to run inside
    # an open transaction. flock is released when the process dies too.
    with open(Path(connection.settings_dict["NAME"]).with_suffix(".migrate.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
