"""How one thread sits in LangGraph's tables: rows, bytes, snapshots and orphans.

The saver API can say what a checkpoint holds but not how big anything is or
where a delta channel's seeds are, so this module reads LangGraph's tables
with raw SQL on Django's connection (they live in Django's database, see
``checkpoints.backend``). Retention plans on the same read. The layouts
(langgraph-checkpoint-sqlite 3.1.2, -postgres 3.2.0):

- SQLite: ``checkpoints`` keeps each checkpoint msgpack-serialized with every
  channel value inline (a delta snapshot is a ``_DeltaSnapshot`` value, msgpack
  ext code 7); ``writes`` keeps the pending writes.
- PostgreSQL: ``checkpoints`` keeps JSONB with only primitive values inline (a
  delta snapshot leaves a ``true`` marker there); ``checkpoint_blobs`` keeps the
  other values by (channel, version); ``checkpoint_writes`` the pending writes.

``seed_of`` mirrors where each saver's ``get_delta_channel_history`` stops:
SQLite at a checkpoint whose blob has the channel at all, PostgreSQL at one
whose version of the channel has a non-empty blob or a non-null inline value.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import ormsgpack
from django.db import connection
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from checkpoints.backend import current_backend
from checkpoints.encryption import plain_bytes
from checkpoints.modes import metadata_uses_delta
from core.errors import Unavailable

# langgraph.checkpoint.serde.jsonplus.EXT_DELTA_SNAPSHOT
EXT_DELTA_SNAPSHOT = 7

SQLITE_CHECKPOINTS_SQL = """
SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata
FROM checkpoints WHERE thread_id = %s
"""
SQLITE_WRITES_SQL = """
SELECT checkpoint_ns, checkpoint_id, channel, COUNT(*), COALESCE(SUM(LENGTH(value)), 0)
FROM writes WHERE thread_id = %s
GROUP BY checkpoint_ns, checkpoint_id, channel
"""
POSTGRES_CHECKPOINTS_SQL = """
SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id,
       checkpoint -> 'channel_versions', checkpoint -> 'channel_values', metadata,
       octet_length(checkpoint::text) + octet_length(metadata::text),
       pg_column_size(checkpoint) + pg_column_size(metadata),
       md5(checkpoint::text || metadata::text), checkpoint -> 'versions_seen'
FROM checkpoints WHERE thread_id = %s
"""
POSTGRES_WRITES_SQL = """
SELECT checkpoint_ns, checkpoint_id, channel, COUNT(*),
       COALESCE(SUM(octet_length(blob)), 0), COALESCE(SUM(pg_column_size(blob)), 0)
FROM checkpoint_writes WHERE thread_id = %s
GROUP BY checkpoint_ns, checkpoint_id, channel
"""
SQLITE_TASK_PATHS_SQL = """
SELECT DISTINCT checkpoint_ns, checkpoint_id, task_id, task_path FROM writes WHERE thread_id = %s
"""
POSTGRES_TASK_PATHS_SQL = """
SELECT DISTINCT checkpoint_ns, checkpoint_id, task_id, task_path FROM checkpoint_writes WHERE thread_id = %s
"""
POSTGRES_BLOBS_SQL = """
SELECT checkpoint_ns, channel, version, type,
       COALESCE(octet_length(blob), 0), COALESCE(pg_column_size(blob), 0)
