"""``/mcp``: MCP's Streamable HTTP transport (POST a message, GET to resume a call's stream, DELETE a session).

The protocol is ``runs.mcp``; this module is its HTTP: the session header,
JSON or SSE answers, the priming and response events of a resumable call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

from adrf.views import APIView as AsyncAPIView
from django.http import HttpResponse, JsonResponse, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema

from core.bridge_runtime import get_bridge
from core.drf import EventStreamRenderer
from core.renderers import FastJSONRenderer
from runs import mcp
from runs.models import McpSession, Run
from runs.services.cancel import arun_cancel
from runs.streaming.sse import HEARTBEAT
from threads.stream_follow import follow_thread, owned_incarnation, replay


def _json(body: dict[str, Any], *, status: int = 200, session: McpSession | None = None) -> JsonResponse:
    response = JsonResponse(body, status=status)
    if session is not None:
        response[mcp.SESSION_HEADER] = session.session_id
    return response


def _sse_message(body: dict[str, Any] | None, event_id: str) -> bytes:
    data = "" if body is None else json.dumps(body, ensure_ascii=False, default=str)
    return f"id: {event_id}\r\nevent: message\r\ndata: {data}\r\n\r\n".encode()


def _sse(events: AsyncIterator[bytes], session: McpSession | None) -> StreamingHttpResponse:
    response = StreamingHttpResponse(events, content_type="text/event-stream; charset=utf-8")
    response["Cache-Control"] = "no-store"
    response["X-Accel-Buffering"] = "no"
    if session is not None:
        response[mcp.SESSION_HEADER] = session.session_id
    return response


async def _call_events(run: Run, request_id: Any, *, since: int | None) -> AsyncIterator[bytes]:
    """A call's SSE: the priming event (``since`` None), its progress after ``since``, heartbeats, the response."""
    if since is None:
        yield _sse_message(None, mcp.event_id(run.run_id, 0))
        since = 0
    result = asyncio.ensure_future(mcp.tool_call_result(run))
    try:
        token = (run.metadata or {}).get(mcp.MCP_METADATA_KEY, {}).get("progress_token")
        if token is not None:
            async for frame in _progress(run, token, since, result):
                yield frame
        while True:
            done, _ = await asyncio.wait({result}, timeout=mcp.heartbeat_seconds())
            if done:
                break
            yield HEARTBEAT
        yield _sse_message(mcp.rpc_result(request_id, result.result()), mcp.event_id(run.run_id, mcp.END))
    finally:
        result.cancel()  # the client went away: the run goes on, and what it says waits to be resumed


async def _progress(run: Run, token: Any, since: int, result: asyncio.Future) -> AsyncIterator[bytes]:
    """Progress frames from the call's thread log after ``since``, live, until ``result`` is done (then drained)."""
    incarnation = await owned_incarnation(run.thread_id, run.owner_id)
    if incarnation is None:
        return
    follow = follow_thread(get_bridge(), incarnation, since=since, idle_timeout=mcp.heartbeat_seconds())
    events = cast(AsyncGenerator[dict | None, None], follow)
    following: asyncio.Future | None = None
    try:
        while True:
            following = asyncio.ensure_future(anext(events))
            done, _ = await asyncio.wait({following, result}, return_when=asyncio.FIRST_COMPLETED)
            if following not in done:  # the run ended: the rest of its log goes out, then the response
                async for row in replay(incarnation, since):
                    if (note := mcp.progress_notification(token, row)) is not None:
                        yield _sse_message(note, mcp.event_id(run.run_id, row["seq"]))
                return
            try:
                envelope = following.result()
            except StopAsyncIteration:
                return
            if envelope is None:
                yield HEARTBEAT
                continue
            since = envelope["seq"]
            if (note := mcp.progress_notification(token, envelope)) is not None:
                yield _sse_message(note, mcp.event_id(run.run_id, since))
    finally:
        if following is not None and not following.done():
            following.cancel()  # the generator must be idle before it is closed
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await following
        await events.aclose()


INITIALIZE_EXAMPLE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "me", "version": "1"}},
}
CALL_EXAMPLE = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {"name": "lead_agent", "arguments": {"messages": [{"role": "user", "content": "hi"}]}},
}


