"""A thread's checkpoint lineage for the console: one metadata read, lanes, collapsed stretches, pages.

The page never materializes state: ids, parents, step, source, mode marker,
snapshot flags, writes and sizes come from one bulk read of LangGraph's
tables (``thread_tables_read``: two queries on SQLite, three on PostgreSQL),
and the protection reasons from the same planner retention uses, so what the
lineage calls protected is exactly what a pass would keep.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from checkpoints.console.lanes import LaneRow, lay_out
from checkpoints.modes import metadata_uses_delta
from checkpoints.retention.planner import _Planner
from checkpoints.retention.policy import RetentionPolicy
from checkpoints.runtime import sync_resources
from checkpoints.storage import CheckpointRow, ThreadTables, thread_tables_read

# Rows (nodes and collapsed stretches) per page: the SVG stays a few hundred elements.
LINEAGE_PAGE_ROWS = 50
# A stretch of this many unremarkable checkpoints in a row collapses...
COLLAPSE_MIN = 12
# ...keeping this many visible at each end.
COLLAPSE_KEEP = 2
LINEAGE_PREFIX = "lineage of "
INTERRUPT_CHANNEL = "__interrupt__"


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
    kind: str = "node"

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

    @property
    def width(self) -> int:
        widths = [
            row.lane.width if isinstance(row, LineageNode) else max(row.lanes, default=0) + 1 for row in self.rows
        ]
        return max(widths, default=1)


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
    rows = sorted((r for r in tables.checkpoints.values() if r.ns == checkpoint_ns), key=lambda r: r.checkpoint_id)
    rows.reverse()
    layout = lay_out((row.checkpoint_id, row.parent_id) for row in rows)
    head = tables.heads().get(checkpoint_ns)
    blob_bytes = _blob_bytes(tables)
    nodes = []
    for row, lane in zip(rows, layout, strict=True):
        parent = tables.checkpoints.get((row.ns, row.parent_id)) if row.parent_id else None
        writes = tables.writes.get(row.ref, {})
        pending = 0 if row.ref in planner.consumed else sum(size.rows for size in writes.values())
        source = str(row.metadata.get("source") or "?")
        step = row.metadata.get("step")
        nodes.append(
            LineageNode(
                checkpoint_id=row.checkpoint_id,
                parent_id=row.parent_id,
                step=step if isinstance(step, int) else None,
                source=source,
                writer=_writer(row, parent, source),
                mode="delta" if metadata_uses_delta(row.metadata) else "full",
                snapshot=any(value.snapshot for value in row.values.values()),
                pending_writes=pending,
                interrupt=bool(pending) and INTERRUPT_CHANNEL in writes,
                bytes=row.size.bytes + tables.write_size(row.ref).bytes + blob_bytes[row.ref],
                protected=list(planner.protected.get(row.ref, [])),
                head=row.checkpoint_id == head,
                lane=lane,
            )
        )
    return nodes


def _plain(node: LineageNode, below: LineageNode | None) -> bool:
    """An unremarkable checkpoint: one child, its parent next, nothing pending, same mode as its parent."""
    return (
        below is not None
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


def thread_lineage_get(
    *,
    thread_id: str,
    references: Mapping[str, str] | None = None,
    checkpoint_ns: str = "",
    page: int = 1,
    collapsed: bool = True,
) -> LineagePage:
    """Return one page of the thread's lineage in ``checkpoint_ns``, newest first.

    ``references`` are the checkpoint ids other records still need (resume
    targets, branch parents), shown as protected with their reason.
    """
    tables = thread_tables_read(thread_id=thread_id, serde=sync_resources().saver.serde)
    planner = _Planner(tables, RetentionPolicy(), dict(references or {}))
    planner.protect()
    namespaces = dict(sorted(Counter(ns for ns, _ in tables.checkpoints).items()))
    nodes = _nodes(tables, planner, checkpoint_ns)
    rows = collapse(nodes) if collapsed else nodes
    pages = max(1, -(-len(rows) // LINEAGE_PAGE_ROWS))
    page = min(max(page, 1), pages)
    start = (page - 1) * LINEAGE_PAGE_ROWS
    return LineagePage(
        thread_id=thread_id,
        checkpoint_ns=checkpoint_ns,
        namespaces=namespaces,
        total=len(nodes),
        rows=rows[start : start + LINEAGE_PAGE_ROWS],
        page=page,
        pages=pages,
        collapsed=collapsed,
    )
