"""A thread's checkpoint lineage for the console: one metadata read, lanes, collapsed stretches, pages.

The page never materializes state: ids, parents, step, source, mode marker,
snapshot flags, writes and sizes come from one bulk read of LangGraph's
tables (``lineage_tables_read``: at most three queries on either backend;
SQLite decodes only rows this process has not seen), and the protection reasons from the same planner retention uses, so what the
lineage calls protected is exactly what a pass would keep.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from langgraph.checkpoint.base.id import UUID as CheckpointUUID

from checkpoints.modes import metadata_uses_delta
from checkpoints.retention.planner import _Planner
from checkpoints.retention.policy import RetentionPolicy
from checkpoints.rollback import RESTORE_NODE
from checkpoints.runtime import sync_resources
from checkpoints.storage import (
    SQLITE_CHECKPOINTS_SQL,
    CheckpointRow,
    ThreadTables,
    read_sqlite_writes,
    require_table_backend,
    rows_of,
    sqlite_checkpoint_row,
    thread_tables_read,
)
from console.lineage.lanes import LaneRow, lay_out
from console.lineage.previews import Added, PreviewReader

# Rows (nodes and collapsed stretches) per page: the SVG stays a few hundred elements.
LINEAGE_PAGE_ROWS = 50
# A stretch of this many unremarkable checkpoints in a row collapses...
COLLAPSE_MIN = 12
# ...keeping this many visible at each end.
COLLAPSE_KEEP = 2
LINEAGE_PREFIX = "lineage of "
# SQLite rows kept decoded per process (a few hundred bytes each).
ROW_CACHE_MAX = 20_000
# Up to this many uncached rows are fetched by id; more, and the whole thread is read at once.
FETCH_BY_ID_MAX = 500
INTERRUPT_CHANNEL = "__interrupt__"
# Sources a run writes as it goes; anything else (update, fork) is a person's or a service's edit.
RUN_SOURCES = ("input", "loop")
# 100-ns intervals between the UUID epoch (1582-10-15) and the Unix epoch.
UUID_EPOCH_OFFSET = 0x01B21DD213814000


def checkpoint_time(checkpoint_id: str) -> datetime | None:
    """Return when a checkpoint was written, from its id (LangGraph's ids are UUIDv6: no payload read)."""
    try:
        uuid = CheckpointUUID(checkpoint_id)
    except ValueError:
        return None
    if uuid.version != 6:
        return None
    return datetime.fromtimestamp((uuid.time - UUID_EPOCH_OFFSET) / 10**7, tz=UTC)


def edit_kind(metadata: Mapping[str, Any], parent_run: str | None) -> str:
    """Name what made a checkpoint that is not a plain run step ("" for a plain one): these never fold.

    A ``loop`` checkpoint whose run is not its parent's is a resume (a run
    that starts fresh writes an ``input`` checkpoint first).
    """
    source = str(metadata.get("source") or "")
    if RESTORE_NODE in metadata:
        return "rollback restore"
    if source == "fork":
        return "fork"
    if source not in RUN_SOURCES:
        return source or "unknown source"
    run_id = metadata.get("run_id")
    if source == "loop" and run_id and parent_run is not None and run_id != parent_run:
        return "resume"
    return ""


@dataclass
class LineageNode:
    """One checkpoint as the lineage draws it (no channel values)."""

    checkpoint_id: str
    parent_id: str | None
    step: int | None
    source: str
    writer: str
    mode: str
    snapshot: bool
    pending_writes: int
    interrupt: bool
    bytes: int
    protected: list[str]
    head: bool
    lane: LaneRow
    run_id: str = ""
    edit: str = ""
    kind: str = "node"
    added: Added | None = None
    not_in_head: Added | None = None
    # Filled by the page from the runs table: the run's status, "rolled back" for a rollback.
    run_status: str = ""

    @property
    def time(self) -> datetime | None:
        return checkpoint_time(self.checkpoint_id)

    @property
    def abandoned(self) -> bool:
        """A branch tip that is not the head: what it holds is not in the conversation shown."""
        return self.lane.children == 0 and not self.head

    @property
    def own_reasons(self) -> list[str]:
        """Protection reasons other than lying on a protected lineage."""
        return [reason for reason in self.protected if not reason.startswith(LINEAGE_PREFIX)]

    @property
    def css_classes(self) -> str:
        flags = {
            "snapshot": self.snapshot,
            "pending": self.pending_writes > 0,
            "interrupt": self.interrupt,
            "head": self.head,
            "tip": self.lane.children == 0,
            "fork": self.lane.children > 1,
            "protected": bool(self.protected),
            "edit": bool(self.edit),
        }
        return " ".join(["node", f"mode-{self.mode}", f"source-{self.source}", *(k for k, on in flags.items() if on)])


@dataclass
class LineageGap:
    """A collapsed stretch of plain checkpoints: one row, every lane passing through."""

    count: int
    first_step: int | None
    last_step: int | None
    snapshots: int
    bytes: int
    lanes: list[int]
    expand_page: int
    kind: str = "gap"


@dataclass
class LineagePage:
    """One page of a thread's lineage in one namespace."""

    thread_id: str
    checkpoint_ns: str
    namespaces: dict[str, int]
    total: int
    rows: list[LineageNode | LineageGap] = field(default_factory=list)
    page: int = 1
    pages: int = 1
    collapsed: bool = True
    head_id: str = ""

    @property
    def width(self) -> int:
        widths = [
            row.lane.width if isinstance(row, LineageNode) else max(row.lanes, default=0) + 1 for row in self.rows
        ]
        return max(widths, default=1)


# SQLite keeps a delta snapshot (the whole message list) inside its checkpoint
# row, before ``metadata``: reading any row's metadata walks the blob's whole
# overflow chain. At 5,000 checkpoints (cadence 10, ~500-character turns)
# that is ~400 MB per view, so decoded rows are kept per process, keyed by id
# and both column lengths (the index query reads those from the record header
# without touching the blob). A row changes length whenever it changes
# (thinning rewrites the blob without a value); deleted rows simply stop
# being listed.
SQLITE_INDEX_SQL = """
SELECT checkpoint_ns, checkpoint_id, LENGTH(checkpoint), LENGTH(metadata) FROM checkpoints WHERE thread_id = %s
"""
SQLITE_ROWS_BY_ID_SQL = """
SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata
FROM checkpoints WHERE thread_id = %s AND checkpoint_id IN ({})
"""


class _RowCache:
    """A process-wide LRU of decoded SQLite checkpoint rows (thread-safe)."""

    def __init__(self, max_rows: int) -> None:
        self.max_rows = max_rows
        self._rows: OrderedDict[tuple, CheckpointRow] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple) -> CheckpointRow | None:
        with self._lock:
            row = self._rows.get(key)
            if row is not None:
                self._rows.move_to_end(key)
            return row

    def put(self, key: tuple, row: CheckpointRow) -> None:
        with self._lock:
            self._rows[key] = row
            self._rows.move_to_end(key)
            while len(self._rows) > self.max_rows:
                self._rows.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._rows.clear()


