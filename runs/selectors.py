"""Reads of runs and run events, scoped to a thread the caller owns."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import Count, Max, Q, QuerySet, Sum
from django.utils import timezone
from langchain_core.messages import BaseMessage
from langchain_core.messages.utils import count_tokens_approximately

from checkpoints.accessor import state_accessor
from checkpoints.graphs import resolve_graph
from core.access import scope_of
from core.errors import DomainError
from core.payloads import fields_of
from runs.models import LOST_MESSAGE, ORPHAN_MESSAGE, Run, RunEvent, RunStatus
from threads.models import UNFINISHED_STATUSES, ThreadMeta

# Who made an LLM call, as the journal attributes it (``runs.execution.journal.caller_of``).
CALLERS = ("lead_agent", "subagent", "middleware")


def _iso(moment) -> str | None:
    return moment.isoformat() if moment else None


def run_record(run: Run) -> dict[str, Any]:
    """Return the SDK's ``Run`` object, plus outcome, timing and token usage.

    What ``GET /threads/{t}/runs/{r}`` answers and, at the end, what the run's webhook receives.
    """
    assistant_id = run.kwargs.get("assistant_id")  # the assistant clients named (Run.assistant_id: its graph)
    if not assistant_id:
        try:
            assistant_id = resolve_graph(run.assistant_id).assistant_id
        except LookupError:
            assistant_id = run.assistant_id
    return {
        "run_id": run.run_id,
        "thread_id": run.thread_id,
        "assistant_id": assistant_id,
        "graph_id": run.assistant_id,
        "created_at": run.created_at.isoformat(),
        "updated_at": run.updated_at.isoformat(),
        # A queued run waits behind another; clients know that state as pending.
        "status": RunStatus.PENDING if run.status == RunStatus.QUEUED else run.status,
        "metadata": run.metadata,
        "multitask_strategy": run.multitask_strategy,
        "kwargs": run.kwargs,
        "error": run.error or None,
        "stop_reason": run.stop_reason or None,
        "cancel_action": run.cancel_action or None,
        # A delayed start (after_seconds): no worker starts the run before this.
        "not_before": _iso(run.not_before),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
        "model_name": run.model_name or None,
        "total_input_tokens": run.total_input_tokens,
        "total_output_tokens": run.total_output_tokens,
        "total_tokens": run.total_tokens,
        "llm_call_count": run.llm_call_count,
        # DeerFlow's per-caller columns, read from the one JSON the journal keeps per caller.
        **{f"{caller}_tokens": int(run.token_usage_by_caller.get(caller, 0)) for caller in CALLERS},
        "message_count": run.message_count,
    }


def event_payload(event: RunEvent) -> dict[str, Any]:
    """Return DeerFlow's event row shape."""
    return {
        **fields_of(event, "thread_id", "run_id", "event_type", "category", "content", "metadata", "seq"),
        "created_at": event.created_at.isoformat(),
    }


def _window(
    queryset: QuerySet[RunEvent], *, limit: int, before_seq: int | None, after_seq: int | None
) -> tuple[list[RunEvent], bool]:
    """Return up to ``limit`` rows ascending: after a cursor (forward), before one, or the newest."""
    if after_seq is not None:
        rows = list(queryset.filter(seq__gt=after_seq).order_by("seq")[: limit + 1])
        return rows[:limit], len(rows) > limit
    if before_seq is not None:
        queryset = queryset.filter(seq__lt=before_seq)
    rows = list(queryset.order_by("-seq")[: limit + 1])
    return list(reversed(rows[:limit])), len(rows) > limit


def thread_messages(
    *, thread_id: str, limit: int, before_seq: int | None, after_seq: int | None
) -> tuple[list[RunEvent], bool]:
    """Return message events across the thread's runs, ascending by seq."""
    queryset = RunEvent.objects.filter(thread_id=thread_id, category="message")
    return _window(queryset, limit=limit, before_seq=before_seq, after_seq=after_seq)


def run_messages(*, run: Run, limit: int, before_seq: int | None, after_seq: int | None) -> tuple[list[RunEvent], bool]:
    queryset = RunEvent.objects.filter(thread_id=run.thread_id, run=run, category="message")
    return _window(queryset, limit=limit, before_seq=before_seq, after_seq=after_seq)


def run_events(*, run: Run, event_types: list[str] | None, limit: int, after_seq: int | None) -> list[RunEvent]:
    queryset = RunEvent.objects.filter(thread_id=run.thread_id, run=run).order_by("seq")
    if event_types:
        queryset = queryset.filter(event_type__in=event_types)
    if after_seq is not None:
        queryset = queryset.filter(seq__gt=after_seq)
    return list(queryset[:limit])


