"""Why a large thread is large, and what would shrink it: the storage page's advice, from metadata only.

For each thread it reads the rows the lineage reads (sizes, parents,
markers; no payload decoded but the few abandoned tips' last messages) and
runs the retention planner with the console's ``keep_latest`` policy, so
"reclaimable" is exactly what a retention apply would delete (before
snapshot thinning, which needs a replay to verify and is only estimated).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from django.template.defaultfilters import filesizeformat

from checkpoints.modes import metadata_uses_delta
from checkpoints.retention.planner import _Planner
from checkpoints.retention.policy import RetentionPolicy
from checkpoints.runtime import sync_resources
from checkpoints.storage import ThreadTables
from console.lineage.lineage import LINEAGE_PREFIX, _blob_bytes, lineage_tables_read
from console.lineage.previews import Added, PreviewReader


@dataclass
class LostBranch:
    """A branch retention would delete, and what it holds that HEAD does not."""

    tip: str
    checkpoints: int
    bytes: int
    held: Added
    run_id: str = ""


@dataclass
class ThreadGuidance:
    """One thread's storage explained: where its bytes are and what would reclaim them."""

    thread_id: str
    mode: str
    checkpoints: int
    bytes: int
    head_id: str = ""
    head_bytes: int = 0
    line_checkpoints: int = 0
    line_bytes: int = 0
    reclaimable: int = 0
    deleted: int = 0
    rolled_back_bytes: int = 0
    writes_bytes: int = 0
    snapshots: int = 0
    kept_branches: list[tuple[str, str, int]] = field(default_factory=list)
    lost: list[LostBranch] = field(default_factory=list)

    @property
    def branch_bytes(self) -> int:
        return max(self.bytes - self.line_bytes, 0)

    def reasons(self) -> list[str]:
        """Why the thread is large, biggest share first."""
        found = []
        if self.mode == "full" and self.line_checkpoints > 1:
            found.append(
                (
                    self.line_bytes,
                    f"full-mode history: the {self.line_checkpoints} checkpoints of the conversation each store the "
                    f"whole message list ({_size(self.line_bytes)}; the head alone is {_size(self.head_bytes)})",
                )
            )
        elif self.line_checkpoints:
            found.append(
                (self.line_bytes, f"the conversation's {self.line_checkpoints} checkpoints ({_size(self.line_bytes)})")
            )
        if self.branch_bytes:
            found.append((self.branch_bytes, f"branches off the conversation ({_size(self.branch_bytes)})"))
        if self.rolled_back_bytes:
            found.append((self.rolled_back_bytes, f"checkpoints of rolled-back runs ({_size(self.rolled_back_bytes)})"))
        if self.writes_bytes:
            found.append((self.writes_bytes, f"pending and replayed writes ({_size(self.writes_bytes)})"))
        if self.snapshots > 1:
            found.append((0, f"{self.snapshots} delta snapshots stored"))
        return [text for _, text in sorted(found, key=lambda pair: -pair[0])]

    def advice(self) -> list[str]:
        """What would shrink it, and why retention alone may not."""
        advice = []
        if self.reclaimable:
            advice.append(
                f"Retention (keep_latest) would delete {self.deleted} checkpoint(s), {_size(self.reclaimable)}: "
                "branches off the conversation and metadata-only leaves."
            )
        else:
            advice.append(
                "Retention reclaims nothing: retention never cuts the conversation's own history"
                + (", and every other branch is kept for a reason listed below." if self.kept_branches else ".")
            )
        if self.mode == "full" and self.line_checkpoints > 1:
            advice.append(
                "Switch the deployment to delta mode: new checkpoints then store only what a step wrote instead of "
                f"the whole list again (this thread would grow by about {_size(self.line_bytes // self.line_checkpoints)} "
                "less per checkpoint); existing full checkpoints stay as they are."
            )
        if self.snapshots > 1:
            advice.append(
                "Thin snapshots (part of keep_latest): the preview lists which go and which a branch still needs."
            )
        for tip, why, _ in self.kept_branches:
            if why.startswith("branch parent of thread"):
                advice.append(f"Checkpoint {tip[:13]}… is kept as the {why}: delete that thread if it is not needed.")
        return advice


