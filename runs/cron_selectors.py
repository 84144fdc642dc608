"""Reads of crons, scoped to their owner, or by custom auth's crons handler (out of scope: 404, never listed)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from checkpoints.errors import UnknownGraphError
from checkpoints.graphs import resolve_graph
from core.access import scope_of
from core.db import page_of, sort_keys
from core.errors import NotFound
from runs.models import Cron

CRON_SORT_FIELDS = ("cron_id", "assistant_id", "thread_id", "next_run_date", "end_time", "created_at", "updated_at")


def _visible_crons(owner) -> QuerySet[Cron]:
    """The caller's crons, or those custom auth's crons handler allowed (its filter on their metadata)."""
    return Cron.objects.filter(scope_of(owner).q())


def cron_get(*, owner, cron_id: str) -> Cron:
    cron = _visible_crons(owner).filter(pk=cron_id).first()
    if cron is None:
        raise NotFound(f"Cron {cron_id} not found")
    return cron


def cron_filter(
    *,
    owner,
    assistant_id: str | None = None,
    thread_id: str | None = None,
    enabled: bool | None = None,
    metadata: dict[str, Any] | None = None,
) -> QuerySet[Cron]:
    """Return the owner's crons of an assistant (an id, or a graph name: its system assistant), thread, state."""
    queryset = _visible_crons(owner)
    if assistant_id:
        try:
            assistant_id = resolve_graph(assistant_id).assistant_id
        except UnknownGraphError:
            pass
        queryset = queryset.filter(assistant_id=assistant_id)
    if thread_id:
        queryset = queryset.filter(thread_id=thread_id)
    if enabled is not None:
        queryset = queryset.filter(enabled=enabled)
    if metadata:
        queryset = queryset.filter(metadata__jsoncontains=metadata)
    return queryset


def cron_search(
    *, owner, sort_by: str = "created_at", sort_order: str = "desc", limit: int = 10, offset: int = 0, **filters: Any
) -> tuple[list[Cron], int]:
    """Return one page of the owner's crons matching ``filters`` (cron_filter()'s) and the total; ``cron_id`` breaks ties."""
    order_by = sort_keys(sort_by, sort_order, tiebreak="cron_id")
    return page_of(cron_filter(owner=owner, **filters), order_by=order_by, limit=limit, offset=offset)
