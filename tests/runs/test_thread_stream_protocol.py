"""Protocol-v2 logic in process: the translator, filters, and the commands route's envelopes."""

from __future__ import annotations

import uuid

import pytest
from channels.db import database_sync_to_async
from langchain_core.messages import AIMessage, AIMessageChunk, ToolMessage

from runs.streaming.protocol import ProtocolTranslator, parse_filter
from tests.helpers import at_once
from threads.models import ThreadStreamEvent
from threads.stream_log import PendingEvent, thread_stream_append, thread_stream_prune


def _data(events):
    return [(e.method, e.namespace, e.data) for e in events]


# What a chat model's messages carry in LangGraph's ``messages`` stream (its run metadata).
MODEL = {
    "langgraph_node": "agent",
    "ls_provider": "fake",
    "ls_model_type": "chat",
    "ls_integration": "langchain_chat_model",
}
NODE = {"langgraph_node": "agent", "langgraph_step": 1, "ls_integration": "langgraph"}


def test_messages_follow_the_content_block_lifecycle_with_tool_call_chunks_and_usage():
    t = ProtocolTranslator(run_id="r1", graph_name="g")
    t.running()
    out = t.feed((), "messages", (AIMessageChunk(content="Let me", id="m1"), MODEL))
    out += t.feed(
        (),
        "messages",
        (
            AIMessageChunk(
                content="", id="m1", tool_call_chunks=[{"id": "tc", "name": "lookup", "args": '{"q":', "index": 0}]
            ),
            MODEL,
        ),
    )
    out += t.feed(
        (), "messages", (AIMessageChunk(content="", id="m1", tool_call_chunks=[{"args": ' "v3"}', "index": 0}]), MODEL)
    )
    out += t.feed(
        (),
        "messages",
        (
            AIMessageChunk(
                content="",
                id="m1",
                response_metadata={"finish_reason": "stop"},
                usage_metadata={"input_tokens": 3, "output_tokens": 5, "total_tokens": 8},
            ),
            MODEL,
        ),
    )
    kinds = [e.data["event"] for e in out]
    assert kinds == [
        "message-start",
        "content-block-start",
        "content-block-delta",
        "content-block-start",
        "content-block-delta",
        "content-block-delta",
        "content-block-finish",
        "content-block-finish",
        "message-finish",
    ]
    assert out[0].data == {"event": "message-start", "role": "ai", "id": "m1"}
    assert out[3].data["content"] == {"type": "tool_call_chunk", "id": "tc", "name": "lookup", "args": "", "index": 1}
    assert out[7].data["content"] == {"type": "tool_call", "id": "tc", "name": "lookup", "args": {"q": "v3"}}
    assert out[-1].data["usage"] == {"input_tokens": 3, "output_tokens": 5, "total_tokens": 8}
    assert len({e.event_id for e in out}) == len(out)


def test_only_a_chat_model_streams_messages_and_a_tool_result_is_mirrored_under_its_call():
    t = ProtocolTranslator(run_id="r1", graph_name="g")
    t.running()
    # Whole messages a node returns reach clients on ``values``, as on the Platform.
    assert t.feed((), "messages", (AIMessage(content="", id="ai-2", tool_calls=[_call("tc-9")]), NODE)) == []
    assert t.feed((), "messages", (ToolMessage(content="found v3", tool_call_id="tc-9", id="t1"), NODE)) == []
    said = t.feed((), "messages", (AIMessage(content="Hello, world!", id="ai-1"), MODEL))
    assert [e.data["event"] for e in said][0::3] == ["message-start", "content-block-finish"]
    assert said[2].data["delta"] == {"type": "text-delta", "text": "Hello, world!"}
    # A model's answer seen only as its node's output keeps the id LangChain gave it.
    returned = t.feed((), "messages", (AIMessage(content="Hi again", id="lc_run--0193"), NODE))
    assert returned[0].data == {"event": "message-start", "role": "ai", "id": "lc_run--0193"}
    finished = {
        "event": "tool-finished",
        "tool_call_id": "tc-9",
        "output": ToolMessage("found v3", tool_call_id="tc-9"),
    }
    out = t.feed(("sub:1",), "tools", finished)
    assert out[1].method == "tools" and out[1].data["event"] == "tool-finished"
    mirror = out[2:]
    assert {tuple(e.namespace) for e in mirror} == {("sub:1", "tools:tc-9")}
    assert [e.data for e in mirror] == [
        {"event": "message-start", "role": "tool", "id": "tool-tc-9", "tool_call_id": "tc-9"},
        {"event": "content-block-start", "index": 0, "content": {"type": "text", "text": ""}},
        {"event": "content-block-delta", "index": 0, "content": {"type": "text", "text": "found v3"}},
        {"event": "content-block-finish", "index": 0, "content": {"type": "text", "text": "found v3"}},
        {"event": "message-finish", "metadata": {}},
    ]
    raw = t.feed((), "tools", {"event": "tool-finished", "tool_call_id": "tc-7", "output": {"hits": [1, 2]}})
    assert raw[3].data["content"] == {"type": "text", "text": '{"hits": [1, 2]}'}