FROM checkpoint_blobs WHERE thread_id = %s
"""


class UnsupportedBackendError(Unavailable, RuntimeError):
    """The memory backend has no tables to account for or prune (HTTP 501)."""

    MESSAGE = (
        "Checkpoint storage accounting and retention need the sqlite or postgres backend: "
        "the memory backend keeps checkpoints in process memory, and they go when the process ends."
    )

    def __init__(self, message: str = MESSAGE) -> None:
        super().__init__(message, status=501)


class Size(NamedTuple):
    """Rows and payload bytes; ``stored`` is what PostgreSQL keeps after TOAST compression."""

    rows: int = 0
    bytes: int = 0
    stored: int = 0

    def __add__(self, other: Size) -> Size:  # type: ignore[override]
        return Size(self.rows + other.rows, self.bytes + other.bytes, self.stored + other.stored)

    def as_dict(self) -> dict[str, int]:
        return {"rows": self.rows, "bytes": self.bytes, "stored_bytes": self.stored}


class StoredValue(NamedTuple):
    """A channel value kept in the checkpoint row itself."""

    bytes: int
    snapshot: bool  # a DeltaChannel snapshot (SQLite value, PostgreSQL marker)
    null: bool = False


class SeedKey(NamedTuple):
    """A stored channel value a delta walk stops at.

    ``key`` is the holding checkpoint's id on SQLite (the value is in its
    row) and the channel version on PostgreSQL (the value is a blob that
    every checkpoint at that version reads).
    """

    ns: str
    channel: str
    key: str


@dataclass
class CheckpointRow:
    """One checkpoint row, without its channel values' payloads."""

    ns: str
    checkpoint_id: str
    parent_id: str | None
    versions: dict[str, str]
    values: dict[str, StoredValue]
    metadata: dict[str, Any]
    size: Size
    # Changes whenever the row does: retention confirms its plan against it.
    digest: str = ""
    # node -> channel -> version it last saw: tells which node wrote a step.
    seen: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def ref(self) -> tuple[str, str]:
        return (self.ns, self.checkpoint_id)


@dataclass
class ThreadTables:
    """One read of a thread's rows in LangGraph's tables."""

    kind: str
    thread_id: str
    checkpoints: dict[tuple[str, str], CheckpointRow] = field(default_factory=dict)
    # (ns, checkpoint_id) -> channel -> size of the write rows
    writes: dict[tuple[str, str], dict[str, Size]] = field(default_factory=dict)
    # (ns, channel, version) -> (type, size)
    blobs: dict[tuple[str, str, str], tuple[str, Size]] = field(default_factory=dict)

    def fingerprint(self) -> tuple:
        """Return what a plan depends on: every row's parent and digest, write and blob sizes."""
        return (
            sorted((ref, row.parent_id, row.digest) for ref, row in self.checkpoints.items()),
            sorted((ref, sorted(per_channel.items())) for ref, per_channel in self.writes.items()),
            sorted(self.blobs.items()),
        )

    def write_size(self, ref: tuple[str, str]) -> Size:
        return sum(self.writes.get(ref, {}).values(), Size())

    def seed_of(self, row: CheckpointRow, channel: str) -> SeedKey | None:
        """Return the seed a delta walk visiting ``row`` stops at for ``channel``, if any."""
        if self.kind == "sqlite":
            return SeedKey(row.ns, channel, row.checkpoint_id) if channel in row.values else None
        version = row.versions.get(channel)
        blob = self.blobs.get((row.ns, channel, version)) if version is not None else None
        inline = row.values.get(channel)
        if (blob is not None and blob[0] != "empty") or (inline is not None and not inline.null):
            return SeedKey(row.ns, channel, str(version))
        return None

    def snapshots(self) -> dict[SeedKey, str]:
        """Return every DeltaChannel snapshot with the checkpoint that wrote it."""
        found: dict[SeedKey, str] = {}
        for row in sorted(self.checkpoints.values(), key=lambda r: r.checkpoint_id):
            for channel, value in row.values.items():
                if value.snapshot:
                    key = row.checkpoint_id if self.kind == "sqlite" else row.versions.get(channel, "")
                    found.setdefault(SeedKey(row.ns, channel, key), row.checkpoint_id)
        return found

    def heads(self) -> dict[str, str]:
        """Return the newest checkpoint id of each namespace (LangGraph ids are time-ordered)."""
        heads: dict[str, str] = {}
        for ns, checkpoint_id in self.checkpoints:
            if checkpoint_id > heads.get(ns, ""):
                heads[ns] = checkpoint_id
        return heads