row_cache = _RowCache(ROW_CACHE_MAX)


def _sqlite_tables(thread_id: str, serde: Any) -> ThreadTables:
    """Read the thread like ``thread_tables_read`` does, decoding only rows not seen before (≤ 3 queries)."""
    tables = ThreadTables("sqlite", thread_id)
    index = {(ns, cid): (thread_id, ns, cid, n, m) for ns, cid, n, m in rows_of(SQLITE_INDEX_SQL, [thread_id])}
    missing = []
    for ref, key in index.items():
        if (row := row_cache.get(key)) is not None:
            tables.checkpoints[ref] = row
        else:
            missing.append(ref)
    if missing:
        if len(missing) <= FETCH_BY_ID_MAX:
            sql = SQLITE_ROWS_BY_ID_SQL.format(", ".join(["%s"] * len(missing)))
            fetched = rows_of(sql, [thread_id, *(cid for _, cid in missing)])
        else:
            fetched = rows_of(SQLITE_CHECKPOINTS_SQL, [thread_id])
        for raw in fetched:
            decoded = sqlite_checkpoint_row(*raw, serde=serde, exact=False)
            if (cache_key := index.get(decoded.ref)) is not None:
                row_cache.put(cache_key, decoded)
                tables.checkpoints[decoded.ref] = decoded
    read_sqlite_writes(tables)
    return tables