def _call(call_id: str) -> dict:
    return {"id": call_id, "name": "lookup", "args": {"q": "v3"}, "type": "tool_call"}


def test_checkpoint_precedes_the_values_of_its_step_and_subgraphs_open_and_close():
    t = ProtocolTranslator(run_id="r1", graph_name="g")
    t.running()
    out = t.feed((), "values", {"messages": []})
    assert out == []  # held until its checkpoint
    out += t.feed(
        (),
        "checkpoints",
        {
            "config": {"configurable": {"checkpoint_id": "c1"}},
            "parent_config": {"configurable": {"checkpoint_id": "c0"}},
            "metadata": {"step": 1, "source": "loop"},
        },
    )
    out += t.feed(("sub:abc",), "custom", {"name": "progress"})
    out += t.feed((), "updates", {"sub": {"x": 1}})
    assert _data(out) == [
        ("checkpoints", [], {"id": "c1", "parent_id": "c0", "step": 1, "source": "loop"}),
        ("values", [], {"messages": []}),
        (
            "lifecycle",
            ["sub:abc"],
            {"event": "started", "namespace": ["sub:abc"], "graph_name": "sub", "trigger_call_id": "abc"},
        ),
        ("custom", ["sub:abc"], {"name": "progress"}),
        ("updates", [], {"sub": {"x": 1}}),
        ("lifecycle", ["sub:abc"], {"event": "completed", "graph_name": "sub"}),
    ]


def test_interrupts_are_requested_before_the_single_terminal_event_and_carry_payload_and_value():
    t = ProtocolTranslator(run_id="r1", graph_name="g")
    t.running()
    end = t.terminal(status="interrupted", error=None, interrupts=[{"id": "i1", "value": {"q": 1}}])
    assert _data(end) == [
        ("input.requested", [], {"interrupt_id": "i1", "payload": {"q": 1}, "value": {"q": 1}}),
        ("lifecycle", [], {"event": "interrupted", "graph_name": "g"}),
    ]
    assert end[1].event_id == "synth:r1:lc||interrupted"
    assert ProtocolTranslator(run_id="r2", graph_name="g").terminal(status="completed", error=None, interrupts=[]) == []


def test_filters_match_channels_custom_names_namespaces_and_depth():
    def event(method, ns, data=None):
        return {"method": method, "params": {"namespace": ns, "data": data or {}}}

    f = parse_filter({"channels": ["values", "custom:progress", "input"], "namespaces": [[]], "depth": 0})
    assert f.matches(event("values", []))
    assert not f.matches(event("values", ["sub:1"]))
    assert f.matches(event("custom", [], {"name": "progress"}))
    assert not f.matches(event("custom", [], {"name": "other"}))
    assert f.matches(event("input.requested", []))
    sub = parse_filter({"channels": ["messages"], "namespaces": [["sub"]], "depth": True})
    assert sub.matches(event("messages", ["sub:1", "inner:2"])) and not sub.matches(event("messages", []))
    for bad in ({"channels": []}, {"channels": ["debug"]}, {}):
        with pytest.raises(ValueError):
            parse_filter(bad)


@pytest.fixture
def thread(owner):
    return owner.client.post("/api/threads", {}, format="json").json()["thread_id"]


def _cmd(persona, thread_id, body):
    return persona.client.post(f"/api/threads/{thread_id}/commands", body, format="json")


