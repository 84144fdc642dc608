"""What each drawn checkpoint added to ``messages``, and what an abandoned branch holds that HEAD does not.

Read for the rows on one lineage page only, never by materializing state:

- a delta checkpoint's new messages are the ``messages`` writes stored on its
  parent (the writes it consumed): one query for the page, small values;
- a full-mode checkpoint stores the whole list, so its count is the list's
  length and what it added is the difference from its parent's; the list is
  unpacked with every message left as raw msgpack, and only the last one is
  decoded (the preview line).

Counts are of appended messages: a write that replaces the list (an
``Overwrite``, a rollback's restore) is reported as a replacement of N.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import ormsgpack

from checkpoints.encryption import plain_bytes
from checkpoints.storage import CheckpointRow, ThreadTables, rows_of
from console.lineage.diff import content_text, short

PREVIEW_CHARS = 80
MESSAGES = "messages"

SQL = {
    "sqlite": {
        "writes": "SELECT checkpoint_id, type, value FROM writes WHERE thread_id = %s AND checkpoint_ns = %s"
        " AND channel = 'messages' AND checkpoint_id IN ({}) ORDER BY checkpoint_id, task_id, idx",
        "lists": "SELECT checkpoint_id, type, checkpoint FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = %s"
        " AND checkpoint_id IN ({})",
    },
    "postgres": {
        "writes": "SELECT checkpoint_id, type, blob FROM checkpoint_writes WHERE thread_id = %s AND checkpoint_ns = %s"
        " AND channel = 'messages' AND checkpoint_id IN ({}) ORDER BY checkpoint_id, task_id, idx",
        "lists": "SELECT version, type, blob FROM checkpoint_blobs WHERE thread_id = %s AND checkpoint_ns = %s"
        " AND channel = 'messages' AND version IN ({})",
    },
}


@dataclass
class Added:
    """Messages a checkpoint added: how many (None: unknown), whether it replaced the list, the last one's line."""

    count: int | None = None
    replaced: bool = False
    last: str = ""

    @property
    def text(self) -> str:
        if self.replaced:
            return f"replaced messages ({self.count})"
        if not self.count:
            return ""
        return f"+{self.count} {self.last}".rstrip()


@dataclass(frozen=True)
class _Raw:
    """A msgpack extension (a message) kept undecoded, comparable by its bytes."""

    code: int
    data: bytes

    def packed(self) -> bytes:
        return ormsgpack.packb(ormsgpack.Ext(self.code, self.data))


def _unpack(type_: str, blob: Any, serde: Any) -> Any:
    """Unpack a msgpack value (opened first if it is sealed) leaving every extension (a message) undecoded.

    None for other serializers.
    """
    if blob is None:
        return None
    type_, blob = plain_bytes(type_, bytes(blob), serde)
    if type_ != "msgpack":
        return None
    return ormsgpack.unpackb(blob, ext_hook=_Raw, option=ormsgpack.OPT_NON_STR_KEYS)


def _line(serde: Any, raw: Any) -> str:
    """Decode one message (or anything) and return it as one short line."""
    value = serde.loads_typed(("msgpack", raw.packed())) if isinstance(raw, _Raw) else raw
    kind = getattr(value, "type", "")
    text = content_text(getattr(value, "content", value))
    return short(f"{kind}: {text}" if kind else text, PREVIEW_CHARS)


def _placeholders(count: int) -> str:
    return ", ".join(["%s"] * count)