def require_table_backend() -> str:
    """Return the backend kind, refusing the memory backend before any read."""
    kind = current_backend().kind
    if kind == "memory":
        raise UnsupportedBackendError()
    return kind


def _json(value: Any) -> Any:
    # Django's psycopg setup loads jsonb as text (for JSONField); SQLite keeps bytes.
    if isinstance(value, (str, bytes, bytearray, memoryview)):
        return json.loads(bytes(value) if not isinstance(value, str) else value)
    return value if value is not None else {}


class _RawExt:
    """A msgpack extension left undecoded: reading keys must not rebuild 2,000 messages."""

    __slots__ = ("code", "data")

    def __init__(self, code: int, data: bytes) -> None:
        self.code = code
        self.data = data


def _raw_default(value: Any) -> Any:
    if isinstance(value, _RawExt):
        return ormsgpack.Ext(value.code, value.data)
    raise TypeError(type(value).__name__)


def _packed_size(value: Any) -> int:
    return len(ormsgpack.packb(value, default=_raw_default, option=ormsgpack.OPT_NON_STR_KEYS))


def _seen(raw: Any) -> dict[str, dict[str, str]]:
    return {node: {ch: str(v) for ch, v in (seen or {}).items()} for node, seen in (raw or {}).items()}


def peek_checkpoint(
    type_: str, blob: bytes, serde: Any, *, value_sizes: bool = True
) -> tuple[dict[str, str], dict[str, StoredValue], dict[str, dict[str, str]]]:
    """Return a serialized checkpoint's channel versions, its values' sizes and its versions seen.

    A msgpack blob, once opened if it is sealed (``checkpoints.encryption``),
    is read without building its values (measured: 0.7 ms instead of 14 ms for
    a 2,000-message snapshot); another serializer's goes through the saver's serde.
    """
    type_, blob = plain_bytes(type_, blob, serde)
    if type_ == "msgpack":
        checkpoint = ormsgpack.unpackb(blob, ext_hook=_RawExt, option=ormsgpack.OPT_NON_STR_KEYS)
        values = {
            channel: StoredValue(
                _packed_size(value) if value_sizes else 0,
                isinstance(value, _RawExt) and value.code == EXT_DELTA_SNAPSHOT,
                value is None,
            )
            for channel, value in (checkpoint.get("channel_values") or {}).items()
        }
    else:
        checkpoint = serde.loads_typed((type_, blob))
        values = {
            channel: StoredValue(len(serde.dumps_typed(value)[1]), isinstance(value, _DeltaSnapshot), value is None)
            for channel, value in (checkpoint.get("channel_values") or {}).items()
        }
    versions = {k: str(v) for k, v in (checkpoint.get("channel_versions") or {}).items()}
    return versions, values, _seen(checkpoint.get("versions_seen"))