@pytest.mark.django_db(transaction=True)
def test_envelope_errors_and_unknown_commands(owner, thread):
    bad = _cmd(owner, thread, {"id": "x", "method": "run.start"})
    assert bad.status_code == 400
    assert bad.json() == {
        "type": "error",
        "id": "x",
        "error": "invalid_argument",
        "message": "Protocol commands must include an integer id and string method.",
    }
    unknown = _cmd(owner, thread, {"id": 2, "method": "input.inject", "params": {}})
    assert unknown.status_code == 200 and unknown.json()["error"] == "unknown_command"
    missing = _cmd(owner, thread, {"id": 3, "method": "run.start", "params": {}})
    assert missing.json()["error"] == "invalid_argument"
    assert missing.json()["message"] == "run.start requires an assistant_id."
    sub = _cmd(owner, thread, {"id": 5, "method": "subscription.subscribe", "params": {"channels": ["values"]}})
    assert sub.json()["type"] == "success" and sub.json()["meta"] == {"applied_through_seq": 0}
    tree = _cmd(owner, thread, {"id": 6, "method": "agent.getTree", "params": {}})
    assert tree.json()["error"] == "no_such_run"


@pytest.mark.django_db(transaction=True)
def test_another_users_thread_is_no_such_thread_and_writes_nothing(owner, other, thread):
    for method, params in (
        ("run.start", {"assistant_id": "lead_agent", "input": None}),
        ("input.respond", {"interrupt_id": "i", "response": 1}),
        ("state.get", {}),
        ("state.listCheckpoints", {}),
    ):
        answer = _cmd(other, thread, {"id": 1, "method": method, "params": params}).json()
        assert (answer["error"], answer["message"]) == ("no_such_thread", f"Thread {thread} not found")
    assert _cmd(other, str(uuid.uuid4()), {"id": 1, "method": "state.get"}).json()["error"] == "no_such_thread"
    assert not ThreadStreamEvent.objects.exists()


@pytest.mark.django_db(transaction=True)
async def test_state_commands_read_through_the_accessor_and_respond_needs_an_interrupt(owner, thread):
    from checkpoints.runtime import aclose_async_resources
    from runs.api.commands import adispatch

    async def cmd(method, params=None):
        return await adispatch(user=owner.user, thread_id=thread, message={"id": 1, "method": method, "params": params})

    try:
        state = await cmd("state.get")
        assert state["type"] == "success" and state["result"]["values"] == {}
        assert (await cmd("state.listCheckpoints", {"limit": 5}))["result"] == {"checkpoints": []}
        assert (await cmd("state.listCheckpoints", {"limit": 0}))["error"] == "invalid_argument"
        assert (await cmd("state.fork", {"checkpoint_id": "nope"}))["error"] == "invalid_argument"
        assert (await cmd("input.respond", {"interrupt_id": "i", "response": 1}))["error"] == "no_such_run"
    finally:
        await aclose_async_resources()


@pytest.mark.django_db(transaction=True)
def test_stream_body_is_validated(owner, thread):
    for body, detail in (
        ({"channels": []}, "channels is required and must be a non-empty array"),
        ({"channels": ["debug"]}, "channels contains unsupported entries: debug."),
    ):
        answer = owner.client.post(f"/api/threads/{thread}/stream/events", body, format="json")
        assert answer.status_code == 400 and answer.json()["detail"].startswith(detail)


@pytest.mark.django_db(transaction=True)
def test_an_append_to_a_thread_deleted_meanwhile_writes_nothing(owner, thread):
    """A run's last batch can arrive after its thread was deleted: nothing is written, nothing published."""
    events = [PendingEvent("r:0", "custom", [], {"i": 0})]
    assert thread_stream_append(thread_id="no-such-thread", run_id="r", events=events) == []
    assert not ThreadStreamEvent.objects.filter(thread_id="no-such-thread").exists()
    # An empty log starts at 1; a thread's numbers continue after its own last one only.
    assert [e["seq"] for e in thread_stream_append(thread_id=thread, run_id="r", events=events)] == [1]


@pytest.mark.django_db(transaction=True)
def test_concurrent_appends_to_one_thread_number_its_events_without_a_gap_or_a_clash(thread):
    """Two writers at once (a finishing run and its successor): the thread's row lock orders them."""

    def writer() -> list[int]:
        name = uuid.uuid4().hex[:8]
        return [
            e["seq"]
            for i in range(15)
            for e in thread_stream_append(
                thread_id=thread, run_id=name, events=[PendingEvent(f"{name}:{i}", "custom", [], {"i": i})]
            )
        ]

    numbers = at_once(writer, 2)
    assert sorted(numbers[0] + numbers[1]) == list(range(1, 31))
    assert numbers[0] == sorted(numbers[0]) and numbers[1] == sorted(numbers[1])


