"""Protocol-v2 commands (``POST /threads/{id}/commands`` and in-band on the WebSocket).

One command in, one envelope out. Commands are one more interface over the
run services: ``run.start`` and ``input.respond`` call ``arun_start``, the
state commands the state accessor. Protocol errors are envelopes (HTTP 200)
with the reference's codes; another user's thread is ``no_such_thread``,
exactly as a missing one. Mode-gate errors stay domain errors: the HTTP
route answers them as every route does (409/503).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from channels.db import database_sync_to_async
from rest_framework.exceptions import ValidationError

from checkpoints.accessor import astate_accessor
from checkpoints.errors import CheckpointNotFoundError, UnknownGraphError
from checkpoints.serialization import serialize, thread_state
from deerflow_site.errors import Conflict, Invalid, NotFound
from runs.models import Run, RunStatus
from runs.schemas import RunCreateSerializer
from runs.selectors import thread_stream_bounds
from runs.services.start import arun_start
from runs.streaming.protocol import EventFilter, parse_filter
from threads.models import ThreadMeta

ENVELOPE_MESSAGE = "Protocol commands must include an integer id and string method."


class ProtocolError(Exception):
    """A command failed; ``code`` is the protocol's error code."""

    def __init__(self, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra


class Subscriptions:
    """A WebSocket's subscriptions; HTTP commands have none (subscribe there does nothing)."""

    def __init__(self, on_change: Callable[[str, EventFilter | None, int | None], Awaitable[int]]) -> None:
        self.filters: dict[str, EventFilter] = {}
        self._on_change = on_change

    async def subscribe(self, event_filter: EventFilter, since: int | None) -> tuple[str, int]:
        subscription_id = str(uuid.uuid4())
        self.filters[subscription_id] = event_filter
        return subscription_id, await self._on_change(subscription_id, event_filter, since)

    async def unsubscribe(self, subscription_id: str) -> None:
        if self.filters.pop(subscription_id, None) is None:
            raise ProtocolError("no_such_subscription", f"Unknown subscription: {subscription_id}")


def error_envelope(command_id: Any, code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"type": "error", "id": command_id, "error": code, "message": message, **extra}


def valid_envelope(message: Any) -> bool:
    return (
        isinstance(message, dict)
        and isinstance(message.get("id"), int)
        and not isinstance(message.get("id"), bool)
        and isinstance(message.get("method"), str)
    )


def _owned(user, thread_id: str) -> ThreadMeta | None:
    thread = ThreadMeta.objects.filter(pk=thread_id).first()
    return thread if thread is not None and thread.owner_id == user.pk else None


aowned_or_none = database_sync_to_async(_owned)


async def applied_through_seq(thread_id: str) -> int:
    _low, high = await database_sync_to_async(thread_stream_bounds)(thread_id=thread_id)
    return high


async def adispatch(*, user, thread_id: str, message: Any, subscriptions: Subscriptions | None = None) -> dict:
    """Apply one command envelope and return the response envelope."""
    if not valid_envelope(message):
        command_id = message.get("id") if isinstance(message, dict) else None
        return error_envelope(command_id, "invalid_argument", ENVELOPE_MESSAGE)
    command_id, method = message["id"], message["method"]
    params = message.get("params") or {}
    handler = HANDLERS.get(method)
    # The seq the command was applied after: read first, so the events of a run it starts
    # (which the SDKs replay from ``since = max(seen, applied_through_seq)``) are never behind it.
    applied_through = await applied_through_seq(thread_id)
    try:
        if handler is None:
            raise ProtocolError("unknown_command", f"Unknown command: {method}")
        if not isinstance(params, dict):
            raise ProtocolError("invalid_argument", "params must be an object.")
        result = await handler(user=user, thread_id=thread_id, params=params, subscriptions=subscriptions)
    except ProtocolError as exc:
        return error_envelope(command_id, exc.code, exc.message, **exc.extra)
    except ValidationError as exc:
        return error_envelope(command_id, "invalid_argument", _validation_message(exc.detail))
    except Invalid as exc:
        return error_envelope(command_id, "invalid_argument", str(exc))
    except (NotFound, CheckpointNotFoundError) as exc:
        code = "no_such_thread" if str(exc).startswith("Thread ") else "invalid_argument"
        return error_envelope(command_id, code, str(exc))
    except UnknownGraphError as exc:
        return error_envelope(command_id, "unknown_error", f"422: Invalid assistant: {exc}")
    except Conflict as exc:
        return error_envelope(command_id, "unknown_error", f"409: {exc}")
    return {"type": "success", "id": command_id, "result": result, "meta": {"applied_through_seq": applied_through}}


def _validation_message(detail: Any) -> str:
    if isinstance(detail, dict):
        return "; ".join(f"{k}: {_validation_message(v)}" for k, v in detail.items())
    if isinstance(detail, list):
        return "; ".join(_validation_message(d) for d in detail)
    return str(detail)


# -- runs ---------------------------------------------------------------------


async def _pending_interrupts(thread: ThreadMeta | None) -> list[Any]:
    if thread is None:
        return []
    snapshot = await (await astate_accessor(thread.assistant_id)).aget(thread.thread_id)
    return list(snapshot.interrupts)


def _run_request(params: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """Validate the run part of a command as ``POST /threads/{id}/runs`` would."""
    body = {
        "assistant_id": params.get("assistant_id"),
        "config": params.get("config"),
        "metadata": params.get("metadata"),
        "context": params.get("context"),
        "multitask_strategy": params.get("multitaskStrategy") or params.get("multitask_strategy") or "enqueue",
        "if_not_exists": "create",
        **extra,
    }
    serializer = RunCreateSerializer(data={k: v for k, v in body.items() if v is not None})
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


async def run_start(*, user, thread_id: str, params: dict[str, Any], subscriptions) -> dict:
    """Start a run, or resume the thread's pending interrupts with ``input``; create the thread lazily."""
    if not isinstance(params.get("assistant_id"), str) or not params["assistant_id"]:
        raise ProtocolError("invalid_argument", "run.start requires an assistant_id.")
    thread = await aowned_or_none(user, thread_id)
    if thread is None and await database_sync_to_async(ThreadMeta.objects.filter(pk=thread_id).exists)():
        raise ProtocolError("no_such_thread", f"Thread {thread_id} not found")
    configurable = (params.get("config") or {}).get("configurable") or {}
    checkpoint_id = configurable.get("checkpoint_id") if isinstance(configurable, dict) else None
    extra: dict[str, Any] = {}
    if checkpoint_id is not None:  # useStream folds forkFrom in here
        if not isinstance(checkpoint_id, str) or not checkpoint_id:
            raise ProtocolError("invalid_argument", f"Invalid config.configurable.checkpoint_id: {checkpoint_id!r}.")
        extra["checkpoint_id"] = checkpoint_id
        params = {**params, "config": _without_checkpoint(params["config"])}
    payload = params.get("input")
    if payload is not None and await _pending_interrupts(thread):
        extra["command"] = {"resume": payload}
    else:
        extra["input"] = payload
    started = await arun_start(owner=user, thread_id=thread_id, data=_run_request(params, **extra))
    return {"run_id": started.run.run_id}


def _without_checkpoint(config: dict[str, Any]) -> dict[str, Any]:
    configurable = {k: v for k, v in (config.get("configurable") or {}).items() if k != "checkpoint_id"}
    return {**config, "configurable": configurable}


async def input_respond(*, user, thread_id: str, params: dict[str, Any], subscriptions) -> dict:
    """Answer pending interrupts (one, or the batch form) with a new run resuming them."""
    responses = params.get("responses")
    if responses is None:
        responses = [params]
    if not isinstance(responses, list) or not responses or not all(isinstance(r, dict) for r in responses):
        raise ProtocolError("invalid_argument", "input.respond requires an interrupt_id.")
    thread = await aowned_or_none(user, thread_id)
    if thread is None:
        raise ProtocolError("no_such_thread", f"Thread {thread_id} not found")
    pending = {interrupt.id for interrupt in await _pending_interrupts(thread)}
    if not pending:
        raise ProtocolError("no_such_run", "No run is waiting for input on this thread.")
    resume: dict[str, Any] = {}
    for response in responses:
        interrupt_id = response.get("interrupt_id")
        if not isinstance(interrupt_id, str) or not interrupt_id:
            raise ProtocolError("invalid_argument", "input.respond requires an interrupt_id.")
        if interrupt_id not in pending or (response.get("namespace") or []) != []:
            raise ProtocolError("no_such_interrupt", f"Unknown or already-consumed interrupt: {interrupt_id}")
        resume[interrupt_id] = response.get("response")
    command: dict[str, Any] = {"resume": resume}
    for key in ("update", "goto"):
        if params.get(key) is not None:
            command[key] = params[key]
    request = {**params, "assistant_id": params.get("assistant_id") or thread.assistant_id}
    await arun_start(owner=user, thread_id=thread_id, data=_run_request(request, command=command))
    return {}


# -- subscriptions ----------------------------------------------------------------


def _filter(params: dict[str, Any]) -> EventFilter:
    try:
        return parse_filter(params)
    except ValueError as exc:
        raise ProtocolError("invalid_argument", str(exc)) from None


async def subscription_subscribe(*, user, thread_id: str, params: dict[str, Any], subscriptions) -> dict:
    event_filter = _filter(params)
    if subscriptions is None:  # over HTTP there is no connection to deliver to
        return {"subscription_id": str(uuid.uuid4()), "replayed_events": 0}
    since = params.get("since")
    since = since if isinstance(since, int) and not isinstance(since, bool) and since >= 0 else None
    subscription_id, replayed = await subscriptions.subscribe(event_filter, since)
    return {"subscription_id": subscription_id, "replayed_events": replayed}


async def subscription_reconnect(*, user, thread_id: str, params: dict[str, Any], subscriptions) -> dict:
    if subscriptions is None:
        raise ProtocolError("no_such_run", "No stream is bound to this connection.")
    if (old := params.get("subscription_id")) in subscriptions.filters:
        await subscriptions.unsubscribe(old)
    return await subscription_subscribe(user=user, thread_id=thread_id, params=params, subscriptions=subscriptions)


async def subscription_unsubscribe(*, user, thread_id: str, params: dict[str, Any], subscriptions) -> dict:
    if subscriptions is not None:
        await subscriptions.unsubscribe(str(params.get("subscription_id")))
    return {}


# -- agent and state ----------------------------------------------------------------


def _tree(thread_id: str, user, run_id: str | None) -> dict[str, Any] | None:
    from runs.models import ThreadStreamEvent

    runs = Run.objects.filter(thread_id=thread_id, thread__owner=user)
    run = runs.filter(pk=run_id).first() if run_id else runs.order_by("-created_at").first()
    if run is None:
        return None
    terminal = (
        ThreadStreamEvent.objects.filter(thread_id=thread_id, run_id=run.run_id, method="lifecycle")
        .values_list("namespace", "data")
        .order_by("seq")
    )
    statuses: dict[tuple[str, ...], str] = {}
    for namespace, data in terminal:
        statuses[tuple(namespace)] = (data or {}).get("event", "running")
    root = statuses.pop((), None) or ("running" if run.status == RunStatus.RUNNING else "completed")
    node = {"namespace": [], "status": root, "graph_name": run.assistant_id}
    children = [
        {"namespace": list(ns), "status": status, "graph_name": ns[-1].split(":", 1)[0]}
        for ns, status in statuses.items()
        if len(ns) == 1
    ]
    if children:
        node["children"] = children
    return {"tree": node}


async def agent_get_tree(*, user, thread_id: str, params: dict[str, Any], subscriptions) -> dict:
    run_id = params.get("run_id")
    tree = await database_sync_to_async(_tree)(thread_id, user, run_id if isinstance(run_id, str) else None)
    if tree is None:
        raise ProtocolError("no_such_run", "No run is bound to this thread.")
    return tree


async def _owned_thread(user, thread_id: str) -> ThreadMeta:
    thread = await aowned_or_none(user, thread_id)
    if thread is None:
        raise ProtocolError("no_such_thread", f"Thread {thread_id} not found")
    return thread


async def state_get(*, user, thread_id: str, params: dict[str, Any], subscriptions) -> dict:
    """The thread state (as ``GET /threads/{id}/state``), at the head or ``checkpoint_id``."""
    thread = await _owned_thread(user, thread_id)
    checkpoint_id = params.get("checkpoint_id")
    accessor = await astate_accessor(thread.assistant_id)
    try:
        snapshot = await accessor.aget(thread.thread_id, checkpoint_id=checkpoint_id or None)
    except CheckpointNotFoundError as exc:
        raise ProtocolError("invalid_argument", str(exc)) from None
    return serialize(thread_state(snapshot))


async def state_list_checkpoints(*, user, thread_id: str, params: dict[str, Any], subscriptions) -> dict:
    """Checkpoints newest first as ``{id, parent_id, step, source}``; ``limit`` (1–1000, default 20)."""
    thread = await _owned_thread(user, thread_id)
    limit = params.get("limit", 20)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 1000:
        raise ProtocolError("invalid_argument", "limit must be an integer from 1 to 1000.")
    accessor = await astate_accessor(thread.assistant_id)
    snapshots = await accessor.ahistory(thread.thread_id, limit=limit)
    return {
        "checkpoints": [
            {
                "id": s.config["configurable"]["checkpoint_id"],
                "parent_id": (s.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
                "step": (s.metadata or {}).get("step"),
                "source": (s.metadata or {}).get("source"),
            }
            for s in snapshots
        ]
    }


async def state_fork(*, user, thread_id: str, params: dict[str, Any], subscriptions) -> dict:
    """Copy the state at ``checkpoint_id`` into a new head (LangGraph's ``__copy__``); return its id."""
    from threads.services import thread_state_update

    thread = await _owned_thread(user, thread_id)
    checkpoint_id = params.get("checkpoint_id")
    if not isinstance(checkpoint_id, str) or not checkpoint_id:
        raise ProtocolError("invalid_argument", "state.fork requires a checkpoint_id.")
    try:
        config = await database_sync_to_async(thread_state_update)(
            thread=thread, values=None, as_node="__copy__", checkpoint_id=checkpoint_id
        )
    except CheckpointNotFoundError as exc:
        raise ProtocolError("invalid_argument", str(exc)) from None
    return {"checkpoint_id": config["configurable"]["checkpoint_id"]}


HANDLERS = {
    "run.start": run_start,
    "input.respond": input_respond,
    "subscription.subscribe": subscription_subscribe,
    "subscription.unsubscribe": subscription_unsubscribe,
    "subscription.reconnect": subscription_reconnect,
    "agent.getTree": agent_get_tree,
    "state.get": state_get,
    "state.listCheckpoints": state_list_checkpoints,
    "state.fork": state_fork,
}
