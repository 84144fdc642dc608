"""Why did this run fail? The journal keeps the failure (class, node, message, traceback, checkpoint; secrets
scrubbed) and when each event happened; the run page shows both: a failure panel and a real waterfall."""

from __future__ import annotations

import asyncio
import operator
import re
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Annotated, TypedDict

import pytest
from channels.db import database_sync_to_async
from django.utils import timezone
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from console.timeline import group_events
from runs.execution import journal as journal_module
from runs.execution.journal import RunJournal
from runs.models import Run, RunEvent
from runs.services.events import run_events_append
from runs.services.outcome import REDACTED, failure_details
from tests.console import VIEW_ALL, staff
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "sk-live-0123456789abcdefXYZ"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "console"


class State(TypedDict):
    steps: Annotated[list[str], operator.add]


def plan(state: State) -> dict:
    return {"steps": ["planned"]}


def lookup(state: State) -> dict:
    connection = f"postgresql://billing:hunter2@db.internal/orders?api_key={SECRET}"
    raise ConnectionRefusedError(f"orders database refused {connection}")


def failing_graph():
    builder = StateGraph(State)
    builder.add_node("plan", plan)
    builder.add_node("lookup", lookup)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "lookup")
    builder.add_edge("lookup", END)
    return builder.compile(checkpointer=InMemorySaver())


async def _fail_through_journal(journal: RunJournal) -> str:
    """Run the graph with the journal as callback; record its failure as the executor does; return the checkpoint."""
    config = {"configurable": {"thread_id": "t"}, "callbacks": [journal]}
    last = None
    try:
        async for chunk in failing_graph().astream({"steps": []}, config, stream_mode="checkpoints"):
            last = chunk
    except ConnectionRefusedError as exc:
        await journal.record_failure(exc, last_checkpoint=last)
    else:
        raise AssertionError("the graph was meant to fail")
    return last["config"]["configurable"]["checkpoint_id"]


def _run_row(owner, **fields) -> Run:
    thread = ThreadMeta.objects.create(thread_id=f"fail-{uuid.uuid4().hex[:10]}", owner=owner)
    now = timezone.now()
    return Run.objects.create(
        run_id=uuid.uuid4().hex,
        thread=thread,
        owner=owner,
        assistant_id="lead_agent",
        started_at=now - timedelta(seconds=1),
        finished_at=now,
        **fields,
    )


async def test_the_journal_keeps_class_node_message_traceback_and_checkpoint_of_a_failure():
    journal = RunJournal(flush=lambda batch: asyncio.sleep(0))
    checkpoint_id = await _fail_through_journal(journal)
    (event,) = [e for e in journal.drain() if e["event_type"] == "run.error"]
    details = event["content"]
    assert details["name"] == "ConnectionRefusedError"
    assert details["node"] == "lookup"
    assert details["checkpoint_id"] == checkpoint_id  # the checkpoint after "plan", where a resume starts
    assert details["message"].startswith("orders database refused postgresql://billing:")
    assert "in lookup" in details["traceback"] and "ConnectionRefusedError" in details["traceback"]
    stored = f"{details['message']}{details['traceback']}"
    assert SECRET not in stored and "hunter2" not in stored and REDACTED in details["message"]


def test_failure_details_scrub_this_processs_secret_settings(monkeypatch):
    monkeypatch.setenv("PAYMENTS_API_TOKEN", "tok-9f8e7d6c5b")
    try:
        raise RuntimeError("upstream said no to tok-9f8e7d6c5b (Authorization: Bearer abc.def.ghi)")
    except RuntimeError as exc:
        details = failure_details(exc, last_checkpoint=None)
    assert details["message"] == f"upstream said no to {REDACTED} (Authorization: {REDACTED})"
    assert "tok-9f8e7d6c5b" not in details["traceback"]
    assert (details["node"], details["checkpoint_id"]) == (None, None)


