"""Two support jobs on threads done in a real browser (Debian's Chromium driven by Playwright) against a live server.

- "Find a thread by what was said in it": the search box matched ids,
  titles, owners and metadata only, so a thread known by a sentence from it
  could not be found from the console (one opened candidates one by one).
  Budget: the Threads link, a search, the thread: 2 clicks and a search,
  with the matching passage shown in the list before the second click.
- "Read what happened in a conversation": the thread page showed the head's
  messages and a runs table of statuses; each turn's input, duration and
  outcome meant opening its run (1 + a click per turn: 7 for these 6
  turns). Budget: 1 click for every turn's input, outcome, duration,
  tokens and badges with the thread's figures, 2 to see a turn beside the
  one before it.

Each job runs in the light and the dark scheme, checks that nothing is wider
than the window at 1440 and 375 px (the list scrolls inside its own box),
and takes a screenshot per scheme (to docs/console/ with ``CONSOLE_SCREENSHOTS=1``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from tests.console import VIEW_ALL, _thread, staff
from tests.console.test_compare import journal
from tests.console.test_lineage_jobs import DOCS, SCHEMES, Clicks, assert_fits, chromium, signed_in
from tests.console.test_threads import make_run
from tests.helpers import run_turns
from threads.models import ThreadMeta
from threads.search import thread_message_index_refresh

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sqlite_only]


@pytest.fixture
def shots(tmp_path) -> Path:
    return DOCS if os.environ.get("CONSOLE_SCREENSHOTS") == "1" else tmp_path


def threads_with_things_said(owner) -> ThreadMeta:
    """A few conversations; the one we look for mentions a parcel number nobody put in its title or metadata."""
    questions = [
        "What are your opening hours on public holidays, and does the central warehouse close earlier then?",
        "Can I change my password without the old one? I no longer have the phone the codes went to.",
        "Invoice copy",
    ]
    for index, text in enumerate(questions):
        thread = _thread(
            owner.user, f"noise{index}", display_name=f"Customer question number {index} about the account"
        )
        run_turns(thread.pk, [text])
        thread_message_index_refresh(thread_id=thread.pk)
        make_run(thread, seconds=1.2, first_human_message=text, last_ai_message=f"echo: {text}")
    wanted = _thread(owner.user, "parcel", display_name="Delivery problem")
    run_turns(wanted.pk, ["Hello", "My parcel ZX-4471 arrived damaged"])
    thread_message_index_refresh(thread_id=wanted.pk)
    make_run(
        wanted,
        seconds=2.4,
        status="error",
        error="tool lookup_parcel failed: 503",
        first_human_message="My parcel ZX-4471 arrived damaged",
    )
    return wanted


def test_job_find_a_thread_by_what_was_said_in_two_clicks(owner, live_server, shots):
    wanted = threads_with_things_said(owner)
    support = staff(perms=VIEW_ALL)
    with chromium() as browser:
        for scheme in SCHEMES:
            context, page = signed_in(browser, live_server, support, scheme)
            clicks = Clicks(page)
            page.goto(f"{live_server.url}/admin/")
            clicks.click("a[href='/admin/threads/threadmeta/']")
            page.wait_for_selector("#result_list")
            assert page.locator("#result_list tbody tr").count() == 4
            assert_fits(page, "the thread list", scheme)
            # every column shows at 1440 px; at 375 px the table scrolls inside its own box
            assert page.evaluate(
                "(e => e.scrollWidth <= e.clientWidth)(document.querySelector('#changelist .results'))"
            )
            page.set_viewport_size({"width": 375, "height": 800})
            assert page.evaluate("(e => e.scrollWidth > e.clientWidth)(document.querySelector('#changelist .results'))")
            page.set_viewport_size({"width": 1440, "height": 900})
            page.fill("#searchbar", "parcel damaged")
            page.press("#searchbar", "Enter")
            page.wait_for_selector("#result_list")
            rows = page.locator("#result_list tbody tr")
            assert rows.count() == 1
            row = rows.first.inner_text()
            assert "Delivery problem" in row and wanted.thread_id[:8] in row
            assert "[parcel]" in row and "[damaged]" in row  # where it was said, before opening anything
            assert "tool lookup_parcel failed" in row and "2.4 s" in row
            assert_fits(page, "the search's answer", scheme)
            page.screenshot(path=str(shots / f"job-find-thread-{scheme}.png"), full_page=True)
            clicks.click("#result_list a:has-text('Delivery problem')")
            page.wait_for_selector("#turns")
            assert "My parcel ZX-4471 arrived damaged" in page.locator("#conversation").inner_text()
            assert clicks.count <= 2
            context.close()


def conversation_with_turns(owner) -> ThreadMeta:
    thread = _thread(owner.user, "story", display_name="Refund conversation")
    run_turns(thread.pk, ["Where is my refund?", "approve"])
    usage = {"demo-echo": {"total_tokens": 30}}
    make_run(
        thread,
        seconds=1.0,
        first_human_message="Where is my refund?",
        last_ai_message="It left on Monday.",
        total_tokens=30,
        token_usage_by_model=usage,
        model_name="demo-echo",
    )
    make_run(
        thread,
        seconds=4.0,
        status="interrupted",
        first_human_message="Refund it twice",
        last_ai_message="Approve a second refund?",
    )
    make_run(thread, seconds=1.5, kwargs={"command": {"resume": "approve"}}, last_ai_message="Done.")
    make_run(thread, seconds=9.0, status="error", error="payment API timed out", first_human_message="Status?")
    cancelled = make_run(
        thread,
        seconds=2.0,
        status="error",
        error="Rolled back by user",
        cancel_action="rollback",
        first_human_message="Cancel everything",
    )
    forked = make_run(
        thread,
        seconds=1.1,
        kwargs={"checkpoint_id": "1f0-earlier"},
        first_human_message="Status now?",
        last_ai_message="Refunded on Monday.",
    )
    journal(cancelled, HumanMessage("Cancel everything"), AIMessage("Cancelling the refund and the order."))
    journal(forked, HumanMessage("Status now?"), AIMessage("Refunded on Monday."))
    return thread


def test_job_read_what_happened_in_a_conversation_in_one_click(owner, live_server, shots):
    thread = conversation_with_turns(owner)
    support = staff(perms=VIEW_ALL)
    with chromium() as browser:
        for scheme in SCHEMES:
            context, page = signed_in(browser, live_server, support, scheme)
            clicks = Clicks(page)
            page.goto(f"{live_server.url}/admin/threads/threadmeta/")
            clicks.click("#result_list a:has-text('Refund conversation')")
            page.wait_for_selector("#turns")
            assert f"/{thread.thread_id}/change/" in page.url
            turns = page.locator("#turns tr.turn").all_inner_texts()
            assert len(turns) == 6
            assert "Where is my refund?" in turns[0] and "It left on Monday." in turns[0] and "1.0 s" in turns[0]
            assert "interrupted" in turns[1] and "resumed" in turns[2] and "resume: approve" in turns[2]
            assert "failed" in turns[3] and "payment API timed out" in turns[3] and "9.0 s" in turns[3]
            assert "rolled back" in turns[4] and "forked" in turns[5]
            stats = page.locator("#turn-stats").inner_text()
            assert "6 turns" in stats and "1 failed" in stats and "1 rolled back" in stats
            assert "p50 1.5 s" in stats and "p95 9.0 s" in stats and "demo-echo 30" in stats
            assert clicks.count <= 1
            assert_fits(page, "the thread page", scheme)
            page.screenshot(path=str(shots / f"job-read-thread-{scheme}.png"), full_page=True)
            clicks.click("#turns tr.turn:last-child a.compare-previous")
            page.wait_for_selector("#compare-summary")
            inputs = page.locator("#compare-summary tr.compare-input").inner_text()
            assert "Cancel everything" in inputs and "Status now?" in inputs
            assert "They differ from message 1 on" in page.locator("#first-difference").inner_text()
            assert clicks.count <= 2
            assert_fits(page, "the comparison", scheme)
            page.screenshot(path=str(shots / f"job-compare-turns-{scheme}.png"), full_page=True)
            # Any two turns: tick them on the thread page (the boxes belong to a form outside the admin's own).
            page.go_back()
            page.check("#turns tr.turn:nth-child(1) input[type=checkbox]")
            page.check("#turns tr.turn:nth-child(4) input[type=checkbox]")
            page.click("#compare-turns")
            page.wait_for_selector("#compare-summary")
            inputs = page.locator("#compare-summary tr.compare-input").inner_text()
            assert "Where is my refund?" in inputs and "Status?" in inputs
            context.close()


def test_a_saved_filter_comes_back_in_another_tab_in_one_click(owner, live_server):
    apollo = _thread(owner.user, "apollo", display_name="Apollo launch", metadata={"project": "apollo"})
    _thread(owner.user, "gemini", display_name="Gemini launch", metadata={"project": "gemini"})
    support = staff(perms=VIEW_ALL)
    with chromium() as browser:
        context, page = signed_in(browser, live_server, support, "light")
        page.goto(f"{live_server.url}/admin/threads/threadmeta/?meta=project%3Dapollo&q=launch")
        assert page.locator("#result_list tbody tr").count() == 1
        page.once("dialog", lambda dialog: dialog.accept("Apollo launches"))
        page.click("#save-filter")
        page.wait_for_selector("a.saved-filter:has-text('Apollo launches')")
        other_tab = context.new_page()
        other_tab.goto(f"{live_server.url}/admin/threads/threadmeta/")
        assert other_tab.locator("#result_list tbody tr").count() == 2
        clicks = Clicks(other_tab)
        clicks.click("a.saved-filter:has-text('Apollo launches')")
        other_tab.wait_for_url("**meta=project%3Dapollo**")
        rows = other_tab.locator("#result_list tbody tr")
        assert (
            rows.count() == 1
            and "Apollo launch" in rows.first.inner_text()
            and apollo.pk[:8] in rows.first.inner_text()
        )
        assert other_tab.locator("#id_meta").input_value() == "project=apollo"
        assert clicks.count == 1
        other_tab.click("button.drop-filter")
        assert other_tab.locator("a.saved-filter").count() == 0
        context.close()
