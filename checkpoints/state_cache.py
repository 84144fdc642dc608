"""Encoded thread states, cached under a digest of the rows they are computed from.

``GET /state`` on a 200-turn thread decodes ~400 messages and encodes them
again on every call (8 ms of a 9 ms request in-process), although a thread's
state changes only when a row under it does. This cache keeps the encoded
``ThreadState`` JSON and finds it again by what the state is a function of:

- the checkpoint row: its id, type and metadata, and on PostgreSQL a digest
  of its JSONB row, on SQLite the stored blob's length;
- the checkpoint's pending writes, every byte of every row;
- head read or read by id (LangGraph answers a head read *live*: finished
  tasks' writes applied; by id, as a record of the step);
- the graph (id, import path, mode, cadence) and the database.

One query reads those rows (no message is decoded); on a hit the answer is the
stored bytes. On a miss LangGraph computes the state from the saver's
checkpoint and exactly the writes that were hashed (decoded from those rows),
so writes landing or going meanwhile cannot slip under the key. (The saver
reads the checkpoint itself again.) A checkpoint id names one state:
LangGraph writes each id once, and the one rewrite in place, snapshot
thinning, keeps the state, so the row's length only guards against a
rewrite nobody makes. Hashing a full-mode SQLite blob instead (every message
of the thread, 26 MB for a history page of 100 on 200 turns) meant reading
and hashing it on every hit: 20 of the page's 32 ms. Nothing is invalidated:
a new run, update, rollback, prune or delete changes the rows, hence the key;
entries of old keys age out of the LRU.

What is not cached goes the plain way: factory graphs (built per call, their
shape may depend on the config), subgraph reads (``subgraphs=true`` or a
namespace: they read other checkpoints), the in-memory backend, and strict
msgpack (its allowlist would need the saver LangGraph derives per graph).
A delta checkpoint's values also depend on its ancestors' writes: sealed once
the checkpoint exists, the contract the delta history cache rests on.

Memory is bounded by ``database.checkpoint_state_cache.max_mb`` (0 turns it
off); an entry larger than a quarter of the bound is not kept, and a history
page stores entries up to half the bound (its newest ones).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple, writes_sort_key

# The tables as langgraph-checkpoint-sqlite 3.1.2 and -postgres 3.2.0 lay them
# out (see checkpoints.storage); the newest first, as get_tuple and list pick
# them. PostgreSQL digests its JSONB row itself; the blobs it names are keyed
# by (channel, version) and never rewritten (versions carry a random suffix).
# SQLite answers length() from the row's header, without reading the blob;
# it joins each checkpoint's writes by index (no outer ORDER BY: it would
# copy every blob into a temporary B-tree). PostgreSQL reads them in a second
# statement: on a table without statistics yet (freshly written) it planned
# the join as a nested loop over every write of the thread per checkpoint
# (94 ms for 600 checkpoints instead of 2).
_SQLITE_SQL = """
    SELECT c.checkpoint_id, c.type, c.stored, c.metadata,
           w.task_path, w.task_id, w.idx, w.channel, w.type, w.value
    FROM (SELECT checkpoint_id, type, length(checkpoint) AS stored, metadata FROM checkpoints
          WHERE thread_id = %s AND checkpoint_ns = '' {where}
          ORDER BY checkpoint_id DESC LIMIT %s) AS c
    LEFT JOIN writes AS w
      ON w.thread_id = %s AND w.checkpoint_ns = '' AND w.checkpoint_id = c.checkpoint_id
"""
_POSTGRES_CHECKPOINTS_SQL = """
    SELECT checkpoint_id, '', md5(checkpoint::text), metadata::text FROM checkpoints
    WHERE thread_id = %s AND checkpoint_ns = '' {where} ORDER BY checkpoint_id DESC LIMIT %s
"""
_POSTGRES_WRITES_SQL = """
    SELECT checkpoint_id, task_path, task_id, idx, channel, type, blob FROM checkpoint_writes
    WHERE thread_id = %s AND checkpoint_ns = '' AND checkpoint_id = ANY(%s)