def test_the_run_page_answers_why_a_run_failed(owner, django_assert_max_num_queries):
    journal = RunJournal(flush=lambda batch: asyncio.sleep(0))
    checkpoint_id = asyncio.run(_fail_through_journal(journal))
    run = _run_row(owner.user, status="error", error="orders database refused …")
    run_events_append(thread_id=run.thread_id, run_id=run.run_id, events=journal.drain())
    support = staff(perms=(*VIEW_ALL,))
    with django_assert_max_num_queries(13):
        html = support.get(f"/admin/runs/run/{run.pk}/change/").content.decode()
    assert '<dd id="failure-name">ConnectionRefusedError</dd>' in html
    assert '<dd id="failure-node">lookup</dd>' in html
    assert re.search(r'<pre class="traceback" id="failure-traceback">[^<]*in lookup', html)
    link = f'<a href="/admin/checkpoints/threads/{run.thread_id}/checkpoints/{checkpoint_id}/">{checkpoint_id}</a>'
    assert link in html
    assert SECRET not in html and "hunter2" not in html
    assert 'data-kind="failure"' in html and "failed: ConnectionRefusedError in lookup" in html
    # Whoever may not open checkpoint pages reads the id, without a link that would answer 403.
    runs_only = staff(perms=("runs.view_run", "runs.view_runevent")).get(f"/admin/runs/run/{run.pk}/change/")
    assert f'<dd id="failure-checkpoint">{checkpoint_id}</dd>' in runs_only.content.decode()


async def test_the_journal_stamps_each_event_and_writes_a_slow_runs_events_within_a_second(owner):
    run = await database_sync_to_async(_run_row)(owner.user, status="running")
    written: list[list[dict]] = []
    flushed = asyncio.Event()

    async def flush(batch):
        written.append(batch)
        await database_sync_to_async(run_events_append)(thread_id=run.thread_id, run_id=run.run_id, events=batch)
        flushed.set()

    journal = RunJournal(flush=flush)
    began = time.monotonic()
    await journal.record("run.start")
    await asyncio.sleep(0.05)
    await journal.record("llm.human.input", {"type": "human", "content": "hi"})
    await asyncio.wait_for(flushed.wait(), timeout=journal_module.FLUSH_WITHIN_SECONDS + 2)
    assert time.monotonic() - began < journal_module.FLUSH_WITHIN_SECONDS + 1
    assert [[e["event_type"] for e in batch] for batch in written] == [["run.start", "llm.human.input"]]
    assert journal.drain() == []  # nothing written twice with the outcome
    rows = await database_sync_to_async(list)(RunEvent.objects.filter(run_id=run.run_id).order_by("seq"))
    assert (rows[1].created_at - rows[0].created_at) >= timedelta(milliseconds=45)  # their own times, not the batch's


async def test_a_quick_run_writes_its_events_once_with_its_outcome():
    written: list[list[dict]] = []

    async def flush(batch):
        written.append(batch)

    journal = RunJournal(flush=flush)
    await journal.record("run.start")
    assert [e["event_type"] for e in journal.drain()] == ["run.start"]
    await asyncio.sleep(journal_module.FLUSH_WITHIN_SECONDS + 0.2)
    assert written == []  # the timer was called off: no extra write for a run that ended in time


def _event(seq: int, at_ms: int, event_type: str, content=None, **metadata) -> RunEvent:
    start = timezone.now()
    return RunEvent(
        seq=seq,
        event_type=event_type,
        category="message",
        content=content,
        metadata=metadata,
        created_at=start + timedelta(milliseconds=at_ms),
    )


def test_the_waterfall_spans_model_latency_and_tool_calls_from_request_to_result():
    base = timezone.now()
    events = [
        _event(1, 0, "run.start"),
        _event(2, 10, "llm.human.input", {"type": "human", "content": "fly me"}),
        _event(
            3,
            510,
            "llm.ai.response",
            {"type": "ai", "content": "", "tool_calls": [{"name": "flights", "id": "c1"}]},
            latency_ms=480.0,
        ),
        _event(4, 1510, "llm.tool.result", {"type": "tool", "content": "TP1234", "tool_call_id": "c1"}),
        _event(5, 2000, "run.end"),
    ]
    for event, at in zip(events, (0, 10, 510, 1510, 2000), strict=True):
        event.created_at = base + timedelta(milliseconds=at)
    groups = group_events(events)
    spans = [(g.kind, g.start_ms, g.end_ms) for g in groups]
    assert spans == [
        ("run", 0, 0),
        ("input", 10, 10),
        ("model call", 30, 510),
        ("tool call", 510, 1510),
        ("run", 2000, 2000),
    ]
    assert [row.delta_ms for g in groups for row in g.rows] == [0, 10, 500, 1000, 490]


