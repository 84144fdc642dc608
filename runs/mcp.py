"""MCP (Model Context Protocol, Streamable HTTP) at ``/mcp``: every assistant a tool, with sessions and resumable calls.

What the LangGraph Platform's ``/mcp`` does: each assistant the caller may
run is a tool (its name, its description, its graph's input schema);
``tools/call`` runs it on a thread of its own, with the caller's ownership
and auth, and answers the run's final values as JSON text. A request
without a session works, as on the Platform (it keeps none).

Beyond the Platform:

- **Sessions.** ``initialize`` issues an ``Mcp-Session-Id`` (a row,
  ``runs.models.McpSession``), kept across restarts and answered by every
  process; the caller's own only: anything else is the 404 that tells a
  client to initialize again. ``DELETE /mcp`` ends it.
- **Resumable calls.** In a session, a ``tools/call`` that accepts
  ``text/event-stream`` is answered as SSE: ``<run id>.0`` primes the
  client (empty data); with a ``progressToken``, ``<run id>.<seq>`` carries a
  ``notifications/progress`` for each piece of text the model streams (read
  from the thread's durable protocol log, ``seq`` its position there);
  ``<run id>.end`` is the response. The call is a run whose metadata names
  the session, the request and the token, on a thread that is kept, so a
  client that loses the stream GETs ``/mcp`` with ``Last-Event-ID`` and gets
  what it missed (the progress after that event, then the response when the
  run ends) from any process, after a restart.
  ``notifications/cancelled`` cancels the call's run.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone

from checkpoints.graphs import INTROSPECT
from core.access import aauthorize
from core.errors import DomainError, Invalid
from runs.models import McpSession, Run, RunStatus
from runs.services.outcome import arun_final_outcome

# Newest first: what initialize answers when the client asks for a version this server does not speak.
PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")
SESSION_HEADER = "Mcp-Session-Id"
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603
_TOOL_NAME = re.compile(r"[^A-Za-z0-9_-]")
_EVENT_ID = re.compile(r"^(?P<run>[0-9a-f-]{32,36})\.(?P<n>0|[1-9][0-9]{0,17}|end)$")
END = "end"  # the event id suffix of a call's response
# Where a call's bookkeeping lives in its run's metadata (visible to its owner as any run's metadata is).
MCP_METADATA_KEY = "mcp"


class McpError(Exception):
    """A JSON-RPC error: code and message (the request's HTTP answer stays 200 unless the transport says otherwise)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def rpc_result(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def rpc_error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def event_id(run_id: str, n: int | str) -> str:
    """``<run id>.0`` primes; ``<run id>.<seq>``: the progress of the run's log event ``seq``; ``<run id>.end``."""
    return f"{run_id}.{n}"


def parse_event_id(text: str | None) -> tuple[str, int | None] | None:
    """``(run id, seq)`` of an event id this server issued (seq None: the response), else None."""
    match = _EVENT_ID.match(text or "")
    if not match:
        return None
    return match["run"], None if match["n"] == END else int(match["n"])


def progress_notification(token: Any, envelope: dict[str, Any]) -> dict[str, Any] | None:
    """The ``notifications/progress`` a log event makes: a model's text as it streams (None for other events).

    ``progress`` is the event's ``seq``, which only grows, across a resumed stream too.
    """
    data = (envelope.get("params") or {}).get("data") or {}
    delta = data.get("delta") if isinstance(data, dict) else None
    if envelope.get("method") != "messages" or not isinstance(delta, dict) or delta.get("type") != "text-delta":
        return None
    params = {"progressToken": token, "progress": envelope["seq"], "message": delta.get("text") or ""}
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}


# -- sessions -----------------------------------------------------------------------------------


def negotiated_version(requested: Any) -> str:
    """The client's version when this server speaks it, else the newest this server does (the spec's rule)."""
    return requested if requested in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]


@sync_to_async
def session_create(*, owner, protocol_version: str, client_info: Any) -> McpSession:
    info = client_info if isinstance(client_info, dict) else {}
    return McpSession.objects.create(
        session_id=uuid.uuid4().hex, owner=owner, protocol_version=protocol_version, client_info=info
    )


# How often a session's last_seen_at moves: its requests read the row, one in this long writes it.
TOUCH_EVERY = timedelta(minutes=1)


@sync_to_async
def session_get(*, owner, session_id: str) -> McpSession | None:
    """The caller's session, touched at most once a ``TOUCH_EVERY``; None for another user's, an ended one
    or an unknown id alike (a write per request only moved the time by seconds)."""
    session = McpSession.objects.filter(pk=session_id[:64], owner=owner).first()
    if session is not None and timezone.now() - session.last_seen_at >= TOUCH_EVERY:
        session.save(update_fields=["last_seen_at"])
    return session


@sync_to_async
def session_end(*, owner, session_id: str) -> bool:
    deleted, _ = McpSession.objects.filter(pk=session_id[:64], owner=owner).delete()
    return bool(deleted)


def initialize_result(protocol_version: str) -> dict[str, Any]:
    return {
        "protocolVersion": protocol_version,
        "capabilities": {"tools": {"listChanged": False}},
        "serverInfo": {"name": "deerflow-site", "title": "DeerFlow persistence gateway", "version": "1"},
        "instructions": "Each tool runs one of this server's LangGraph assistants with its input and answers "
        "the run's final values as JSON.",
    }


# -- tools ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tool:
    name: str
    assistant_id: str
    graph_id: str
    description: str


