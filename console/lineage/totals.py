"""Storage of every thread at once: bytes per table and per mode, snapshots, orphans, the largest threads.

Four aggregate queries over LangGraph's tables, whatever their size (no row
is decoded): the console's storage page must not scan thread by thread.
Bytes are payload bytes as in ``checkpoints.storage`` (PostgreSQL also after
TOAST compression). A checkpoint's mode is its metadata marker (or
LangGraph's delta counters); a delta checkpoint without a ``messages``
counter is one that wrote a snapshot. Snapshots still *stored* (thinning
drops some) are counted exactly on PostgreSQL, where each is a blob behind an
inline ``true``; SQLite keeps them inside checkpoint rows, which only a
per-thread read (``thread_storage_get``) decodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from checkpoints.storage import require_table_backend

LARGEST_THREADS = 20

_SQLITE_DELTA = (
    "(json_extract(CAST(metadata AS TEXT), '$.deerflow_checkpoint_channel_mode') = 'delta'"
    " OR json_type(CAST(metadata AS TEXT), '$.counters_since_delta_snapshot.messages') IS NOT NULL)"
)
_SQLITE_SNAPSHOT = (
    "(json_extract(CAST(metadata AS TEXT), '$.deerflow_checkpoint_channel_mode') = 'delta'"
    " AND json_type(CAST(metadata AS TEXT), '$.counters_since_delta_snapshot.messages') IS NULL)"
)
_PG_DELTA = (
    "(metadata ->> 'deerflow_checkpoint_channel_mode' = 'delta'"
    " OR (metadata -> 'counters_since_delta_snapshot') ? 'messages')"
)
_PG_SNAPSHOT = (
    "(metadata ->> 'deerflow_checkpoint_channel_mode' = 'delta'"
    " AND NOT coalesce((metadata -> 'counters_since_delta_snapshot') ? 'messages', false))"
)

SQL = {
    "sqlite": {
        "tables": """
SELECT 'checkpoints', COUNT(*), COALESCE(SUM(LENGTH(checkpoint) + COALESCE(LENGTH(metadata), 0)), 0), 0
FROM checkpoints
UNION ALL SELECT 'writes', COUNT(*), COALESCE(SUM(LENGTH(value)), 0), 0 FROM writes
""",
        "modes": f"""
SELECT CASE WHEN {_SQLITE_DELTA} THEN 'delta' ELSE 'full' END, COUNT(*),
       COALESCE(SUM(LENGTH(checkpoint) + COALESCE(LENGTH(metadata), 0)), 0),
       SUM(CASE WHEN {_SQLITE_SNAPSHOT} THEN 1 ELSE 0 END), COUNT(DISTINCT thread_id)
FROM checkpoints GROUP BY 1
""",
        "largest": """
SELECT thread_id, SUM(n), SUM(b) FROM (
    SELECT thread_id, COUNT(*) AS n, SUM(LENGTH(checkpoint) + COALESCE(LENGTH(metadata), 0)) AS b
    FROM checkpoints GROUP BY thread_id
    UNION ALL
    SELECT thread_id, 0, COALESCE(SUM(LENGTH(value)), 0) FROM writes GROUP BY thread_id
) GROUP BY thread_id ORDER BY 3 DESC, 1 LIMIT %s
""",
        "orphans": """
SELECT
  (SELECT COUNT(*) FROM writes w WHERE NOT EXISTS (
      SELECT 1 FROM checkpoints c WHERE c.thread_id = w.thread_id
        AND c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id)),
  0,
  (SELECT COUNT(*) FROM checkpoints c WHERE c.parent_checkpoint_id IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM checkpoints p WHERE p.thread_id = c.thread_id
        AND p.checkpoint_ns = c.checkpoint_ns AND p.checkpoint_id = c.parent_checkpoint_id)),
  NULL
""",
    },
    "postgres": {
        "tables": """
SELECT 'checkpoints', COUNT(*),
       COALESCE(SUM(octet_length(checkpoint::text) + octet_length(metadata::text)), 0),
       COALESCE(SUM(pg_column_size(checkpoint) + pg_column_size(metadata)), 0)
FROM checkpoints
UNION ALL SELECT 'writes', COUNT(*), COALESCE(SUM(octet_length(blob)), 0), COALESCE(SUM(pg_column_size(blob)), 0)
FROM checkpoint_writes
UNION ALL SELECT 'blobs', COUNT(*), COALESCE(SUM(octet_length(blob)), 0), COALESCE(SUM(pg_column_size(blob)), 0)
FROM checkpoint_blobs
""",
        "modes": f"""