class McpView(AsyncAPIView):
    """POST/GET/DELETE /mcp (the Platform's path, under /api as every route)."""

    renderer_classes = [FastJSONRenderer, EventStreamRenderer]

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={200: OpenApiTypes.OBJECT, 202: None, 400: OpenApiTypes.OBJECT, 404: OpenApiTypes.OBJECT},
        tags=["mcp"],
        description="One MCP JSON-RPC message (Streamable HTTP): JSON, or SSE for a call in a session.",
        examples=[
            OpenApiExample("initialize", value=INITIALIZE_EXAMPLE, request_only=True),
            OpenApiExample("tools/call", value=CALL_EXAMPLE, request_only=True),
        ],
    )
    async def post(self, request):
        try:
            message = json.loads(request.body or b"null")
        except ValueError:
            return _json(mcp.rpc_error(None, mcp.PARSE_ERROR, "the body is not JSON"), status=400)
        if isinstance(message, list):
            return _json(mcp.rpc_error(None, mcp.INVALID_REQUEST, "JSON-RPC batches are not supported"), status=400)
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return _json(mcp.rpc_error(None, mcp.INVALID_REQUEST, "expected one JSON-RPC 2.0 message"), status=400)
        request_id, method = message.get("id"), message.get("method")
        if method == "initialize":
            return await self._initialize(request, request_id, message.get("params") or {})
        session = None
        if session_id := request.headers.get(mcp.SESSION_HEADER):
            session = await mcp.session_get(owner=request.user, session_id=session_id)
            if session is None:  # ended, another user's or never issued: the client starts a new session
                return _json(mcp.rpc_error(request_id, mcp.INVALID_REQUEST, "Session not found"), status=404)
        if not isinstance(method, str):  # a response to a server request: none are sent, nothing to do
            return HttpResponse(status=202)
        if "id" not in message:
            await self._notification(request, session, method, message.get("params") or {})
            return HttpResponse(status=202)
        try:
            if method == "ping":
                return _json(mcp.rpc_result(request_id, {}), session=session)
            if method == "tools/list":
                return _json(mcp.rpc_result(request_id, await mcp.tools_list(request.user)), session=session)
            if method == "tools/call":
                return await self._call(request, session, request_id, message.get("params"))
            raise mcp.McpError(mcp.METHOD_NOT_FOUND, f"Method not found: {method}")
        except mcp.McpError as exc:
            return _json(mcp.rpc_error(request_id, exc.code, exc.message), session=session)

    async def _initialize(self, request, request_id: Any, params: dict[str, Any]) -> JsonResponse:
        version = mcp.negotiated_version(params.get("protocolVersion") if isinstance(params, dict) else None)
        session = await mcp.session_create(
            owner=request.user, protocol_version=version, client_info=params.get("clientInfo")
        )
        return _json(mcp.rpc_result(request_id, mcp.initialize_result(version)), session=session)

    async def _notification(self, request, session: McpSession | None, method: str, params: Any) -> None:
        if method == "notifications/cancelled" and session is not None and isinstance(params, dict):
            run = await mcp.call_run_by_request(owner=request.user, session=session, request_id=params.get("requestId"))
            if run is not None:
                await arun_cancel(run=run, action="interrupt", by=request.user)

    async def _call(self, request, session: McpSession | None, request_id: Any, params: Any):
        run = await mcp.tool_call_start(request.user, params=params, session=session, request_id=request_id)
        if session is not None and "text/event-stream" in request.headers.get("Accept", ""):
            return _sse(_call_events(run, request_id, since=None), session)
        return _json(mcp.rpc_result(request_id, await mcp.tool_call_result(run)), session=session)

    @extend_schema(
        parameters=[
            OpenApiParameter("Mcp-Session-Id", str, OpenApiParameter.HEADER),
            OpenApiParameter("Last-Event-ID", str, OpenApiParameter.HEADER),
        ],
        responses={200: OpenApiTypes.STR, 404: OpenApiTypes.OBJECT, 405: OpenApiTypes.OBJECT},
        tags=["mcp"],
        description="Resume a call's SSE stream after the event Last-Event-ID names (in its session).",
    )
    async def get(self, request):
        """Resume a call's stream (``Last-Event-ID``); this server sends no unsolicited messages, so nothing else."""
        resumed = mcp.parse_event_id(request.headers.get("Last-Event-ID"))
        session_id = request.headers.get(mcp.SESSION_HEADER)
        if resumed is None or not session_id:
            detail = "GET /mcp resumes a call's stream: send Mcp-Session-Id and the Last-Event-ID of one of its events"
            return JsonResponse({"detail": detail}, status=405, headers={"Allow": "GET, POST, DELETE"})
        session = await mcp.session_get(owner=request.user, session_id=session_id)
        run = await mcp.call_run(owner=request.user, session=session, run_id=resumed[0]) if session else None
        if run is None:  # another user's, another session's or no such call: one answer
            return _json(mcp.rpc_error(None, mcp.INVALID_REQUEST, "Session or stream not found"), status=404)
        request_id = run.metadata[mcp.MCP_METADATA_KEY].get("request_id")
        if resumed[1] is None:  # the client has the response: the stream has nothing left
            return _sse(_nothing(), session)
        return _sse(_call_events(run, request_id, since=resumed[1]), session)

    @extend_schema(
        parameters=[OpenApiParameter("Mcp-Session-Id", str, OpenApiParameter.HEADER)],
        responses={204: None, 404: OpenApiTypes.OBJECT},
        tags=["mcp"],
        description="End the session Mcp-Session-Id names.",
    )
    async def delete(self, request):
        session_id = request.headers.get(mcp.SESSION_HEADER)
        if not session_id or not await mcp.session_end(owner=request.user, session_id=session_id):
            return _json(mcp.rpc_error(None, mcp.INVALID_REQUEST, "Session not found"), status=404)
        return HttpResponse(status=204)


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield  # an async generator that ends at once
