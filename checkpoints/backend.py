"""Describe where LangGraph's tables live, derived from Django's ``default`` database.

Deriving (instead of configuring) the saver's connection is what makes a split
brain impossible: the checkpointer and the Store always open the database the
ORM uses, including the test database the test runner switches to.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

from django.db import connections
from psycopg.conninfo import make_conninfo

from core.db import MEMORY_SQLITE_NAME

BackendKind = Literal["memory", "sqlite", "postgres"]


@dataclass(frozen=True)
class Backend:
    """The database of all five stores, as the savers need to reach it."""

    kind: BackendKind
    sqlite_path: str = ""
    conninfo: str = ""
    # Host/port/db (PostgreSQL) or path (SQLite), never credentials.
    identity: str = ""
    # The most connections each of the savers' PostgreSQL pools opens (database.postgres_pool_size, 10 by default).
    pool_size: int = 10

    @property
    def cache_namespace(self) -> str:
        """Return a short stable hash of the identity, for cache key prefixes."""
        return hashlib.sha256(self.identity.encode()).hexdigest()[:12]


def current_backend(alias: str = "default") -> Backend:
    """Return the backend Django's ``alias`` database points at right now."""
    return backend_of(connections[alias].settings_dict)


def backend_of(settings_dict: dict) -> Backend:
    """Return the backend of one Django ``DATABASES`` entry."""
    engine = settings_dict["ENGINE"]
    if engine.endswith("sqlite3"):
        name = str(settings_dict["NAME"])
        if name == MEMORY_SQLITE_NAME:
            return Backend(kind="memory", identity="memory")
        return Backend(kind="sqlite", sqlite_path=name, identity=f"sqlite:{name}")
    if engine.endswith("postgresql"):
        options = {k: v for k, v in settings_dict.get("OPTIONS", {}).items() if k != "pool"}
        conninfo = make_conninfo(
            dbname=settings_dict["NAME"],
            user=settings_dict.get("USER") or None,
            password=settings_dict.get("PASSWORD") or None,
            host=settings_dict.get("HOST") or None,
            port=settings_dict.get("PORT") or None,
            **options,
        )
        identity = f"postgres:{settings_dict.get('HOST')}:{settings_dict.get('PORT')}/{settings_dict['NAME']}"
        pool_size = settings_dict.get("OPTIONS", {}).get("pool", {}).get("max_size", Backend.pool_size)
        return Backend(kind="postgres", conninfo=conninfo, identity=identity, pool_size=pool_size)
    raise RuntimeError(f"Unsupported database engine for checkpoints: {engine}")
