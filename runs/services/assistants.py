"""Writes of assistants: create, update (a new version), set the version in force, delete.

System assistants (one per registered graph, no owner) are created here
from the registry and are read-only to users. What the LangGraph Platform
does with them: without an auth handler anyone may patch or delete them
(a deleted one comes back at the next start); with a per-user auth handler
they are nobody's, so an update or delete answers 404. Here every user is
authenticated and shares them, so writes answer 404 too, with a detail
that says why.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max, Q

from checkpoints.graphs import registered_graphs
from core.errors import Conflict, Invalid, NotFound
from runs.models import Assistant, AssistantVersion, Cron, Run
from runs.services.cancel import run_cancel, thread_delete_cancelling_runs
from threads.models import UNFINISHED_STATUSES, ThreadMeta

SYSTEM_CREATOR = "system"
# How often a delete looks again for the runs it cancelled to have ended.
_DELETE_POLL_SECONDS = 0.05
DEFAULT_NAME = "Untitled"
_VERSIONED_FIELDS = ("graph_id", "name", "description", "config", "context", "metadata")


def _unknown_graph(graph_id: str) -> NotFound:
    return NotFound(f"Graph '{graph_id}' not found. Expected one of: {sorted(registered_graphs())}")


def _snapshot(assistant: Assistant) -> AssistantVersion:
    return AssistantVersion(
        assistant=assistant,
        version=assistant.version,
        **{name: getattr(assistant, name) for name in _VERSIONED_FIELDS},
    )


def system_assistants_ensure() -> None:
    """Create the missing system assistants of the registered graphs (one query when none is missing).

    Rows of graphs no longer registered stay (their crons and history keep
    their target) but are hidden by the selectors.
    """
    specs = {spec.assistant_id: spec for spec in registered_graphs().values()}
    existing = set(Assistant.objects.filter(pk__in=specs).values_list("pk", flat=True))
    missing = [spec for assistant_id, spec in specs.items() if assistant_id not in existing]
    if not missing:
        return
    rows = [
        Assistant(
            assistant_id=spec.assistant_id,
            owner=None,
            graph_id=spec.graph_id,
            name=spec.graph_id,
            metadata={"created_by": SYSTEM_CREATOR},
        )
        for spec in missing
    ]
    with transaction.atomic():
        Assistant.objects.bulk_create(rows, ignore_conflicts=True)
        created = Assistant.objects.filter(pk__in=[r.pk for r in rows], owner__isnull=True)
        AssistantVersion.objects.bulk_create([_snapshot(a) for a in created], ignore_conflicts=True)


def _writable(assistant: Assistant) -> None:
    if assistant.is_system:
        raise NotFound(
            f"Assistant {assistant.assistant_id} is the system assistant of graph {assistant.graph_id!r}: "
            "it follows the server's configuration and cannot be changed or deleted; create an assistant "
            f"of graph {assistant.graph_id!r} to configure it"
        )


def _check_metadata(metadata: dict[str, Any]) -> None:
    if metadata.get("created_by") == SYSTEM_CREATOR:
        raise Invalid("metadata.created_by", "'system' is reserved for the server's own assistants")


def assistant_create(
    *,
    owner,
    graph_id: str,
    assistant_id: str | None = None,
    config: dict[str, Any] | None = None,
    context: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    if_exists: str = "raise",
    name: str | None = None,
    description: str = "",
) -> Assistant:
    """Create the owner's assistant of a registered graph, with its version 1.

    ``if_exists="do_nothing"`` returns the owner's existing assistant of that
    id unchanged. An id held by another user or by a system assistant is a
    conflict either way, and reveals nothing about that assistant.
    """
    if graph_id not in registered_graphs():
        raise _unknown_graph(graph_id)
    metadata = dict(metadata or {})
    _check_metadata(metadata)
    assistant_id = assistant_id or str(uuid.uuid4())
    assistant = Assistant(
        assistant_id=assistant_id,
        owner=owner,
        graph_id=graph_id,
        name=name or DEFAULT_NAME,
        description=description,
        config=config or {},
        context=context or {},
        metadata=metadata,
    )
    system_assistants_ensure()  # a system id is taken even before its first read
    try:
        with transaction.atomic():
            assistant.save(force_insert=True)
            _snapshot(assistant).save(force_insert=True)
    except IntegrityError:
        existing = Assistant.objects.filter(pk=assistant_id, owner=owner).first()
        if existing is not None and if_exists == "do_nothing":
            return existing
        raise Conflict(f"Assistant {assistant_id} already exists") from None
    return assistant


def assistant_update(
    *,
    assistant: Assistant,
    graph_id: str | None = None,
    config: dict[str, Any] | None = None,
    context: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    name: str | None = None,
    description: str | None = None,
) -> Assistant:
    """Save a new version (one past the highest) and put it in force.

    Fields not given keep their current value; ``metadata`` is merged into
    the current metadata (the Platform's rule); ``config`` and ``context``, when
    given, replace the current ones.
    """
    _writable(assistant)
    if graph_id is not None and graph_id not in registered_graphs():
        raise _unknown_graph(graph_id)
    if metadata:
        _check_metadata(metadata)
    with transaction.atomic():
        locked = Assistant.objects.select_for_update().get(pk=assistant.pk)
        highest = AssistantVersion.objects.filter(assistant=locked).aggregate(v=Max("version"))["v"] or 0
        changes = {"graph_id": graph_id, "config": config, "context": context, "name": name}
        for field, value in changes.items():
            if value is not None:
                setattr(locked, field, value)
        if description is not None:
            locked.description = description
        if metadata is not None:
            locked.metadata = {**locked.metadata, **metadata}
        locked.version = highest + 1
        locked.save()
        _snapshot(locked).save(force_insert=True)
    return locked


def assistant_set_latest(*, assistant: Assistant, version: int) -> Assistant:
    """Put a saved version in force again (every versioned field comes back)."""
    _writable(assistant)
    with transaction.atomic():
        locked = Assistant.objects.select_for_update().get(pk=assistant.pk)
        saved = AssistantVersion.objects.filter(assistant=locked, version=version).first()
        if saved is None:
            raise NotFound(f"Version {version} not found for assistant {assistant.assistant_id}")
        for field in _VERSIONED_FIELDS:
            setattr(locked, field, getattr(saved, field))
        locked.version = version
        locked.save()
    return locked


def assistant_threads(*, assistant: Assistant) -> list[str]:
    """Return the owner's threads that ran the assistant (or name it in their metadata)."""
    owner_threads = ThreadMeta.objects.filter(owner_id=assistant.owner_id)
    by_run = owner_threads.filter(runs__kwargs__assistant_id=assistant.assistant_id)
    by_metadata = owner_threads.filter(metadata__assistant_id=assistant.assistant_id)
    return sorted(set(by_run.values_list("pk", flat=True)) | set(by_metadata.values_list("pk", flat=True)))


def assistant_delete(*, assistant: Assistant, delete_threads: bool = False) -> None:
    """Delete an assistant with its versions and crons; ``delete_threads`` also deletes its threads.

    As the Platform does: the assistant's unfinished runs are cancelled
    (``interrupt``) and, with ``delete_threads``, its threads are deleted the
    way a thread ``DELETE`` is (their runs cancelled, then everything erased).
    The assistant row goes last, and only once none of its runs is
    unfinished (``_delete_when_idle``): a run admitted meanwhile, on any
    process, is cancelled and waited for too. If a run does not stop within
    ``runs.delete_cancel_wait_seconds`` (409), the threads already deleted
    stay deleted, the rest and the assistant stay, and repeating the delete
    finishes it.
    """

    _writable(assistant)
    threads = assistant_threads(assistant=assistant) if delete_threads else []
    for run in _unfinished_runs(assistant, threads):  # all at once, so they stop together
        run_cancel(run=run, action="interrupt")
    for thread in ThreadMeta.objects.filter(pk__in=threads):
        thread_delete_cancelling_runs(thread=thread)
    _delete_when_idle(assistant)


def _unfinished_runs(assistant: Assistant, threads=()) -> list[Run]:
    return list(
        Run.objects.filter(status__in=UNFINISHED_STATUSES).filter(
            Q(owner_id=assistant.owner_id, kwargs__assistant_id=assistant.assistant_id) | Q(thread_id__in=threads)
        )
    )


def _delete_when_idle(assistant: Assistant) -> None:
    """Delete the assistant's row under its lock when none of its runs is unfinished; else cancel them and wait.

    Admission holds the row ``FOR SHARE`` until it commits
    (``runs.services.admission``), so the ``FOR UPDATE`` here waits for the
    admissions in flight and the check then sees their runs; an admission
    after the delete finds no assistant (404). Without this the delete
    answered 204 while 3 to 6 of 8 runs admitted at that moment on two
    processes ran on to ``success``. Crons go first: a cron firing locks its
    row before it admits (lock order: cron, thread, assistant).
    """

    deadline = time.monotonic() + settings.DEERFLOW_CONFIG.runs.delete_cancel_wait_seconds
    cancelled: set[str] = set()
    while True:
        with transaction.atomic():
            Cron.objects.filter(assistant=assistant).delete()
            if not Assistant.objects.select_for_update().filter(pk=assistant.pk).exists():
                return  # a concurrent delete finished it
            unfinished = _unfinished_runs(assistant)
            if not unfinished:
                Assistant.objects.filter(pk=assistant.pk).delete()
                return
            transaction.set_rollback(True)  # the crons stay with the assistant
        for run in unfinished:
            if run.run_id not in cancelled:  # admitted after the caller's cancels
                run_cancel(run=run, action="interrupt")
                cancelled.add(run.run_id)
        if time.monotonic() >= deadline:
            raise Conflict(
                f"Assistant {assistant.assistant_id} has a run that did not stop after being cancelled; "
                "the assistant was not deleted, try again."
            )
        time.sleep(_DELETE_POLL_SECONDS)
