"""Run routes (LangGraph Platform compatible): create, stream, wait, join, cancel, list."""

from __future__ import annotations

import asyncio

from adrf.views import APIView as AsyncAPIView
from channels.db import database_sync_to_async
from django.conf import settings
from django.http import StreamingHttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from core.bridge import dumps, from_start
from core.bridge_runtime import get_bridge
from core.drf import EventStreamRenderer, PageSerializer, StrictCharField
from core.errors import Conflict, Invalid
from core.renderers import FastJSONRenderer
from runs.api.common import aowned_run, aowned_thread, owned_run_sync, query_stream_modes, with_run_headers
from runs.models import Run, RunStatus
from runs.schemas import RunCreateSerializer
from runs.selectors import run_record, runs_to_cancel
from runs.services.admission import run_delete
from runs.services.cancel import arun_cancel
from runs.services.outcome import arun_final_values
from runs.services.run_request import STREAM_MODES, RunRequest, headers_matching
from runs.services.start import arun_request_check, arun_start
from runs.streaming.sse import run_outcome, sse_stream
from threads.api_common import owned_thread, validate_thread_id
from threads.models import UNFINISHED_STATUSES

# Whitespace sent while /wait and /join wait, so proxies keep the connection.
WAIT_KEEPALIVE_SECONDS = 5.0


def _validated(request) -> RunRequest:
    serializer = RunCreateSerializer(data=request.data if request.data is not None else {})
    serializer.is_valid(raise_exception=True)
    return _with_headers(request, RunRequest.from_body(serializer.validated_data))


def _with_headers(request, run: RunRequest) -> RunRequest:
    """The run with the request headers langgraph.json's ``http.configurable_headers`` names, in ``configurable``."""
    return run.with_headers(headers_matching(request.headers, settings.DEERFLOW.get("CONFIGURABLE_HEADERS")))


async def _start(request, thread_id: str | None):
    if thread_id is not None:
        validate_thread_id(thread_id)
    return await arun_start(owner=request.user, thread_id=thread_id, request=_validated(request))


def _heartbeat() -> float:
    return settings.DEERFLOW_CONFIG.stream_bridge.heartbeat_seconds


def _disconnect_policy(run: Run, on_disconnect: str):
    if on_disconnect != "cancel":
        return None

    async def cancel() -> None:  # the client went away: no one asked, so no one is recorded
        await arun_cancel(run=run, action="interrupt")

    return cancel


def sse_response(
    request, run: Run, *, after: str | None, on_disconnect: str, modes: set[str] | None = None
) -> StreamingHttpResponse:
    response = StreamingHttpResponse(
        sse_stream(
            get_bridge(),
            run,
            after=after,
            heartbeat=_heartbeat(),
            modes=modes,
            on_disconnect=_disconnect_policy(run, on_disconnect),
        ),
        content_type="text/event-stream",
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return with_run_headers(response, run, location_suffix="/stream")


def wait_response(request, run: Run, *, on_disconnect: str) -> StreamingHttpResponse:
    """Stream whitespace while the run works, then the final JSON (the Platform's /wait)."""

    async def body():
        task = asyncio.ensure_future(arun_final_values(run))
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=WAIT_KEEPALIVE_SECONDS)
                if done:
                    yield dumps(task.result()).encode()
                    return
                yield b" "
        except asyncio.CancelledError:
            task.cancel()
            policy = _disconnect_policy(run, on_disconnect)
            if policy is not None:
                await asyncio.shield(policy())
            raise

    response = StreamingHttpResponse(body(), content_type="application/json")
    return with_run_headers(response, run, location_suffix="/join")


