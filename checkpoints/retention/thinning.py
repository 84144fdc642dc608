"""Snapshot thinning: which delta snapshots can go without changing any retained state."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from langgraph.channels.delta import DeltaChannel

from checkpoints.accessor import thread_config
from checkpoints.graphs import channel_table, resolve_graph
from checkpoints.modes import resolve_snapshot_frequency
from checkpoints.retention.planner import _Planner
from checkpoints.retention.policy import Ref
from checkpoints.retention.sql import POSTGRES_BLOB_SQL, SQLITE_CHECKPOINT_BLOB_SQL
from checkpoints.storage import (
    CheckpointRow,
    SeedKey,
    ThreadTables,
)


def _nearest_seed(tables: ThreadTables, nodes: Mapping[Ref, CheckpointRow], ref: Ref, channel: str) -> SeedKey | None:
    """Return the seed materializing ``ref`` reads: its own stored value, else the nearest ancestor's."""
    seen: set[Ref] = set()
    while ref in nodes and ref not in seen:
        seen.add(ref)
        row = nodes[ref]
        if (seed := tables.seed_of(row, channel)) is not None:
            return seed
        if row.parent_id is None:
            return None
        ref = (row.ns, row.parent_id)
    return None


def _shared_version_writes(
    tables: ThreadTables, key: SeedKey, holders: set[Ref], children: Mapping[Ref, set[Ref]]
) -> bool:
    """PostgreSQL: would a checkpoint that reads this blob start replaying writes once it goes?

    Every checkpoint at the snapshot's version reads the blob directly; without
    it, one below another such checkpoint replays that one's writes to the
    channel, which the blob never contained.
    """
    for ref in holders:
        writes = tables.writes.get(ref, {}).get(key.channel)
        if writes and writes.rows and children[ref] & holders:
            return True
    return False


def plan_thinning(tables: ThreadTables, planner: _Planner) -> tuple[dict[SeedKey, str], dict[SeedKey, tuple[str, str]]]:
    """Return (candidates to verify: seed → holder, kept: seed → (holder, reason))."""
    nodes = planner.survivors()
    snapshots = {key: holder for key, holder in tables.snapshots().items() if (key.ns, holder) in nodes}
    channels = sorted({key.channel for key in snapshots})
    parents = {planner.parent_ref(row) for row in nodes.values()}
    anchors = {ref: label for ref, label in planner.anchors.items() if ref in nodes}
    anchors.update({ref: f"retained leaf {ref[1]}" for ref in nodes if ref not in parents and ref not in anchors})
    kept: dict[SeedKey, tuple[str, str]] = {}
    for ref, label in sorted(anchors.items()):
        for channel in channels:
            seed = _nearest_seed(tables, nodes, ref, channel)
            if seed in snapshots and seed not in kept:
                kept[seed] = (snapshots[seed], f"nearest snapshot of {label}")
    children = {ref: planner.children[ref] - planner.deleted.keys() for ref in nodes}
    holders: dict[SeedKey, set[Ref]] = defaultdict(set)
    for ref, row in nodes.items():
        for channel in channels:
            if (version := row.versions.get(channel)) is not None:
                holders[SeedKey(row.ns, channel, version)].add(ref)
    candidates = {}
    for key, holder in sorted(snapshots.items()):
        if key in kept:
            continue
        if tables.kind == "postgres" and _shared_version_writes(tables, key, holders[key], children):
            kept[key] = (holder, "checkpoints sharing its version own writes a replay would add")
        else:
            candidates[key] = holder
    return candidates, kept


class _SnapshotStore:
    """Reads stored snapshot values and prepares their removal, per backend."""

    def __init__(self, tables: ThreadTables, serde: Any, cursor: Any) -> None:
        self.tables = tables
        self.serde = serde
        self.cursor = cursor
        self.rewrites: dict[Ref, tuple[str, bytes, int]] = {}  # SQLite: new type, blob, bytes saved

    def _fetch(self, sql: str, params: list[Any]) -> tuple[str, bytes]:
        self.cursor.execute(sql, params)
        type_, blob = self.cursor.fetchone()
        return type_, bytes(blob)

    def stored_values(self, holder: Ref, channels: list[str]) -> dict[str, Any]:
        """Return the snapshot values of ``channels`` (SQLite decodes the holder's row once)."""
        thread_id, (ns, checkpoint_id) = self.tables.thread_id, holder
        if self.tables.kind == "sqlite":
            type_, blob = self._fetch(SQLITE_CHECKPOINT_BLOB_SQL, [thread_id, ns, checkpoint_id])
            self._decoded = (holder, type_, blob, self.serde.loads_typed((type_, blob)))
            return {ch: self._decoded[3]["channel_values"][ch].value for ch in channels}
        row = self.tables.checkpoints[holder]
        values = {}
        for ch in channels:
            typed_blob = self._fetch(POSTGRES_BLOB_SQL, [thread_id, ns, ch, row.versions[ch]])
            values[ch] = self.serde.loads_typed(typed_blob).value
        return values

    def prepare_drop(self, holder: Ref, channels: list[str]) -> None:
        """SQLite: encode the holder's row without ``channels`` now, while it is decoded."""
        if self.tables.kind != "sqlite" or not channels:
            return
        _, _, old_blob, checkpoint = self._decoded
        values = {k: v for k, v in checkpoint["channel_values"].items() if k not in channels}
        type_, blob = self.serde.dumps_typed({**checkpoint, "channel_values": values})
        self.rewrites[holder] = (type_, blob, len(old_blob) - len(blob))

    def saved_bytes(self, key: SeedKey, holder: str) -> int:
        if self.tables.kind == "sqlite":
            return 0  # counted once per rewritten row, see RetentionRun
        return self.tables.blobs[(key.ns, key.channel, key.key)][1].bytes


def replay_channels(graph_id: str) -> dict[str, DeltaChannel]:
    """Return the graph's delta channels, whose reducers rebuild a snapshot from writes."""
    channels = channel_table(resolve_graph(graph_id), "delta", resolve_snapshot_frequency())
    return {name: channel for name, channel in channels.items() if isinstance(channel, DeltaChannel)}


def replayed_value(saver: Any, thread_id: str, holder: Ref, channel: str, spec: DeltaChannel) -> Any:
    """Return what ``holder`` would materialize for ``channel`` without its own stored value.

    The saver's history of a checkpoint skips the checkpoint's own value, so
    it is exactly the seed before it plus the writes in between.
    """
    config = thread_config(thread_id, holder[1], holder[0])
    history = saver.get_delta_channel_history(config=config, channels=[channel])[channel]
    replayed = spec.from_checkpoint(history.get("seed"))
    replayed.replay_writes(history["writes"])
    return replayed.value


# -- one pass ----------------------------------------------------------------------
