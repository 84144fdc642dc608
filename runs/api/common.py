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