def thread_token_usage(*, thread_id: str, include_active: bool) -> dict[str, Any]:
    """Sum token usage over the thread's finished runs (and active ones when asked)."""
    statuses = [RunStatus.SUCCESS, RunStatus.ERROR, RunStatus.INTERRUPTED]
    if include_active:
        statuses.append(RunStatus.RUNNING)
    runs = Run.objects.filter(thread_id=thread_id, status__in=statuses)
    totals = runs.aggregate(
        input=Sum("total_input_tokens"), output=Sum("total_output_tokens"), total=Sum("total_tokens")
    )
    by_model: dict[str, dict[str, int]] = {}
    by_caller = dict.fromkeys(CALLERS, 0)
    count = 0
    for usage_by_model, usage_by_caller in runs.values_list("token_usage_by_model", "token_usage_by_caller"):
        count += 1
        for model, usage in (usage_by_model or {}).items():
            bucket = by_model.setdefault(model, {"tokens": 0, "runs": 0})
            bucket["tokens"] += int(usage.get("total_tokens", 0))
            bucket["runs"] += 1
        for caller, tokens in (usage_by_caller or {}).items():
            by_caller[caller] = by_caller.get(caller, 0) + int(tokens)
    return {
        "thread_id": thread_id,
        "total_tokens": totals["total"] or 0,
        "total_input_tokens": totals["input"] or 0,
        "total_output_tokens": totals["output"] or 0,
        "total_runs": count,
        "by_model": by_model,
        "by_caller": by_caller,
    }


def _context_window(thread_id: str) -> int | None:
    """Return the configured window of the model the thread's latest run used (else the default)."""
    config = settings.DEERFLOW_CONFIG.context
    model = (
        Run.objects.filter(thread_id=thread_id)
        .exclude(model_name="")
        .order_by("-created_at")
        .values_list("model_name", flat=True)
        .first()
    )
    return config.context_windows.get(model or "", config.default_context_window)


def thread_context_usage(*, thread: ThreadMeta) -> dict[str, Any] | None:
    """Estimate how full the thread's context is: LangChain's approximate count of the head's messages.

    Read through the accessor, so delta threads count their materialized
    messages. None when the state cannot be read here (the thread's mode or
    values): token usage still answers.
    """
    try:
        values = state_accessor(thread.assistant_id).get(thread.thread_id).values or {}
    except DomainError:
        return None
    messages = [m for m in values.get("messages") or [] if isinstance(m, BaseMessage)]
    token_count = count_tokens_approximately(messages)
    window = _context_window(thread.thread_id)
    return {
        "token_count": token_count,
        "max_context_tokens": window,
        "percentage": round(token_count / window * 100, 1) if window else None,
    }


def runs_to_cancel(*, owner, thread=None, run_ids: list[str] | None = None, status: str = "all") -> list[Run]:
    """Return the unfinished runs on the caller's threads (its scope's, with custom auth), narrowed to a thread,
    ids and ``pending`` | ``running`` | ``all``."""
    runs = Run.objects.filter(scope_of(owner).q(prefix="thread__"), status__in=UNFINISHED_STATUSES)
    if thread is not None:
        runs = runs.filter(thread=thread)
    if run_ids:
        runs = runs.filter(pk__in=run_ids)
    if status == "pending":
        runs = runs.filter(status__in=[RunStatus.QUEUED, RunStatus.PENDING])
    elif status == "running":
        runs = runs.filter(status=RunStatus.RUNNING)
    return list(runs)


# When this process loaded the runs app: "recovered since start" counts from here.
PROCESS_STARTED_AT = timezone.now()


def run_health(*, lease_seconds: int) -> dict[str, Any]:
    """Return queue depth, the workers holding leases, and orphan recoveries (three grouped queries).

    A worker is seen through the runs it holds: its last renewal is its
    lease's end minus ``lease_seconds`` (every process renews on the same
    configured lease).
    """
    now = timezone.now()
    depth = dict(Run.objects.filter(status__in=UNFINISHED_STATUSES).values_list("status").annotate(n=Count("pk")))
    workers = [
        {
            "worker_id": row["worker_id"],
            "running": row["running"],
            "lease_age_seconds": round((now - row["lease"]).total_seconds() + lease_seconds, 1)
            if row["lease"]
            else None,
        }
        for row in Run.objects.filter(status=RunStatus.RUNNING)
        .exclude(worker_id="")
        .values("worker_id")
        .annotate(running=Count("pk"), lease=Max("lease_expires_at"))
        .order_by("worker_id")
    ]
    orphaned = Run.objects.filter(error__in=[ORPHAN_MESSAGE, LOST_MESSAGE]).aggregate(
        total=Count("pk"), since_start=Count("pk", filter=Q(finished_at__gte=PROCESS_STARTED_AT))
    )
    return {
        "queue": {status: depth.get(status, 0) for status in (RunStatus.QUEUED, RunStatus.PENDING, RunStatus.RUNNING)},
        "workers": workers,
        "orphaned": orphaned,
        "process_started_at": PROCESS_STARTED_AT,
    }
