"""Protocol-v2 commands: malformed params, thread ids, and interrupts answered once."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async as db

from runs.models import Run
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def thread(owner):
    return owner.client.post("/api/threads", {}, format="json").json()["thread_id"]


def _cmd(persona, thread_id, method, params):
    return persona.client.post(
        f"/api/threads/{thread_id}/commands", {"id": 1, "method": method, "params": params}, format="json"
    )


# -- malformed params ------------------------------------------------------------------

MALFORMED = [
    ("run.start", {"assistant_id": "lead_agent", "config": "x"}),
    ("run.start", {"assistant_id": "lead_agent", "config": [1]}),
    ("run.start", {"assistant_id": "lead_agent", "config": 3}),
    ("run.start", {"assistant_id": "lead_agent", "config": {"configurable": "x"}}),
    ("run.start", {"assistant_id": "lead_agent", "config": {"configurable": {"checkpoint_id": {}}}}),
    ("run.start", {"assistant_id": "lead_agent", "metadata": "x"}),
    ("run.start", {"assistant_id": "lead_agent", "multitaskStrategy": 5}),
    ("run.start", {"assistant_id": 7}),
    ("state.get", {"checkpoint_id": {}}),
    ("state.get", {"checkpoint_id": ["c"]}),
    ("state.get", {"checkpoint_id": 5}),
    ("state.listCheckpoints", {"limit": "5"}),
    ("state.fork", {"checkpoint_id": {}}),
    ("input.respond", {"responses": "x"}),
    ("input.respond", {"responses": [1]}),
    ("input.respond", {"interrupt_id": 5, "response": 1}),
    ("input.respond", {"interrupt_id": "i", "namespace": "x", "response": 1}),
    ("input.respond", {"responses": [{"interrupt_id": "i", "response": 1}, {"interrupt_id": "i", "response": 2}]}),
    ("agent.getTree", {"run_id": 5}),
    ("subscription.subscribe", {"channels": "values"}),
    ("subscription.reconnect", {"channels": {}}),
]


@pytest.mark.parametrize(("method", "params"), MALFORMED, ids=[f"{m}-{p}" for m, p in MALFORMED])
def test_malformed_params_are_invalid_argument_and_write_nothing(owner, thread, method, params):
    answer = _cmd(owner, thread, method, params)
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["type"], body["error"]) == ("error", "invalid_argument"), body
    assert not Run.objects.exists()


# -- thread ids --------------------------------------------------------------------------

BAD_IDS = ["with space", "dot.dot", "été", "x" * 65, "trailing\n"]


@pytest.mark.parametrize("thread_id", BAD_IDS, ids=repr)
async def test_a_websocket_run_start_cannot_create_a_thread_rest_cannot_address(owner, runtime, thread_id):
    from urllib.parse import quote

    from channels.testing import WebsocketCommunicator

    from deerflow_site.asgi import application

    socket = WebsocketCommunicator(
        application, f"/api/threads/{quote(thread_id)}/stream/events", headers=[(b"x-api-key", owner.key.encode())]
    )
    await socket.connect(10)
    await socket.send_json_to({"id": 1, "method": "run.start", "params": {"assistant_id": "lead_agent"}})
    answer = await socket.receive_json_from(10)
    await socket.disconnect()
    assert (answer["type"], answer["error"]) == ("error", "invalid_argument"), answer
    assert "letters, digits" in answer["message"]
    assert not await db(ThreadMeta.objects.exists)()


@pytest.mark.parametrize("thread_id", BAD_IDS, ids=repr)
def test_no_service_creates_a_thread_with_an_id_the_routes_refuse(owner, thread_id):
    from core.errors import Invalid
    from threads.services import thread_create

    with pytest.raises(Invalid, match="thread_id: Invalid thread id"):
        thread_create(owner=owner.user, thread_id=thread_id)
    assert not ThreadMeta.objects.exists()


def test_a_path_id_with_a_trailing_newline_is_refused(owner):
    answer = owner.client.get("/api/threads/abc%0A")
    assert answer.status_code == 422, answer.content


# -- one answer per interrupt ----------------------------------------------------------


def _interrupted_thread(owner) -> tuple[str, str]:
    """The owner's thread stopped at the demo agent's ``interrupt()``; return (thread id, interrupt id)."""
    from checkpoints.accessor import state_accessor
    from tests.helpers import run_turns

    thread_id = owner.client.post("/api/threads", {}, format="json").json()["thread_id"]
    run_turns(thread_id, ["/interrupt"])
    [pending] = state_accessor("lead_agent").get(thread_id).interrupts
    return thread_id, pending.id


async def _settled(run_ids: list[str], within: float = 20) -> list[str]:
    """Wait until every run has ended; return their statuses."""
    from threads.models import UNFINISHED_STATUSES

    async with asyncio.timeout(within):
        while True:
            statuses = await db(lambda: list(Run.objects.filter(pk__in=run_ids).values_list("status", flat=True)))()
            if not set(statuses) & set(UNFINISHED_STATUSES):
                return statuses
            await asyncio.sleep(0.05)


async def test_two_concurrent_answers_to_one_interrupt_run_once_and_the_loser_is_told(owner, closing_savers, runtime):
    from checkpoints.accessor import astate_accessor
    from runs.api.commands import adispatch

    thread_id, interrupt_id = await db(_interrupted_thread)(owner)

    def respond(command_id: int, answer: str):
        params = {"interrupt_id": interrupt_id, "response": answer}
        message = {"id": command_id, "method": "input.respond", "params": params}
        return adispatch(user=owner.user, thread_id=thread_id, message=message)

    answers = await asyncio.gather(respond(1, "first"), respond(2, "second"))

    outcomes = sorted((a["type"], a.get("error")) for a in answers)
    assert outcomes == [("error", "no_such_interrupt"), ("success", None)], answers
    runs = await db(lambda: list(Run.objects.filter(thread_id=thread_id).values_list("run_id", flat=True)))()
    assert len(runs) == 1
    assert await _settled(runs) == ["success"]
    [winner] = [n for n, a in zip(("first", "second"), answers, strict=True) if a["type"] == "success"]
    messages = (await (await astate_accessor("lead_agent")).aget(thread_id)).values["messages"]
    assert [m.content for m in messages if m.content.startswith("resumed")] == [f"resumed: {winner}"]
    late = await respond(3, "late")
    assert (late["error"], late["message"]) == (
        "no_such_interrupt",
        f"Unknown or already-consumed interrupt: {interrupt_id}",
    )


async def test_a_resuming_run_start_and_an_answer_to_the_same_interrupt_run_once(owner, closing_savers, runtime):
    from runs.api.commands import adispatch

    thread_id, interrupt_id = await db(_interrupted_thread)(owner)
    commands = (
        {"id": 1, "method": "run.start", "params": {"assistant_id": "lead_agent", "input": "by run.start"}},
        {"id": 2, "method": "input.respond", "params": {"interrupt_id": interrupt_id, "response": "by respond"}},
    )

    answers = await asyncio.gather(*(adispatch(user=owner.user, thread_id=thread_id, message=c) for c in commands))

    assert sorted((a["type"], a.get("error")) for a in answers) == [("error", "no_such_interrupt"), ("success", None)]
    runs = await db(lambda: list(Run.objects.filter(thread_id=thread_id).values_list("run_id", flat=True)))()
    assert len(runs) == 1 and await _settled(runs) == ["success"]


def test_answers_racing_on_separate_connections_admit_exactly_one(owner):
    """The database decides, not this process: each racer has its own connection, as two servers would."""
    from runs.services.interrupts import InterruptAnswered
    from runs.services.start import run_admit_answering
    from tests.helpers import at_once

    for round_ in range(5):
        thread_id = owner.client.post("/api/threads", {}, format="json").json()["thread_id"]

        def answer(thread_id=thread_id):
            try:
                run, _ = run_admit_answering(
                    answers=["i-1"],
                    owner=owner.user,
                    thread=ThreadMeta.objects.get(pk=thread_id),
                    assistant_id="lead_agent",
                    strategy="enqueue",
                    metadata={},
                    kwargs={},
                )
            except InterruptAnswered:
                return "refused"
            return run.run_id

        results = at_once(answer, 4)
        assert sorted(results)[-1] == "refused" and len([r for r in results if r != "refused"]) == 1, (round_, results)
        assert Run.objects.filter(thread_id=thread_id).count() == 1


def test_an_answer_whose_run_failed_no_longer_holds_the_interrupt(owner, thread):
    from runs.models import RunStatus
    from runs.services.interrupts import InterruptAnswered
    from runs.services.start import run_admit_answering

    def answer():
        run, _ = run_admit_answering(
            answers=["i-1"],
            owner=owner.user,
            thread=ThreadMeta.objects.get(pk=thread),
            assistant_id="lead_agent",
            strategy="enqueue",
            metadata={},
            kwargs={},
        )
        return run

    first = answer()
    with pytest.raises(InterruptAnswered):
        answer()
    Run.objects.filter(pk=first.pk).update(status=RunStatus.ERROR)
    second = answer()
    assert list(second.interrupt_answers.values_list("interrupt_id", flat=True)) == ["i-1"]
    assert not first.interrupt_answers.exists()
