"""Projects: a user's folders of threads, and moving a thread into or out of one.

A thread's project is its ``project`` column, mirrored into
``metadata["deerflow_project_id"]`` (the key DeerFlow's frontend reads,
which clients cannot write). Filing a thread is not activity: a move leaves
``updated_at`` alone, so the thread keeps its place in recency-sorted lists.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from core.errors import Conflict, NotFound, ThreadNotFound
from threads.models import Project, ThreadMeta

PROJECT_METADATA_KEY = "deerflow_project_id"


def project_payload(project: Project) -> dict[str, Any]:
    return {
        "project_id": project.project_id,
        "name": project.name,
        "archived": project.archived_at is not None,
        "created_at": project.created_at.isoformat(),
        "updated_at": project.updated_at.isoformat(),
    }


def project_create(*, owner, name: str) -> Project:
    """Create a project of ``owner``'s."""
    project = Project(project_id=str(uuid.uuid4()), owner=owner, name=name)
    project.full_clean()
    project.save(force_insert=True)
    return project


def project_list(*, owner) -> QuerySet[Project]:
    """Return the owner's projects, most recently changed first."""
    return Project.objects.filter(owner=owner)


def project_get(*, owner, project_id: str) -> Project:
    """Return the owner's project, else 404 (another user's included)."""
    project = Project.objects.filter(pk=project_id, owner=owner).first()
    if project is None:
        raise NotFound(f"Project {project_id} not found")
    return project


def project_update(*, project: Project, name: str | None = None, archived: bool | None = None) -> Project:
    """Rename the project, archive it (it takes no new threads) or restore it."""
    if name is not None:
        project.name = name
    if archived is not None:
        project.archived_at = (project.archived_at or timezone.now()) if archived else None
    project.full_clean()
    project.save(update_fields=["name", "archived_at", "updated_at"])
    return project


def project_lock_assignable(*, owner, project_id: str) -> Project:
    """Lock and return the owner's project a thread may be filed in (call in a transaction).

    The row lock makes a concurrent archive either commit first (then this
    refuses) or wait for the filing: no thread is filed in an archived project.
    """
    project = Project.objects.select_for_update().filter(pk=project_id, owner=owner).first()
    if project is None:
        raise NotFound(f"Project {project_id} not found")
    if project.archived_at is not None:
        raise Conflict(f"Project {project_id} is archived; restore it before moving threads into it.")
    return project


def project_metadata(metadata: dict[str, Any], project_id: str | None) -> dict[str, Any]:
    """Return ``metadata`` with the project mirror set to ``project_id`` (dropped for none)."""
    mirrored = {k: v for k, v in metadata.items() if k != PROJECT_METADATA_KEY}
    if project_id is not None:
        mirrored[PROJECT_METADATA_KEY] = project_id
    return mirrored


def thread_move(*, thread: ThreadMeta, project_id: str | None) -> ThreadMeta:
    """File the thread in the owner's ``project_id``, or in none; ``updated_at`` is unchanged."""
    with transaction.atomic():
        locked = ThreadMeta.objects.select_for_update().filter(pk=thread.pk).first()
        if locked is None:
            raise ThreadNotFound(thread.thread_id)
        if project_id is not None:
            project_lock_assignable(owner=locked.owner, project_id=project_id)
        metadata = project_metadata(locked.metadata, project_id)
        # A queryset update: the model's auto_now would move updated_at.
        ThreadMeta.objects.filter(pk=locked.pk).update(project_id=project_id, metadata=metadata)
    locked.project_id, locked.metadata = project_id, metadata
    return locked
