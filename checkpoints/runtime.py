"""Process-wide LangGraph savers and Stores, sync and async, built by one factory.

Sync code (DRF views, the admin, management commands) uses the sync twins:
``SqliteSaver`` on its own connection, or ``PostgresSaver`` on a psycopg
``ConnectionPool``. Async code (runs, streams, async views) uses the async
twins, which bind to the event loop that builds them, so they are created
lazily inside the serving loop and kept per loop. Both twins open the database
``checkpoints.backend.current_backend()`` names, i.e. Django's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from dataclasses import dataclass, field
from typing import Any

import aiosqlite
from django.conf import settings
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from checkpoints.backend import Backend, current_backend
from checkpoints.cached_saver import CachedHistorySaver
from checkpoints.decode_memo import install_decode_memo
from checkpoints.encryption import KeepsListedKeysOut, Keyring, checkpoint_serde
from checkpoints.history_cache import HistoryCache, make_history_cache
from checkpoints.modes import process_mode
from checkpoints.sealed_store import sealed_store
from checkpoints.sqlite_aio import CancelSafeAsyncSqliteSaver
from checkpoints.store_index import (
    PG_FLAVOUR_SQL,
    StoreIndex,
    aprepare_sqlite,
    exact_postgres_stores,
    postgres_flavour,
    prepare_sqlite,
    sqlite_stores,
)
from core.custom_encryption import active as active_encryption
from core.db import acheck_pooled, check_pooled

_PG_KWARGS = {"autocommit": True, "prepare_threshold": 0}


def _pg_kwargs() -> dict[str, Any]:
    from psycopg.rows import dict_row

    return {**_PG_KWARGS, "row_factory": dict_row}


def _pool_options(pool_class: Any, *, min_size: int, max_size: int, open: bool) -> dict[str, Any]:
    """Return a psycopg pool's options (sync or async), sized by the caller.

    ``check``: psycopg_pool never tests idle connections itself, so one the
    server closed (restart, pg_terminate_backend) is replaced at checkout,
    not handed to a saver to fail a request or a run; the empty round trip
    is paid only by a connection heard from while idle (``core.db.check_pooled``).
    """
    from psycopg_pool import AsyncConnectionPool  # PostgreSQL's packages load only on that backend (below)

    return {
        "kwargs": _pg_kwargs(),
        "min_size": min_size,
        "max_size": max_size,
        "open": open,
        "check": acheck_pooled if issubclass(pool_class, AsyncConnectionPool) else check_pooled,
    }


def _sqlite_connect(path: str, *, autocommit: bool) -> sqlite3.Connection:
    """Open a connection the way each LangGraph class expects it.

    The savers commit their own implicit transactions; the Stores expect
    autocommit (their setup() would otherwise hold the write lock forever).
    """
    conn = sqlite3.connect(path, check_same_thread=False, timeout=20, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    if not autocommit:
        # "" is sqlite3's implicit-transaction mode; typeshed lists only DEFERRED/IMMEDIATE/EXCLUSIVE.
        conn.isolation_level = ""  # type: ignore[assignment]
    return conn


@dataclass
class SyncResources:
    """The sync saver and Store of this process, plus what must be closed."""

    backend: Backend
    saver: BaseCheckpointSaver
    store: BaseStore
    closers: list = field(default_factory=list)

    def close(self) -> None:
        for close in reversed(self.closers):
            close()


@dataclass
class AsyncResources:
    """The async saver and Store bound to one event loop."""

    backend: Backend
    saver: BaseCheckpointSaver
    store: BaseStore
    pool: Any = None
    closers: list = field(default_factory=list)
    history_cache: HistoryCache | None = None

    def new_saver(self) -> BaseCheckpointSaver:
        """Return a saver for one run.

        Upstream's ``AsyncPostgresSaver`` serialised all IO of an instance
        behind one asyncio.Lock, so each run got a saver of its own on the
        shared pool (measured: the pool never grew past 2 connections with a
        shared saver). ``PooledAsyncPostgresSaver`` has no such lock; a run
        still gets its own, for its decode memo and history cache wrapping.
        """
        if self.backend.kind == "postgres":
            # PostgreSQL's savers, Store and pool load only on that backend (psycopg_pool and the postgres packages).
            from checkpoints.pg_saver import PooledAsyncPostgresSaver

            saver = PooledAsyncPostgresSaver(self.pool, serde=self.saver.serde)  # sealed as the process's
            return with_history_cache(install_decode_memo(saver), self.history_cache)
        return self.saver

    async def aclose(self) -> None:
        await _stop_batch_task(self.store)
        for close in reversed(self.closers):
            await close()


async def _stop_batch_task(store: BaseStore) -> None:
    """Stop the background task LangGraph's async Stores batch their operations in.

    The Store never stops it itself: only its ``__del__`` cancels it, once
    the loop is gone, and asyncio then logs "Task was destroyed but it is
    pending!" at every shutdown. Cancelled here while the loop still runs.
    """
    task = getattr(store, "_task", None)
    if isinstance(task, asyncio.Task) and not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# The memory backend shares one saver and Store between both twins.


class MemorySaver(KeepsListedKeysOut, InMemorySaver):
    """The memory backend's saver (``KeepsListedKeysOut``)."""