class PreviewReader:
    """Previews of one namespace's checkpoints, each read at most once per page."""

    def __init__(self, tables: ThreadTables, checkpoint_ns: str, serde: Any) -> None:
        self.tables = tables
        self.ns = checkpoint_ns
        self.serde = serde
        self.sql = SQL[tables.kind]

    def row(self, checkpoint_id: str | None) -> CheckpointRow | None:
        return self.tables.checkpoints.get((self.ns, checkpoint_id)) if checkpoint_id else None

    def _writes(self, parent_ids: set[str]) -> dict[str, list[Any]]:
        """The ``messages`` write values stored on each of ``parent_ids`` (raw, in task order)."""
        wanted = sorted(p for p in parent_ids if MESSAGES in self.tables.writes.get((self.ns, p), {}))
        found: dict[str, list[Any]] = defaultdict(list)
        if wanted:
            sql = self.sql["writes"].format(_placeholders(len(wanted)))
            for checkpoint_id, type_, blob in rows_of(sql, [self.tables.thread_id, self.ns, *wanted]):
                found[checkpoint_id].append(_unpack(type_, blob, self.serde))
        return found

    def _lists(self, checkpoint_ids: set[str]) -> dict[str, list[Any]]:
        """The stored ``messages`` list (raw messages) of each full-mode checkpoint among ``checkpoint_ids``."""
        rows = [r for c in checkpoint_ids if (r := self.row(c)) is not None and MESSAGES in r.values]
        rows = [r for r in rows if not r.values[MESSAGES].snapshot]
        if not rows:
            return {}
        if self.tables.kind == "sqlite":
            sql = self.sql["lists"].format(_placeholders(len(rows)))
            found = {}
            for checkpoint_id, type_, blob in rows_of(
                sql, [self.tables.thread_id, self.ns, *(r.checkpoint_id for r in rows)]
            ):
                checkpoint = _unpack(type_, blob, self.serde) or {}
                value = (checkpoint.get("channel_values") or {}).get(MESSAGES)
                if isinstance(value, list):
                    found[checkpoint_id] = value
            return found
        by_version = defaultdict(list)
        for row in rows:
            by_version[row.versions[MESSAGES]].append(row.checkpoint_id)
        sql = self.sql["lists"].format(_placeholders(len(by_version)))
        found = {}
        for version, type_, blob in rows_of(sql, [self.tables.thread_id, self.ns, *by_version]):
            if isinstance(value := _unpack(type_, blob, self.serde), list):
                found.update(dict.fromkeys(by_version[version], value))
        return found

    def _from_writes(self, values: list[Any]) -> Added:
        added = Added(count=0)
        for value in values:
            if isinstance(value, list):
                added.count = (added.count or 0) + len(value)
                if value:
                    added.last = _line(self.serde, value[-1])
            elif isinstance(value, dict) or value is None:
                return Added(count=None)  # another shape than an append: no count to give
            else:
                decoded = self.serde.loads_typed(("msgpack", value.packed())) if isinstance(value, _Raw) else value
                inner = getattr(decoded, "value", None)
                if type(decoded).__name__ == "Overwrite" and isinstance(inner, list):
                    added = Added(count=len(inner), replaced=True)
                else:
                    added.count = (added.count or 0) + 1
                    added.last = _line(self.serde, value)
        return added

    def added(self, checkpoint_ids: Iterable[str]) -> dict[str, Added]:
        """Return what each checkpoint added to ``messages`` (only those that did)."""
        ids = set(checkpoint_ids)
        parents = {c: row.parent_id for c in ids if (row := self.row(c)) is not None and row.parent_id}
        writes = self._writes(set(parents.values()))
        lists = self._lists((ids | set(parents.values())) - {p for p in parents.values() if p in writes})
        out: dict[str, Added] = {}
        for checkpoint_id in ids:
            parent = parents.get(checkpoint_id)
            if parent in writes:
                out[checkpoint_id] = self._from_writes(writes[parent])
            elif checkpoint_id in lists:
                mine, theirs = lists[checkpoint_id], lists.get(parent or "", [])
                if len(mine) != len(theirs) or mine[-1:] != theirs[-1:]:
                    out[checkpoint_id] = self._list_change(mine, theirs)
        return out

    def _list_change(self, mine: list[Any], theirs: list[Any]) -> Added:
        grew = len(mine) - len(theirs)
        if grew > 0 and mine[: len(theirs)] == theirs:
            return Added(count=grew, last=_line(self.serde, mine[-1]))
        return Added(count=len(mine), replaced=True)

    def _branch(self, tip_id: str, head_line: set[str]) -> tuple[list[CheckpointRow], str | None]:
        """The tip and its ancestors up to HEAD's lineage (newest first), and where it left it."""
        branch, row = [], self.row(tip_id)
        while row is not None and row.checkpoint_id not in head_line:
            branch.append(row)
            row = self.row(row.parent_id)
        return branch, row.checkpoint_id if row is not None else None

    def not_in_head(self, tip_ids: Iterable[str], head_line: set[str]) -> dict[str, Added]:
        """Messages each branch ending at one of ``tip_ids`` appended since it left HEAD's lineage (two queries)."""
        branches = {tip: self._branch(tip, head_line) for tip in tip_ids}
        lists = self._lists({c for tip, (_, junction) in branches.items() for c in (tip, junction) if c})
        writes = self._writes({row.parent_id for rows, _ in branches.values() for row in rows if row.parent_id})
        out = {}
        for tip, (rows, junction) in branches.items():
            if tip in lists:
                mine, theirs = lists[tip], lists.get(junction or "", [])
                count = max(len(mine) - len(theirs), 0)
                out[tip] = Added(count=count, last=_line(self.serde, mine[-1]) if count else "")
            else:
                out[tip] = self._appended(rows, writes)
        return out

    def _appended(self, rows: list[CheckpointRow], writes: dict[str, list[Any]]) -> Added:
        total = Added(count=0)
        for row in reversed(rows):
            if row.parent_id not in writes:
                continue
            step = self._from_writes(writes[row.parent_id])
            if step.count is None or step.replaced:
                return Added(count=None)
            total.count = (total.count or 0) + step.count
            total.last = step.last or total.last
        return total
