"""How the management command finds the app glue (threads registers it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.db import connection

from checkpoints.retention.apply import thread_checkpoints_prune
from checkpoints.retention.policy import RetentionReport


@dataclass(frozen=True)
class RetentionScope:
    """How the app owning thread records lists threads and prunes one with its references.

    checkpoints imports neither threads nor runs, so the owner registers this
    from its own ``retention`` module, found like ``admin`` modules are.
    """

    thread_ids: Callable[[], list[str]]
    prune: Callable[..., RetentionReport]


_scope: RetentionScope | None = None


def register_retention_scope(scope: RetentionScope) -> None:
    global _scope
    _scope = scope


def _checkpoint_thread_ids() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT thread_id FROM checkpoints ORDER BY thread_id")
        return [row[0] for row in cursor.fetchall()]


def retention_scope() -> RetentionScope:
    """Return the registered scope (autodiscovering ``<app>.retention``), else raw checkpoints."""
    from django.utils.module_loading import autodiscover_modules

    autodiscover_modules("retention")
    return _scope or RetentionScope(thread_ids=_checkpoint_thread_ids, prune=thread_checkpoints_prune)