"""


@dataclass(frozen=True)
class StoredInputs:
    """The rows one state is computed from, and their digest."""

    checkpoint_id: str
    metadata: bytes
    # (task_path, task_id, idx, channel, type, value), in LangGraph's write order.
    writes: tuple[tuple[str, str, int, str, str, bytes], ...]
    digest: bytes


def _chunk(value: Any) -> bytes:
    if value is None:
        return b"\x00"
    if isinstance(value, int):
        value = str(value)
    data = value.encode() if isinstance(value, str) else bytes(value)
    return len(data).to_bytes(8, "little") + data


def _inputs(checkpoint: tuple, writes: list[tuple]) -> StoredInputs:
    checkpoint_id, type_, stored, metadata = checkpoint
    digest = hashlib.sha256()
    for part in (checkpoint_id, type_, stored, metadata):
        digest.update(_chunk(part))
    ordered = sorted(
        ((path, task, int(idx), channel, kind, bytes(value)) for path, task, idx, channel, kind, value in writes),
        key=lambda write: writes_sort_key(write[0], write[1], write[2]),
    )
    for write in ordered:
        for part in write:
            digest.update(_chunk(part))
    metadata = metadata.encode() if isinstance(metadata, str) else bytes(metadata or b"{}")
    return StoredInputs(checkpoint_id, metadata, tuple(ordered), digest.digest())


def _page_filter(thread_id: str, *, checkpoint_id: str | None = None, before: str | None = None):
    """Return the extra WHERE clause and the parameters up to it: one checkpoint, or those older than ``before``."""
    if checkpoint_id:
        return "AND checkpoint_id = %s", [thread_id, checkpoint_id]
    if before:
        return "AND checkpoint_id < %s", [thread_id, before]
    return "", [thread_id]


def read_inputs(
    backend_kind: str, thread_id: str, *, checkpoint_id: str | None = None, before: str | None = None, limit: int = 1
) -> list[StoredInputs]:
    """Return the rows of the newest ``limit`` checkpoints in the root namespace, newest first.

    ``checkpoint_id``: that checkpoint only; ``before``: strictly older ones.
    """
    where, params = _page_filter(thread_id, checkpoint_id=checkpoint_id, before=before)
    writes: dict[str, list[tuple]] = {}
    with connection.cursor() as cursor:
        if backend_kind == "sqlite":
            cursor.execute(_SQLITE_SQL.format(where=where), [*params, limit, thread_id])
            by_id: dict[str, tuple] = {}
            for row in cursor.fetchall():
                by_id.setdefault(row[0], row[:4])
                if row[5] is not None:
                    writes.setdefault(row[0], []).append(row[4:])
            checkpoints = [by_id[found] for found in sorted(by_id, reverse=True)]
        else:
            cursor.execute(_POSTGRES_CHECKPOINTS_SQL.format(where=where), [*params, limit])
            checkpoints = cursor.fetchall()
            if checkpoints:
                cursor.execute(_POSTGRES_WRITES_SQL, [thread_id, [row[0] for row in checkpoints]])
                for found, *write in cursor.fetchall():
                    writes.setdefault(found, []).append(write)
    return [_inputs(row, writes.get(row[0], [])) for row in checkpoints]


class PinnedSaver(BaseCheckpointSaver):
    """Answer ``get_tuple`` with one checkpoint whose pending writes are the hashed rows.

    LangGraph's ``get_state`` on a copy of the graph bound to it computes the
    state as it would from the saver; the delta history still comes from the
    real saver.
    """

    def __init__(self, inner: BaseCheckpointSaver, saved: CheckpointTuple, writes: Sequence[tuple]) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner
        self.saved = saved._replace(
            pending_writes=[
                (task, channel, inner.serde.loads_typed((kind, value))) for _, task, _, channel, kind, value in writes
            ]
        )

    def get_tuple(self, config) -> CheckpointTuple:
        return self.saved

    def get_delta_channel_history(self, *args, **kwargs):
        return self.inner.get_delta_channel_history(*args, **kwargs)


class EncodedStateCache:
    """A process-local LRU of encoded states, bounded in bytes."""

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple, bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self.counters = dict.fromkeys(("hits", "misses", "stores", "evictions", "oversize"), 0)

    @staticmethod
    def max_bytes() -> int:
        return settings.DEERFLOW_CONFIG.database.checkpoint_state_cache.max_mb << 20

    def get(self, key: tuple) -> bytes | None:
        with self._lock:
            encoded = self._entries.get(key)
            if encoded is None:
                self.counters["misses"] += 1
                return None
            self._entries.move_to_end(key)
            self.counters["hits"] += 1
            return encoded

    def put(self, key: tuple, encoded: bytes) -> None:
        limit = self.max_bytes()
        with self._lock:
            if len(encoded) > limit // 4:
                self.counters["oversize"] += 1
                return
            if (old := self._entries.pop(key, None)) is not None:
                self._size -= len(old)
            self._entries[key] = encoded
            self._size += len(encoded)
            self.counters["stores"] += 1
            while self._size > limit:
                _, dropped = self._entries.popitem(last=False)
                self._size -= len(dropped)
                self.counters["evictions"] += 1

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._size = 0

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {**self.counters, "entries": len(self._entries), "bytes": self._size}


state_cache = EncodedStateCache()
