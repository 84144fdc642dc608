"""Crons: scheduled runs, claimed by the run workers through the database.

A cron is due when it is enabled, its ``next_run_date`` has passed and its
``end_time`` (if any) has not. Any worker may fire it: the firing is one
transaction that moves ``next_run_date`` on with a conditional UPDATE (it
matches only the value the worker read, so of two workers that saw the same
due cron exactly one updates a row) and admits the run through
``run_admit``, the run routes' admission. The run is therefore committed
together with the claim: a process that dies before the commit fired
nothing, and the cron is still due for the next worker; one that dies after
it leaves a pending run that any worker claims.

Catch-up rule: a cron overdue after downtime (no worker ran when a slot
passed) fires **once** at the next pass, and its next run is the first slot
after *now*; slots missed in between are not replayed. Disabling skips slots
the same way: re-enabling a cron schedules it from the moment it is enabled.

Each firing is an ordinary run of the cron's assistant (its config and
context under the cron's own), with ``multitask_strategy`` ``enqueue``
unless the cron says otherwise. A thread cron runs on its thread; a
stateless cron gets a new thread per firing, deleted after the run unless
``on_run_completed`` is ``keep``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from langchain_core.utils.uuid import uuid7

from core.custom_encryption import context_to_store, fixed_scope
from core.errors import DomainError, Invalid, NotFound
from runs.assistant_selectors import assistant_resolve
from runs.models import Cron, Run
from runs.services.admission import run_admit
from runs.services.assistants import system_assistants_ensure
from runs.services.run_request import RunRequest
from runs.services.start import assistant_kwargs
from runs.services.webhooks import webhook_url_check
from threads.models import ThreadMeta
from threads.selectors import lock_thread
from threads.services import thread_create

logger = logging.getLogger(__name__)

# What a firing runs with when the cron names no strategy (the Platform's default for crons).
DEFAULT_CRON_STRATEGY = "enqueue"
# The cron-only keys; everything else in a create or patch body is the run request.
CRON_FIELDS = ("schedule", "timezone", "end_time", "enabled", "on_run_completed")


def validate_timezone(name: str | None) -> str:
    """Return an IANA zone name ("" for UTC), or raise ``Invalid("timezone")``."""
    if not name:
        return ""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, KeyError):
        raise Invalid("timezone", f"Invalid timezone: {name!r}. Use an IANA name such as 'America/New_York'.") from None
    return name


def next_run_after(schedule: str, zone: str, after: datetime) -> datetime:
    """Return the first slot of ``schedule`` (read in ``zone``, UTC if empty) strictly after ``after``, in UTC."""
    base = after.astimezone(ZoneInfo(zone) if zone else UTC)
    return croniter(schedule, base).get_next(datetime).astimezone(UTC)


def validate_schedule(schedule: str, zone: str = "") -> str:
    """Return a cron expression that fires, or raise ``Invalid("schedule")``."""
    if not croniter.is_valid(schedule):
        raise Invalid(
            "schedule",
            f"Invalid cron schedule: {schedule!r}. Use the standard five fields "
            "(minute hour day_of_month month day_of_week), e.g. '*/5 * * * *'.",
        )
    try:
        next_run_after(schedule, zone, timezone.now())
    except CroniterBadDateError:
        raise Invalid("schedule", f"Cron schedule {schedule!r} never fires") from None
    return schedule


def cron_create(
    *,
    owner,
    thread: ThreadMeta | None,
    payload: dict[str, Any],
    schedule: str,
    zone: str = "",
    end_time: datetime | None = None,
    enabled: bool = True,
    on_run_completed: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Cron:
    """Create a cron of the owner's (or a system) assistant, on ``thread`` or stateless.

    ``payload`` is a validated run request (the run routes' serializer); its
    ``assistant_id`` is resolved now, so a missing assistant is 404 at once.
    """
    zone = validate_timezone(zone)
    validate_schedule(schedule, zone)
    if payload.get("webhook"):
        webhook_url_check(payload["webhook"])
    system_assistants_ensure()
    assistant = assistant_resolve(owner=owner, assistant_id=payload["assistant_id"])
    now = timezone.now()
    cron = Cron(
        cron_id=str(uuid7()),
        owner=owner,
        assistant_id=assistant.assistant_id,
        thread=thread,
        schedule=schedule,
        timezone=zone,
        end_time=end_time,
        enabled=enabled,
        on_run_completed="" if thread is not None else (on_run_completed or "delete"),
        payload={**payload, "assistant_id": assistant.assistant_id},
        metadata=metadata or {},
        next_run_date=next_run_after(schedule, zone, now),
        encryption_context=context_to_store(),
    )
    cron.save(force_insert=True)
    return cron


def cron_update(*, cron: Cron, changes: dict[str, Any], payload: dict[str, Any] | None = None) -> Cron:
    """Apply a patch: cron fields in ``changes``, a merged run request in ``payload``.

    A new schedule or timezone, and re-enabling, schedule the next run from now.
    ``end_time: None`` clears the end; ``metadata`` is merged.
    """
    if payload is not None and payload.get("webhook"):
        webhook_url_check(payload["webhook"])  # resolves the host: before the row lock
    with transaction.atomic():
        locked = Cron.objects.select_for_update().get(pk=cron.pk)
        zone = validate_timezone(changes["timezone"]) if "timezone" in changes else locked.timezone
        schedule = validate_schedule(changes["schedule"], zone) if "schedule" in changes else locked.schedule
        reschedule = schedule != locked.schedule or zone != locked.timezone
        if changes.get("enabled") is True and not locked.enabled:
            reschedule = True
        locked.schedule, locked.timezone = schedule, zone
        if "end_time" in changes:
            locked.end_time = changes["end_time"]
        if changes.get("enabled") is not None:
            locked.enabled = changes["enabled"]
        if changes.get("on_run_completed") is not None:
            if locked.thread_id is not None:
                raise Invalid("on_run_completed", "only stateless crons (POST /runs/crons) create threads to delete")
            locked.on_run_completed = changes["on_run_completed"]
        if changes.get("metadata") is not None:
            locked.metadata = {**locked.metadata, **changes["metadata"]}
        if payload is not None:
            locked.payload = {**payload, "assistant_id": locked.payload["assistant_id"]}
        if reschedule:
            locked.next_run_date = next_run_after(schedule, zone, timezone.now())
        locked.save()
    return locked


def cron_delete(*, cron: Cron) -> None:
    if not Cron.objects.filter(pk=cron.pk).delete()[0]:
        raise NotFound(f"Cron {cron.cron_id} not found")


@dataclass
class Firing:
    """One due cron this worker fired: the admitted run (None if admission refused it)."""

    cron_id: str
    run: Run | None = None
    superseded: list[Run] = field(default_factory=list)
    error: str | None = None


def crons_due(*, now: datetime, limit: int) -> list[Mapping[str, Any]]:
    """Return up to ``limit`` due crons, most overdue first (a plain read: the claim decides)."""
    return list(
        Cron.objects.filter(enabled=True, next_run_date__lte=now)
        .filter(Q(end_time__isnull=True) | Q(end_time__gte=now))
        .order_by("next_run_date", "cron_id")
        .values("cron_id", "thread_id", "next_run_date", "schedule", "timezone")[:limit]
    )


def crons_fire_due(*, now: datetime | None = None, limit: int = 50) -> list[Firing]:
    """Fire every due cron this process wins; return the firings to announce and dispatch."""
    now = now or timezone.now()
    fired = []
    for due in crons_due(now=now, limit=limit):
        firing = cron_fire(due=due, now=now)
        if firing is not None:
            fired.append(firing)
    return fired


def cron_fire(*, due: Mapping[str, Any], now: datetime) -> Firing | None:
    """Claim one due cron (as read by ``crons_due``) and admit its run, in one transaction.

    None when another process claimed it first (or its thread is gone). A
    run admission refuses (e.g. ``reject`` on a busy thread) still consumes
    the slot: the refusal is logged and returned.
    """
    with transaction.atomic():
        # Lock order: the thread row first, as admission and thread deletion take it.
        if due["thread_id"] is not None and lock_thread(due["thread_id"]) is None:
            return None
        following = next_run_after(due["schedule"], due["timezone"], now)
        claimed = Cron.objects.filter(pk=due["cron_id"], enabled=True, next_run_date=due["next_run_date"]).update(
            next_run_date=following, last_run_date=now, updated_at=now
        )
        if not claimed:
            return None
        cron = Cron.objects.select_related("owner", "thread").get(pk=due["cron_id"])
        try:
            with transaction.atomic(), fixed_scope(cron.encryption_context):
                run, superseded = _admit(cron, slot=due["next_run_date"])
        except DomainError as exc:
            logger.warning("cron %s: its run was not admitted: %s", cron.cron_id, exc)
            return Firing(cron.cron_id, error=str(exc))
    logger.info("cron %s fired run %s (next %s)", cron.cron_id, run.run_id, following.isoformat())
    return Firing(cron.cron_id, run=run, superseded=superseded)


def _admit(cron: Cron, *, slot: datetime) -> tuple[Run, list[Run]]:
    """Admit one firing's run: the stored request, the assistant's settings under it.

    The run keeps the slot it was claimed for (``kwargs.cron_slot``, the
    ``next_run_date`` the claim matched): its creation time alone cannot tell
    a late firing from a second firing of one slot, an audit can with it.
    """
    assistant = assistant_resolve(owner=cron.owner, assistant_id=cron.payload["assistant_id"])
    request = RunRequest.from_body(cron.payload).with_assistant(assistant)
    configurable = {**(request.config.get("configurable") or {}), "cron_id": cron.cron_id}
    request = request.replace(config={**request.config, "configurable": configurable})
    thread = cron.thread
    if thread is None:
        request = request.replace(on_completion=cron.on_run_completed or "delete")
        metadata = {"graph_id": assistant.graph_id, "stateless": True, "cron_id": cron.cron_id}
        thread, _ = thread_create(owner=cron.owner, metadata=metadata)
    return run_admit(
        owner=cron.owner,
        thread=thread,
        assistant_id=assistant.graph_id,
        strategy=request.multitask_strategy or DEFAULT_CRON_STRATEGY,
        metadata=dict(cron.metadata),
        kwargs={
            **request.run_kwargs(None),
            **assistant_kwargs(assistant),
            "cron_id": cron.cron_id,
            "cron_slot": slot.isoformat(),
        },
        **request.admission_options(),
    )
