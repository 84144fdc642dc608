"""Start a run: resolve the thread, check the resume point, admit, announce, dispatch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction

from checkpoints.accessor import astate_accessor
from checkpoints.errors import CheckpointNotFoundError
from core.access import AccessScope, aauthorize
from core.db import db_async
from core.errors import Invalid, ThreadNotFound
from runs import dispatch
from runs.assistant_selectors import ResolvedAssistant, assistant_resolve, system_assistant
from runs.models import Run, RunStatus
from runs.services.admission import run_admit
from runs.services.interrupts import interrupt_answers_record
from runs.services.webhooks import awebhook_url_check, redacted_url
from threads.models import ThreadMeta
from threads.selectors import owned_thread_or_none
from threads.services import thread_create


@dataclass
class StartedRun:
    run: Run
    thread: ThreadMeta


def _checkpoint_id(data: dict[str, Any], thread_id: str) -> str | None:
    checkpoint = data.get("checkpoint") or {}
    if checkpoint.get("thread_id") not in (None, thread_id):
        raise Invalid("checkpoint.thread_id", "does not match the run's thread")
    return data.get("checkpoint_id") or checkpoint.get("checkpoint_id") or None


def run_kwargs(data: dict[str, Any], checkpoint_id: str | None) -> dict[str, Any]:
    """Return what the executor needs, as stored on the run row (no secrets: rejected earlier)."""
    runs = settings.DEERFLOW_CONFIG.runs
    config = data.get("config") or {}
    # None: the graph's own with_config default applies, else runs.recursion_limit (executor).
    recursion_limit = (
        min(config["recursion_limit"], runs.max_recursion_limit) if config.get("recursion_limit") else None
    )
    durability = data.get("durability")
    if durability is None and data.get("checkpoint_during") is not None:
        durability = "async" if data["checkpoint_during"] else "exit"
    return {
        "input": data.get("input"),
        "command": data.get("command"),
        "config": {k: v for k, v in config.items() if k in ("tags", "configurable", "run_name")},
        "context": data.get("context"),
        "stream_mode": data.get("stream_mode") or ["values"],
        "stream_subgraphs": data.get("stream_subgraphs", False),
        "stream_resumable": data.get("stream_resumable", False),
        "on_disconnect": data.get("on_disconnect") or "continue",
        "interrupt_before": data.get("interrupt_before"),
        "interrupt_after": data.get("interrupt_after"),
        "checkpoint_id": checkpoint_id,
        "durability": durability,
        "recursion_limit": recursion_limit,
        "on_completion": data.get("on_completion"),
        "after_seconds": data.get("after_seconds") or None,
        # Where the webhook goes, without the token a URL may carry (the URL itself: Run.webhook).
        "webhook": redacted_url(data["webhook"]) if data.get("webhook") else None,
    }


def admission_options(data: dict[str, Any]) -> dict[str, Any]:
    """Return ``run_admit``'s delayed start and webhook from a validated run request."""
    return {"after_seconds": data.get("after_seconds") or 0, "webhook": data.get("webhook") or ""}


def with_assistant(data: dict[str, Any], assistant: ResolvedAssistant) -> dict[str, Any]:
    """Return the run request with the assistant's config and context merged under the run's own.

    The run's keys win; ``configurable`` is merged key by key (the Platform's
    rule), ``context`` likewise. ``assistant_id`` becomes the graph to run.
    """
    base, own = assistant.config or {}, data.get("config") or {}
    config = {**base, **own}
    configurable = {**(base.get("configurable") or {}), **(own.get("configurable") or {})}
    if configurable or "configurable" in config:
        config["configurable"] = configurable
    context = {**(assistant.context or {}), **(data.get("context") or {})}
    return {**data, "assistant_id": assistant.graph_id, "config": config, "context": context or data.get("context")}


def assistant_kwargs(assistant: ResolvedAssistant) -> dict[str, Any]:
    """Return what the run row keeps of its assistant (the id clients see, the version that ran)."""
    return {"assistant_id": assistant.assistant_id, "assistant_version": assistant.version}


def _existing_thread(*, owner, scope: AccessScope, thread_id: str, if_not_exists: str | None) -> ThreadMeta | None:
    """Return the caller's thread, None when it may be created, else raise 404.

    The scope is in the query: another user's thread and an id that exists
    nowhere cost the same (``bench.oracle``: loading the other's row made its
    404 measurably slower, 0.1 ms, on PostgreSQL).
    """
    thread = owned_thread_or_none(thread_id=thread_id, owner=owner, scope=scope)
    if thread is not None:
        return thread
    if if_not_exists == "create" and not ThreadMeta.objects.filter(pk=thread_id).exists():
        return None
    raise ThreadNotFound(thread_id)


def _new_thread(
    *, owner, thread_id: str | None, graph_id: str, assistant_id: str, granted: dict[str, Any]
) -> ThreadMeta:
    # ``granted``: metadata custom auth's create_run handler added, so the thread lands in the caller's scope.
    metadata: dict[str, Any] = {**granted, "graph_id": graph_id, "assistant_id": assistant_id}
    if thread_id is None:  # stateless: a thread of its own, deleted on completion by default
        metadata["stateless"] = True
    thread, _ = thread_create(owner=owner, thread_id=thread_id, metadata=metadata)
    return thread


