"""Database helpers shared by the apps: JSON containment on SQLite and PostgreSQL; ORM calls from async code; search pages.

``JSONField__contains`` is PostgreSQL-only in Django. Metadata search needs the
same semantics on the embedded SQLite default, so a ``jsoncontains`` lookup
compiles to ``@>`` on PostgreSQL and to a deterministic Python function,
registered on every SQLite connection, that implements jsonb containment.
"""

from __future__ import annotations

import json
import select
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.conf import settings
from django.db.backends.signals import connection_created
from django.db.models import JSONField, Lookup, Model, QuerySet
from django.db.models.expressions import OrderBy
from django.db.models.lookups import FieldGetDbPrepValueMixin
from django.dispatch import receiver

from core.custom_encryption import refuse_sealed_filter

SQLITE_FUNCTION = "deerflow_json_contains"
# The embedded ``memory`` backend: shared-cache in-memory SQLite, one database
# for every connection of the process while one stays open (the runtime keeps one).
MEMORY_SQLITE_NAME = "file:deerflow-memory?mode=memory&cache=shared"
T = TypeVar("T")
M = TypeVar("M", bound=Model)


def _scalar_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def json_contains(container: Any, contained: Any) -> bool:
    """Return whether ``container`` contains ``contained`` as jsonb ``@>`` defines it."""
    if isinstance(contained, dict):
        return isinstance(container, dict) and all(
            key in container and json_contains(container[key], value) for key, value in contained.items()
        )
    if isinstance(contained, list):
        return isinstance(container, list) and all(
            any(json_contains(item, wanted) for item in container) for wanted in contained
        )
    if isinstance(container, list):
        # jsonb: a top-level array contains a primitive it holds.
        return any(_scalar_equal(item, contained) for item in container)
    return not isinstance(container, (dict, list)) and _scalar_equal(container, contained)


def _sqlite_json_contains(container: str | None, contained: str | None) -> int:
    if container is None or contained is None:
        return 0
    return int(json_contains(json.loads(container), json.loads(contained)))


@receiver(connection_created)
def _register_sqlite_function(sender, connection, **kwargs) -> None:
    if connection.vendor == "sqlite":
        connection.connection.create_function(SQLITE_FUNCTION, 2, _sqlite_json_contains, deterministic=True)


@JSONField.register_lookup
class JSONContains(FieldGetDbPrepValueMixin, Lookup):
    """``field__jsoncontains=value``: jsonb containment on both backends."""

    lookup_name = "jsoncontains"

    def get_prep_lookup(self):
        # A key LANGGRAPH_AES_JSON_KEYS seals never equals a filter's value: a 422, not an empty answer.
        column = getattr(self.lhs, "target", None)
        if getattr(column, "sealed_as", ("",))[0]:
            refuse_sealed_filter(column.name, self.rhs)
        return super().get_prep_lookup()

    def as_sql(self, compiler, connection):
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        if connection.vendor == "postgresql":
            return f"{lhs} @> {rhs}", [*lhs_params, *rhs_params]
        return f"{SQLITE_FUNCTION}({lhs}, {rhs})", [*lhs_params, *rhs_params]


def db_async(func: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """Return ``func`` as a coroutine for ORM work on the request's or the run's own thread.

    On PostgreSQL each call gives its pooled connection back when it returns
    (channels' ``database_sync_to_async``): 32 runs each holding one for
    their whole life would drain a pool of 10. SQLite has no pool, and each
    new connection is an open and two PRAGMAs: closed after every call, one
    ``/wait`` opened six. There the thread keeps its connection, and the
    thread outlives its request or run (``core.sync_threads``):
    Django's end-of-request check (``request_finished``; a stream's when the
    stream ends) and the worker's at a run's end close it only when it is
    unusable or left in a transaction. Calls outside both (the worker's
    claims) keep one on asgiref's shared thread.
    """
    if settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        return database_sync_to_async(func)
    return sync_to_async(func, thread_sensitive=True)


def sort_keys(sort_by: str, sort_order: str, *, tiebreak: str) -> list[str]:
    """Return ``order_by`` keys: ``sort_by``, then the unique ``tiebreak`` so pages never overlap or skip rows."""
    direction = "-" if sort_order == "desc" else ""
    return [f"{direction}{key}" for key in dict.fromkeys((sort_by, tiebreak))]


def page_of(
    queryset: QuerySet[M], *, order_by: Sequence[str | OrderBy], limit: int, offset: int
) -> tuple[list[M], int]:
    """Return rows ``offset`` to ``offset + limit`` of ``queryset`` in that order, and how many match in all."""
    return list(queryset.order_by(*order_by)[offset : offset + limit]), queryset.count()


# -- pooled PostgreSQL connections ------------------------------------------------------


def _heard_while_idle(conn: Any) -> bool:
    """Whether an idle pooled connection's socket has something to read (or it is already known broken).

    An idle connection is sent nothing: the server closing it (a restart,
    ``pg_terminate_backend``) leaves an error message and EOF to read, and a
    notice or ``NOTIFY`` is rare. Polling the socket costs no round trip.
    """
    if conn.closed or conn.broken:
        return True
    try:
        readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
    except (OSError, ValueError):  # no socket left
        return True
    return bool(readable)


def check_pooled(conn: Any) -> None:
    """psycopg_pool's ``check`` for a sync pool: the empty round trip only for a connection heard from while idle.

    ``ConnectionPool.check_connection`` runs one empty query per checkout
    (about 5 % of a streaming run's CPU on PostgreSQL); a connection the server
    closed is still replaced at checkout, not handed to a request to fail.
    What it cannot see is a close whose message is still on its way (the
    moment between a backend's end and its farewell reaching this socket,
    sub-millisecond on one host): a checkout in that moment fails its
    statement, as one already running then does.
    """
    if _heard_while_idle(conn):
        from psycopg_pool import ConnectionPool  # loaded only where a PostgreSQL pool exists (not on SQLite)

        ConnectionPool.check_connection(conn)


async def acheck_pooled(conn: Any) -> None:
    """``check_pooled`` for an async pool."""
    if _heard_while_idle(conn):
        from psycopg_pool import AsyncConnectionPool  # loaded only where a PostgreSQL pool exists

        await AsyncConnectionPool.check_connection(conn)
