"""The DeerFlow database being imported: connection, schema check and row reads.

Read with plain DB-API (``sqlite3`` opened read-only, ``psycopg``), never
through Django's connections, and with LangGraph's own saver and Store
classes for the tables LangGraph owns. Nothing here writes to the source.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote, urlparse

import psycopg
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.base import BaseStore
from langgraph.store.postgres import PostgresStore
from langgraph.store.sqlite import SqliteStore
from psycopg.rows import dict_row

# DeerFlow's Alembic chain (persistence/migrations/versions); a database
# provisioned before Alembic has no alembic_version table (the "legacy
# baseline"), and DeerFlow stamps it 0001_baseline on its next start.
KNOWN_REVISIONS = (
    "0001_baseline",
    "0002_runs_token_usage",
    "0003_scheduled_tasks",
    "0004_run_ownership",
    "0005_run_stop_reason",
    "0006_agents",
    "0007_scheduled_run_active_index",
    "0008_thread_operation_kind",
    "0009_webhook_dedupe",
    "0010_run_cancel_request",
    "0011_mcp_tasks",
    "0012_mcp_task_results",
    "0013_mcp_task_notifications",
)
# The columns every known revision has; later ones (tokens, leases, cancel
# requests, operation_kind) are read when present and defaulted when not.
REQUIRED_COLUMNS = {
    "threads_meta": {"thread_id", "user_id", "status", "metadata_json", "created_at", "updated_at"},
    "runs": {"run_id", "thread_id", "user_id", "status", "created_at", "updated_at"},
    "run_events": {"id", "thread_id", "run_id", "event_type", "category", "content", "seq", "created_at"},
}
OPTIONAL_TABLES = {
    "feedback": {"feedback_id", "run_id", "thread_id"},
    "users": {"id", "email"},
}
CHECKPOINT_TABLES = {"sqlite": ("checkpoints", "writes"), "postgres": ("checkpoints", "checkpoint_writes")}
CHECKPOINT_COLUMNS = {"thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "metadata"}

SQLITE_TABLES_SQL = "SELECT name FROM sqlite_master WHERE type = 'table'"
POSTGRES_TABLES_SQL = "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
POSTGRES_COLUMNS_SQL = (
    "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = %s"
)
ALEMBIC_SQL = "SELECT version_num FROM alembic_version"
# Keyset pages over each table's key; the table and key names are constants below, never input.
PAGE_SQL = "SELECT * FROM {table} WHERE {key} > %s ORDER BY {key} LIMIT %s"
COUNT_SQL = "SELECT COUNT(*) AS n FROM {table}"
# Threads that have checkpoints, runs or events, whether or not threads_meta lists them.
THREAD_IDS_SQL = {
    "checkpoints": "SELECT DISTINCT thread_id FROM checkpoints",
    "runs": "SELECT DISTINCT thread_id FROM runs",
    "run_events": "SELECT DISTINCT thread_id FROM run_events",
    "threads_meta": "SELECT thread_id FROM threads_meta",
}
RUN_OWNER_SQL = "SELECT thread_id, user_id FROM runs WHERE user_id IS NOT NULL ORDER BY created_at"
TASK_PATHS_SQL = {
    "sqlite": "SELECT DISTINCT checkpoint_ns, checkpoint_id, task_id, task_path FROM writes WHERE thread_id = %s",
    "postgres": (
        "SELECT DISTINCT checkpoint_ns, checkpoint_id, task_id, task_path FROM checkpoint_writes WHERE thread_id = %s"
    ),
}
PAGE_KEYS = {"threads_meta": "thread_id", "runs": "run_id", "run_events": "id", "feedback": "feedback_id"}


class SourceRefused(Exception):
    """The source is not a DeerFlow database this importer knows; the message says why, in one line."""


@dataclass
class SourceDatabase:
    """An open DeerFlow database: its kind, tables, schema flavour and connection."""

    kind: str  # "sqlite" or "postgres"
    location: str  # a file path, or a libpq conninfo
    connection: Any
    tables: set[str] = field(default_factory=set)
    columns: dict[str, set[str]] = field(default_factory=dict)
    revision: str | None = None

    @property
    def flavour(self) -> str:
        return f"alembic {self.revision}" if self.revision else "legacy baseline (no alembic_version)"

    @property
    def has_checkpoints(self) -> bool:
        return set(CHECKPOINT_TABLES[self.kind]) <= self.tables

    @property
    def has_store(self) -> bool:
        return "store" in self.tables

    def execute(self, sql: str, params: tuple = ()) -> list[dict[str, Any]]:
        """Run one read and return its rows as dicts (``%s`` placeholders on both backends)."""
        if self.kind == "sqlite":
            cursor = self.connection.execute(sql.replace("%s", "?"), params)
            names = [column[0] for column in cursor.description or ()]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    def count(self, table: str) -> int:
        return int(self.execute(COUNT_SQL.format(table=table))[0]["n"]) if table in self.tables else 0

    def pages(self, table: str, *, batch_size: int, after: Any = None) -> Iterator[list[dict[str, Any]]]:
        """Yield the table's rows in key order, ``batch_size`` at a time, from after ``after``."""
        key = PAGE_KEYS[table]
        cursor = after if after is not None else ("" if key != "id" else -1)
        sql = PAGE_SQL.format(table=table, key=key)
        while rows := self.execute(sql, (cursor, batch_size)):
            yield rows
            cursor = rows[-1][key]

    def thread_ids(self, table: str) -> set[str]:
        return {row["thread_id"] for row in self.execute(THREAD_IDS_SQL[table])} if table in self.tables else set()

    def first_run_owners(self) -> dict[str, str]:
        """Return the user of each thread's oldest run that names one (owners of legacy threads)."""
        owners: dict[str, str] = {}
        for row in self.execute(RUN_OWNER_SQL):
            owners.setdefault(row["thread_id"], row["user_id"])
        return owners

    def user_emails(self) -> dict[str, str]:
        if "users" not in self.tables:
            return {}
        return {row["id"]: row["email"] for row in self.execute("SELECT id, email FROM users")}

    def task_paths(self, thread_id: str) -> dict[tuple[str, str, str], str]:
        """Return the task path each task's writes were stored with (``PendingWrite`` has none)."""
        rows = self.execute(TASK_PATHS_SQL[self.kind], (thread_id,))
        return {(r["checkpoint_ns"], r["checkpoint_id"], r["task_id"]): r["task_path"] or "" for r in rows}

    def saver(self) -> BaseCheckpointSaver:
        """Return LangGraph's saver for this backend, reading this database."""
        if self.kind == "sqlite":
            return SqliteSaver(self.connection)
        return PostgresSaver(self.connection)

    def store(self) -> BaseStore:
        if self.kind == "sqlite":
            return SqliteStore(self.connection)
        return PostgresStore(self.connection)

    def close(self) -> None:
        self.connection.close()