def lineage_tables_read(*, thread_id: str) -> ThreadTables:
    """Return the thread's rows for drawing: SQLite through the row cache, PostgreSQL as retention reads it.

    PostgreSQL keeps snapshots in ``checkpoint_blobs``, whose sizes it reads
    without detoasting, so its checkpoint rows stay small and need no cache.
    """
    serde = sync_resources().saver.serde
    if require_table_backend() == "sqlite":
        return _sqlite_tables(thread_id, serde)
    return thread_tables_read(thread_id=thread_id, serde=serde)


def _writer(row: CheckpointRow, parent: CheckpointRow | None, source: str) -> str:
    """Name the node(s) that wrote ``row``: those whose versions seen changed since the parent."""
    if source == "input":
        return "__input__"
    before = parent.seen if parent is not None else {}
    return ", ".join(sorted(node for node, seen in row.seen.items() if before.get(node) != seen))


def _blob_bytes(tables: ThreadTables) -> Counter:
    """PostgreSQL: charge each blob to the oldest checkpoint holding its version."""
    owners: dict[tuple[str, str, str], str] = {}
    for row in sorted(tables.checkpoints.values(), key=lambda r: r.checkpoint_id):
        for channel, version in row.versions.items():
            owners.setdefault((row.ns, channel, version), row.checkpoint_id)
    charged: Counter = Counter()
    for key, (_, size) in tables.blobs.items():
        if key in owners:
            charged[(key[0], owners[key])] += size.bytes
    return charged


def _nodes(tables: ThreadTables, planner: _Planner, checkpoint_ns: str) -> list[LineageNode]:
    """Build every node of the namespace; the writer is named later, only for the rows shown."""
    rows = sorted((r for r in tables.checkpoints.values() if r.ns == checkpoint_ns), key=lambda r: r.checkpoint_id)
    rows.reverse()
    layout = lay_out((row.checkpoint_id, row.parent_id) for row in rows)
    head = tables.heads().get(checkpoint_ns)
    blob_bytes = _blob_bytes(tables) if tables.blobs else Counter()
    nodes = []
    for row, lane in zip(rows, layout, strict=True):
        parent = tables.checkpoints.get((checkpoint_ns, row.parent_id)) if row.parent_id else None
        writes = tables.writes.get(row.ref, {})
        write_rows = sum(size.rows for size in writes.values())
        pending = 0 if row.ref in planner.consumed else write_rows
        step = row.metadata.get("step")
        nodes.append(
            LineageNode(
                checkpoint_id=row.checkpoint_id,
                parent_id=row.parent_id,
                step=step if isinstance(step, int) else None,
                source=str(row.metadata.get("source") or "?"),
                writer="",
                mode="delta" if metadata_uses_delta(row.metadata) else "full",
                snapshot=any(value.snapshot for value in row.values.values()),
                pending_writes=pending,
                interrupt=bool(pending) and INTERRUPT_CHANNEL in writes,
                bytes=row.size.bytes + sum(size.bytes for size in writes.values()) + blob_bytes[row.ref],
                protected=planner.protected.get(row.ref, []),
                head=row.checkpoint_id == head,
                lane=lane,
                run_id=str(row.metadata.get("run_id") or ""),
                edit=edit_kind(row.metadata, parent.metadata.get("run_id") if parent else None),
            )
        )
    return nodes


def _name_writers(tables: ThreadTables, checkpoint_ns: str, rows: list[LineageNode | LineageGap]) -> None:
    for node in rows:
        if isinstance(node, LineageNode):
            row = tables.checkpoints[(checkpoint_ns, node.checkpoint_id)]
            parent = tables.checkpoints.get((checkpoint_ns, node.parent_id)) if node.parent_id else None
            node.writer = _writer(row, parent, node.source)
            if RESTORE_NODE in node.writer.split(", "):
                node.edit = "rollback restore"


def _plain(node: LineageNode, below: LineageNode | None) -> bool:
    """An unremarkable checkpoint: a run's step, one child, its parent next, nothing pending, same mode."""
    return (
        below is not None
        and not node.edit
        and node.parent_id == below.checkpoint_id
        and node.lane.children == 1
        and not node.head
        and not node.pending_writes
        and not node.own_reasons
        and node.mode == below.mode
    )


