"""Checkpoint counts, stored bytes and head mode for a page of threads, in one grouped query.

The console's thread list shows these for 50 threads at a time: one
statement per page, grouped by thread, never a storage scan per row
(``checkpoints.storage`` does the full per-thread accounting). Payloads are
measured with ``LENGTH``/``octet_length``, never read; only the head rows'
metadata comes back, to tell full from delta with the same rule as the gate
(``checkpoints.modes.metadata_uses_delta``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.db import connection

from checkpoints.backend import current_backend
from checkpoints.modes import DELTA_COUNTERS_KEY, DELTA_MARKER_KEY, metadata_uses_delta

# {ids} is a list of %s placeholders, one per thread id; the ids are parameters.
SQLITE_STATS_SQL = """
WITH ck AS (
    SELECT thread_id, COUNT(*) AS n,
           SUM(LENGTH(checkpoint) + COALESCE(LENGTH(metadata), 0)) AS bytes,
           MAX(CASE WHEN checkpoint_ns = '' THEN checkpoint_id END) AS head
    FROM checkpoints WHERE thread_id IN ({ids}) GROUP BY thread_id
), wr AS (
    SELECT thread_id, SUM(COALESCE(LENGTH(value), 0)) AS bytes
    FROM writes WHERE thread_id IN ({ids}) GROUP BY thread_id
)
SELECT ck.thread_id, ck.n, ck.bytes + COALESCE(wr.bytes, 0), ck.head, hc.metadata
FROM ck
LEFT JOIN wr ON wr.thread_id = ck.thread_id
LEFT JOIN checkpoints hc ON hc.thread_id = ck.thread_id AND hc.checkpoint_ns = '' AND hc.checkpoint_id = ck.head
"""
POSTGRES_STATS_SQL = """
WITH ck AS (
    SELECT thread_id, COUNT(*) AS n,
           SUM(octet_length(checkpoint::text) + octet_length(metadata::text)) AS bytes,
           MAX(CASE WHEN checkpoint_ns = '' THEN checkpoint_id END) AS head
    FROM checkpoints WHERE thread_id IN ({ids}) GROUP BY thread_id
), wr AS (
    SELECT thread_id, SUM(COALESCE(octet_length(blob), 0)) AS bytes
    FROM checkpoint_writes WHERE thread_id IN ({ids}) GROUP BY thread_id
), bl AS (
    SELECT thread_id, SUM(COALESCE(octet_length(blob), 0)) AS bytes
    FROM checkpoint_blobs WHERE thread_id IN ({ids}) GROUP BY thread_id
)
SELECT ck.thread_id, ck.n, ck.bytes + COALESCE(wr.bytes, 0) + COALESCE(bl.bytes, 0), ck.head, hc.metadata
FROM ck
LEFT JOIN wr ON wr.thread_id = ck.thread_id
LEFT JOIN bl ON bl.thread_id = ck.thread_id
LEFT JOIN checkpoints hc ON hc.thread_id = ck.thread_id AND hc.checkpoint_ns = '' AND hc.checkpoint_id = ck.head
"""

# The thread ids whose head (newest root-namespace checkpoint) is delta.
SQLITE_DELTA_HEADS_SQL = f"""
SELECT c.thread_id FROM checkpoints c
WHERE c.checkpoint_ns = '' AND c.checkpoint_id = (
    SELECT MAX(m.checkpoint_id) FROM checkpoints m WHERE m.thread_id = c.thread_id AND m.checkpoint_ns = ''
) AND (
    json_extract(CAST(c.metadata AS TEXT), '$.{DELTA_MARKER_KEY}') = 'delta'
    OR json_type(CAST(c.metadata AS TEXT), '$.{DELTA_COUNTERS_KEY}.messages') IS NOT NULL
)
"""
POSTGRES_DELTA_HEADS_SQL = f"""
SELECT c.thread_id FROM checkpoints c
WHERE c.checkpoint_ns = '' AND c.checkpoint_id = (
    SELECT MAX(m.checkpoint_id) FROM checkpoints m WHERE m.thread_id = c.thread_id AND m.checkpoint_ns = ''
) AND (
    c.metadata ->> '{DELTA_MARKER_KEY}' = 'delta'
    OR c.metadata -> '{DELTA_COUNTERS_KEY}' -> 'messages' IS NOT NULL
)
"""
# Every thread id with at least one checkpoint.
CHECKPOINTED_SQL = "SELECT DISTINCT thread_id FROM checkpoints"


def _metadata(raw: Any) -> dict[str, Any]:
    # SQLite keeps JSON bytes; Django's psycopg setup hands jsonb over as text.
    if isinstance(raw, (bytes, bytearray, memoryview)):
        raw = bytes(raw).decode()
    return json.loads(raw) if isinstance(raw, str) else (raw or {})


@dataclass(frozen=True)
class ThreadStats:
    """What LangGraph's tables hold for one thread."""

    checkpoint_count: int
    stored_bytes: int
    head_id: str | None
    head_mode: str | None  # "full" | "delta"; None without a root-namespace checkpoint


def thread_stats_many(*, thread_ids: list[str]) -> dict[str, ThreadStats] | None:
    """Return stats per thread id (absent: no checkpoints); None on the memory backend."""
    kind = current_backend().kind
    if kind == "memory":
        return None
    if not thread_ids:
        return {}
    template = SQLITE_STATS_SQL if kind == "sqlite" else POSTGRES_STATS_SQL
    sql = template.format(ids=", ".join(["%s"] * len(thread_ids)))
    params = [*thread_ids, *thread_ids] if kind == "sqlite" else [*thread_ids, *thread_ids, *thread_ids]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    stats = {}
    for thread_id, count, size, head, metadata in rows:
        mode = None
        if head is not None:
            mode = "delta" if metadata_uses_delta(_metadata(metadata)) else "full"
        stats[thread_id] = ThreadStats(int(count), int(size or 0), head, mode)
    return stats


def delta_heads_sql() -> str | None:
    """Return SQL selecting the ids of threads whose head is delta; None on the memory backend."""
    kind = current_backend().kind
    if kind == "memory":
        return None
    return SQLITE_DELTA_HEADS_SQL if kind == "sqlite" else POSTGRES_DELTA_HEADS_SQL


def checkpointed_sql() -> str | None:
    """Return SQL selecting the ids of threads that have checkpoints; None on the memory backend."""
    return None if current_backend().kind == "memory" else CHECKPOINTED_SQL
