"""Shared pieces of the run routes: headers, run lookup, join-stream modes.

The Run object itself is ``runs.selectors.run_record``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from channels.db import database_sync_to_async
from rest_framework.exceptions import ValidationError

from core.errors import NotFound
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


def query_stream_modes(request, names: tuple[str, ...], known: Iterable[str]) -> list[str]:
    """Return the stream modes a join stream's query names, in every form the SDKs send; 422 an unknown one.

    Repeated parameters (the Python SDK; the JS SDK 1.15), a comma-separated
    list, or one JSON array (the JS SDK 1.0, in the Agent Chat UI's ``^1.0.0``
    range: ``?stream_mode=["values","messages-tuple"]``, which langgraph-api
    parses on purpose too). Duplicates are dropped, order kept.
    """
    modes: list[str] = []
    for name in names:
        for value in request.query_params.getlist(name):
            modes.extend(_modes_in(name, value))
    known = tuple(known)
    if unknown := [m for m in modes if m not in known]:
        raise ValidationError({names[0]: f"unknown stream mode(s) {', '.join(unknown)} (known: {', '.join(known)})"})
    return list(dict.fromkeys(modes))


def _modes_in(name: str, value: str) -> list[str]:
    value = value.strip()
    if not value.startswith("["):
        return [m.strip() for m in value.split(",") if m.strip()]
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = None
    if not isinstance(parsed, list) or not all(isinstance(m, str) for m in parsed):
        raise ValidationError({name: f"not a JSON array of stream modes: {value[:200]}"})
    return [m.strip() for m in parsed if m.strip()]
