"""Shared pieces of the run routes: the Run object, headers, thread lookup."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async

from checkpoints.graphs import resolve_graph
from deerflow_site.errors import NotFound
from runs.models import Run, RunStatus
from threads.api_common import owned_thread
from threads.models import ThreadMeta


def run_location(run: Run) -> str:
    """Return ``/api/threads/{t}/runs/{r}``: the SDKs parse ids from it (no suffix)."""
    return f"/api/threads/{run.thread_id}/runs/{run.run_id}"


def with_run_headers(response, run: Run, *, request=None, location_suffix: str | None = None):
    """Set ``Content-Location`` (ids for the SDKs) and ``Location`` (where to reconnect).

    ``Location`` is absolute: the Python SDK resolves it against its base URL,
    which already ends in ``/api``, so a path would double the prefix.
    """
    response["Content-Location"] = run_location(run)
    if location_suffix is not None:
        path = run_location(run) + location_suffix
        response["Location"] = request.build_absolute_uri(path) if request is not None else path
    return response


def run_payload(run: Run) -> dict[str, Any]:
    """Return the SDK's ``Run`` object, plus outcome and token usage."""
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
        "model_name": run.model_name or None,
        "total_input_tokens": run.total_input_tokens,
        "total_output_tokens": run.total_output_tokens,
        "total_tokens": run.total_tokens,
        "llm_call_count": run.llm_call_count,
        "message_count": run.message_count,
    }


def owned_run_sync(request, thread_id: str, run_id: str) -> tuple[ThreadMeta, Run]:
    thread = owned_thread(request, thread_id)
    run = Run.objects.filter(pk=run_id, thread=thread).first()
    if run is None:
        raise NotFound(f"Run {run_id} not found")
    return thread, run


aowned_thread = database_sync_to_async(owned_thread)
aowned_run = database_sync_to_async(owned_run_sync)