def _tools(owner) -> list[Tool]:
    # The assistants' selectors sit beside this module in runs; imported here for the sync hop's sake only.
    from runs.assistant_selectors import assistant_filter

    assistants = list(assistant_filter(owner=owner).order_by("created_at", "assistant_id"))
    tools, taken = [], set()
    for assistant in assistants:
        name = _TOOL_NAME.sub("_", assistant.name or assistant.graph_id)[:64] or assistant.graph_id
        if name in taken:  # two assistants of one name: the later gets its id's start
            name = f"{name[:55]}-{str(assistant.assistant_id)[:8]}"
        taken.add(name)
        description = assistant.description or f"Run the {assistant.graph_id} agent."
        tools.append(Tool(name, str(assistant.assistant_id), assistant.graph_id, description))
    return tools


def _input_schema(graph_id: str) -> dict[str, Any]:
    """The graph's input JSON schema (an object schema, as MCP requires), built as the assistants' schemas route does."""
    # The accessor builds (and caches) the compiled graph; runs sits above checkpoints.
    from checkpoints.accessor import state_accessor

    try:
        schema = state_accessor(graph_id, access=INTROSPECT).graph.get_input_jsonschema()
    except Exception:  # a type pydantic cannot express: the tool takes any object
        schema = None
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return {"type": "object"}
    return schema


async def _visible_tools(user) -> list[Tool]:
    # Custom auth: the assistants' search handler decides what the caller sees, as on /assistants/search.
    user.access_scope = await aauthorize(user, resource="assistants", action="search", value={})
    return await sync_to_async(_tools)(user)


async def tools_list(user) -> dict[str, Any]:
    tools = await _visible_tools(user)
    schemas = {graph_id: await sync_to_async(_input_schema)(graph_id) for graph_id in {t.graph_id for t in tools}}
    return {
        "tools": [{"name": t.name, "description": t.description, "inputSchema": schemas[t.graph_id]} for t in tools]
    }


async def tool_call_start(user, *, params: Any, session: McpSession | None, request_id: Any) -> Run:
    """Start the run a ``tools/call`` asks for; unknown tools and bad arguments are ``INVALID_PARAMS``."""
    # The run services sit beside this module in runs; their imports load the executor's world.
    from runs.services.run_request import RunRequest
    from runs.services.start import arun_start

    if not isinstance(params, dict) or not isinstance(params.get("name"), str):
        raise McpError(INVALID_PARAMS, "tools/call needs params.name, the tool's name")
    arguments = params.get("arguments") or {}
    if not isinstance(arguments, dict):
        raise McpError(INVALID_PARAMS, "params.arguments must be an object")
    tool = next((t for t in await _visible_tools(user) if t.name == params["name"]), None)
    if tool is None:  # another user's assistant is as unknown as one that never was
        raise McpError(INVALID_PARAMS, f"Unknown tool: {params['name']}")
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    if token is not None and (isinstance(token, bool) or not isinstance(token, str | int)):
        raise McpError(INVALID_PARAMS, "params._meta.progressToken must be a string or an integer")
    metadata = {
        MCP_METADATA_KEY: {
            "tool": tool.name,
            "session": session.session_id if session else None,
            "request_id": request_id,
            "progress_token": token,
        }
    }
    body = {"assistant_id": tool.assistant_id, "input": arguments, "metadata": metadata}
    if session is not None:
        body["on_completion"] = "keep"  # its stream resumes from the run and its thread after the call
    try:
        started = await arun_start(owner=user, thread_id=None, request=RunRequest.from_body(body))
    except Invalid as exc:
        raise McpError(INVALID_PARAMS, str(exc)) from exc
    except DomainError as exc:
        raise McpError(INTERNAL_ERROR, str(exc)) from exc
    return started.run


async def tool_call_result(run: Run) -> dict[str, Any]:
    """The ``CallToolResult`` of a call's run, once it ends: its final values as JSON text, or the error."""
    # The status comes with the outcome: a call without a session is a stateless run, whose row is deleted
    # with its thread as soon as it ended (reading it back raced that deletion).
    status, values = await arun_final_outcome(run)
    if "__error__" in values:
        message = values["__error__"].get("message") or "the run failed"
        return {"content": [{"type": "text", "text": message}], "isError": True}
    text = json.dumps(values, ensure_ascii=False, default=str)
    if status == RunStatus.INTERRUPTED and not values.get("__interrupt__"):
        return {"content": [{"type": "text", "text": f"the run was cancelled; its state: {text}"}], "isError": True}
    return {"content": [{"type": "text", "text": text}], "isError": False}


@sync_to_async
def call_run(*, owner, session: McpSession, run_id: str) -> Run | None:
    """The run of a call made in ``session`` by its owner; None for anything else (another user's, another session's)."""
    run = Run.objects.filter(pk=run_id, owner=owner).first()
    if run is None or (run.metadata or {}).get(MCP_METADATA_KEY, {}).get("session") != session.session_id:
        return None
    return run


@sync_to_async
def call_run_by_request(*, owner, session: McpSession, request_id: Any) -> Run | None:
    """The unfinished run of the call ``request_id`` names in ``session`` (what ``notifications/cancelled`` cancels)."""
    runs = Run.objects.filter(owner=owner, status__in=[RunStatus.PENDING, RunStatus.RUNNING]).order_by("-created_at")
    for run in runs[:50]:
        mcp = (run.metadata or {}).get(MCP_METADATA_KEY) or {}
        if mcp.get("session") == session.session_id and mcp.get("request_id") == request_id:
            return run
    return None


def heartbeat_seconds() -> float:
    return float(settings.DEERFLOW_CONFIG.stream_bridge.heartbeat_seconds)