# -- the job in a browser ---------------------------------------------------------

CHROMIUM = "/usr/bin/chromium"
WIDTHS = (1440, 375)


class Clicks:
    """Count what a person clicks (or submits) to get an answer."""

    def __init__(self, page) -> None:
        self.page, self.count = page, 0

    def click(self, selector: str) -> None:
        self.count += 1
        self.page.click(selector)


def _overflow(page) -> int:
    """How many CSS pixels the page is wider than the window (0: nothing to scroll sideways)."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


def _cut(page) -> int:
    """How many CSS pixels of a list's table are hidden in its scroll box (a column cut off)."""
    return page.evaluate(
        "Math.max(0, ...Array.from(document.querySelectorAll('.results'), e => e.scrollWidth - e.clientWidth))"
    )


@pytest.mark.skipif(not __import__("os").path.exists(CHROMIUM), reason="needs Chromium at /usr/bin/chromium")
def test_job_why_did_this_run_fail_in_two_clicks(owner, live_server, tmp_path):
    """From the runs list: filter "failed", open the run; the answer is on the page (budget 2; it took 3–4)."""
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    journal = RunJournal(flush=lambda batch: asyncio.sleep(0))
    checkpoint_id = asyncio.run(_fail_through_journal(journal))
    run = _run_row(owner.user, status="error", error="orders database refused …")
    run_events_append(thread_id=run.thread_id, run_id=run.run_id, events=journal.drain())
    _run_row(owner.user, status="error", error="Rolled back by user", cancel_action="rollback")
    _run_row(owner.user, status="success")
    support = staff(perms=VIEW_ALL)
    shots = tmp_path if __import__("os").environ.get("CONSOLE_SCREENSHOTS") != "1" else DOCS
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            for scheme in ("light", "dark"):
                context = browser.new_context(viewport={"width": 1440, "height": 900}, color_scheme=scheme)
                context.add_cookies(
                    [{"name": "sessionid", "value": support.cookies["sessionid"].value, "url": live_server.url}]
                )
                page = context.new_page()
                page.goto(f"{live_server.url}/admin/runs/run/")
                assert (_overflow(page), _cut(page)) == (0, 0), f"the runs list overflows at 1440 px ({scheme})"
                clicks = Clicks(page)
                clicks.click("#changelist-filter a[href*='outcome=failed']")
                page.wait_for_selector(f"a:has-text('{run.run_id}')")
                clicks.click(f"a:has-text('{run.run_id}')")
                panel = page.locator("#run-failure")
                panel.wait_for()
                assert clicks.count <= 2
                assert page.locator("#failure-name").inner_text() == "ConnectionRefusedError"
                assert page.locator("#failure-node").inner_text() == "lookup"
                assert checkpoint_id in page.locator("#failure-checkpoint").inner_text()
                assert "in lookup" in page.locator("#failure-traceback").inner_text()
                assert SECRET not in page.content()
                head = page.locator("#timeline .group-head td").first
                colours = head.evaluate("e => [getComputedStyle(e).color, getComputedStyle(e).backgroundColor]")
                assert colours[0] != colours[1], f"timeline group headers unreadable ({scheme})"
                page.screenshot(path=str(shots / f"job-failed-run-{scheme}.png"), full_page=True)
                for width in WIDTHS:
                    page.set_viewport_size({"width": width, "height": 900})
                    assert _overflow(page) == 0, f"the run page overflows at {width} px ({scheme})"
                    page.goto(f"{live_server.url}/admin/runs/run/")
                    assert _overflow(page) == 0, f"the runs list overflows at {width} px ({scheme})"
                    page.go_back()
                context.close()
        finally:
            browser.close()