def _size(count: int) -> str:
    return str(filesizeformat(count)).replace("\xa0", " ")


def _row_bytes(tables: ThreadTables) -> Counter:
    """Bytes per checkpoint: its row, its write rows and (PostgreSQL) the blobs first stored with it."""
    charged = _blob_bytes(tables) if tables.blobs else Counter()
    for ref, row in tables.checkpoints.items():
        charged[ref] += row.size.bytes + tables.write_size(ref).bytes
    return charged


def _line(tables: ThreadTables) -> set[tuple[str, str]]:
    """Every namespace's head and its ancestors."""
    line: set[tuple[str, str]] = set()
    for ns, head in tables.heads().items():
        ref: tuple[str, str] | None = (ns, head)
        while ref is not None and ref in tables.checkpoints and ref not in line:
            line.add(ref)
            parent = tables.checkpoints[ref].parent_id
            ref = (ns, parent) if parent else None
    return line


def _lost_branches(tables: ThreadTables, planner: _Planner, sizes: Counter, line: set) -> list[LostBranch]:
    """The root-namespace branches the plan deletes whole, with the messages each holds that HEAD lacks."""
    deleted = planner.deleted
    tips = [ref for ref in deleted if ref[0] == "" and not planner.children[ref]]
    if not tips:
        return []
    reader = PreviewReader(tables, "", sync_resources().saver.serde)
    held = reader.not_in_head([tip for _, tip in tips], {cid for ns, cid in line if ns == ""})
    branches = []
    for ns, tip in tips:
        members: list[tuple[str, str]] = []
        ref: tuple[str, str] | None = (ns, tip)
        while ref is not None and ref in deleted and (ref == (ns, tip) or len(planner.children[ref]) == 1):
            members.append(ref)
            parent = tables.checkpoints[ref].parent_id
            ref = (ns, parent) if parent else None
        run_id = str(tables.checkpoints[(ns, tip)].metadata.get("run_id") or "")
        branches.append(LostBranch(tip, len(members), sum(sizes[m] for m in members), held[tip], run_id))
    return sorted(branches, key=lambda b: b.tip, reverse=True)


def thread_guidance_get(
    *, thread_id: str, total_bytes: int, references: dict[str, str], policy: RetentionPolicy
) -> ThreadGuidance:
    """Explain one thread's storage (``total_bytes`` from the storage page's aggregate query)."""
    tables = lineage_tables_read(thread_id=thread_id)
    planner = _Planner(tables, policy, references)
    planner.protect()
    planner.delete_shapes()
    sizes = _row_bytes(tables)
    line = _line(tables)
    head = tables.heads().get("")
    head_row = tables.checkpoints.get(("", head)) if head else None
    guidance = ThreadGuidance(
        thread_id=thread_id,
        mode="delta" if head_row is not None and metadata_uses_delta(head_row.metadata) else "full",
        checkpoints=len(tables.checkpoints),
        bytes=total_bytes,
        head_id=head or "",
        head_bytes=head_row.size.bytes if head_row is not None else 0,
        line_checkpoints=len(line),
        line_bytes=sum(sizes[ref] for ref in line),
        reclaimable=sum(sizes[ref] for ref in planner.deleted),
        deleted=len(planner.deleted),
        rolled_back_bytes=sum(sizes[ref] for ref in tables.checkpoints if planner.released(ref)),
        writes_bytes=sum(tables.write_size(ref).bytes for ref in tables.checkpoints),
        snapshots=sum(any(v.snapshot for v in row.values.values()) for row in tables.checkpoints.values()),
    )
    guidance.lost = _lost_branches(tables, planner, sizes, line)
    for ref, reasons in sorted(planner.protected.items()):
        own = [r for r in reasons if not r.startswith(LINEAGE_PREFIX)]
        if ref not in line and own and not planner.children[ref]:
            guidance.kept_branches.append((ref[1], "; ".join(own), sizes[ref]))
    return guidance
