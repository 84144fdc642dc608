"""``/mcp``: MCP's Streamable HTTP transport (POST a message, GET to resume a call's stream, DELETE a session).

The protocol is ``runs.mcp``; this module is its HTTP: the session header,
JSON or SSE answers, the priming and response events of a resumable call.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from adrf.views import APIView as AsyncAPIView
from django.http import HttpResponse, JsonResponse, StreamingHttpResponse

from runs import mcp
from runs.models import McpSession, Run
from runs.services.cancel import arun_cancel
from runs.streaming.sse import HEARTBEAT


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


async def _call_events(run: Run, request_id: Any, *, primed: bool) -> AsyncIterator[bytes]:
    """The call's SSE: the priming event (unless resumed past it), heartbeats while the run works, the response."""
    if not primed:
        yield _sse_message(None, mcp.event_id(run.run_id, 0))
    task = asyncio.ensure_future(mcp.tool_call_result(run))
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=mcp.heartbeat_seconds())
            if done:
                break
            yield HEARTBEAT
        yield _sse_message(mcp.rpc_result(request_id, task.result()), mcp.event_id(run.run_id, 1))
    finally:
        task.cancel()  # the client went away: the run goes on, and the response waits to be resumed


class McpView(AsyncAPIView):
    """POST/GET/DELETE /mcp (the Platform's path, under /api as every route)."""

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
            return _sse(_call_events(run, request_id, primed=False), session)
        return _json(mcp.rpc_result(request_id, await mcp.tool_call_result(run)), session=session)

    async def get(self, request):
        """Resume a call's stream (``Last-Event-ID``); this server sends no unsolicited messages, so nothing else."""
        resumed = mcp.parse_event_id(request.headers.get("Last-Event-ID"))
        session_id = request.headers.get(mcp.SESSION_HEADER)
        if resumed is None or not session_id:
            return HttpResponse(status=405, headers={"Allow": "POST, DELETE"})
        session = await mcp.session_get(owner=request.user, session_id=session_id)
        run = await mcp.call_run(owner=request.user, session=session, run_id=resumed[0]) if session else None
        if run is None:  # another user's, another session's or no such call: one answer
            return _json(mcp.rpc_error(None, mcp.INVALID_REQUEST, "Session or stream not found"), status=404)
        request_id = run.metadata[mcp.MCP_METADATA_KEY].get("request_id")
        if resumed[1] >= 1:  # the client has the response: the stream has nothing left
            return _sse(_nothing(), session)
        return _sse(_call_events(run, request_id, primed=True), session)

    async def delete(self, request):
        session_id = request.headers.get(mcp.SESSION_HEADER)
        if not session_id or not await mcp.session_end(owner=request.user, session_id=session_id):
            return _json(mcp.rpc_error(None, mcp.INVALID_REQUEST, "Session not found"), status=404)
        return HttpResponse(status=204)


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield  # an async generator that ends at once