SELECT CASE WHEN {_PG_DELTA} THEN 'delta' ELSE 'full' END, COUNT(*),
       COALESCE(SUM(octet_length(checkpoint::text) + octet_length(metadata::text)), 0),
       SUM(CASE WHEN {_PG_SNAPSHOT} THEN 1 ELSE 0 END), COUNT(DISTINCT thread_id)
FROM checkpoints GROUP BY 1
""",
        "largest": """
SELECT thread_id, SUM(n), SUM(b) FROM (
    SELECT thread_id, COUNT(*) AS n, SUM(octet_length(checkpoint::text) + octet_length(metadata::text)) AS b
    FROM checkpoints GROUP BY thread_id
    UNION ALL
    SELECT thread_id, 0, COALESCE(SUM(octet_length(blob)), 0) FROM checkpoint_writes GROUP BY thread_id
    UNION ALL
    SELECT thread_id, 0, COALESCE(SUM(octet_length(blob)), 0) FROM checkpoint_blobs GROUP BY thread_id
) AS t GROUP BY thread_id ORDER BY 3 DESC, 1 LIMIT %s
""",
        # Blob versions are joined through the checkpoints' version maps (a
        # hash join, not one scan of a thread's checkpoints per blob).
        "orphans": """
WITH referenced AS (
    SELECT DISTINCT c.thread_id, c.checkpoint_ns, v.key AS channel, v.value AS version
    FROM checkpoints c, jsonb_each_text(c.checkpoint -> 'channel_versions') v
)
SELECT
  (SELECT COUNT(*) FROM checkpoint_writes w WHERE NOT EXISTS (
      SELECT 1 FROM checkpoints c WHERE c.thread_id = w.thread_id
        AND c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id)),
  (SELECT COUNT(*) FROM checkpoint_blobs b LEFT JOIN referenced r
      ON r.thread_id = b.thread_id AND r.checkpoint_ns = b.checkpoint_ns
     AND r.channel = b.channel AND r.version = b.version
   WHERE r.thread_id IS NULL),
  (SELECT COUNT(*) FROM checkpoints c WHERE c.parent_checkpoint_id IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM checkpoints p WHERE p.thread_id = c.thread_id
        AND p.checkpoint_ns = c.checkpoint_ns AND p.checkpoint_id = c.parent_checkpoint_id)),
  (SELECT COUNT(*) FROM (
      SELECT DISTINCT c.thread_id, c.checkpoint_ns, v.key, c.checkpoint -> 'channel_versions' ->> v.key
      FROM checkpoints c, jsonb_each(c.checkpoint -> 'channel_values') v
      WHERE v.value = 'true'::jsonb AND EXISTS (
          SELECT 1 FROM checkpoint_blobs b WHERE b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
            AND b.channel = v.key AND b.version = c.checkpoint -> 'channel_versions' ->> v.key)
  ) AS s)
""",
    },
}


@dataclass
class StorageTotals:
    """The whole database's checkpoint storage, as the console's storage page shows it."""

    backend: str
    tables: dict[str, dict[str, int]] = field(default_factory=dict)
    modes: dict[str, dict[str, int]] = field(default_factory=dict)
    largest: list[dict[str, Any]] = field(default_factory=list)
    orphans: dict[str, int] = field(default_factory=dict)
    snapshots_stored: int | None = None

    @property
    def total_bytes(self) -> int:
        return sum(table["bytes"] for table in self.tables.values())


def _fetch(sql: str, params: list[Any] | None = None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        return cursor.fetchall()


def storage_totals_get(*, largest: int = LARGEST_THREADS) -> StorageTotals:
    """Return the storage of every thread in four queries (UnsupportedBackendError on memory)."""
    kind = require_table_backend()
    sql = SQL[kind]
    totals = StorageTotals(kind)
    for name, rows, size, stored in _fetch(sql["tables"]):
        totals.tables[name] = {"rows": int(rows), "bytes": int(size), "stored_bytes": int(stored or size)}
    for mode in ("full", "delta"):
        totals.modes[mode] = {"checkpoints": 0, "bytes": 0, "snapshots_written": 0, "threads": 0}
    for mode, rows, size, snapshots, threads in _fetch(sql["modes"]):
        totals.modes[mode] = {
            "checkpoints": int(rows),
            "bytes": int(size),
            "snapshots_written": int(snapshots or 0),
            "threads": int(threads),
        }
    totals.largest = [
        {"thread_id": thread_id, "checkpoints": int(rows), "bytes": int(size)}
        for thread_id, rows, size in _fetch(sql["largest"], [largest])
    ]
    writes, blobs, parents, stored = _fetch(sql["orphans"])[0]
    totals.orphans = {"writes": int(writes), "blobs": int(blobs), "parents": int(parents)}
    totals.snapshots_stored = None if stored is None else int(stored)
    return totals
