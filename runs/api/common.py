"""Shared pieces of the run routes: headers and run lookup (the Run object is ``runs.selectors.run_record``)."""

from __future__ import annotations

from channels.db import database_sync_to_async

from deerflow_site.errors import NotFound
from runs.models import Run
from threads.api_common import owned_thread
from threads.models import ThreadMeta


def run_location(run: Run) -> str:
    """Return ``/api/threads/{t}/runs/{r}``: the SDKs parse ids from it (no suffix)."""
    return f"/api/threads/{run.thread_id}/runs/{run.run_id}"


def with_run_headers(response, run: Run, *, location_suffix: str | None = None):
    """Set ``Content-Location`` (ids for the SDKs) and ``Location`` (where to reconnect).

    ``Location`` is relative to the API root (``/threads/{t}/runs/{r}/stream``),
    as the LangGraph Platform sends it: both SDKs append it to their base URL,
    which already ends in ``/api``, and it never carries the request's Host
    (behind a proxy that rewrites Host, an absolute URL built from it is
    refused by the Python SDK as cross-origin and mangled by the JS SDK).
    """
    response["Content-Location"] = run_location(run)
    if location_suffix is not None:
        response["Location"] = f"/threads/{run.thread_id}/runs/{run.run_id}{location_suffix}"
    return response


def owned_run_sync(request, thread_id: str, run_id: str) -> tuple[ThreadMeta, Run]:
    thread = owned_thread(request, thread_id)
    run = Run.objects.filter(pk=run_id, thread=thread).first()
    if run is None:
        raise NotFound(f"Run {run_id} not found")
    return thread, run


aowned_thread = database_sync_to_async(owned_thread)
aowned_run = database_sync_to_async(owned_run_sync)
