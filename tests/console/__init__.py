"""Seeded data and staff personas for the console (admin) page tests.

Checkpoints are written by the real demo graph through the process's saver
(and an explicit delta accessor for the delta thread); run rows and their
events go through the same services the executor uses, with the outcomes a
real run records (a cancelled, a rolled-back, a failed and an interrupted one).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from checkpoints.accessor import state_accessor
from runs.models import Run
from runs.services.events import run_events_append
from tests.checkpoints.support import accessor, invoke
from tests.helpers import run_turns
from threads.models import ThreadMeta


def staff(*, username: str | None = None, perms: tuple[str, ...] = (), superuser: bool = False) -> Client:
    """Return a logged-in client of a staff user holding ``perms`` ("app.codename").

    No password: hashing one costs ~0.3 s, and ``force_login`` needs none.
    """
    user = get_user_model().objects.create_user(
        username or f"staff-{uuid.uuid4().hex[:8]}", is_staff=True, is_superuser=superuser
    )
    for perm in perms:
        app_label, codename = perm.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    client = Client()
    client.force_login(user)
    client.user = user
    return client


VIEW_ALL = ("threads.view_threadmeta", "runs.view_run", "runs.view_runevent")


@dataclass
class Seeded:
    """The console's fixture world: ids by role."""

    full_thread: str = ""
    delta_thread: str = ""
    tools_thread: str = ""
    fork_thread: str = ""
    empty_thread: str = ""
    runs: dict[str, str] = field(default_factory=dict)


def _thread(owner, label: str, **fields) -> ThreadMeta:
    return ThreadMeta.objects.create(thread_id=f"{label}-{uuid.uuid4().hex[:10]}", owner=owner, **fields)


def _run(thread: ThreadMeta, *, status: str, error: str = "", cancel_action: str = "", events=(), **fields) -> Run:
    """Create a finished run row and append its events through the journal's service."""
    now = timezone.now()
    run = Run.objects.create(
        run_id=uuid.uuid4().hex,
        thread=thread,
        owner=thread.owner,
        assistant_id=thread.assistant_id,
        status=status,
        error=error,
        cancel_action=cancel_action,
        started_at=now - timezone.timedelta(seconds=2),
        finished_at=now,
        **fields,
    )
    run_events_append(thread_id=thread.pk, run_id=run.run_id, events=list(events))
    return run


def _usage_events(text: str, reply: str) -> list[dict]:
    human = HumanMessage(content=text, id=f"h-{uuid.uuid4().hex[:6]}")
    ai = AIMessage(
        content=reply,
        id=f"a-{uuid.uuid4().hex[:6]}",
        tool_calls=[{"name": "search", "args": {"q": text}, "id": "call-1"}],
    )
    tool = ToolMessage(content="3 results", tool_call_id="call-1", id=f"t-{uuid.uuid4().hex[:6]}")
    usage = {"input_tokens": 3, "output_tokens": 5, "total_tokens": 8}
    from checkpoints.serialization import serialize

    return [
        {"event_type": "run.start", "content": None, "metadata": {"assistant_id": "lead_agent"}},
        {"event_type": "llm.human.input", "content": serialize(human)},
        {
            "event_type": "llm.ai.response",
            "content": serialize(ai),
            "metadata": {"caller": "lead_agent", "usage": usage, "latency_ms": 12.5, "llm_call_index": 0},
        },
        {"event_type": "llm.tool.result", "content": serialize(tool)},
        {
            "event_type": "llm.ai.response",
            "content": serialize(AIMessage(content="final answer", id=f"a-{uuid.uuid4().hex[:6]}")),
            "metadata": {"caller": "subagent", "usage": usage, "latency_ms": 7.0, "llm_call_index": 1},
        },
    ]


def seed(owner) -> Seeded:
    """Write the console's fixture world for ``owner`` (a user); return its ids."""
    seeded = Seeded()
    full = _thread(owner, "full", display_name="Billing question", metadata={"project": "apollo"})
    run_turns(full.pk, ["Billing question", "/image please"])
    seeded.full_thread = full.pk

    delta = _thread(owner, "delta", display_name="Delta conversation")
    invoke(accessor("delta"), delta.pk, "delta one", "delta two")
    seeded.delta_thread = delta.pk

    tools = _thread(owner, "tools", display_name="Tool use")
    state_accessor("lead_agent").update(
        tools.pk,
        {
            "messages": [
                HumanMessage(content="find flights", id="m-human"),
                AIMessage(content="", id="m-ai", tool_calls=[{"name": "flights", "args": {"to": "LIS"}, "id": "c1"}]),
                ToolMessage(content="TP1234 at 9:00", tool_call_id="c1", id="m-tool"),
                AIMessage(content="Take TP1234.", id="m-ai2"),
            ]
        },
    )
    seeded.tools_thread = tools.pk

    fork = _thread(owner, "fork", display_name="Forked", status="interrupted")
    run_turns(fork.pk, ["first", "second"])
    history = state_accessor("lead_agent").history(fork.pk, limit=None)
    older = next(s for s in history if len(s.values.get("messages", [])) == 2)
    graph = state_accessor("lead_agent").graph
    graph.invoke({"messages": [HumanMessage(content="regenerated")]}, older.config)
    run_turns(fork.pk, ["/interrupt"])
    seeded.fork_thread = fork.pk

    seeded.empty_thread = _thread(owner, "empty", display_name="Nothing yet").pk

    seeded.runs["success"] = _run(
        full,
        status="success",
        model_name="demo-echo",
        total_input_tokens=6,
        total_output_tokens=10,
        total_tokens=16,
        token_usage_by_model={"demo-echo": {"input_tokens": 6, "output_tokens": 10, "total_tokens": 16}},
        token_usage_by_caller={"lead_agent": 8, "subagent": 8},
        events=_usage_events("Billing question", "let me look"),
    ).run_id
    seeded.runs["failed"] = _run(
        full,
        status="error",
        error="demo failure requested",
        events=[
            {"event_type": "run.start", "content": None},
            {"event_type": "run.error", "content": {"message": "demo failure requested", "name": "RuntimeError"}},
            {"event_type": "run.end", "content": {"status": "error", "error": "demo failure requested"}},
        ],
    ).run_id
    seeded.runs["cancelled"] = _run(fork, status="interrupted", cancel_action="interrupt").run_id
    seeded.runs["rolled_back"] = _run(
        fork, status="error", error="Rolled back by user", cancel_action="rollback"
    ).run_id
    seeded.runs["interrupted"] = _run(fork, status="interrupted").run_id
    return seeded
