"""The console's thread pages over seeded data: list figures, filters, the conversation, export."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model

from tests.console import VIEW_ALL, seed, staff
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
    checkpoints = re.search(r'<td class="field-checkpoint_count">(\d+)</td>', full).group(1)
    assert int(checkpoints) > 4
    assert re.search(r'<td class="field-stored_bytes">[\d.]+\xa0(bytes|KB)</td>', full)
    assert '<td class="field-checkpoint_count">0</td>' in empty and "mode-badge" not in empty


def test_filters_by_mode_failed_runs_status_and_owner(support, world, owner, other):
    assert listed(support.get(LIST, {"mode": "delta"}).content.decode(), world) == {world.delta_thread}
    full = listed(support.get(LIST, {"mode": "full"}).content.decode(), world)
    assert full == {world.full_thread, world.tools_thread, world.fork_thread}
    assert listed(support.get(LIST, {"mode": "none"}).content.decode(), world) == {world.empty_thread}
    assert listed(support.get(LIST, {"failed": "yes"}).content.decode(), world) == {world.full_thread}
    assert listed(support.get(LIST, {"status": "interrupted"}).content.decode(), world) == {world.fork_thread}
    from tests.console import _thread

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
    from tests.console import _thread
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


def test_thread_page_shows_the_conversation_with_hidden_and_image_placeholders(support, world):
    html = support.get(f"{LIST}{world.full_thread}/change/").content.decode()
    conversation = re.search(
        r'<div class="console-section conversation".*?</div>\s*<div class="console-section" id="thread-runs"',
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
    assert "demo failure requested" in html  # the runs table
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
        r'id="conversation".*?id="thread-runs"', html, re.S
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


def test_export_downloads_metadata_state_lineage_runs_and_events(support, world):
    response = support.get(f"{LIST}{world.full_thread}/export/")
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


def test_export_costs_a_fixed_number_of_queries(support, world, django_assert_max_num_queries):
    # session, user, permissions (2), the thread, its owner, the checkpoint and write reads, runs, events
    with django_assert_max_num_queries(11):
        assert support.get(f"{LIST}{world.fork_thread}/export/").status_code == 200


def test_export_of_a_delta_thread_in_full_mode_carries_the_gate_message(support, world):
    document = json.loads(support.get(f"{LIST}{world.delta_thread}/export/").content)
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