@pytest.mark.django_db(transaction=True)
def test_log_numbers_per_thread_and_retention_keeps_the_newest(owner, thread, settings):
    events = [PendingEvent(f"r:{i}", "custom", [], {"i": i}) for i in range(5)]
    first = thread_stream_append(thread_id=thread, run_id="r", events=events[:3])
    second = thread_stream_append(thread_id=thread, run_id="r", events=events[3:])
    assert [e["seq"] for e in first + second] == [1, 2, 3, 4, 5]
    settings.DEERFLOW_CONFIG.thread_stream.max_events_per_thread = 2
    try:
        assert thread_stream_prune(thread_id=thread) == 3
    finally:
        settings.DEERFLOW_CONFIG.thread_stream.max_events_per_thread = 0
    assert list(ThreadStreamEvent.objects.values_list("seq", flat=True)) == [4, 5]
    meta = owner.client.post(
        f"/api/threads/{thread}/commands",
        {"id": 1, "method": "subscription.subscribe", "params": {"channels": ["values"]}},
        format="json",
    )
    assert meta.json()["meta"] == {"applied_through_seq": 5}


@pytest.mark.django_db(transaction=True)
def test_a_run_ending_trims_the_log_to_the_newest_events_its_terminal_last(owner, thread, settings):
    from runs.models import RunStatus
    from runs.services.admission import run_admit
    from runs.services.lifecycle import Outcome, run_claim, run_finalize
    from threads.models import ThreadMeta

    meta = ThreadMeta.objects.get(pk=thread)
    run, _ = run_admit(
        owner=owner.user, thread=meta, assistant_id="lead_agent", strategy="reject", metadata={}, kwargs={}
    )
    assert run_claim(run_id=run.run_id, worker_id="w", lease_seconds=30) is not None
    translator = ProtocolTranslator(run_id=run.run_id, graph_name="lead_agent")
    progress = [PendingEvent(f"r:{i}", "custom", [], {"i": i}) for i in range(4)]
    thread_stream_append(thread_id=thread, run_id=run.run_id, events=[*translator.running(), *progress])
    settings.DEERFLOW_CONFIG.thread_stream.max_events_per_thread = 3
    try:
        done = run_finalize(
            run_id=run.run_id,
            worker_id="w",
            outcome=Outcome(status=RunStatus.SUCCESS),
            thread_id=thread,
            stream_events=translator.terminal(status="completed", error=None, interrupts=[]),
        )
    finally:
        settings.DEERFLOW_CONFIG.thread_stream.max_events_per_thread = 0
    assert done.finalized and [e["seq"] for e in done.stream_envelopes] == [6]
    kept = ThreadStreamEvent.objects.filter(thread_id=thread).order_by("seq").values_list("seq", "method", "data")
    assert list(kept) == [
        (4, "custom", {"i": 2}),
        (5, "custom", {"i": 3}),
        (6, "lifecycle", {"event": "completed", "graph_name": "lead_agent"}),
    ]


@pytest.mark.django_db(transaction=True)
def test_an_orphaned_run_gets_exactly_one_failed_terminal(owner, thread):
    from runs.models import ORPHAN_MESSAGE
    from runs.services.admission import run_admit
    from runs.services.lifecycle import run_claim, run_fail_orphan
    from threads.models import ThreadMeta

    meta = ThreadMeta.objects.get(pk=thread)
    run, _ = run_admit(
        owner=owner.user, thread=meta, assistant_id="lead_agent", strategy="reject", metadata={}, kwargs={}
    )
    assert run_claim(run_id=run.run_id, worker_id="gone", lease_seconds=30) is not None
    translator = ProtocolTranslator(run_id=run.run_id, graph_name="lead_agent")
    thread_stream_append(thread_id=thread, run_id=run.run_id, events=translator.running())
    run_fail_orphan(run_id=run.run_id)
    run_fail_orphan(run_id=run.run_id)
    lifecycle = list(ThreadStreamEvent.objects.filter(method="lifecycle").values_list("data", flat=True))
    assert lifecycle == [
        {"event": "running", "graph_name": "lead_agent"},
        {"event": "failed", "graph_name": "lead_agent", "error": ORPHAN_MESSAGE},
    ]


@pytest.fixture
def agentic_graph(settings):
    settings.DEERFLOW = {
        **settings.DEERFLOW,
        "GRAPHS": {**settings.DEERFLOW["GRAPHS"], "agentic": "tests.runs.graphs:agentic"},
    }
    return "agentic"