class SyncSqliteSaver(KeepsListedKeysOut, SqliteSaver):
    """The SQLite backend's saver for request threads (``KeepsListedKeysOut``)."""


_memory: tuple[InMemorySaver, InMemoryStore] | None = None
_sync: SyncResources | None = None
_sync_lock = threading.Lock()
_async: dict[asyncio.AbstractEventLoop, AsyncResources] = {}
_async_locks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}


def store_default_ttl() -> float | None:
    """Minutes an item written without its own ``ttl`` lives (langgraph.json ``store.ttl.default_ttl``), or None."""
    return settings.DEERFLOW.get("STORE_DEFAULT_TTL")


def store_ttl_config() -> Any:
    """The Stores' ``TTLConfig``: the default TTL of items a graph writes without one; reads never refresh."""
    minutes = store_default_ttl()
    return {"default_ttl": minutes, "refresh_on_read": False} if minutes else None


def checkpoint_keyring() -> Keyring | None:
    """The keys checkpoints are sealed with (``LANGGRAPH_AES_KEY`` and its fallbacks), or None."""
    return settings.DEERFLOW.get("CHECKPOINT_KEYRING")


def saver_serde() -> Any:
    """The savers' serializer: LangGraph's default, sealed by custom blob handlers or a key (checkpoints.encryption)."""
    custom = active_encryption()
    return checkpoint_serde(checkpoint_keyring(), custom if custom is not None and custom.seals_blobs else None)


def store_index() -> StoreIndex | None:
    """The Store's embedding index (langgraph.json ``store.index``), or None: search ``query`` is then refused."""
    return settings.DEERFLOW.get("STORE_INDEX")


def store_vector_table_lacking() -> bool:
    """Whether a Store index is configured but its database lacks the vector table (``migrate`` creates it)."""
    from django.db import connection  # Django's connection: the Store's tables live in its database

    if store_index() is None or current_backend().kind == "memory":
        return False
    return "store_vectors" not in connection.introspection.table_names()


def _store_index_config() -> Any:
    index = store_index()
    return index.config() if index else None


def _memory_pair() -> tuple[InMemorySaver, InMemoryStore]:
    global _memory
    if _memory is None:
        _memory = (MemorySaver(serde=saver_serde()), InMemoryStore(index=_store_index_config()))
    return _memory


def delta_history_cache(backend: Backend, *, asynchronous: bool) -> HistoryCache | None:
    """Return the history cache a delta-mode process wraps its savers with (None in full mode)."""
    mode, _ = process_mode()
    if mode != "delta":
        return None
    return make_history_cache(settings.DEERFLOW_CONFIG.database.checkpoint_cache, backend, asynchronous=asynchronous)


def with_history_cache(saver: BaseCheckpointSaver, cache: HistoryCache | None) -> BaseCheckpointSaver:
    """Wrap ``saver`` so delta-history reads go through ``cache`` (no cache: unchanged)."""
    return CachedHistorySaver(saver, cache) if cache is not None else saver


def _with_delta_cache(resources):
    """Wrap the resources' saver in delta mode; the cache closes with them."""
    cache = delta_history_cache(resources.backend, asynchronous=isinstance(resources, AsyncResources))
    if cache is None:
        return resources
    resources.saver = with_history_cache(resources.saver, cache)
    if isinstance(resources, AsyncResources):
        resources.history_cache = cache
        resources.closers.insert(0, cache.aclose)
    else:
        resources.closers.insert(0, cache.close)
    return resources


def build_sync(backend: Backend) -> SyncResources:
    """Build the sync saver and Store for ``backend`` (wrapped with the history cache in delta mode)."""
    resources = _build_sync(backend)
    install_decode_memo(resources.saver)
    resources.store = sealed_store(resources.store, indexed=store_index() is not None)
    return _with_delta_cache(resources)


async def build_async(backend: Backend) -> AsyncResources:
    """Build the async saver and Store for ``backend`` on the running loop (cached in delta mode)."""
    resources = await _build_async(backend)
    install_decode_memo(resources.saver)
    resources.store = sealed_store(resources.store, indexed=store_index() is not None)
    return _with_delta_cache(resources)


