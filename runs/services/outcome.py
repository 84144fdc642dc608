"""A finished run's final values: what ``/wait`` and ``/join`` answer."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async

from checkpoints.accessor import astate_accessor
from checkpoints.serialization import serialize, serialize_channel_values
from runs.models import Run, RunStatus
from runs.streaming.runtime import get_bridge
from runs.streaming.sse import outcome_body, run_outcome


async def arun_final_values(run: Run) -> dict[str, Any]:
    """Wait for ``run`` to end; return the outcome from the stream's end marker, else from the row and the head."""
    outcome = await run_outcome(get_bridge(), run)
    if outcome is not None:
        return outcome_body(outcome)
    await database_sync_to_async(run.refresh_from_db)()
    if run.status == RunStatus.ERROR:
        return outcome_body({"status": "error", "error": run.error, "error_name": "RunError"})
    accessor = await astate_accessor(run.assistant_id)
    snapshot = await accessor.aget(run.thread_id)
    values = serialize_channel_values(snapshot.values or {})
    if snapshot.interrupts:
        values["__interrupt__"] = serialize(list(snapshot.interrupts))
    return values