class RunCreateView(AsyncAPIView):
    """POST /threads/{id}/runs and POST /runs: a background run; GET lists a thread's runs."""

    InputSerializer = RunCreateSerializer

    class ListQuerySerializer(PageSerializer):
        status = serializers.ChoiceField(choices=[s for s in RunStatus.values if s != RunStatus.QUEUED], required=False)

    async def post(self, request, thread_id: str | None = None):
        started = await _start(request, thread_id)
        return with_run_headers(Response(run_record(started.run)), started.run)

    async def get(self, request, thread_id: str):
        return await database_sync_to_async(self._list)(request, thread_id)

    def _list(self, request, thread_id: str):
        thread = owned_thread(request, thread_id)
        query = self.ListQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        data = query.validated_data
        runs = Run.objects.filter(thread=thread).order_by("-created_at", "-run_id")
        if (wanted := data.get("status")) is not None:
            runs = runs.filter(status__in=[wanted, RunStatus.QUEUED] if wanted == RunStatus.PENDING else [wanted])
        page = runs[data["offset"] : data["offset"] + data["limit"]]
        return Response([run_record(run) for run in page])


# Runs one POST /runs/batch may create (each is admitted like POST /runs).
BATCH_MAX = 100


class RunBatchView(AsyncAPIView):
    """POST /runs/batch: several stateless background runs (the SDK's ``runs.create_batch``).

    Every payload is validated before any run is admitted, so a bad one
    (422, naming its index) creates nothing.
    """

    InputSerializer = RunCreateSerializer(many=True)

    async def post(self, request):
        payloads = request.data
        if not isinstance(payloads, list) or not payloads or len(payloads) > BATCH_MAX:
            raise ValidationError(f"the body must be a list of 1-{BATCH_MAX} run payloads")
        validated = []
        for index, payload in enumerate(payloads):
            serializer = RunCreateSerializer(data=payload)
            if not serializer.is_valid():
                raise ValidationError({f"[{index}]": serializer.errors})
            validated.append(_with_headers(request, RunRequest.from_body(serializer.validated_data)))
        for index, run_request in enumerate(validated):
            try:
                await arun_request_check(run_request)
            except Invalid as exc:
                raise ValidationError({f"[{index}]": {exc.field: [exc.reason]}}) from None
        started = [await arun_start(owner=request.user, thread_id=None, request=r) for r in validated]
        return Response([run_record(s.run) for s in started])


class RunStreamView(AsyncAPIView):
    """POST /threads/{id}/runs/stream and POST /runs/stream: create and stream (SSE)."""

    renderer_classes = [FastJSONRenderer, EventStreamRenderer]
    InputSerializer = RunCreateSerializer

    async def post(self, request, thread_id: str | None = None):
        started = await _start(request, thread_id)
        return sse_response(request, started.run, after=None, on_disconnect=started.run.kwargs["on_disconnect"])


class RunWaitView(AsyncAPIView):
    """POST /threads/{id}/runs/wait and POST /runs/wait: create and wait for the final values."""

    InputSerializer = RunCreateSerializer

    async def post(self, request, thread_id: str | None = None):
        started = await _start(request, thread_id)
        return wait_response(request, started.run, on_disconnect=started.run.kwargs["on_disconnect"])


class RunDetailView(APIView):
    """GET and DELETE /threads/{id}/runs/{run_id}."""

    def get(self, request, thread_id: str, run_id: str):
        _, run = owned_run_sync(request, thread_id, run_id)
        return Response(run_record(run))

    def delete(self, request, thread_id: str, run_id: str):
        _, run = owned_run_sync(request, thread_id, run_id)
        run_delete(run=run)
        return Response(status=status.HTTP_204_NO_CONTENT)


def _flag(request, name: str) -> bool:
    raw = request.query_params.get(name, "false").lower()
    if raw not in {"0", "1", "true", "false"}:
        raise ValidationError({name: "must be true/false or 1/0"})
    return raw in {"1", "true"}


def _action(request) -> str:
    action = request.query_params.get("action", "interrupt")
    if action not in ("interrupt", "rollback"):
        raise ValidationError({"action": "must be interrupt or rollback"})
    return action


