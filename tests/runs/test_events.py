"""Run event numbering: seq strictly increases per thread, even with concurrent writers."""

from __future__ import annotations

import threading
import uuid

import pytest
from django.db import connection
from django.utils import timezone

from runs.models import Run, RunEvent
from runs.services.events import run_events_append
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)


def test_concurrent_writers_never_share_or_skip_a_seq(owner):
    thread = ThreadMeta.objects.create(thread_id=f"ev-{uuid.uuid4().hex}", owner=owner.user)
    runs = [
        Run.objects.create(
            run_id=uuid.uuid4().hex, thread=thread, owner=owner.user, assistant_id="lead_agent", status="success"
        )
        for _ in range(4)
    ]
    errors = []

    def writer(run):
        try:
            for batch in range(5):
                run_events_append(
                    thread_id=thread.thread_id,
                    run_id=run.run_id,
                    events=[{"event_type": "run.start", "content": f"{run.run_id}-{batch}-{i}"} for i in range(3)],
                )
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(r,)) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    seqs = list(RunEvent.objects.filter(thread=thread).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, 4 * 5 * 3 + 1))
    # Within one run, its own events keep their order.
    for run in runs:
        contents = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("content", flat=True))
        assert contents == [f"{run.run_id}-{b}-{i}" for b in range(5) for i in range(3)]


def test_events_of_a_deleted_thread_are_dropped_quietly(owner):
    assert run_events_append(thread_id="gone", run_id="r", events=[{"event_type": "run.start"}]) == 0


# What orjson writes, what it refuses (an integer past 64 bits: json.dumps
# stores it), and SQL NULL for a missing content.
AWKWARD = [
    {"text": "naïve 漢字 🦜", "n": [1, 2.5, True, None], "nested": {"deep": [{"x": ""}]}},
    {"big": 2**70, "text": "still stored"},
    "a plain string",
    None,
]


def test_appended_events_read_back_as_written_and_stamped(owner):
    thread = ThreadMeta.objects.create(thread_id=f"ev-{uuid.uuid4().hex}", owner=owner.user)
    run = Run.objects.create(run_id=uuid.uuid4().hex, thread=thread, owner=owner.user, assistant_id="lead_agent")
    before = timezone.now()
    events = [
        {"event_type": "llm.ai.response", "content": content, "metadata": {"i": i, "tag": "é"}}
        for i, content in enumerate(AWKWARD)
    ]
    events.append({"event_type": "custom.kind", "category": "custom"})

    assert run_events_append(thread_id=thread.thread_id, run_id=run.run_id, events=events) == len(events)

    rows = list(RunEvent.objects.filter(run=run).order_by("seq"))
    assert [r.content for r in rows] == [*AWKWARD, None]
    assert [r.metadata for r in rows] == [{"i": i, "tag": "é"} for i in range(len(AWKWARD))] + [{}]
    assert [r.category for r in rows] == ["message"] * len(AWKWARD) + ["custom"]
    assert RunEvent.objects.filter(run=run, content__isnull=True).count() == 2  # SQL NULL, not JSON null
    assert all(before <= r.created_at <= timezone.now() for r in rows)


def with_run_events(settings, **values) -> None:
    config = settings.DEERFLOW_CONFIG
    settings.DEERFLOW_CONFIG = config.model_copy(update={"run_events": config.run_events.model_copy(update=values)})


def test_trace_content_is_cut_at_max_trace_content_bytes_as_deerflow_cuts_it(owner, settings):
    with_run_events(settings, max_trace_content=10)
    thread = ThreadMeta.objects.create(thread_id=f"ev-{uuid.uuid4().hex}", owner=owner.user)
    run = Run.objects.create(run_id=uuid.uuid4().hex, thread=thread, owner=owner.user, assistant_id="lead_agent")
    events = [
        {"event_type": "run.start", "content": "short"},
        {"event_type": "run.start", "content": "abcdefgh漢字", "metadata": {"k": 1}},  # 8 + 6 bytes: 漢 split
        {"event_type": "llm.error", "content": {"message": "x" * 40}},
        {"event_type": "llm.ai.response", "content": "a message is never cut " * 3},
    ]
    run_events_append(thread_id=thread.thread_id, run_id=run.run_id, events=events)
    stored = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("content", "metadata"))
    assert stored[0] == ("short", {})
    assert stored[1] == ("abcdefgh", {"k": 1, "content_truncated": True, "original_byte_length": 14})
    assert stored[2] == ('{"message"', {"content_truncated": True, "original_byte_length": 54})  # its JSON text
    assert stored[3] == ("a message is never cut " * 3, {})


def test_max_trace_content_zero_keeps_every_byte(owner, settings):
    with_run_events(settings, max_trace_content=0)
    thread = ThreadMeta.objects.create(thread_id=f"ev-{uuid.uuid4().hex}", owner=owner.user)
    run = Run.objects.create(run_id=uuid.uuid4().hex, thread=thread, owner=owner.user, assistant_id="lead_agent")
    run_events_append(
        thread_id=thread.thread_id, run_id=run.run_id, events=[{"event_type": "run.start", "content": "y" * 20000}]
    )
    assert RunEvent.objects.get(run=run).content == "y" * 20000


@pytest.mark.parametrize("track", [True, False])
async def test_track_token_usage_false_leaves_the_token_columns_at_zero(settings, track):
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, LLMResult

    from runs.execution.journal import RunJournal

    with_run_events(settings, track_token_usage=track)

    async def flush(events):
        raise AssertionError("one event does not fill a batch")

    journal = RunJournal(flush=flush)
    message = AIMessage(
        "hi",
        usage_metadata={"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
        response_metadata={"model_name": "m"},
    )
    await journal.on_llm_end(LLMResult(generations=[[ChatGeneration(message=message)]]), run_id=uuid.uuid4())
    [event] = journal.drain()
    assert event["event_type"] == "llm.ai.response" and ("usage" in event["metadata"]) is track
    fields = journal.usage_fields()
    assert fields["llm_call_count"] == 1 and fields["model_name"] == "m"
    if track:
        assert (fields["total_input_tokens"], fields["total_output_tokens"], fields["total_tokens"]) == (3, 4, 7)
        assert fields["token_usage_by_model"] == {"m": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}}
    else:
        assert (fields["total_input_tokens"], fields["total_output_tokens"], fields["total_tokens"]) == (0, 0, 0)
        assert fields["token_usage_by_model"] == {} and fields["token_usage_by_caller"] == {}
