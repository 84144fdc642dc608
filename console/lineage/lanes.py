"""Lay a checkpoint tree out in lanes, Gitea-style: one pass, newest first, one lane per open branch.

Rows go newest first, so a child is drawn above its parent and a fork (a
parent with several children) is where lanes meet. Each lane waits for the
parent of the last node drawn in it; a node nobody waits for (a branch tip)
opens a lane in the leftmost free column, and a node several lanes wait for
takes the leftmost and frees the others. Columns never shift, so every
edge is either straight down or one diagonal into a node. O(rows × lanes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class LaneRow:
    """Where one node sits and which edges reach its row from the row above.

    ``incoming`` holds (column above, column here) pairs: a pair ending at
    ``column`` enters the node, any other passes by. ``open_below`` lists
    the columns still waiting for a parent under this row.
    """

    column: int
    incoming: list[tuple[int, int]] = field(default_factory=list)
    open_below: list[int] = field(default_factory=list)
    children: int = 0  # lanes that entered the node: 0 is a tip, 2+ a fork

    @property
    def width(self) -> int:
        return max([self.column, *self.open_below, *(a for a, _ in self.incoming)]) + 1


def lay_out(nodes: Iterable[tuple[str, str | None]]) -> list[LaneRow]:
    """Return one LaneRow per ``(id, parent id)``, given newest first.

    A parent that is not among the nodes (another page of history, a pruned
    or legacy link) ends its lane instead of keeping it open forever.
    """
    nodes = list(nodes)
    known = {node_id for node_id, _ in nodes}
    lanes: list[str | None] = []
    rows: list[LaneRow] = []
    for node_id, parent_id in nodes:
        waiting = [i for i, wanted in enumerate(lanes) if wanted == node_id]
        column = waiting[0] if waiting else _free_column(lanes)
        incoming = [(i, column if wanted == node_id else i) for i, wanted in enumerate(lanes) if wanted is not None]
        for i in waiting[1:]:
            lanes[i] = None
        lanes[column] = parent_id if parent_id in known else None
        while lanes and lanes[-1] is None:
            lanes.pop()
        open_below = [i for i, wanted in enumerate(lanes) if wanted is not None]
        rows.append(LaneRow(column, incoming, open_below, len(waiting)))
    return rows


def _free_column(lanes: list[str | None]) -> int:
    for i, wanted in enumerate(lanes):
        if wanted is None:
            return i
    lanes.append(None)
    return len(lanes) - 1
