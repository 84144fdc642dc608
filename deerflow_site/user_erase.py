"""Erase a user: everything they own, through the domain services, after a preview that counts it.

A support request anyone running agents for people gets ("delete my data").
What a user owns: their threads (with every run on them, whoever started it,
their events and their checkpoints), the runs they started on other people's
threads (custom auth lets colleagues share threads; the thread stays, the
run and its events go), their assistants, crons and projects, their Store
items (every namespace under their root), their API keys, then the account.

The erase refuses, having written nothing, while one of those runs is
unfinished, unless asked to cancel them first (as a thread delete does:
``interrupt``, then wait ``runs.delete_cancel_wait_seconds``). A staff
account is not erased here (its audit trail would go with it), nor the
caller's own. Each step is a service that is safe to repeat, so an erase
stopped half-way (a run that would not stop: 409) finishes when repeated.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q, QuerySet

from checkpoints.thread_stats import thread_stats_many
from core.errors import Conflict
from runs.models import Assistant, Cron, Run, RunEvent
from runs.services.admission import run_delete
from runs.services.assistants import assistant_delete
from runs.services.cancel import runs_cancel_and_wait, thread_delete_cancelling_runs
from runs.services.crons import cron_delete
from store.selectors import store_user_id, store_user_items_count
from store.services import store_user_items_delete
from threads.models import UNFINISHED_STATUSES, Project, ThreadMeta

# Thread ids per statistics query (SQLite's bound-parameter limit is far above).
STATS_CHUNK = 500


@dataclass(frozen=True)
class UserHoldings:
    """What erasing a user deletes, counted."""

    threads: int
    runs: int
    unfinished_runs: int
    events: int
    checkpoints: int
    checkpoint_bytes: int
    store_items: int
    api_keys: int
    assistants: int
    crons: int
    projects: int

    def summary(self) -> str:
        parts = (
            (self.threads, "thread"),
            (self.runs, "run"),
            (self.events, "event"),
            (self.checkpoints, "checkpoint"),
            (self.store_items, "Store item"),
            (self.api_keys, "API key"),
            (self.assistants, "assistant"),
            (self.crons, "cron"),
            (self.projects, "project"),
        )
        return ", ".join(f"{count} {noun}{'' if count == 1 else 's'}" for count, noun in parts)


def _runs(user) -> QuerySet[Run]:
    """Every run erasing ``user`` deletes: those on their threads and those they started elsewhere."""
    return Run.objects.filter(Q(thread__owner=user) | Q(owner=user))


def user_holdings(*, user) -> UserHoldings:
    """Count what ``user`` owns (the erase preview): a few grouped queries, checkpoints by thread in chunks."""
    thread_ids = list(ThreadMeta.objects.filter(owner=user).values_list("thread_id", flat=True))
    checkpoints = stored = 0
    for start in range(0, len(thread_ids), STATS_CHUNK):
        for stats in (thread_stats_many(thread_ids=thread_ids[start : start + STATS_CHUNK]) or {}).values():
            checkpoints += stats.checkpoint_count
            stored += stats.stored_bytes
    runs = _runs(user)
    return UserHoldings(
        threads=len(thread_ids),
        runs=runs.count(),
        unfinished_runs=runs.filter(status__in=UNFINISHED_STATUSES).count(),
        events=RunEvent.objects.filter(run__in=runs).count(),
        checkpoints=checkpoints,
        checkpoint_bytes=stored,
        store_items=store_user_items_count(user_id=store_user_id(user=user)),
        api_keys=user.api_keys.count(),
        assistants=Assistant.objects.filter(owner=user).count(),
        crons=Cron.objects.filter(owner=user).count(),
        projects=Project.objects.filter(owner=user).count(),
    )


def user_erase_check(*, user, by: AbstractBaseUser | None, cancel_runs: bool) -> UserHoldings:
    """Refuse (409) what may not be erased; return what would be."""
    if by is not None and user.pk == by.pk:
        raise Conflict("You cannot erase your own account.")
    if user.is_staff or user.is_superuser:
        raise Conflict(
            f"{user.username} is a staff account: its actions are the console's audit trail. "
            "Remove its staff status first if it must be erased."
        )
    holdings = user_holdings(user=user)
    if holdings.unfinished_runs and not cancel_runs:
        raise Conflict(
            f"{user.username} has {holdings.unfinished_runs} unfinished run(s); "
            "cancel them first, or erase with their runs cancelled."
        )
    return holdings


def user_erase(*, user, by: AbstractBaseUser | None = None, cancel_runs: bool = False) -> UserHoldings:
    """Erase ``user`` and everything they own; return what was there (``user_holdings`` before the erase).

    Crons go first (none fires meanwhile), then the runs are cancelled all
    at once and waited for (they stop together), then the threads, the runs
    elsewhere, the assistants, the Store items and the account (its keys and
    projects go with it).
    """
    holdings = user_erase_check(user=user, by=by, cancel_runs=cancel_runs)
    for cron in Cron.objects.filter(owner=user):
        cron_delete(cron=cron)
    runs_cancel_and_wait(
        lambda: _runs(user),
        by=by,
        refusal=f"A run of {user.username} did not stop after being cancelled; the erase stopped, try again.",
    )
    for thread in ThreadMeta.objects.filter(owner=user):
        thread_delete_cancelling_runs(thread=thread, by=by)  # a run admitted since is cancelled too
    for run in Run.objects.filter(owner=user):
        run_delete(run=run)
    for assistant in Assistant.objects.filter(owner=user):
        assistant_delete(assistant=assistant)
    store_user_items_delete(user_id=store_user_id(user=user))
    user.delete()  # API keys and projects cascade; nothing the user owns is left to protect
    return holdings
