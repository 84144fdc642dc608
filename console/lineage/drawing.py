"""Coordinates for the lineage SVG: a fixed grid, so the template only emits elements.

Row r's node sits at y = r·ROW + ROW/2 in its lane's column. An edge from the
row above starts half a row over the top of the page for the first row (the
SVG clips it), so lanes visibly continue across pages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from console.lineage.lineage import LineageGap, LineageNode, LineagePage

ROW = 24
COLUMN = 16
MARGIN = 10
RADIUS = 5
# Fixed text columns right of the lanes (12 px monospace, ~7.2 px a character):
# the time (8 characters), the run link (run + 6 characters + a mark), the label.
RUN_OFFSET = 66
LABEL_OFFSET = 150
LABEL_WIDTH = 1000


@dataclass
class Edge:
    x1: int
    y1: int
    x2: int
    y2: int
    dashed: bool = False


@dataclass
class DrawnRow:
    """One row of the drawing: its edges, its node (or gap), its label and link."""

    y: int
    edges: list[Edge] = field(default_factory=list)
    node: LineageNode | None = None
    gap: LineageGap | None = None
    cx: int = 0
    href: str = ""
    run_href: str = ""


def _x(column: int) -> int:
    return MARGIN + column * COLUMN


def lineage_drawing(
    page: LineagePage,
    node_href: Callable[[LineageNode], str],
    gap_href: Callable[[LineageGap], str],
    run_href: Callable[[str], str],
) -> dict:
    """Return the SVG's size, text columns and rows for ``page``."""
    rows: list[DrawnRow] = []
    for index, row in enumerate(page.rows):
        y = index * ROW + ROW // 2
        drawn = DrawnRow(y=y)
        if isinstance(row, LineageNode):
            drawn.node, drawn.cx, drawn.href = row, _x(row.lane.column), node_href(row)
            drawn.run_href = run_href(row.run_id) if row.run_id else ""
            drawn.edges = [Edge(_x(a), y - ROW, _x(b), y) for a, b in row.lane.incoming]
            if index == len(page.rows) - 1:
                drawn.edges += [Edge(_x(c), y, _x(c), y + ROW) for c in row.lane.open_below]
        else:
            drawn.gap, drawn.href = row, gap_href(row)
            drawn.edges = [Edge(_x(c), y - ROW, _x(c), y + ROW, dashed=True) for c in row.lanes]
        rows.append(drawn)
    text_x = _x(page.width) + MARGIN
    return {
        "width": text_x + LABEL_OFFSET + LABEL_WIDTH,
        "height": max(1, len(rows)) * ROW,
        "text_x": text_x,
        "run_x": text_x + RUN_OFFSET,
        "label_x": text_x + LABEL_OFFSET,
        "rows": rows,
        "r": RADIUS,
    }
