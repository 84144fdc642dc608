"""The console's Health page: is anything stuck? Queue depth, workers holding leases, runs running or waiting long.

Every figure links to the runs behind it (the runs list filtered, or the run
page with its live view and cancel), so "a run is stuck" is found here and
handled in two clicks. A fixed number of queries, whatever the row counts.
"""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from console.runs import runs_health_context
from core.admin_site import ConsolePage, console_render
from runs.models import Run
from threads.models import RunStatus

LONG_MINUTES = 5
LISTED = 50


def _minutes(raw: str | None) -> int:
    try:
        return max(1, int(raw)) if raw else LONG_MINUTES
    except ValueError:
        return LONG_MINUTES


def long_runs(*, minutes: int) -> list[Run]:
    """Return the oldest runs running, or waiting to start while due, for longer than ``minutes`` (one query)."""
    now = timezone.now()
    cutoff = now - timedelta(minutes=minutes)
    running = Q(status=RunStatus.RUNNING, started_at__lte=cutoff)
    waiting = Q(status__in=(RunStatus.PENDING, RunStatus.QUEUED), created_at__lte=cutoff) & (
        Q(not_before__isnull=True) | Q(not_before__lte=cutoff)
    )
    runs = Run.objects.filter(running | waiting).select_related("thread", "owner").order_by("created_at")
    return list(runs[:LISTED])


def _age(delta: timedelta) -> str:
    minutes, seconds = divmod(int(delta.total_seconds()), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min {seconds} s"


def health_view(request):
    """Show queue depth, workers and long runs, each linked to the runs it counts."""
    minutes = _minutes(request.GET.get("minutes"))
    changelist = reverse("admin:runs_run_changelist")
    now = timezone.now()
    context = {
        "title": "Health",
        "panel": runs_health_context(request),
        "minutes": minutes,
        "long_runs": [(run, _age(now - (run.started_at or run.created_at))) for run in long_runs(minutes=minutes)],
        "listed": LISTED,
        "runs_url": changelist,
    }
    return console_render(request, "admin/runs/health.html", context)


PAGE = ConsolePage(
    app_label="runs",
    app_name="Runs",
    route="runs/health/",
    url_name="runs_health",
    title="Health",
    view=health_view,
    permission="runs.view_run",
)
