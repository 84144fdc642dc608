"""``GET /metrics``: the queue and this process's worker in Prometheus' text format (or JSON).

The names are the LangGraph Platform's where it has one (``lg_api_num_pending_runs``,
``lg_api_num_running_runs``, ``lg_api_pending_runs_wait_time_max``,
``lg_api_workers_max``/``_active``/``_available``), so its dashboards and
alerts read ours; the rest is ours (``deerflow_``): runs waiting behind
another on their thread, runs of workers whose process died, threads.

Authenticated like every API route (an API key, a staff session, or custom
auth's identity): queue depth and worker counts describe the deployment's
load, which is nobody's business outside it. Prometheus sends the key as a
header (``authorization: Bearer <key>`` or ``x-api-key``). Every figure is
one grouped query or a read of this process's worker, so a scrape costs a
few milliseconds however many runs there are.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import Min
from django.utils import timezone
from rest_framework.renderers import BaseRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from core.renderers import FastJSONRenderer
from runs.execution.runtime import current_worker
from runs.models import Run
from runs.selectors import run_health
from threads.models import RunStatus, ThreadMeta


class PrometheusRenderer(BaseRenderer):
    """Prometheus' text exposition format (0.0.4): the view hands it the text."""

    media_type = "text/plain"
    format = "prometheus"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        return data.encode() if isinstance(data, str) else b""


def metrics_collect() -> list[tuple[str, str, float]]:
    """Return ``(name, help, value)`` for every gauge, queue first."""
    health = run_health(lease_seconds=settings.DEERFLOW_CONFIG.runs.lease_seconds)
    queue = health["queue"]
    now = timezone.now()
    oldest = Run.objects.filter(status=RunStatus.PENDING, not_before__lte=now).aggregate(at=Min("created_at"))["at"]
    oldest_unscheduled = Run.objects.filter(status=RunStatus.PENDING, not_before__isnull=True).aggregate(
        at=Min("created_at")
    )["at"]
    waiting_since = min((at for at in (oldest, oldest_unscheduled) if at is not None), default=None)
    worker = current_worker()
    capacity = worker.capacity if worker is not None and worker.claim else 0
    active = len(worker.tasks) if worker is not None else 0
    return [
        ("lg_api_num_pending_runs", "The number of runs waiting for a worker.", queue[RunStatus.PENDING]),
        ("lg_api_num_running_runs", "The number of runs running, on every worker.", queue[RunStatus.RUNNING]),
        (
            "lg_api_pending_runs_wait_time_max",
            "How long the oldest run due to start has waited for a worker, in seconds.",
            round((now - waiting_since).total_seconds(), 3) if waiting_since else 0,
        ),
        ("lg_api_workers_max", "Runs this process's worker executes at once.", capacity),
        ("lg_api_workers_active", "Runs this process's worker executes now.", active),
        ("lg_api_workers_available", "Runs this process's worker could start now.", max(capacity - active, 0)),
        (
            "deerflow_num_queued_runs",
            "Runs waiting behind another run of their thread (multitask_strategy enqueue).",
            queue[RunStatus.QUEUED],
        ),
        ("deerflow_num_leased_workers", "Worker processes holding a running run's lease.", len(health["workers"])),
        (
            "deerflow_orphaned_runs_since_start",
            "Runs ended because their worker died, since this process started.",
            health["orphaned"]["since_start"],
        ),
        ("deerflow_num_threads", "Threads stored.", ThreadMeta.objects.count()),
    ]


def metrics_prometheus(gauges: list[tuple[str, str, float]]) -> str:
    lines: list[str] = []
    for name, text, value in gauges:
        lines += [f"# HELP {name} {text}", f"# TYPE {name} gauge", f"{name} {value}"]
    return "\n".join(lines) + "\n"


class MetricsView(APIView):
    """GET /metrics: Prometheus text by default, ``?format=json`` (or ``Accept: application/json``) for JSON."""

    renderer_classes = [PrometheusRenderer, FastJSONRenderer]

    def get(self, request) -> Any:
        gauges = metrics_collect()
        if request.accepted_renderer.format == "json":
            return Response({name: value for name, _, value in gauges})
        # The format's version goes on the answer, not the renderer (an Accept of */* would not match it there).
        return Response(metrics_prometheus(gauges), content_type="text/plain; version=0.0.4; charset=utf-8")
