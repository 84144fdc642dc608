"""Reads of assistants: the caller's own and the system ones, never another user's.

A system assistant (``owner`` null) exists for every registered graph and is
visible to every user; a user's assistant is visible only to its owner
(another user's answers 404 everywhere and never counts in a search). Every
read first makes sure the system rows exist (``system_assistants_ensure``:
one indexed query when they do), so a graph added to the configuration is an
assistant from the next request on.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet
from django.db.models.expressions import OrderBy
from django.db.models.functions import Lower

from checkpoints.errors import UnknownGraphError
from checkpoints.graphs import registered_graph, registered_graphs, resolve_graph
from core.access import scope_of
from core.db import page_of
from core.errors import NotFound
from runs.models import Assistant, AssistantVersion
from runs.services.assistants import system_assistants_ensure

ASSISTANT_SORT_FIELDS = ("assistant_id", "created_at", "updated_at", "name", "graph_id")


@dataclass(frozen=True)
class ResolvedAssistant:
    """What a run of an assistant needs: its identity, its graph and its saved settings."""

    assistant_id: str
    graph_id: str
    version: int
    config: dict[str, Any]
    context: dict[str, Any]


def _not_found(assistant_id: str) -> NotFound:
    return NotFound(f"Assistant {assistant_id} not found")


def is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except (ValueError, TypeError, AttributeError):
        return False
    return True


def _users_assistants(owner) -> Q:
    """Users' assistants the caller may touch: its own, or those custom auth's handler allowed."""
    scope = scope_of(owner)
    return Q(owner__isnull=False) & (scope.q() if scope.owner_id is not None or scope.filters else Q())


def visible_assistants(*, owner) -> QuerySet[Assistant]:
    """Return the caller's assistants and the system assistants of graphs registered now.

    System assistants (the graphs served) are everyone's, whatever a handler's
    filter says: every caller can run a graph by its name anyway.
    """
    system_assistants_ensure()
    graphs = list(registered_graphs())
    return Assistant.objects.filter(_users_assistants(owner) | Q(owner__isnull=True, graph_id__in=graphs))


def assistant_get(*, owner, assistant_id: str) -> Assistant:
    """Return a visible assistant by id, or by graph name (its system assistant); else 404."""
    try:
        assistant_id = resolve_graph(assistant_id).assistant_id
    except UnknownGraphError:
        if not is_uuid(assistant_id):
            raise _not_found(assistant_id) from None
    assistant = visible_assistants(owner=owner).filter(pk=assistant_id).first()
    if assistant is None:
        raise _not_found(assistant_id)
    return assistant


def assistant_filter(
    *, owner, graph_id: str | None = None, name: str | None = None, metadata: dict[str, Any] | None = None
) -> QuerySet[Assistant]:
    """Return the visible assistants matching graph, name (case-insensitive part) and metadata containment."""
    queryset = visible_assistants(owner=owner)
    if graph_id:
        queryset = queryset.filter(graph_id=graph_id)
    if name:
        queryset = queryset.filter(name__icontains=name)
    if metadata:
        queryset = queryset.filter(metadata__jsoncontains=metadata)
    return queryset


def assistant_search(
    *, owner, sort_by: str = "created_at", sort_order: str = "desc", limit: int = 10, offset: int = 0, **filters: Any
) -> tuple[list[Assistant], int]:
    """Return one page of the assistants matching ``filters`` (assistant_filter()'s) and the total count.

    ``name`` and ``graph_id`` sort case-insensitively (as the Platform does);
    ``assistant_id`` breaks ties so pages never overlap.
    """
    descending = sort_order == "desc"
    first: OrderBy | str
    if sort_by in ("name", "graph_id"):
        first = Lower(sort_by).desc() if descending else Lower(sort_by).asc()
    else:
        first = f"-{sort_by}" if descending else sort_by
    order_by = (first, "-assistant_id" if descending else "assistant_id")
    return page_of(assistant_filter(owner=owner, **filters), order_by=order_by, limit=limit, offset=offset)


def assistant_versions(
    *, assistant: Assistant, metadata: dict[str, Any] | None = None, limit: int = 10, offset: int = 0
) -> list[AssistantVersion]:
    """Return an assistant's versions, newest first, filtered by metadata containment."""
    versions = AssistantVersion.objects.filter(assistant=assistant)
    if metadata:
        versions = versions.filter(metadata__jsoncontains=metadata)
    return list(versions.order_by("-version")[offset : offset + limit])


def system_assistant(assistant_id: str) -> ResolvedAssistant | None:
    """Return the registered graph ``assistant_id`` names (a graph name or its system id), else None; no query."""
    if (spec := registered_graph(assistant_id)) is None:
        return None
    return ResolvedAssistant(spec.assistant_id, spec.graph_id, 1, {}, {})


def assistant_resolve(*, owner, assistant_id: str) -> ResolvedAssistant:
    """Return what a run started with ``assistant_id`` runs: a graph name, a system id or the owner's assistant.

    A system assistant is read from the registry (no query: its settings are
    the graph's own); a user's assistant from its row, at its current version.
    Another user's assistant, or one whose graph is no longer registered, is 404.
    """
    if (system := system_assistant(assistant_id)) is not None:
        return system
    found = Assistant.objects.filter(_users_assistants(owner), pk=assistant_id)
    assistant = found.first() if is_uuid(assistant_id) else None
    if assistant is None:
        raise _not_found(assistant_id)
    if assistant.graph_id not in registered_graphs():
        raise NotFound(f"Assistant {assistant_id}: its graph {assistant.graph_id!r} is not registered")
    return ResolvedAssistant(
        assistant.assistant_id, assistant.graph_id, assistant.version, assistant.config, assistant.context
    )
