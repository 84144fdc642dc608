"""The A2A edge: ``POST /a2a/{assistant_id}`` (JSON-RPC, JSON or SSE) and the agent card.

A refusal of the protocol is a JSON-RPC error in an HTTP 200 body, as the
spec and the Platform answer; HTTP statuses stay for what comes before the
protocol: no credentials (401), an assistant the caller cannot see (404, as
on every route), a body over the limit (413).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from adrf.views import APIView as AsyncAPIView
from django.http import JsonResponse, StreamingHttpResponse
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema

from core.bridge import dumps
from core.drf import EventStreamRenderer
from core.errors import DomainError, NotFound
from core.renderers import FastJSONRenderer
from runs.a2a import push, tasks, wire
from runs.a2a.wire import A2AError
from runs.services.webhooks import webhooks_disabled
from runs.streaming.sse import HEARTBEAT, OPENING

logger = logging.getLogger(__name__)

SEND_EXAMPLE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "SendMessage",
    "params": {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}},
}


def agent_card(request, agent: tasks.Agent) -> dict[str, Any]:
    """The agent card (A2A v1.0 fields, plus v0.3's ``url``/``protocolVersion`` for older clients)."""
    url = request.build_absolute_uri(reverse("run-a2a", kwargs={"assistant_id": agent.assistant_id}))
    return {
        "name": agent.name,
        "description": agent.description or f"The {agent.graph_id} agent.",
        "version": "1.0.0",
        "supportedInterfaces": [{"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "url": url,
        "preferredTransport": "JSONRPC",
        "protocolVersion": "0.3.0",
        "capabilities": {
            "streaming": True,
            "pushNotifications": not webhooks_disabled(),
            "extendedAgentCard": False,
        },
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain"],
        "skills": [
            {
                "id": agent.graph_id,
                "name": agent.name,
                "description": agent.description or f"Talk to the {agent.graph_id} agent.",
                "tags": ["chat"],
            }
        ],
        "securitySchemes": {"apiKey": {"apiKeySecurityScheme": {"location": "header", "name": "x-api-key"}}},
        "securityRequirements": [{"schemes": {"apiKey": {"list": []}}}],
    }


class AgentCardView(AsyncAPIView):
    """GET /.well-known/agent-card.json?assistant_id=…: an assistant's agent card (404 when not the caller's)."""

    @extend_schema(
        parameters=[OpenApiParameter("assistant_id", str, required=True, description="An assistant id or graph name")],
        responses=OpenApiTypes.OBJECT,
        tags=["a2a"],
    )
    async def get(self, request):
        assistant_id = request.query_params.get("assistant_id") or ""
        if not assistant_id:
            return JsonResponse({"detail": "assistant_id: this query parameter is required"}, status=422)
        agent = await tasks.aagent_get(owner=request.user, assistant_id=assistant_id)
        return JsonResponse(agent_card(request, agent))


class A2AView(AsyncAPIView):
    """POST /a2a/{assistant_id}: one A2A JSON-RPC request (v1.0 or v0.3 method names)."""

    renderer_classes = [FastJSONRenderer, EventStreamRenderer]

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses=OpenApiTypes.OBJECT,
        tags=["a2a"],
        examples=[OpenApiExample("SendMessage", value=SEND_EXAMPLE, request_only=True)],
    )
    async def post(self, request, assistant_id: str):
        agent = await tasks.aagent_get(owner=request.user, assistant_id=assistant_id)
        try:
            message = json.loads(request.body or b"")
        except ValueError:
            return JsonResponse(wire.error(None, wire.PARSE_ERROR, "Invalid JSON payload"))
        request_id = message.get("id") if isinstance(message, dict) else None
        try:
            method, params = _call(message)
            v03 = method != message["method"]
            if method in wire.STREAMING:
                return await self._stream(request, agent, method, params, request_id, v03=v03)
            answer = await _answer(request, agent, method, params, v03=v03)
        except A2AError as exc:
            return JsonResponse(wire.error(request_id, exc.code, exc.message))
        except DomainError as exc:
            converted = tasks.domain_error(exc)
            return JsonResponse(wire.error(request_id, converted.code, converted.message))
        if method != message["method"]:
            answer = wire.v03(method, answer)
        return JsonResponse(wire.result(request_id, answer))

    async def _stream(self, request, agent, method: str, params: dict, request_id: Any, *, v03: bool):
        if method == "SendStreamingMessage":
            since: int | None
            run, thread, since = await _send(request.user, agent, params)
            first = {"task": await tasks.atask_object(run, thread, history=0)}
        else:
            run, thread = await tasks.atask_get(request.user, agent, params.get("id"))
            since = _last_event_id(request, params)
            first = {"task": await tasks.atask_object(run, thread, history=0)}
        response = StreamingHttpResponse(
            _sse(request_id, method if v03 else None, first, tasks.atask_events(run, thread, since=since)),
            content_type="text/event-stream; charset=utf-8",
        )
        response["Cache-Control"] = "no-store"
        response["X-Accel-Buffering"] = "no"
        return response


def _call(message: Any) -> tuple[str, dict[str, Any]]:
    """Return the v1.0 method and the params of a JSON-RPC request, or raise its JSON-RPC error."""
    if not isinstance(message, dict) or message.get("jsonrpc") != wire.JSONRPC:
        raise A2AError(wire.INVALID_REQUEST, "expected a JSON-RPC 2.0 request object")
    if "id" not in message or not isinstance(message["id"], str | int | type(None)) or isinstance(message["id"], bool):
        raise A2AError(wire.INVALID_REQUEST, "a request needs an id (a string or a number)")
    method = message.get("method")
    if not isinstance(method, str) or method not in wire.METHODS:
        raise A2AError(wire.METHOD_NOT_FOUND, f"Method not found: {method}")
    params = message.get("params", {})
    if not isinstance(params, dict):
        raise A2AError(wire.INVALID_PARAMS, "params must be an object")
    if wire.METHODS[method] in ("SendMessage", "SendStreamingMessage") and not isinstance(params.get("message"), dict):
        raise A2AError(wire.INVALID_PARAMS, "params.message: an object is required")
    return wire.METHODS[method], params


async def _send(user, agent: tasks.Agent, params: dict[str, Any]):
    """Start the message's task; a push config in its configuration is checked first and registered on it."""
    config = await push.apush_config_at_send(params)
    run, thread, since = await tasks.atask_send(user, agent, params)
    if config is not None:
        await push.apush_config_register(run, config[0], v03=config[1])
    return run, thread, since


PUSH_METHODS = {
    "CreateTaskPushNotificationConfig": push.apush_config_create,
    "GetTaskPushNotificationConfig": push.apush_config_get,
    "ListTaskPushNotificationConfigs": push.apush_config_list,
    "DeleteTaskPushNotificationConfig": push.apush_config_delete,
}


async def _answer(request, agent: tasks.Agent, method: str, params: dict[str, Any], *, v03: bool) -> Any:
    user = request.user
    header_scope = request.headers.get(wire.HISTORY_SCOPE_HEADER)
    if method in PUSH_METHODS:
        return await PUSH_METHODS[method](user, agent, params, v03=v03)
    if method == "SendMessage":
        configuration = params.get("configuration") or {}
        history = wire.history_length(configuration.get("historyLength"), default=wire.MAX_HISTORY_LENGTH)
        scope = wire.history_scope(params.get("historyScope"), configuration.get("historyScope"), header_scope)
        run, thread, _ = await _send(user, agent, params)
        if not (configuration.get("returnImmediately") or configuration.get("blocking") is False):
            await tasks.atask_wait(run)
        return {"task": await tasks.atask_object(run, thread, history=history, scope=scope)}
    if method == "GetTask":
        history = wire.history_length(params.get("historyLength"), default=wire.MAX_HISTORY_LENGTH)
        scope = wire.history_scope(params.get("historyScope"), header_scope)
        run, thread = await tasks.atask_get(user, agent, params.get("id"))
        return await tasks.atask_object(run, thread, history=history, scope=scope)
    if method == "CancelTask":
        run, thread = await tasks.atask_cancel(user, agent, params.get("id"))
        return await tasks.atask_object(run, thread, history=0)
    if method == "ListTasks":
        return await tasks.atask_list(user, agent, params)
    return agent_card(request, agent)  # GetExtendedAgentCard: the same card, to an authenticated caller


def _last_event_id(request, params: dict[str, Any]) -> int | None:
    """Where a resubscription resumes: ``Last-Event-ID`` (or ``params.lastEventId``), a log seq; None: the start."""
    value = request.headers.get("Last-Event-ID", params.get("lastEventId"))
    if value in (None, "", "-1", -1):
        return None
    text = str(value)
    if not text.isdigit():
        raise A2AError(wire.INVALID_PARAMS, f"Last-Event-ID: {value!r} is not an event id of this stream")
    return int(text)


async def _sse(request_id: Any, v03_method: str | None, first: dict, events: AsyncIterator) -> AsyncIterator[bytes]:
    """Frame the task's stream: ``id:`` is the log seq a resubscription resumes after."""

    def framed(value: dict, seq: int | None) -> bytes:
        body = wire.result(request_id, wire.v03(v03_method, value) if v03_method else value)
        head = f"id: {seq}\r\n" if seq is not None else ""
        return f"{head}event: message\r\ndata: {dumps(body)}\r\n\r\n".encode()

    yield OPENING
    yield framed(first, None)
    try:
        async for seq, value in events:
            yield HEARTBEAT if value is None else framed(value, seq)
    except NotFound:
        return  # the thread was deleted: the task is gone
    except Exception:
        logger.warning("a2a: task stream interrupted", exc_info=True)
        yield f"event: error\r\ndata: {dumps(wire.error(request_id, wire.INTERNAL_ERROR, 'stream interrupted'))}\r\n\r\n".encode()
