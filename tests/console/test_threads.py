"""The console's thread pages over seeded data: list figures, filters, turns, the conversation, export."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.utils import timezone

from runs.models import Run
from tests.console import VIEW_ALL, _thread, seed, staff
from tests.threads.test_state_modes import process_in_mode
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)

LIST = "/admin/threads/threadmeta/"


@pytest.fixture
def world(owner):
    return seed(owner.user)


@pytest.fixture
def support(db):
    return staff(perms=VIEW_ALL)


@pytest.fixture
def exporter(db):
    return staff(perms=(*VIEW_ALL, "threads.export_threadmeta"))


def row_of(html: str, thread_id: str) -> str:
    match = re.search(rf"<tr[^>]*>(?:(?!</tr>).)*{re.escape(thread_id)}(?:(?!</tr>).)*</tr>", html, re.S)
    assert match, f"{thread_id} is not listed"
    return match.group(0)


def listed(html: str, world) -> set[str]:
    ids = {world.full_thread, world.delta_thread, world.tools_thread, world.fork_thread, world.empty_thread}
    return {thread_id for thread_id in ids if thread_id in html}


def test_list_shows_counts_bytes_and_mode_badges(support, world):
    html = support.get(LIST).content.decode()
    full, delta, empty = (
        row_of(html, world.full_thread),
        row_of(html, world.delta_thread),
        row_of(html, world.empty_thread),
    )
    assert "Billing question" in full and '<span class="mode-badge mode-full">full</span>' in full
    assert '<span class="mode-badge mode-delta">delta</span>' in delta
    assert "(1 failed)" in full  # the failed run counts, the rolled-back one on the fork does not
    assert "failed" not in row_of(html, world.fork_thread)
    checkpoints = re.search(r'<span class="ckpt-count">(\d+)</span>', full).group(1)
    assert int(checkpoints) > 4
    assert re.search(r'<span class="stored">[\d.]+\xa0(bytes|KB)</span>', full)
    assert '<td class="field-storage"><span class="ckpt-count">0</span></td>' in empty and "mode-badge" not in empty


def test_filters_by_mode_failed_runs_status_and_owner(support, world, owner, other):
    assert listed(support.get(LIST, {"mode": "delta"}).content.decode(), world) == {world.delta_thread}
    full = listed(support.get(LIST, {"mode": "full"}).content.decode(), world)
    assert full == {world.full_thread, world.tools_thread, world.fork_thread}
    assert listed(support.get(LIST, {"mode": "none"}).content.decode(), world) == {world.empty_thread}
    assert listed(support.get(LIST, {"failed": "yes"}).content.decode(), world) == {world.full_thread}
    assert listed(support.get(LIST, {"status": "interrupted"}).content.decode(), world) == {world.fork_thread}
    others = _thread(other.user, "others").pk
    assert others in support.get(LIST, {"owner__id__exact": other.user.pk}).content.decode()
    assert listed(support.get(LIST, {"owner__id__exact": other.user.pk}).content.decode(), world) == set()
    assert len(listed(support.get(LIST, {"owner__id__exact": owner.user.pk}).content.decode(), world)) == 5


def test_preview_retention_is_a_list_action(support, world):
    body = {"action": "preview_retention", "_selected_action": [world.full_thread, world.fork_thread]}
    response = support.post(LIST, body)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/checkpoints/retention/?ids=")
    assert {world.full_thread, world.fork_thread} <= set(
        response["Location"].split("=", 1)[1].replace("%2C", ",").split(",")
    )


def test_search_by_title_id_and_metadata_value(support, world):
    assert listed(support.get(LIST, {"q": "Billing"}).content.decode(), world) == {world.full_thread}
    assert listed(support.get(LIST, {"q": world.delta_thread}).content.decode(), world) == {world.delta_thread}
    assert listed(support.get(LIST, {"q": "apollo"}).content.decode(), world) == {world.full_thread}


def test_list_costs_a_fixed_number_of_queries(support, world, owner, django_assert_max_num_queries):
    from tests.helpers import run_turns

    for index in range(8):
        run_turns(_thread(owner.user, f"bulk{index}").pk, ["hello"])
    # session, user, permissions (2), the page, the owner filter, the assistant filter, the stats query
    with django_assert_max_num_queries(10) as captured:
        assert support.get(LIST).status_code == 200
    storage_reads = [q["sql"] for q in captured.captured_queries if "checkpoints" in q["sql"].lower()]
    assert len(storage_reads) == 1, storage_reads  # one grouped query for the whole page of 13 threads
    with django_assert_max_num_queries(10):
        assert support.get(LIST, {"mode": "full", "failed": "no", "q": "bulk"}).status_code == 200


def test_thread_page_shows_the_conversation_with_hidden_and_image_placeholders(exporter, world):
    html = exporter.get(f"{LIST}{world.full_thread}/change/").content.decode()
    conversation = re.search(
        r'<div class="console-section conversation".*?</div>\s*<div class="console-section" id="thread-storage"',
        html,
        re.S,
    ).group(0)
    assert "Billing question" in conversation and "echo: Billing question" in conversation
    assert (
        'class="message role-human hidden-message"' in conversation
        and '<span class="flag">hidden</span>' in conversation
    )
    assert re.search(r"\[image image/png, \d+ bytes\]", conversation)
    assert "data:image" not in html
    assert "demo failure requested" in html  # the turns table
    assert 'id="storage-checkpoints"' in html and "Export JSON" in html
    assert f'href="/admin/checkpoints/threads/{world.full_thread}/lineage/" id="lineage-link"' in html
    assert f'href="/admin/checkpoints/retention/?ids={world.full_thread}" id="retention-link"' in html
    assert 'href="/admin/checkpoints/storage/" id="storage-page-link"' in html


def test_thread_page_pairs_tool_calls_with_their_results(support, world, monkeypatch):
    monkeypatch.setattr("threads.conversation.MESSAGES_SHOWN", 3)
    html = support.get(f"{LIST}{world.tools_thread}/change/").content.decode()
    assert '<p class="help" id="earlier-messages">1 earlier message(s) not shown' in html
    assert "find flights" not in html
    call = re.search(r'<div class="tool-call" data-call-id="c1">(.*?)</div>\s*</div>', html, re.S).group(1)
    assert "flights" in call and "LIS" in call and "TP1234 at 9:00" in call
    assert 'class="message role-tool' not in html  # folded into its call
    assert "Take TP1234." in html


def test_thread_page_shows_a_pending_interrupt(support, world):
    html = support.get(f"{LIST}{world.fork_thread}/change/").content.decode()
    assert 'id="pending-interrupt"' in html and "approve?" in html
    assert "regenerated" in html and "second" not in re.search(
        r'id="conversation".*?id="thread-storage"', html, re.S
    ).group(0)


def test_a_full_mode_process_shows_the_gate_message_for_a_delta_thread(support, world):
    html = support.get(f"{LIST}{world.delta_thread}/change/").content.decode()
    assert 'id="gate-message"' in html and "Thread requires delta mode" in html
    assert "delta one" not in html


def test_a_delta_mode_process_shows_the_delta_conversation(support, world, settings):
    with process_in_mode(settings, "delta"):
        html = support.get(f"{LIST}{world.delta_thread}/change/").content.decode()
    assert "gate-message" not in html
    assert "delta one" in html and "delta two" in html


def test_thread_page_costs_a_fixed_number_of_queries(support, world, django_assert_max_num_queries):
    with django_assert_max_num_queries(12):
        assert support.get(f"{LIST}{world.fork_thread}/change/").status_code == 200


def test_thread_rows_cannot_be_edited_from_the_console(support, world):
    page = support.get(f"{LIST}{world.full_thread}/change/").content.decode()
    assert 'name="_save"' not in page
    response = support.post(f"{LIST}{world.full_thread}/change/", {"display_name": "hacked", "status": "idle"})
    assert response.status_code == 403


def test_export_downloads_metadata_state_lineage_runs_and_events(exporter, world):
    response = exporter.get(f"{LIST}{world.full_thread}/export/")
    assert response.status_code == 200
    assert response["Content-Disposition"] == f'attachment; filename="thread-{world.full_thread}.json"'
    document = json.loads(response.content)
    assert document["thread"]["title"] == "Billing question" and document["thread"]["metadata"] == {"project": "apollo"}
    assert [m["content"] for m in document["state"]["values"]["messages"]][:2] == [
        "Billing question",
        "echo: Billing question",
    ]
    ids = {c["checkpoint_id"] for c in document["checkpoints"]}
    assert all(c["parent_checkpoint_id"] in ids for c in document["checkpoints"] if c["parent_checkpoint_id"])
    assert document["state"]["checkpoint_id"] in ids
    assert {r["status"] for r in document["runs"]} == {"success", "error"}
    assert [e["seq"] for e in document["events"]] == list(range(1, len(document["events"]) + 1))
    assert "data:image" not in response.content.decode()
    # Who took the conversation out, and how much of it, is in the staff-action log.
    [entry] = LogEntry.objects.filter(object_id=world.full_thread)
    assert entry.user_id == exporter.user.pk
    runs, events = len(document["runs"]), len(document["events"])
    assert entry.change_message == f"Exported thread: {runs} runs, {events} events, {len(response.content)} bytes"


def test_export_costs_a_fixed_number_of_queries(exporter, world, django_assert_max_num_queries):
    # session, user, permissions (2), the thread, its owner, the checkpoint and write reads, runs, events,
    # the state read at the one abandoned branch's tip, and the staff-action log's entry
    with django_assert_max_num_queries(16):
        assert exporter.get(f"{LIST}{world.fork_thread}/export/").status_code == 200


def test_export_of_a_delta_thread_in_full_mode_carries_the_gate_message(exporter, world):
    document = json.loads(exporter.get(f"{LIST}{world.delta_thread}/export/").content)
    assert document["state"] is None and "Thread requires delta mode" in document["state_error"]
    assert {c["channel_mode"] for c in document["checkpoints"]} == {"delta"}


def test_pages_need_the_view_permission(world):
    nobody = staff()
    assert nobody.get(LIST).status_code == 403
    assert nobody.get(f"{LIST}{world.full_thread}/change/").status_code == 403
    assert nobody.get(f"{LIST}{world.full_thread}/export/").status_code == 403
    threads_only = staff(perms=("threads.view_threadmeta",))
    assert threads_only.get(f"{LIST}{world.full_thread}/change/").status_code == 200
    assert threads_only.get(f"{LIST}{world.full_thread}/export/").status_code == 403


def test_non_staff_users_are_sent_to_the_login(client, world):
    user = get_user_model().objects.create_user("plain-user")
    client.force_login(user)
    response = client.get(LIST)
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_conversation_rows_pair_calls_and_keep_images_out():
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from threads.conversation import conversation_messages, image_placeholder

    rows = conversation_messages(
        [
            HumanMessage(
                content=[
                    {"type": "text", "text": "look"},
                    {"type": "image", "base64": "aGVsbG8=", "mime_type": "image/jpeg"},
                ]
            ),
            AIMessage(content="", tool_calls=[{"name": "t", "args": {}, "id": "x"}]),
            ToolMessage(content="boom", tool_call_id="x", status="error"),
            ToolMessage(content="stray", tool_call_id="nobody"),
        ]
    )
    assert rows[0].text == "look" and rows[0].images == ["[image image/jpeg, 5 bytes]"]
    assert (rows[1].tool_calls[0].result, rows[1].tool_calls[0].result_status) == ("boom", "error")
    assert rows[2].answers_call == "x" and rows[3].answers_call == ""  # a stray result stays visible
    assert (
        image_placeholder({"type": "image_url", "image_url": {"url": "https://example.org/a.png"}})
        == "[image, remote URL]"
    )
    assert image_placeholder({"type": "text", "text": "no"}) is None


def test_thread_page_shows_the_ttl(support, world):
    page = support.get(f"{LIST}{world.full_thread}/change/").content.decode()
    assert "none (never expires)" in page
    ThreadMeta.objects.filter(pk=world.full_thread).update(ttl_strategy="keep_latest", ttl=timedelta(minutes=90))
    page = support.get(f"{LIST}{world.full_thread}/change/").content.decode()
    assert "keep_latest 90 min after the last activity; pruned: the next activity restarts the clock" in page


# -- turns -------------------------------------------------------------------------


def make_run(thread: ThreadMeta, *, seconds: float | None = 1.0, **fields) -> Run:
    """A finished run row ``seconds`` long (None: never started), ``created_at`` in call order."""
    now = timezone.now()
    defaults = {"status": "success", "kwargs": {"input": {"messages": [{"role": "user", "content": "hi"}]}}}
    run = Run.objects.create(
        run_id=uuid.uuid4().hex,
        thread=thread,
        owner=thread.owner,
        assistant_id=thread.assistant_id,
        started_at=None if seconds is None else now - timedelta(seconds=seconds),
        finished_at=None if seconds is None else now,
        **{**defaults, **fields},
    )
    # created_at is auto_now_add: space the rows so their order is the call order.
    Run.objects.filter(pk=run.pk).update(created_at=now + timedelta(milliseconds=Run.objects.count()))
    return run


@pytest.fixture
def turns_thread(owner):
    thread = _thread(owner.user, "turns", display_name="Refund conversation")
    usage = {"demo-echo": {"total_tokens": 30}, "demo-large": {"total_tokens": 70}}
    make_run(
        thread,
        seconds=1,
        first_human_message="Where is my refund?",
        last_ai_message="It left on Monday.",
        total_tokens=100,
        token_usage_by_model=usage,
        model_name="demo-echo",
    )
    make_run(thread, seconds=2, kwargs={"command": {"resume": "approve"}}, last_ai_message="Approved.")
    make_run(
        thread,
        seconds=3,
        kwargs={"input": {"messages": [{"role": "user", "content": "try again"}]}, "checkpoint_id": "1f0-older"},
    )
    make_run(thread, seconds=4, status="error", error="Rolled back by user", cancel_action="rollback")
    make_run(thread, seconds=10, status="error", error="model timed out: upstream 504")
    make_run(thread, seconds=None, status="interrupted")
    return thread


def turn_rows(html: str) -> list[str]:
    return re.findall(r'<tr class="turn" data-run-id="[^"]+">.*?</tr>', html, re.S)


def test_thread_page_lists_turns_with_input_outcome_duration_tokens_and_badges(support, turns_thread):
    html = support.get(f"{LIST}{turns_thread.pk}/change/").content.decode()
    rows = turn_rows(html)
    assert len(rows) == 6
    first, resumed, forked, rolled_back, failed, interrupted = rows
    assert "Where is my refund?" in first and "It left on Monday." in first and "1.0 s" in first
    assert "100" in first and "demo-echo" in first and "turn-badge" not in first
    assert '<span class="turn-badge resumed"' in resumed and "resume: approve" in resumed
    assert '<span class="turn-badge forked" title="ran from checkpoint 1f0-older">' in forked
    assert "try again" in forked
    assert '<span class="turn-badge rolled-back"' in rolled_back and "failed" not in rolled_back
    assert '<span class="turn-badge failed"' in failed and "model timed out: upstream 504" in failed
    assert '<span class="turn-badge interrupted"' in interrupted and "interrupted</td>" in interrupted
    # one-click comparison with the turn before
    assert "compare-previous" not in first and f"run={turns_thread.runs.order_by('created_at')[0].pk}" in resumed


def test_thread_page_shows_turn_count_latency_percentiles_and_tokens_by_model(support, turns_thread):
    html = support.get(f"{LIST}{turns_thread.pk}/change/").content.decode()
    stats = re.search(r'<ul class="turn-stats" id="turn-stats">(.*?)</ul>', html, re.S).group(1)
    assert "<strong>6</strong> turns" in stats
    assert "<strong>1</strong> failed" in stats and "<strong>1</strong> rolled back" in stats
    # five timed runs (1, 2, 3, 4, 10 s): nearest-rank p50 is 3 s, p95 is 10 s
    assert '<strong id="latency-p50">3.0 s</strong>' in stats and '<strong id="latency-p95">10.0 s</strong>' in stats
    assert '<span id="tokens-by-model">demo-large 70, demo-echo 30</span>' in stats


def test_long_conversations_page_their_turns_latest_first(support, owner):
    thread = _thread(owner.user, "long")
    for index in range(45):
        make_run(thread, first_human_message=f"question {index + 1}.")
    html = support.get(f"{LIST}{thread.pk}/change/").content.decode()
    assert "turns 41–45 of 45" in html and len(turn_rows(html)) == 5
    assert "question 45." in html and "question 40." not in html
    earlier = re.search(r'href="\?turns=(\d+)" id="earlier-turns"', html).group(1)
    html = support.get(f"{LIST}{thread.pk}/change/", {"turns": earlier}).content.decode()
    assert "turns 21–40 of 45" in html and "question 21." in html and "question 41." not in html
    # the page's first turn still compares with the turn before it, on the previous page
    assert re.search(r"compare-previous", turn_rows(html)[0])


def test_thread_page_queries_do_not_grow_with_turns(support, owner, django_assert_max_num_queries):
    thread = _thread(owner.user, "counted")
    make_run(thread)
    with django_assert_max_num_queries(15) as few:
        assert support.get(f"{LIST}{thread.pk}/change/").status_code == 200
    for _ in range(60):
        make_run(thread, status="error", error="boom")
    with django_assert_max_num_queries(len(few.captured_queries) + 1):  # + the previous page's last run id
        assert support.get(f"{LIST}{thread.pk}/change/").status_code == 200


# -- the list ------------------------------------------------------------------------


def test_list_rows_lead_with_title_and_short_id_then_input_duration_and_error(support, turns_thread):
    html = support.get(LIST).content.decode()
    row = row_of(html, turns_thread.pk[:8])
    cells = re.findall(r'<t[hd] class="field-(\w+)', row)
    assert cells[:4] == ["title", "status", "input_preview", "last_run"]
    assert re.search(
        rf'<span class="thread-title">Refund conversation</span> <code class="short-id" title="{turns_thread.pk}">'
        rf'{turns_thread.pk[:8]}…</code><span class="row-owner">{turns_thread.owner.username}</span>',
        row,
    )
    # the last run is the interrupted one (never started): its status, no error
    assert '<td class="field-last_run">interrupted</td>' in row
    make_run(
        turns_thread,
        seconds=2.5,
        status="error",
        error="demo failure requested",
        first_human_message="Why was I charged twice?",
    )
    row = row_of(support.get(LIST).content.decode(), turns_thread.pk[:8])
    assert "Why was I charged twice?" in row
    assert '2.5 s <span class="row-error" title="demo failure requested">error: demo failure requested</span>' in row


def test_compare_action_needs_exactly_two_threads(support, world):
    body = {"action": "compare_threads", "_selected_action": [world.full_thread, world.fork_thread]}
    response = support.post(LIST, body)
    first, second = sorted([world.full_thread, world.fork_thread])
    assert response.status_code == 302
    assert response["Location"] == f"/admin/threads/threadmeta/compare/?thread={first}&thread={second}"
    response = support.post(LIST, {**body, "_selected_action": [world.full_thread]}, follow=True)
    assert "Select exactly two threads to compare (1 selected)." in response.content.decode()


# -- export --------------------------------------------------------------------------


def test_export_needs_its_own_permission(support, exporter, world):
    page = support.get(f"{LIST}{world.full_thread}/change/").content.decode()
    assert "Export JSON" not in page and 'id="export-link"' not in page
    refused = support.get(f"{LIST}{world.full_thread}/export/")
    assert refused.status_code == 403 and world.full_thread not in refused.content.decode()
    page = exporter.get(f"{LIST}{world.full_thread}/change/").content.decode()
    assert f'href="{LIST}{world.full_thread}/export/" id="export-link"' in page
    assert exporter.get(f"{LIST}{world.full_thread}/export/").status_code == 200


def test_export_holds_abandoned_branches_and_run_inputs(exporter, world):
    thread = ThreadMeta.objects.get(pk=world.fork_thread)
    resumed = make_run(thread, kwargs={"command": {"resume": "approve"}, "checkpoint_id": None})
    document = json.loads(exporter.get(f"{LIST}{world.fork_thread}/export/").content)
    inputs = {run["run_id"]: run["kwargs"] for run in document["runs"]}
    assert inputs[resumed.pk] == {"command": {"resume": "approve"}, "checkpoint_id": None}
    # "first", then "second" was regenerated away: its branch holds the answer the head lost
    (branch,) = document["branches"]
    assert document["branches_not_exported"] == 0
    lost = [m["content"] for m in branch["messages_not_in_head"]]
    assert lost == ["second", "echo: second"]
    ids = {c["checkpoint_id"]: c for c in document["checkpoints"]}
    assert branch["tip_checkpoint_id"] in ids and branch["fork_checkpoint_id"] in ids
    assert branch["checkpoints"] >= 1
    head_messages = [m["content"] for m in document["state"]["values"]["messages"]]
    assert "regenerated" in head_messages and "second" not in head_messages