def _build_sync(backend: Backend) -> SyncResources:
    if backend.kind == "memory":
        saver, store = _memory_pair()
        return SyncResources(backend, saver, store)
    if backend.kind == "sqlite":
        saver_conn = _sqlite_connect(backend.sqlite_path, autocommit=False)
        store_conn = _sqlite_connect(backend.sqlite_path, autocommit=True)
        return SyncResources(
            backend,
            SyncSqliteSaver(saver_conn, serde=saver_serde()),
            _sqlite_store(store_conn),
            closers=[saver_conn.close, store_conn.close],
        )
    # PostgreSQL's savers, Store and pool load only on that backend (psycopg_pool and the postgres packages).
    from langgraph.store.postgres import PostgresStore
    from psycopg import Connection
    from psycopg.rows import DictRow
    from psycopg_pool import ConnectionPool

    from checkpoints.pg_saver import PooledPostgresSaver

    # Typed by its rows: _pg_kwargs() sets row_factory=dict_row.
    pool: ConnectionPool[Connection[DictRow]] = ConnectionPool(
        backend.conninfo, **_pool_options(ConnectionPool, min_size=1, max_size=backend.pool_size, open=True)
    )
    store_class: type[Any] = PostgresStore
    if store_index() is not None:
        with pool.connection() as pg_conn:
            if postgres_flavour(pg_conn.execute(PG_FLAVOUR_SQL).fetchone()) == "exact":
                store_class = exact_postgres_stores()[0]
    pg_store = store_class(pool, ttl=store_ttl_config(), index=_store_index_config())
    return SyncResources(backend, PooledPostgresSaver(pool, serde=saver_serde()), pg_store, closers=[pool.close])


async def _build_async(backend: Backend) -> AsyncResources:
    if backend.kind == "memory":
        saver, store = _memory_pair()
        return AsyncResources(backend, saver, store)
    if backend.kind == "sqlite":
        saver_conn = await aiosqlite.connect(backend.sqlite_path, timeout=20)
        store_conn = await aiosqlite.connect(backend.sqlite_path, timeout=20, isolation_level=None)
        for conn in (saver_conn, store_conn):
            await conn.execute("PRAGMA journal_mode=WAL")
            await conn.execute("PRAGMA synchronous=NORMAL")
        sqlite_store = sqlite_stores()[1](store_conn, ttl=store_ttl_config(), index=_store_index_config())
        if store_index() is not None:
            await aprepare_sqlite(store_conn)
            await sqlite_store.setup()  # before it is shared (see sqlite_stores)
        # aiosqlite's worker is a non-daemon thread: an unclosed connection
        # hangs interpreter exit (a server's SIGTERM hung >15 s without this).
        return AsyncResources(
            backend,
            CancelSafeAsyncSqliteSaver(saver_conn, serde=saver_serde()),
            sqlite_store,
            closers=[saver_conn.close, store_conn.close],
        )
    # PostgreSQL's savers, Store and pool load only on that backend (psycopg_pool and the postgres packages).
    from langgraph.store.postgres.aio import AsyncPostgresStore

    from checkpoints.pg_pool import ReturningConnectionPool
    from checkpoints.pg_saver import PooledAsyncPostgresSaver

    pool = ReturningConnectionPool(
        backend.conninfo, **_pool_options(ReturningConnectionPool, min_size=2, max_size=backend.pool_size, open=False)
    )
    await pool.open(wait=True)
    async_store_class: type[Any] = AsyncPostgresStore
    if store_index() is not None:
        async with pool.connection() as pg_conn:
            if postgres_flavour(await (await pg_conn.execute(PG_FLAVOUR_SQL)).fetchone()) == "exact":
                async_store_class = exact_postgres_stores()[1]
    return AsyncResources(
        backend,
        PooledAsyncPostgresSaver(pool, serde=saver_serde()),
        async_store_class(pool, ttl=store_ttl_config(), index=_store_index_config()),
        pool=pool,
        closers=[pool.close],
    )


def sync_resources() -> SyncResources:
    """Return this process's sync saver and Store, building them on first use."""
    global _sync
    backend = current_backend()
    with _sync_lock:
        if _sync is None or _sync.backend != backend:
            if _sync is not None:
                _sync.close()
            _sync = build_sync(backend)
        return _sync


async def async_resources() -> AsyncResources:
    """Return the async saver and Store of the running loop, building them on first use."""
    loop = asyncio.get_running_loop()
    if (resources := _async.get(loop)) is not None:
        return resources
    lock = _async_locks.setdefault(loop, asyncio.Lock())
    async with lock:
        if loop not in _async:
            _async[loop] = await build_async(current_backend())
    return _async[loop]


async def aclose_async_resources() -> None:
    """Close the running loop's async resources (lifespan shutdown, tests)."""
    loop = asyncio.get_running_loop()
    _async_locks.pop(loop, None)
    resources = _async.pop(loop, None)
    if resources is not None:
        await resources.aclose()


def close_sync_resources() -> None:
    """Close the sync resources (tests switch databases between passes)."""
    global _sync
    with _sync_lock:
        if _sync is not None:
            _sync.close()
        _sync = None


def _sqlite_store(conn: sqlite3.Connection) -> BaseStore:
    from langgraph.store.sqlite import SqliteStore  # the SQLite Store loads only on that backend

    if store_index() is None:
        return SqliteStore(conn, ttl=store_ttl_config())
    prepare_sqlite(conn)
    store = sqlite_stores()[0](conn, ttl=store_ttl_config(), index=_store_index_config())
    store.setup()  # before it is shared (see sqlite_stores)
    return store


def setup_tables() -> None:
    """Create or migrate LangGraph's checkpoint and Store tables via the savers' setup()."""
    resources = sync_resources()
    for component in (resources.saver, resources.store):
        # The in-memory saver and Store have no tables.
        if setup := getattr(component, "setup", None):
            setup()
