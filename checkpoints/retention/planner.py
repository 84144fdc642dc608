"""Plan a retention pass: protected set, deletable leaves, consumed writes."""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping

from checkpoints.errors import CheckpointNotFoundError
from checkpoints.retention.policy import CheckpointProtectedError, Ref, RetentionPolicy
from checkpoints.storage import (
    CheckpointRow,
    ThreadTables,
)


class _Planner:
    """The protected set and the deletions of one read of a thread."""

    def __init__(self, tables: ThreadTables, policy: RetentionPolicy, references: Mapping[str, str]) -> None:
        self.tables = tables
        self.policy = policy
        self.references = references
        self.nodes = tables.checkpoints
        self.children: dict[Ref, set[Ref]] = defaultdict(set)
        for ref, row in self.nodes.items():
            if (parent := self.parent_ref(row)) is not None:
                self.children[parent].add(ref)
        # Writes a child consumed: it advanced some channel version (a
        # metadata-only clone applied nothing, so its parent's writes are pending).
        self.consumed = {
            ref
            for ref, kids in self.children.items()
            if any(self.nodes[kid].versions != self.nodes[ref].versions for kid in kids)
        }
        self.by_id: dict[str, list[Ref]] = defaultdict(list)
        for ref in self.nodes:
            self.by_id[ref[1]].append(ref)
        self.protected: dict[Ref, list[str]] = {}
        self.anchors: dict[Ref, str] = {}
        self.deleted: dict[Ref, str] = {}
        self.budget_hit = False

    def parent_ref(self, row: CheckpointRow) -> Ref | None:
        ref = (row.ns, row.parent_id) if row.parent_id is not None else None
        return ref if ref in self.nodes else None

    def _reason(self, ref: Ref, reason: str) -> None:
        reasons = self.protected.setdefault(ref, [])
        if reason not in reasons:
            reasons.append(reason)

    def _anchor(self, ref: Ref, reason: str, label: str) -> None:
        """Protect ``ref`` and its lineage; stop at an ancestor some earlier anchor already holds."""
        self.anchors.setdefault(ref, label)
        self._reason(ref, reason)
        row = self.nodes[ref]
        while (parent := self.parent_ref(row)) is not None and parent not in self.protected:
            self._reason(parent, f"lineage of {label}")
            row = self.nodes[parent]

    def protect(self) -> None:
        for ns, head in sorted(self.tables.heads().items()):
            self._anchor((ns, head), f"head of namespace {ns!r}", f"the head of namespace {ns!r}")
        for checkpoint_id in sorted(self.policy.protect_ids):
            for ref in self.by_id.get(checkpoint_id, ()):
                self._anchor(ref, "explicitly protected", f"protected checkpoint {checkpoint_id}")
        for checkpoint_id, reason in sorted(self.references.items()):
            for ref in self.by_id.get(checkpoint_id, ()):
                self._anchor(ref, reason, f"checkpoint {checkpoint_id} ({reason})")
        for ref in sorted(self.nodes):
            if ref not in self.consumed and self.tables.write_size(ref).rows and not self.released(ref):
                self._anchor(ref, "owns pending writes (unconsumed state, e.g. an interrupt)", f"leaf {ref[1]}")
        for ref, row in self.nodes.items():
            if row.parent_id is None and ref not in self.protected:
                self._reason(ref, "root checkpoint (no parent to keep the lineage on)")
            elif row.parent_id is not None and self.parent_ref(row) is None:
                self._reason(ref, f"its parent {row.parent_id} is missing (legacy data)")

    def released(self, ref: Ref) -> bool:
        """Whether ``ref`` was written by a run whose leftover writes protect nothing (rolled back)."""
        return str(self.nodes[ref].metadata.get("run_id") or "") in self.policy.released_runs

    def _shape(self, ref: Ref) -> str | None:
        row = self.nodes[ref]
        parent = self.parent_ref(row)
        if parent is None:
            return None
        metadata_only = row.versions == self.nodes[parent].versions and not self.own_writes(ref)
        if metadata_only and self.policy.prune_metadata_only:
            return "metadata_only"
        return "leaf_sibling" if self.policy.prune_siblings else None

    def own_writes(self, ref: Ref) -> int:
        """Write rows that stay with ``ref``: none once every consumer of them is deleted."""
        if ref in self.consumed and not self.children[ref] - self.deleted.keys():
            return 0
        return self.tables.write_size(ref).rows

    def dropped_writes(self) -> list[Ref]:
        """Surviving, unprotected checkpoints whose writes go with the children that consumed them."""
        return sorted(
            ref
            for ref in self.nodes
            if ref not in self.deleted
            and ref not in self.protected
            and self.tables.write_size(ref).rows
            and not self.own_writes(ref)
        )

    def _take(self, ref: Ref, shape: str) -> bool:
        if self.policy.max_delete is not None and len(self.deleted) >= self.policy.max_delete:
            self.budget_hit = True
            return False
        self.deleted[ref] = shape
        return True

    def _subtree(self, ref: Ref) -> list[Ref]:
        """Return ``ref`` and its descendants, deepest first."""
        order, queue = [], deque([ref])
        while queue:
            node = queue.popleft()
            order.append(node)
            queue.extend(sorted(self.children[node]))
        return list(reversed(order))

    def delete_explicit(self) -> None:
        """Delete the requested checkpoints with their subtrees; refuse a protected one loudly."""
        for checkpoint_id in sorted(self.policy.delete_ids):
            refs = self.by_id.get(checkpoint_id)
            if not refs:
                raise CheckpointNotFoundError(checkpoint_id)
            for ref in refs:
                if ref in self.protected:
                    raise CheckpointProtectedError(self.tables.thread_id, checkpoint_id, self.protected[ref])
        for checkpoint_id in sorted(self.policy.delete_ids):
            for ref in self.by_id[checkpoint_id]:
                for node in self._subtree(ref):
                    if node not in self.deleted and not self._take(node, "explicit"):
                        return

    def delete_shapes(self) -> None:
        """Delete safe leaves, newest first, until none is left (or the budget is spent)."""
        alive = {ref: len(self.children[ref] - self.deleted.keys()) for ref in self.nodes}
        queue = deque(sorted((r for r in self.nodes if not alive[r] and r not in self.deleted), reverse=True))
        while queue:
            ref = queue.popleft()
            if ref in self.protected or ref in self.deleted or (shape := self._shape(ref)) is None:
                continue
            if not self._take(ref, shape):
                return
            if (parent := self.parent_ref(self.nodes[ref])) is not None:
                alive[parent] -= 1
                if not alive[parent]:
                    queue.append(parent)

    def kept_reason(self, ref: Ref) -> str:
        if self.children[ref] - self.deleted.keys():
            return "has retained children"
        if self.budget_hit and self._shape(ref) is not None:
            return "max_delete reached"
        return "off-chain leaf (sibling pruning is off)"

    def survivors(self) -> dict[Ref, CheckpointRow]:
        return {ref: row for ref, row in self.nodes.items() if ref not in self.deleted}


# -- snapshot thinning -----------------------------------------------------------