def rows_of(sql: str, params: list[Any]) -> Iterator[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        while batch := cursor.fetchmany(200):
            yield from batch


def sqlite_checkpoint_row(
    ns: str,
    checkpoint_id: str,
    parent_id: str | None,
    type_: str,
    blob: Any,
    metadata: Any,
    *,
    serde: Any,
    exact: bool = True,
) -> CheckpointRow:
    """Build a CheckpointRow from one row of SQLite's ``checkpoints`` (as SQLITE_CHECKPOINTS_SQL selects it).

    ``exact=False`` skips what only accounting and retention need (each
    value's size, the row digest): re-packing and hashing a 2,000-message
    snapshot costs more than reading it.
    """
    blob, metadata = bytes(blob), bytes(metadata or b"")
    versions, values, seen = peek_checkpoint(type_, blob, serde, value_sizes=exact)
    size = len(blob) + len(metadata)
    digest = hashlib.blake2b(blob + metadata + (type_ or "").encode(), digest_size=16).hexdigest() if exact else ""
    return CheckpointRow(
        ns, checkpoint_id, parent_id, versions, values, _json(metadata), Size(1, size, size), digest, seen
    )


def read_sqlite_writes(tables: ThreadTables) -> None:
    """Fill ``tables.writes`` from SQLite's ``writes`` (sizes only: LENGTH does not load a value)."""
    for ns, checkpoint_id, channel, rows, size in rows_of(SQLITE_WRITES_SQL, [tables.thread_id]):
        tables.writes.setdefault((ns, checkpoint_id), {})[channel] = Size(rows, size, size)


def _read_sqlite(tables: ThreadTables, serde: Any) -> None:
    for row in rows_of(SQLITE_CHECKPOINTS_SQL, [tables.thread_id]):
        checkpoint = sqlite_checkpoint_row(*row, serde=serde)
        tables.checkpoints[checkpoint.ref] = checkpoint
    read_sqlite_writes(tables)


def _inline_values(raw: dict[str, Any]) -> dict[str, StoredValue]:
    return {
        channel: StoredValue(len(json.dumps(value)), value is True, value is None) for channel, value in raw.items()
    }


def _read_postgres(tables: ThreadTables) -> None:
    for ns, channel, version, type_, size, stored in rows_of(POSTGRES_BLOBS_SQL, [tables.thread_id]):
        tables.blobs[(ns, channel, version)] = (type_, Size(1, size, stored))
    for row in rows_of(POSTGRES_CHECKPOINTS_SQL, [tables.thread_id]):
        ns, checkpoint_id, parent_id, versions, values, metadata, size, stored, digest, seen = row
        versions = {k: str(v) for k, v in _json(versions).items()}
        inline = _inline_values(_json(values))
        # An inline ``true`` is a snapshot marker only with a blob behind it
        # (a bool channel keeps a real ``true`` inline and has no blob).
        inline = {
            ch: value._replace(snapshot=value.snapshot and (ns, ch, versions.get(ch)) in tables.blobs)
            for ch, value in inline.items()
        }
        tables.checkpoints[(ns, checkpoint_id)] = CheckpointRow(
            ns,
            checkpoint_id,
            parent_id,
            versions,
            inline,
            _json(metadata),
            Size(1, size, stored),
            digest,
            _seen(_json(seen)),
        )
    for ns, checkpoint_id, channel, rows, size, stored in rows_of(POSTGRES_WRITES_SQL, [tables.thread_id]):
        tables.writes.setdefault((ns, checkpoint_id), {})[channel] = Size(rows, size, stored)


def thread_tables_read(*, thread_id: str, serde: Any) -> ThreadTables:
    """Read every row the thread has in LangGraph's tables (payload sizes, not payloads)."""
    tables = ThreadTables(require_table_backend(), thread_id)
    if tables.kind == "sqlite":
        _read_sqlite(tables, serde)
    else:
        _read_postgres(tables)
    return tables


# -- accounting ---------------------------------------------------------------


def orphan_counts(tables: ThreadTables) -> dict[str, int]:
    """Count rows that point at nothing: writes and blobs of no checkpoint, dangling parent links."""
    referenced = {(row.ns, ch, v) for row in tables.checkpoints.values() for ch, v in row.versions.items()}
    return {
        "writes": sum(tables.write_size(ref).rows for ref in tables.writes if ref not in tables.checkpoints),
        "blobs": sum(1 for key in tables.blobs if key not in referenced),
        "parents": sum(
            1
            for row in tables.checkpoints.values()
            if row.parent_id is not None and (row.ns, row.parent_id) not in tables.checkpoints
        ),
    }


def _channel_sizes(tables: ThreadTables) -> dict[str, dict[str, int]]:
    writes: dict[str, Size] = defaultdict(Size)
    values: dict[str, Size] = defaultdict(Size)
    for per_channel in tables.writes.values():
        for channel, size in per_channel.items():
            writes[channel] += size
    for row in tables.checkpoints.values():
        for channel, value in row.values.items():
            # A PostgreSQL snapshot marker points at a blob, counted below.
            if not (tables.kind == "postgres" and value.snapshot):
                values[channel] += Size(1, value.bytes, value.bytes)
    for (_, channel, _), (_, size) in tables.blobs.items():
        values[channel] += size
    snapshots = Counter(key.channel for key in tables.snapshots())
    return {
        channel: {
            "write_rows": writes[channel].rows,
            "write_bytes": writes[channel].bytes,
            "value_rows": values[channel].rows,
            "value_bytes": values[channel].bytes,
            "snapshots": snapshots[channel],
        }
        for channel in sorted(set(writes) | set(values))
    }


def _head(tables: ThreadTables) -> dict[str, Any] | None:
    heads = tables.heads()
    if not heads:
        return None
    ns = "" if "" in heads else min(heads)
    row = tables.checkpoints[(ns, heads[ns])]
    return {
        "checkpoint_id": row.checkpoint_id,
        "checkpoint_ns": ns,
        "channel_mode": "delta" if metadata_uses_delta(row.metadata) else "full",
    }


def storage_summary(tables: ThreadTables) -> dict[str, Any]:
    """Return the accounting of one read: per table, per channel, head mode, snapshots, orphans."""
    checkpoints = sum((row.size for row in tables.checkpoints.values()), Size())
    writes = sum((tables.write_size(ref) for ref in tables.writes), Size())
    blobs = sum((size for _, size in tables.blobs.values()), Size())
    total = checkpoints + writes + blobs
    return {
        "thread_id": tables.thread_id,
        "backend": tables.kind,
        "checkpoint_count": len(tables.checkpoints),
        "snapshot_count": len(tables.snapshots()),
        "head": _head(tables),
        "tables": {"checkpoints": checkpoints.as_dict(), "writes": writes.as_dict(), "blobs": blobs.as_dict()},
        "channels": _channel_sizes(tables),
        "total": total.as_dict(),
        "orphans": orphan_counts(tables),
    }


def thread_storage_get(*, thread_id: str) -> dict[str, Any]:
    """Return the storage accounting of a thread (raises UnsupportedBackendError on memory)."""
    # At module level a circle: the runtime imports the graph registry, which reads storage.
    from checkpoints.runtime import sync_resources

    require_table_backend()
    return storage_summary(thread_tables_read(thread_id=thread_id, serde=sync_resources().saver.serde))


TaskRef = tuple[str, str, str]  # (checkpoint_ns, checkpoint_id, task_id)


def write_task_paths(saver: Any, *, thread_id: str) -> dict[TaskRef, str]:
    """Return the task path each task's writes in a thread were stored with.

    ``PendingWrite`` carries no path, yet delta replay sorts a step's writes
    by (task path, task id, idx) (LangGraph's ``writes_sort_key``); the id is
    a hash, so writes re-stored without their path replay parallel tasks in a
    random order. ``saver`` is the one holding the thread: LangGraph's
    ``InMemorySaver`` keeps the path in its ``writes`` map, the others in
    Django's database.
    """
    inner = getattr(saver, "inner", saver)
    if isinstance(inner, InMemorySaver):
        return {
            (ns, checkpoint_id, task_id): task_path
            for ns, checkpoints in list(inner.storage.get(thread_id, {}).items())
            for checkpoint_id in list(checkpoints)
            for task_id, _, _, task_path in list(inner.writes.get((thread_id, ns, checkpoint_id), {}).values())
        }
    sql = SQLITE_TASK_PATHS_SQL if current_backend().kind == "sqlite" else POSTGRES_TASK_PATHS_SQL
    return {
        (ns, checkpoint_id, task_id): task_path for ns, checkpoint_id, task_id, task_path in rows_of(sql, [thread_id])
    }
