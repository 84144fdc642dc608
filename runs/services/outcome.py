"""A finished run's outcome: its final values (what ``/wait`` and ``/join`` answer) and, for a failure, its details."""

from __future__ import annotations

import os
import re
import traceback
from collections.abc import Mapping
from typing import Any

from channels.db import database_sync_to_async

from checkpoints.accessor import astate_accessor
from checkpoints.serialization import serialize, serialize_channel_values
from core.bridge_runtime import get_bridge
from runs.models import Run, RunStatus
from runs.streaming.sse import outcome_body, run_outcome

# A stateless run's row goes with its thread once it ended (on_completion: delete).
RUN_GONE = (
    "The run ended and its thread was deleted (on_completion: delete) before its outcome could be read from the stream"
)


async def arun_final_values(run: Run) -> dict[str, Any]:
    """Wait for ``run`` to end; return the outcome from the stream's end marker, else from the row and the head."""
    return (await arun_final_outcome(run))[1]


async def arun_final_outcome(run: Run) -> tuple[str | None, dict[str, Any]]:
    """Wait for ``run`` to end; return its final status and what ``/wait`` answers.

    Both come from the stream's end marker; without one (the bridge lost it)
    from the row and the head, read once the row is final. The row is never
    read after the marker: a stateless run's row is deleted with its thread
    right after it ended.
    """
    outcome = await run_outcome(get_bridge(), run)
    if outcome is not None:
        return outcome.get("status"), outcome_body(outcome)
    try:
        await database_sync_to_async(run.refresh_from_db)()
    except Run.DoesNotExist:
        return None, outcome_body({"status": "error", "error": RUN_GONE, "error_name": "RunGone"})
    if run.status == RunStatus.ERROR:
        return run.status, outcome_body({"status": "error", "error": run.error, "error_name": "RunError"})
    accessor = await astate_accessor(run.assistant_id)
    snapshot = await accessor.aget(run.thread_id)
    values = serialize_channel_values(snapshot.values or {})
    if snapshot.interrupts:
        values["__interrupt__"] = serialize(list(snapshot.interrupts))
    return run.status, values


REDACTED = "[redacted]"
MESSAGE_CHARS = 2000
TRACEBACK_FRAMES = 8
TRACEBACK_CHARS = 4000
# LangGraph notes the task a node's exception escaped from (pregel/_retry.py).
_TASK_NOTE = re.compile(r"^During task with name '(?P<node>[^']*)'")
# What a secret looks like in a message or a source line: a credential in a
# URL, a secret-named parameter or key, a bearer token, a provider key.
_SECRETS = (
    (re.compile(r"(\w+://[^/\s:@]+:)[^@\s/]+@"), rf"\g<1>{REDACTED}@"),
    (
        re.compile(
            r"""(?i)(\b[\w-]*(?:api[_-]?key|token|secret|password|passwd|authorization|signature)[\w-]*"""
            r"""["']?\s*[:=]\s*["']?)(?:bearer\s+)?[^\s"'&,;})]+"""
        ),
        rf"\g<1>{REDACTED}",
    ),
    (re.compile(r"(?i)\b(bearer\s+)[\w.~+/=-]+"), rf"\g<1>{REDACTED}"),
    (
        re.compile(r"\b(?:sk|pk|rk)-[\w-]{16,}|\bgh[pousr]_\w{20,}|\bxox[abpr]-[\w-]{10,}|\bAKIA[0-9A-Z]{16}\b"),
        REDACTED,
    ),
)
# Environment variables whose values are secrets wherever they show up.
_SECRET_NAME = re.compile(r"(?i)key|token|secret|password|passwd|credential|dsn|database_url|redis_url")


def scrubbed(text: str) -> str:
    """Return ``text`` with secrets replaced: this process's secret settings, then anything shaped like one."""
    for name, value in os.environ.items():
        if len(value) >= 8 and _SECRET_NAME.search(name) and value in text:
            text = text.replace(value, REDACTED)
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


def _failed_node(error: BaseException) -> str | None:
    """Return the innermost graph node ``error`` escaped from (LangGraph notes each task it passes through)."""
    for note in getattr(error, "__notes__", ()):
        if match := _TASK_NOTE.match(note):
            return match["node"]
    return None


def _traceback_excerpt(error: BaseException) -> str:
    """Return the last frames of ``error``'s traceback and its final line, cut from the start to a bounded size."""
    frames = traceback.extract_tb(error.__traceback__)[-TRACEBACK_FRAMES:]
    lines = [*traceback.format_list(frames), *traceback.format_exception_only(error)]
    excerpt = "".join(lines)
    return excerpt if len(excerpt) <= TRACEBACK_CHARS else "…" + excerpt[-(TRACEBACK_CHARS - 1) :]


def _checkpoint_id(chunk: Mapping[str, Any] | None) -> str | None:
    configurable = ((chunk or {}).get("config") or {}).get("configurable") or {}
    return configurable.get("checkpoint_id")


def failure_details(error: BaseException, *, last_checkpoint: Mapping[str, Any] | None) -> dict[str, Any]:
    """Return what a failed run's journal keeps of ``error``: class, node, message, traceback excerpt, checkpoint.

    ``last_checkpoint`` is the root graph's last ``checkpoints`` stream chunk:
    the checkpoint the run failed after, where a resume or a rollback starts.
    Secrets are scrubbed from the message and the traceback before they are
    stored; the traceback holds source lines, never local variables.
    """
    message = scrubbed(str(error))
    return {
        "name": type(error).__name__,
        "message": message if len(message) <= MESSAGE_CHARS else message[: MESSAGE_CHARS - 1] + "…",
        "node": _failed_node(error),
        "traceback": scrubbed(_traceback_excerpt(error)),
        "checkpoint_id": _checkpoint_id(last_checkpoint),
    }