def collapse(nodes: list[LineageNode], page_rows: int = LINEAGE_PAGE_ROWS) -> list[LineageNode | LineageGap]:
    """Replace the middle of every run of COLLAPSE_MIN+ plain checkpoints with one gap row."""
    out: list[LineageNode | LineageGap] = []
    index = 0
    while index < len(nodes):
        end = index
        while end < len(nodes) and _plain(nodes[end], nodes[end + 1] if end + 1 < len(nodes) else None):
            end += 1
        if end - index >= COLLAPSE_MIN:
            hidden = nodes[index + COLLAPSE_KEEP : end - COLLAPSE_KEEP]
            out.extend(nodes[index : index + COLLAPSE_KEEP])
            out.append(
                LineageGap(
                    count=len(hidden),
                    first_step=hidden[-1].step,
                    last_step=hidden[0].step,
                    snapshots=sum(node.snapshot for node in hidden),
                    bytes=sum(node.bytes for node in hidden),
                    lanes=sorted({hidden[0].lane.column, *hidden[0].lane.open_below}),
                    expand_page=(index + COLLAPSE_KEEP) // page_rows + 1,
                )
            )
            out.extend(nodes[end - COLLAPSE_KEEP : end])
            index = end
        else:
            out.extend(nodes[index : max(end, index + 1)])
            index = max(end, index + 1)
    return out


def _head_line(tables: ThreadTables, checkpoint_ns: str) -> set[str]:
    """The head of ``checkpoint_ns`` and all its ancestors: the conversation a client reads."""
    line: set[str] = set()
    checkpoint_id = tables.heads().get(checkpoint_ns)
    while checkpoint_id and checkpoint_id not in line and (checkpoint_ns, checkpoint_id) in tables.checkpoints:
        line.add(checkpoint_id)
        checkpoint_id = tables.checkpoints[(checkpoint_ns, checkpoint_id)].parent_id
    return line


def _preview(tables: ThreadTables, checkpoint_ns: str, rows: list[LineageNode | LineageGap]) -> None:
    """Fill what each drawn node added, and what each abandoned tip holds that HEAD does not (≤ 4 queries)."""
    reader = PreviewReader(tables, checkpoint_ns, sync_resources().saver.serde)
    drawn = [row for row in rows if isinstance(row, LineageNode)]
    added = reader.added(node.checkpoint_id for node in drawn)
    tips = [node.checkpoint_id for node in drawn if node.abandoned]
    lost = reader.not_in_head(tips, _head_line(tables, checkpoint_ns)) if tips else {}
    for node in drawn:
        node.added = added.get(node.checkpoint_id)
        node.not_in_head = lost.get(node.checkpoint_id)


def thread_lineage_get(
    *,
    thread_id: str,
    references: Mapping[str, str] | None = None,
    released_runs: frozenset[str] = frozenset(),
    checkpoint_ns: str = "",
    page: int = 1,
    collapsed: bool = True,
) -> LineagePage:
    """Return one page of the thread's lineage in ``checkpoint_ns``, newest first.

    ``references`` are the checkpoint ids other records still need (resume
    targets, branch parents), shown as protected with their reason;
    ``released_runs`` are rolled back, so their leftover writes protect nothing
    (as retention plans it).
    """
    tables = lineage_tables_read(thread_id=thread_id)
    planner = _Planner(tables, RetentionPolicy(released_runs=released_runs), dict(references or {}))
    planner.protect()
    namespaces = dict(sorted(Counter(ns for ns, _ in tables.checkpoints).items()))
    nodes = _nodes(tables, planner, checkpoint_ns)
    rows: list[LineageNode | LineageGap] = collapse(nodes) if collapsed else list(nodes)
    pages = max(1, -(-len(rows) // LINEAGE_PAGE_ROWS))
    page = min(max(page, 1), pages)
    start = (page - 1) * LINEAGE_PAGE_ROWS
    shown = rows[start : start + LINEAGE_PAGE_ROWS]
    _name_writers(tables, checkpoint_ns, shown)
    _preview(tables, checkpoint_ns, shown)
    return LineagePage(
        thread_id=thread_id,
        checkpoint_ns=checkpoint_ns,
        namespaces=namespaces,
        total=len(nodes),
        rows=shown,
        page=page,
        pages=pages,
        collapsed=collapsed,
        head_id=tables.heads().get(checkpoint_ns, ""),
    )
