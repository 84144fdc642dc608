"""Protocol-v2 thread routes: ``POST /threads/{id}/commands`` and ``POST /threads/{id}/stream/events`` (SSE).

The WebSocket on the stream path is ``runs.consumers.ThreadStreamConsumer``.
"""

from __future__ import annotations

import logging

from adrf.views import APIView as AsyncAPIView
from django.conf import settings
from django.http import StreamingHttpResponse
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from deerflow_site.drf import EventStreamRenderer
from runs.api.commands import ENVELOPE_MESSAGE, adispatch
from runs.api.common import aowned_thread
from runs.streaming.protocol import EventFilter, non_negative_int, parse_filter
from runs.streaming.runtime import get_bridge
from runs.streaming.sse import OPENING, interrupted
from runs.streaming.thread_stream import HEARTBEAT, ResumeGap, check_resume, follow_thread, sse_error_frame, sse_frame
from threads.api_common import validate_thread_id

logger = logging.getLogger(__name__)


class ThreadCommandsView(AsyncAPIView):
    """POST /threads/{id}/commands: one protocol command, one envelope (errors too are HTTP 200)."""

    async def post(self, request, thread_id: str):
        validate_thread_id(thread_id)
        answer = await adispatch(user=request.user, thread_id=thread_id, message=request.data)
        # A malformed envelope is the one protocol error that is not a 200.
        return Response(answer, status=400 if answer.get("message") == ENVELOPE_MESSAGE else 200)


class ThreadStreamEventsView(AsyncAPIView):
    """POST /threads/{id}/stream/events: the thread's log as SSE, replayed after ``since``, then live."""

    renderer_classes = [JSONRenderer, EventStreamRenderer]

    async def post(self, request, thread_id: str):
        thread = await aowned_thread(request, thread_id)
        body = request.data if isinstance(request.data, dict) else {}
        try:
            event_filter = parse_filter(body)
        except ValueError as exc:
            return Response({"detail": str(exc)}, status=400)
        since = non_negative_int(body.get("since"))
        response = StreamingHttpResponse(
            _sse(thread.thread_id, event_filter, since), content_type="text/event-stream; charset=utf-8"
        )
        response["Cache-Control"] = "no-store"
        response["X-Accel-Buffering"] = "no"
        return response


async def _sse(thread_id: str, event_filter: EventFilter, since: int | None):
    """Yield SSE frames forever (across runs) until the client goes; heartbeats while idle."""
    yield OPENING
    heartbeat = settings.DEERFLOW_CONFIG.stream_bridge.heartbeat_seconds
    try:
        await check_resume(thread_id, since)
        async for event in follow_thread(get_bridge(), thread_id, since=since, idle_timeout=heartbeat):
            if event is None:
                yield HEARTBEAT
            elif event_filter.matches(event):
                yield sse_frame(event)
    except ResumeGap as gap:
        yield sse_error_frame(gap.body())
    except Exception as exc:
        logger.warning("thread %s: protocol stream interrupted", thread_id, exc_info=True)
        yield sse_error_frame({"error": "unknown_error", "message": interrupted(exc)["message"]})
