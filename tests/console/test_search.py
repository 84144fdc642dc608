"""Finding threads in the console: by what was said (the message index), by date range, by metadata key=value."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async as db
from django.db import connection
from django.utils import timezone
from langchain_core.messages import AIMessage, HumanMessage

from checkpoints.accessor import state_accessor
from tests.console import VIEW_ALL, _thread, staff
from tests.helpers import aexecute_run, anew_thread, run_turns
from threads.models import ThreadMeta
from threads.search import (
    MESSAGE_INDEX_MAX_CHARS,
    TextQuery,
    message_text,
    thread_message_index_refresh,
)

pytestmark = pytest.mark.django_db(transaction=True)

LIST = "/admin/threads/threadmeta/"


@pytest.fixture
def support(db):
    return staff(perms=VIEW_ALL)


def said(owner, label: str, *texts: str, **fields) -> ThreadMeta:
    """A thread whose conversation holds ``texts`` (the demo graph echoes each), indexed as a run's end would."""
    thread = _thread(owner.user, label, **fields)
    run_turns(thread.pk, list(texts))
    assert thread_message_index_refresh(thread_id=thread.pk)
    return thread


def found(client, **params) -> list[str]:
    html = client.get(LIST, params).content.decode()
    return re.findall(r'<code class="short-id" title="([^"]+)">', html)