def source_open(url: str) -> SourceDatabase:
    """Open ``url`` (``sqlite:///path`` or a PostgreSQL URL) and check it is a DeerFlow schema we know."""
    source = _connect(url)
    try:
        _inspect(source)
        schema_check(source)
    except BaseException:
        source.close()
        raise
    return source


def _connect(url: str) -> SourceDatabase:
    scheme = urlparse(url).scheme
    if scheme == "sqlite":
        path = unquote(url.removeprefix("sqlite://"))
        if path.startswith("//"):
            path = path[1:]
        try:
            # mode=ro: an import never writes its source, and a wrong path is an error, not a new empty file.
            connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
            connection.execute(SQLITE_TABLES_SQL)
        except sqlite3.Error as exc:
            raise SourceRefused(f"cannot open SQLite source {path}: {exc}") from None
        return SourceDatabase("sqlite", path, connection)
    if scheme in {"postgres", "postgresql"}:
        try:
            pg_connection = psycopg.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row)
        except psycopg.Error as exc:
            raise SourceRefused(f"cannot connect to the PostgreSQL source: {str(exc).strip()}") from None
        return SourceDatabase("postgres", url, pg_connection)
    raise SourceRefused(f"--source must be sqlite:///path or a postgresql:// URL, got {url!r}")


def _inspect(source: SourceDatabase) -> None:
    if source.kind == "sqlite":
        source.tables = {row["name"] for row in source.execute(SQLITE_TABLES_SQL)}
    else:
        source.tables = {row["table_name"] for row in source.execute(POSTGRES_TABLES_SQL)}
    wanted = {*REQUIRED_COLUMNS, *OPTIONAL_TABLES, "checkpoints"} & source.tables
    source.columns = {table: _columns(source, table) for table in wanted}
    if "alembic_version" in source.tables:
        rows = source.execute(ALEMBIC_SQL)
        source.revision = rows[0]["version_num"] if rows else ""


def _columns(source: SourceDatabase, table: str) -> set[str]:
    if source.kind == "sqlite":
        # PRAGMA takes no parameters; the table name comes from sqlite_master, not from input.
        return {row["name"] for row in source.execute(f"PRAGMA table_info({table})")}
    return {row["column_name"] for row in source.execute(POSTGRES_COLUMNS_SQL, (table,))}


def schema_check(source: SourceDatabase) -> None:
    """Refuse a database that is not DeerFlow's schema (any known revision, or the legacy baseline)."""
    missing_tables = sorted(set(REQUIRED_COLUMNS) - source.tables)
    if missing_tables:
        raise SourceRefused(f"not a DeerFlow database: no {', '.join(missing_tables)} table")
    if source.revision is not None and source.revision not in KNOWN_REVISIONS:
        raise SourceRefused(
            f"unknown DeerFlow schema revision {source.revision!r} (known: {KNOWN_REVISIONS[0]} … {KNOWN_REVISIONS[-1]})"
        )
    for table, required in {**REQUIRED_COLUMNS, **OPTIONAL_TABLES}.items():
        if table in source.tables and (missing := sorted(required - source.columns[table])):
            raise SourceRefused(f"not a DeerFlow schema: table {table} lacks {', '.join(missing)}")
    if "checkpoints" in source.tables and (missing := sorted(CHECKPOINT_COLUMNS - source.columns["checkpoints"])):
        raise SourceRefused(f"not a LangGraph checkpoint table this importer reads: checkpoints lacks {missing}")


def json_value(value: Any, default: Any) -> Any:
    """Return a JSON column's value: SQLite hands back text, PostgreSQL the decoded value."""
    if value is None or value == "":
        return default
    if isinstance(value, (str, bytes)):
        try:
            return json.loads(value)
        except ValueError:
            return default
    return value


def timestamp(value: Any) -> datetime | None:
    """Return a timestamp column as an aware datetime (SQLAlchemy writes naive UTC text on SQLite)."""
    if value is None or value == "":
        return None
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