@pytest.mark.django_db(transaction=True)
async def test_a_run_logs_tools_a_subgraph_and_its_messages_in_order(owner, agentic_graph):
    from channels.db import database_sync_to_async as db

    from checkpoints.runtime import aclose_async_resources
    from core.bridge import MemoryStreamBridge
    from runs.execution.executor import RunExecution
    from runs.models import Run
    from runs.services.admission import run_admit
    from runs.services.lifecycle import run_claim
    from threads.services import thread_create

    def admitted():
        thread, _ = thread_create(owner=owner.user, thread_id=None, metadata={"graph_id": agentic_graph})
        kwargs = {"input": {"messages": [{"role": "user", "content": "go"}]}, "stream_mode": ["values"]}
        run, _ = run_admit(
            owner=owner.user, thread=thread, assistant_id=agentic_graph, strategy="reject", metadata={}, kwargs=kwargs
        )
        run_claim(run_id=run.run_id, worker_id="w", lease_seconds=30)
        return Run.objects.select_related("thread").get(pk=run.pk)

    run = await db(admitted)()
    try:
        outcome = await RunExecution(run, bridge=MemoryStreamBridge(max_events=1000), worker_id="w").execute()
    finally:
        await aclose_async_resources()
    assert outcome.status == "success"
    log = await db(
        lambda: [e.envelope() for e in ThreadStreamEvent.objects.filter(thread_id=run.thread_id).order_by("seq")]
    )()
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
    assert len({e["event_id"] for e in log}) == len(log)
    tools = [e["params"]["data"]["event"] for e in log if e["method"] == "tools"]
    assert tools[0] == "tool-started" and tools[-1] == "tool-finished"
    [started] = [e for e in log if e["method"] == "lifecycle" and e["params"]["data"]["event"] == "started"]
    namespace = started["params"]["namespace"]
    assert namespace[0].startswith("sub:") and started["params"]["data"]["trigger_call_id"] == namespace[0][4:]
    sub_text = [
        e["params"]["data"]["delta"]["text"]
        for e in log
        if e["method"] == "messages"
        and e["params"]["namespace"] == namespace
        and e["params"]["data"]["event"] == "content-block-delta"
    ]
    assert "".join(sub_text) == "sub says hi"
    ends = [(e["params"]["namespace"], e["params"]["data"]["event"]) for e in log if e["method"] == "lifecycle"]
    assert ends[0] == ([], "running") and ends[-1] == ([], "completed")
    assert (namespace, "completed") in ends


@pytest.mark.django_db(transaction=True)
def test_applied_through_seq_is_the_log_position_the_command_was_applied_at(owner, thread, monkeypatch):
    """The SDKs resume from ``since = max(seen, applied_through_seq)``: a run's own events must lie after it."""
    from runs.api import commands

    thread_stream_append(
        thread_id=thread, run_id="r0", events=[PendingEvent(f"r0:{i}", "custom", [], {}) for i in range(3)]
    )
    subscribe = commands.HANDLERS["subscription.subscribe"]

    async def subscribe_then_the_run_logs(**kwargs):  # what a started run does while its command answers
        result = await subscribe(**kwargs)
        await database_sync_to_async(thread_stream_append)(
            thread_id=thread, run_id="r1", events=[PendingEvent("r1:0", "lifecycle", [], {"event": "running"})]
        )
        return result

    monkeypatch.setitem(commands.HANDLERS, "subscription.subscribe", subscribe_then_the_run_logs)
    answer = _cmd(owner, thread, {"id": 1, "method": "subscription.subscribe", "params": {"channels": ["custom"]}})
    assert answer.json()["meta"] == {"applied_through_seq": 3}
    assert ThreadStreamEvent.objects.filter(thread_id=thread).count() == 4


@pytest.mark.django_db(transaction=True)
def test_the_log_reads_back_the_envelopes_it_published(owner, thread):
    awkward = [
        {"text": "naïve 漢字 🦜", "n": [1, 2.5, True, None], "nested": {"deep": [{"x": ""}]}},
        {"big": 2**70},  # past 64 bits: orjson refuses it, json.dumps stores it
        None,
        "plain",
    ]
    events = [PendingEvent(f"r:{i}", "custom", ["sub:1"] if i % 2 else [], data) for i, data in enumerate(awkward)]
    events.append(PendingEvent("r:nul", "custom", [], {"text": "a\x00b"}))

    published = thread_stream_append(thread_id=thread, run_id="r", events=events)

    stored = [row.envelope() for row in ThreadStreamEvent.objects.filter(thread_id=thread).order_by("seq")]
    assert stored == published
    assert [e["params"]["data"] for e in published] == [*awkward, {"text": "a\ufffdb"}]  # NUL made storable
    assert ThreadStreamEvent.objects.filter(thread_id=thread, data__isnull=True).count() == 1