def index_rows(thread_id: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM threads_message_text WHERE thread_id = %s", [thread_id])
        return cursor.fetchone()[0]


async def test_a_finished_run_indexes_what_was_said(owner, closing_savers):
    thread = await anew_thread(owner)
    question = "My parcel zanzibar-77 never arrived"
    await aexecute_run(owner, thread, "lead_agent", {"input": {"messages": [{"role": "user", "content": question}]}})
    client = await db(staff)(perms=VIEW_ALL)
    assert await db(found)(client, q="zanzibar") == [thread.pk]
    assert await db(found)(client, q="echo parcel") == [thread.pk]  # the answer too, every word by prefix
    assert await db(found)(client, q="zanzibar lost") == []


def test_search_box_finds_threads_by_words_prefixes_and_phrases(support, owner):
    refund = said(owner, "refund", "Refund for order 1042 please", display_name="Ticket A")
    other = said(owner, "other", "please order a refund form", display_name="Ticket Bravo")
    said(owner, "unrelated", "What is the weather?")
    assert sorted(found(support, q="refund order")) == sorted([refund.pk, other.pk])
    assert found(support, q='"refund for order"') == [refund.pk]  # a quoted phrase keeps its order
    assert found(support, q="104") == [refund.pk]  # the last word by prefix
    assert found(support, q="Bravo") == [other.pk]  # the title still matches as before
    assert found(support, q="weather refund") == []


def test_search_shows_where_the_words_were_said(support, owner):
    thread = said(owner, "snippet", "The invoice number is INV-5521 for March")
    html = support.get(LIST, {"q": "invoice"}).content.decode()
    cell = re.search(r'<td class="field-input_preview">(.*?)</td>', html, re.S).group(1)
    assert 'class="preview snippet"' in cell and "[invoice]" in cell.lower() and thread.pk[:8] in html


def test_search_is_safe_with_query_syntax(support, owner):
    said(owner, "syntax", "plain words only")
    for text in ['"', "NEAR(", "a:*", "') OR 1=1 --", "*", "plain AND", "plain -words"]:
        response = support.get(LIST, {"q": text})
        assert response.status_code == 200, text


def test_the_index_keeps_only_the_newest_text_of_a_long_thread(owner):
    thread = _thread(owner.user, "long")
    filler = "filler " * 800  # about 5,600 characters a message
    messages = [HumanMessage(content="oldest-marker " + filler, id="m0")]
    messages += [AIMessage(content=filler, id=f"m{index}") for index in range(1, 8)]
    messages.append(HumanMessage(content="newest-marker", id="m9"))
    state_accessor("lead_agent").update(thread.pk, {"messages": messages})
    assert thread_message_index_refresh(thread_id=thread.pk)
    with connection.cursor() as cursor:
        cursor.execute("SELECT body FROM threads_message_text WHERE thread_id = %s", [thread.pk])
        (body,) = cursor.fetchone()
    assert len(body) == MESSAGE_INDEX_MAX_CHARS
    assert body.endswith("human: newest-marker") and "oldest-marker" not in body


def test_the_index_row_goes_with_its_thread(owner):
    thread = said(owner, "gone", "remember me")
    assert index_rows(thread.pk) == 1
    ThreadMeta.objects.filter(pk=thread.pk).delete()
    assert index_rows(thread.pk) == 0


def test_message_text_is_role_text_and_tool_calls_without_images():
    text = message_text(
        [
            {"type": "human", "content": [{"type": "text", "text": "look"}, {"type": "image", "base64": "aGk="}]},
            {"type": "ai", "content": "", "tool_calls": [{"name": "flights", "args": {"to": "LIS"}}]},
            {"type": "tool", "content": "TP1234"},
        ]
    )
    assert text == 'human: look\nai: flights {"to": "LIS"}\ntool: TP1234'
    assert TextQuery.parse('"order  1042" refund-ok') == TextQuery(("order 1042",), ("refund", "ok"))
    assert not TextQuery.parse('" " -- *')


def test_date_range_filters_by_last_activity(support, owner):
    old = _thread(owner.user, "old")
    recent = _thread(owner.user, "recent")
    ThreadMeta.objects.filter(pk=old.pk).update(updated_at=timezone.now() - timedelta(days=40))
    today = timezone.localdate()
    since = (today - timedelta(days=7)).isoformat()
    assert found(support, active_from=since) == [recent.pk]
    until = (today - timedelta(days=30)).isoformat()
    assert found(support, active_to=until) == [old.pk]
    assert sorted(found(support, active_from="2000-01-01", active_to=today.isoformat())) == sorted([old.pk, recent.pk])
    assert support.get(LIST, {"active_from": "last week"}).status_code == 302  # the admin's ?e=1 for a bad date


def test_metadata_filter_matches_a_key_value_or_a_key(support, owner):
    apollo = _thread(owner.user, "apollo", metadata={"project": "apollo", "tier": 2})
    gemini = _thread(owner.user, "gemini", metadata={"project": "gemini"})
    _thread(owner.user, "bare")
    assert found(support, meta="project=apollo") == [apollo.pk]
    assert found(support, meta="tier=2") == [apollo.pk]
    assert sorted(found(support, meta="project")) == sorted([apollo.pk, gemini.pk])
    assert found(support, meta="project__contains=a") == []  # a key, never a lookup
    html = support.get(LIST, {"meta": "project=apollo", "status": "idle"}).content.decode()
    form = re.search(r'<form method="get" id="filter-meta">.*?</form>', html, re.S).group(0)
    assert '<input type="hidden" name="status" value="idle">' in form  # the other filters carry over
    assert 'value="project=apollo"' in form


def test_searching_what_was_said_costs_a_fixed_number_of_queries(support, owner, django_assert_max_num_queries):
    for index in range(6):
        said(owner, f"bulk{index}", f"bulk question {index}")
    # the list's queries, and one for the matching passages of the page
    with django_assert_max_num_queries(12):
        assert len(found(support, q="bulk question")) == 6


def test_a_state_update_that_writes_messages_reindexes_the_conversation(support, owner):
    thread_id = owner.client.post("/api/threads", {}, format="json").json()["thread_id"]
    update = {"values": {"messages": [{"role": "user", "content": "quokka-42 lost its luggage"}]}, "as_node": "agent"}
    assert owner.client.post(f"/api/threads/{thread_id}/state", update, format="json").status_code == 200
    assert found(support, q="quokka") == [thread_id]
    # A state update that leaves the messages alone keeps the row as it was.
    title_only = {"values": {"title": "Luggage"}, "as_node": "agent"}
    assert owner.client.post(f"/api/threads/{thread_id}/state", title_only, format="json").status_code == 200
    assert found(support, q="quokka") == [thread_id]


def test_index_messages_fills_the_index_for_threads_written_before_it(support, owner, capsys):
    from django.core.management import CommandError, call_command

    old = [_thread(owner.user, f"old-{i}") for i in range(2)]
    for i, thread in enumerate(old):
        run_turns(thread.pk, [f"wombat-{i} from before the index"])  # the graph alone: no run, no index row
    assert found(support, q="wombat") == []
    call_command("index_messages", old[0].pk)
    assert found(support, q="wombat") == [old[0].pk]
    call_command("index_messages")
    assert sorted(found(support, q="wombat")) == sorted(t.pk for t in old)
    assert "Indexed the messages of 2 of 2 thread(s)." in capsys.readouterr().out
    with pytest.raises(CommandError, match="No thread nope"):
        call_command("index_messages", "nope")