class RunCancelView(AsyncAPIView):
    """POST /threads/{id}/runs/{run_id}/cancel?action=interrupt|rollback&wait=0|1."""

    async def post(self, request, thread_id: str, run_id: str):
        action, wait = _action(request), _flag(request, "wait")
        _, run = await aowned_run(request, thread_id, run_id)
        if run.status not in UNFINISHED_STATUSES:
            raise Conflict(f"Run {run_id} is not cancellable (status: {run.status})")
        run = await arun_cancel(run=run, action=action, by=request.user)
        if wait:
            await run_outcome(get_bridge(), run)
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(status=status.HTTP_202_ACCEPTED)


class RunCancelManyView(AsyncAPIView):
    """POST /runs/cancel: cancel runs by thread, ids or status (``?action=``)."""

    class InputSerializer(serializers.Serializer):
        thread_id = StrictCharField(required=False, allow_null=True)
        run_ids = serializers.ListField(child=StrictCharField(), required=False, allow_null=True)
        status = serializers.ChoiceField(choices=["pending", "running", "all"], required=False, allow_null=True)

        def validate(self, attrs):
            if not attrs.get("thread_id") and not attrs.get("status"):
                raise serializers.ValidationError("give thread_id (with optional run_ids) or status")
            if attrs.get("run_ids") and not attrs.get("thread_id"):
                raise serializers.ValidationError({"thread_id": "run_ids need their thread_id"})
            return attrs

    @extend_schema(responses={204: None})
    async def post(self, request):
        action = _action(request)
        serializer = self.InputSerializer(data=request.data or {})
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        thread = await aowned_thread(request, data["thread_id"]) if data.get("thread_id") else None
        runs = await database_sync_to_async(runs_to_cancel)(
            owner=request.user, thread=thread, run_ids=data.get("run_ids"), status=data.get("status") or "all"
        )
        for run in runs:
            await arun_cancel(run=run, action=action, by=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class RunJoinView(AsyncAPIView):
    """GET /threads/{id}/runs/{run_id}/join: wait for the run, return the final values."""

    async def get(self, request, thread_id: str, run_id: str):
        _, run = await aowned_run(request, thread_id, run_id)
        on_disconnect = "cancel" if _flag(request, "cancel_on_disconnect") else "continue"
        return wait_response(request, run, on_disconnect=on_disconnect)


# What a run join may filter on: the run modes, and "messages" (the event name of messages-tuple).
JOIN_STREAM_MODES = (*STREAM_MODES, "messages")


class RunJoinStreamView(AsyncAPIView):
    """GET /threads/{id}/runs/{run_id}/stream: replay after ``Last-Event-ID`` (``-1``: all), then live.

    ``stream_mode`` (every form ``query_stream_modes`` reads) keeps only
    those events (and ``metadata``); none keeps all.
    """

    renderer_classes = [FastJSONRenderer, EventStreamRenderer]

    async def get(self, request, thread_id: str, run_id: str):
        _, run = await aowned_run(request, thread_id, run_id)
        after = request.headers.get("Last-Event-ID") or None
        if after is not None and not from_start(after) and not _looks_like_event_id(after):
            raise ValidationError({"Last-Event-ID": f"invalid event id {after!r}"})
        on_disconnect = "cancel" if _flag(request, "cancel_on_disconnect") else "continue"
        modes = query_stream_modes(request, ("stream_mode",), JOIN_STREAM_MODES)
        return sse_response(request, run, after=after, on_disconnect=on_disconnect, modes=_event_names(modes))


def _looks_like_event_id(value: str) -> bool:
    head, _, tail = value.partition("-")
    return head.isdigit() and (tail == "" or tail.isdigit())


def _event_names(modes: list[str] | None) -> set[str] | None:
    if not modes:
        return None
    return {"messages" if m == "messages-tuple" else m for m in modes}