async def arun_start(*, owner, thread_id: str | None, data: dict[str, Any], answers: Sequence[str] = ()) -> StartedRun:
    """Admit a validated run request and hand it to a worker.

    Every check (thread ownership, resume checkpoint, mode gate, the
    webhook's addresses) runs before anything is written, so a rejected
    request leaves no thread and no run. ``answers``: the interrupts the
    run resumes; an answer admitted first wins (``InterruptAnswered``).
    """
    await arun_request_check(data)
    data, scope, granted = await _aauthorized_run(owner=owner, thread_id=thread_id, data=data)
    # A graph name or system id is resolved from the registry, on the loop; a user's assistant is a row.
    assistant = system_assistant(data["assistant_id"]) or await db_async(assistant_resolve)(
        owner=owner, assistant_id=data["assistant_id"]
    )
    data = with_assistant(data, assistant)
    checkpoint_id = _checkpoint_id(data, thread_id or "")
    if thread_id is None:
        if checkpoint_id:
            raise Invalid("checkpoint", "stateless runs cannot resume from a checkpoint")
        data = {**data, "on_completion": data.get("on_completion") or "delete"}
        thread = None
    else:
        thread = await db_async(_existing_thread)(
            owner=owner, scope=scope, thread_id=thread_id, if_not_exists=data.get("if_not_exists")
        )
    if checkpoint_id:
        if thread is None:
            raise CheckpointNotFoundError(checkpoint_id)
        accessor = await astate_accessor(data["assistant_id"])
        await accessor.aget(thread.thread_id, checkpoint_id=checkpoint_id)  # 404 or mode 409 first
    if thread is None:
        thread = await db_async(_new_thread)(
            owner=owner,
            thread_id=thread_id,
            graph_id=data["assistant_id"],
            assistant_id=assistant.assistant_id,
            granted=granted,
        )
    strategy = data.get("multitask_strategy") or settings.DEERFLOW_CONFIG.runs.default_multitask_strategy
    run, superseded = await db_async(run_admit_answering)(
        answers=answers,
        owner=owner,
        thread=thread,
        assistant_id=data["assistant_id"],
        strategy=strategy,
        metadata=data.get("metadata") or {},
        kwargs={**run_kwargs(data, checkpoint_id), **assistant_kwargs(assistant)},
        **admission_options(data),
    )
    for older in superseded:
        if older.status == RunStatus.RUNNING:
            await dispatch.get().signal_cancel(run_id=older.run_id, worker_id=older.worker_id, action=strategy)
    if run.status == RunStatus.PENDING:
        dispatch.get().dispatch_soon(run.run_id, thread_id=thread.thread_id, not_before=run.not_before, admitted=run)
    return StartedRun(run=run, thread=thread)


async def _aauthorized_run(
    *, owner, thread_id: str | None, data: dict[str, Any]
) -> tuple[dict[str, Any], AccessScope, dict]:
    """Ask custom auth's ``threads.create_run`` handler; return the request, the thread scope, metadata it added.

    The handler sees the run request as the Platform passes it and may add
    to its metadata (stored on the run). The authenticated user reaches the
    graph in ``configurable``, as on the Platform (``langgraph_auth_user``).
    Without custom auth: the request unchanged and the owner's scope.
    """
    sent = dict(data.get("metadata") or {})
    value = {
        "thread_id": thread_id,
        "assistant_id": data["assistant_id"],
        "metadata": dict(sent),
        "multitask_strategy": data.get("multitask_strategy"),
        "if_not_exists": data.get("if_not_exists"),
        "after_seconds": data.get("after_seconds"),
        "kwargs": {k: data.get(k) for k in ("input", "command", "config", "context", "stream_mode")},
    }
    scope = await aauthorize(owner, resource="threads", action="create_run", value=value)
    auth_user = getattr(owner, "langgraph_auth_user", None)
    if auth_user is None:
        return data, scope, {}
    granted = {k: v for k, v in value["metadata"].items() if k not in sent or sent[k] != v}
    config = dict(data.get("config") or {})
    config["configurable"] = {
        **(config.get("configurable") or {}),
        "langgraph_auth_user": auth_user,
        "langgraph_auth_permissions": auth_user.get("permissions", []),
    }
    return {**data, "metadata": value["metadata"], "config": config}, scope, granted


def run_admit_answering(*, answers: Sequence[str], **admission: Any) -> tuple[Run, list[Run]]:
    """``run_admit``, recording the run as the answer to ``answers`` in the same transaction.

    The admission locks the thread first, so a second answer to the same
    interrupt waits for this one to commit and is refused, in any process.
    """
    if not answers:
        return run_admit(**admission)
    with transaction.atomic():
        run, superseded = run_admit(**admission)
        interrupt_answers_record(run=run, interrupt_ids=answers)
        return run, superseded


async def arun_request_check(data: dict[str, Any]) -> None:
    """Check what a validated run request needs the network for: the webhook host's addresses (422)."""
    if data.get("webhook"):
        await awebhook_url_check(data["webhook"])
