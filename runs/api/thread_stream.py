"""Thread stream routes: protocol-v2 ``/commands`` and ``/stream/events`` (SSE), and the classic join stream.

The WebSocket on the stream path is ``runs.consumers.ThreadStreamConsumer``.
"""

from __future__ import annotations

import logging

from adrf.views import APIView as AsyncAPIView
from django.conf import settings
from django.http import StreamingHttpResponse
from rest_framework.response import Response

from core.bridge_runtime import get_bridge
from core.drf import EventStreamRenderer
from core.renderers import FastJSONRenderer
from runs.api.commands import ENVELOPE_MESSAGE, adispatch
from runs.api.common import aowned_thread, query_stream_modes
from runs.models import Run
from runs.streaming.join import JOIN_MODES, JoinTranslator
from runs.streaming.protocol import EventFilter, non_negative_int, parse_filter
from runs.streaming.sse import HEARTBEAT, OPENING, frame, interrupted, sse_error_frame, sse_frame
from threads.api_common import validate_thread_id
from threads.stream_follow import Incarnation, ResumeGap, follow_owned, follow_thread

logger = logging.getLogger(__name__)


class ThreadCommandsView(AsyncAPIView):
    """POST /threads/{id}/commands: one protocol command, one envelope (errors too are HTTP 200)."""

    async def post(self, request, thread_id: str):
        validate_thread_id(thread_id)
        answer = await adispatch(user=request.user, thread_id=thread_id, message=request.data, headers=request.headers)
        # A malformed envelope is the one protocol error that is not a 200.
        return Response(answer, status=400 if answer.get("message") == ENVELOPE_MESSAGE else 200)


class ThreadStreamEventsView(AsyncAPIView):
    """POST /threads/{id}/stream/events: the thread's log as SSE, replayed after ``since``, then live."""

    renderer_classes = [FastJSONRenderer, EventStreamRenderer]

    async def post(self, request, thread_id: str):
        validate_thread_id(thread_id)
        body = request.data if isinstance(request.data, dict) else {}
        try:
            event_filter = parse_filter(body)
        except ValueError as exc:
            return Response({"detail": str(exc)}, status=400)
        since = non_negative_int(body.get("since"))
        response = StreamingHttpResponse(
            _sse(request.user, thread_id, event_filter, since), content_type="text/event-stream; charset=utf-8"
        )
        response["Cache-Control"] = "no-store"
        response["X-Accel-Buffering"] = "no"
        return response


async def _sse(user, thread_id: str, event_filter: EventFilter, since: int | None):
    """Yield SSE frames forever (across runs) until the client goes; heartbeats while idle.

    The stream may open before the thread exists (the client minted its id
    and sends ``run.start`` next); it then sends heartbeats until the thread
    is the caller's. Another user's thread gets the same, so the stream is no
    existence oracle. A deleted thread's stream goes back to that wait: the
    id's next life, if it is the caller's, streams from its first event.
    """
    yield OPENING
    heartbeat = settings.DEERFLOW_CONFIG.stream_bridge.heartbeat_seconds
    try:
        async for event in follow_owned(get_bridge(), thread_id, user.pk, since=since, idle_timeout=heartbeat):
            if event is None:
                yield HEARTBEAT
            elif event_filter.matches(event):
                yield sse_frame(event)
    except ResumeGap as gap:
        yield sse_error_frame(gap.body())
    except Exception as exc:
        logger.warning("thread %s: protocol stream interrupted", thread_id, exc_info=True)
        yield sse_error_frame({"error": "unknown_error", "message": interrupted(exc)["message"]})


class ThreadJoinStreamView(AsyncAPIView):
    """GET /threads/{id}/stream: every run of the thread as classic SSE, after ``Last-Event-ID`` (a log seq).

    ``stream_modes`` (or the SDKs' ``stream_mode``), repeated, comma-separated
    or a JSON array: ``run_modes`` (each run's own stream modes, with ``metadata``
    at its start and ``{"status": "run_done"}`` at its end; the default) and
    ``lifecycle`` (only those) and ``state_update`` (each ``POST
    /threads/{id}/state``: the new checkpoint, ``as_node`` and the values
    written). Read from the durable log, so it replays after a restart and
    through any process. It ends when the thread is deleted.
    """

    renderer_classes = [FastJSONRenderer, EventStreamRenderer]

    async def get(self, request, thread_id: str):
        thread = await aowned_thread(request, thread_id)
        modes = set(query_stream_modes(request, ("stream_modes", "stream_mode"), JOIN_MODES)) or {"run_modes"}
        last = request.headers.get("Last-Event-ID")
        if last is not None and last != "-1" and not last.isdigit():
            return Response({"detail": f"Last-Event-ID: invalid event id {last!r}"}, status=422)
        since = int(last) if last and last != "-1" else None
        response = StreamingHttpResponse(_join(Incarnation.of(thread), modes, since), content_type="text/event-stream")
        response["Cache-Control"] = "no-store"
        response["X-Accel-Buffering"] = "no"
        return response


async def _join(incarnation: Incarnation, modes: set[str], since: int | None):
    yield OPENING
    heartbeat = settings.DEERFLOW_CONFIG.stream_bridge.heartbeat_seconds
    translator = JoinTranslator(modes, _run_modes_cache())
    thread_id = incarnation.thread_id
    try:
        async for event in follow_thread(get_bridge(), incarnation, since=since, idle_timeout=heartbeat):
            if event is None:
                yield HEARTBEAT
                continue
            run_id = event["event_id"].removeprefix("synth:").split(":", 1)[0]
            for name, data in await translator.frames(event, run_id):
                yield frame(name, data, str(event["seq"]))
    except Exception as exc:
        logger.warning("thread %s: join stream interrupted", thread_id, exc_info=True)
        yield frame("error", interrupted(exc))


def _run_modes_cache():
    from channels.db import database_sync_to_async

    known: dict[str, set[str]] = {}

    def modes_of(run_id: str) -> set[str]:
        kwargs = Run.objects.filter(pk=run_id).values_list("kwargs", flat=True).first() or {}
        return set(kwargs.get("stream_mode") or ["values"])

    async def lookup(run_id: str) -> set[str]:
        if run_id not in known:
            known[run_id] = await database_sync_to_async(modes_of)(run_id)
        return known[run_id]

    return lookup
