"""The console's run pages over seeded runs: list, grouped timeline, usage, cancel rights and actions."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import httpx
import pytest
from django.contrib.admin.models import LogEntry

from console.timeline import content_preview
from runs.consumers import _visible_run
from runs.models import Run
from runs.services.admission import run_admit
from tests.console import VIEW_ALL, seed, staff
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)

LIST = "/admin/runs/run/"
GROUP = re.compile(
    r'<tbody class="timeline-group" data-kind="([^"]+)">\s*<tr class="group-head"><td colspan="6">'
    r'<span class="group-title">([^<]*)</span>'
)
CANCELLERS = (*VIEW_ALL, "runs.change_run")


@pytest.fixture
def world(owner):
    return seed(owner.user)


def pending_run(owner, label: str = "p") -> Run:
    thread = ThreadMeta.objects.create(thread_id=f"{label}-{owner.pk}-{Run.objects.count()}", owner=owner)
    run, _ = run_admit(owner=owner, thread=thread, assistant_id="lead_agent", strategy="reject", metadata={}, kwargs={})
    return run


def test_list_shows_status_strategy_model_tokens_duration_and_error(world, django_assert_max_num_queries):
    support = staff(perms=VIEW_ALL)
    with django_assert_max_num_queries(10):
        html = support.get(LIST).content.decode()
    success = re.search(rf"<tr>(?:(?!</tr>).)*{world.runs['success']}(?:(?!</tr>).)*</tr>", html, re.S).group(0)
    assert (
        "demo-echo<br>" in success
        and "16 tokens" in success
        and re.search(r"success<br><span class=\"quiet\">\d+\.\d s<", success)
    )
    failed = re.search(rf"<tr>(?:(?!</tr>).)*{world.runs['failed']}(?:(?!</tr>).)*</tr>", html, re.S).group(0)
    assert "demo failure requested" in failed
    rolled_back = support.get(LIST, {"outcome": "rolled back"}).content.decode()
    failed = support.get(LIST, {"outcome": "failed"}).content.decode()
    assert world.runs["rolled_back"] in rolled_back and world.runs["failed"] not in rolled_back
    assert world.runs["failed"] in failed and world.runs["rolled_back"] not in failed  # a rollback is no failure
    assert world.runs["cancelled"] in support.get(LIST, {"outcome": "cancelled"}).content.decode()
    by_thread = support.get(LIST, {"thread": world.full_thread}).content.decode()
    assert world.runs["success"] in by_thread and world.runs["cancelled"] not in by_thread


def test_run_page_groups_the_timeline_per_model_and_tool_call(world, django_assert_max_num_queries):
    support = staff(perms=VIEW_ALL)
    with django_assert_max_num_queries(12):
        html = support.get(f"{LIST}{world.runs['success']}/change/").content.decode()
    groups = GROUP.findall(html)
    assert [kind for kind, _ in groups] == ["run", "input", "model call", "tool call", "model call"]
    assert groups[2][1] == "model call #0 · lead_agent · 12.5 ms · 8 tokens"
    assert groups[3][1] == "tool call search (call-1)" and "3 results" in html
    assert groups[4][1].startswith("model call #1 · subagent")
    assert re.search(r'<tr class="usage-model"><td>demo-echo</td><td>6</td><td>10</td><td>16</td></tr>', html)
    assert '<tr class="usage-caller"><td>subagent</td><td>8</td></tr>' in html
    assert "let me look → search()" in html
    assert 'name="_save"' not in html and "live-events" not in html


def test_every_seeded_run_page_renders_its_outcome(world, django_assert_max_num_queries):
    support = staff(perms=CANCELLERS)
    expected = {
        "success": ("Success", "success", ""),
        "failed": ("Error", "failed", ""),
        "cancelled": ("Interrupted", "cancelled", ""),
        "rolled_back": ("Error", "rolled back", "Rolled back by user"),
        "interrupted": ("Interrupted", "waiting for input", ""),
    }
    for role, (status, outcome, error) in expected.items():
        with django_assert_max_num_queries(13):
            html = support.get(f"{LIST}{world.runs[role]}/change/").content.decode()
        assert re.search(rf'<div class="readonly">{status}</div>', html), role
        assert f'id="run-outcome-badge">{outcome}</span>' in html, role
        assert (f"<pre>{error}</pre>" in html) == bool(error), role
        assert ('id="run-failure"' in html) == (role == "failed"), role
        assert "cancel-panel" not in html and "live-events" not in html, role


def test_failed_run_page_shows_the_failure_and_no_cancel(world):
    html = staff(perms=CANCELLERS).get(f"{LIST}{world.runs['failed']}/change/").content.decode()
    assert '<dd id="failure-name">RuntimeError</dd>' in html
    assert '<pre id="failure-message">demo failure requested</pre>' in html
    assert "cancel-panel" not in html  # finished: nothing to cancel


def test_cancel_buttons_and_posts_need_the_change_permission(owner):
    run = pending_run(owner.user)
    viewer, canceller = staff(perms=VIEW_ALL), staff(perms=CANCELLERS)
    page = f"{LIST}{run.pk}/change/"
    assert "cancel-rollback" not in viewer.get(page).content.decode()
    assert viewer.post(f"{LIST}{run.pk}/cancel/", {"action": "rollback", "confirmed": "yes"}).status_code == 403
    assert viewer.get(f"{LIST}{run.pk}/cancel/?action=rollback").status_code == 403
    assert Run.objects.get(pk=run.pk).status == "pending"

    html = canceller.get(page).content.decode()
    assert 'id="cancel-rollback"' in html and 'data-ws-path="/ws/threads/' in html
    asked = canceller.get(f"{LIST}{run.pk}/cancel/?action=rollback").content.decode()
    assert "the thread is put back to its state before the run" in asked and 'id="confirm-cancel"' in asked
    assert canceller.post(f"{LIST}{run.pk}/cancel/", {"action": "rollback"}).status_code == 200  # asks again
    assert Run.objects.get(pk=run.pk).status == "pending"
    response = canceller.post(f"{LIST}{run.pk}/cancel/", {"action": "rollback", "confirmed": "yes"}, follow=True)
    fresh = Run.objects.get(pk=run.pk)
    assert (fresh.status, fresh.cancel_action, fresh.error) == ("error", "rollback", "Rolled back by user")
    assert fresh.cancelled_by == canceller.user
    assert "Cancel (rollback) requested; the run is error." in response.content.decode()
    assert f"cancel (rollback) requested by {canceller.user.username} at" in response.content.decode()
    entry = LogEntry.objects.get(object_id=run.pk)  # the audit: who, what, on which run, what came of it
    assert (entry.user, entry.get_change_message()) == (canceller.user, "Cancelled run (rollback): the run is error")


def test_cancel_refusals_are_admin_messages(world, owner):
    canceller = staff(perms=CANCELLERS)
    confirm = {"confirmed": "yes"}
    assert (
        "nothing to cancel" in canceller.get(f"{LIST}{world.runs['success']}/cancel/?action=interrupt").content.decode()
    )
    finished = canceller.post(f"{LIST}{world.runs['success']}/cancel/", {"action": "interrupt", **confirm}, follow=True)
    assert f"Run {world.runs['success']} is not cancellable (status: success)" in finished.content.decode()
    run = pending_run(owner.user, "bad")
    bad = canceller.post(f"{LIST}{run.pk}/cancel/", {"action": "explode", **confirm}, follow=True)
    assert bad.status_code == 200 and "Action: must be interrupt or rollback" in bad.content.decode()
    assert Run.objects.get(pk=run.pk).status == "pending"
    refused = {e.object_id: e.get_change_message() for e in LogEntry.objects.filter(user=canceller.user)}
    assert refused == {
        world.runs["success"]: f"Cancelled run (interrupt): refused: Run {world.runs['success']} is not cancellable "
        "(status: success)",
        run.pk: "Cancelled run (explode): refused: action: must be interrupt or rollback",
    }
    assert "is not a way to cancel" in canceller.get(f"{LIST}{run.pk}/cancel/?action=explode").content.decode()
    assert canceller.put(f"{LIST}{run.pk}/cancel/").status_code == 405
    assert canceller.post(f"{LIST}{run.pk}/change/", {}).status_code == 403  # the form never saves


def test_bulk_cancel_selected_cancels_unfinished_runs_only(world, owner):
    runs = [pending_run(owner.user, f"bulk{i}") for i in range(3)]
    selected = [*(run.pk for run in runs), world.runs["success"]]
    body = {"action": "cancel_selected_interrupt", "_selected_action": selected}
    assert staff(perms=VIEW_ALL).post(LIST, body).status_code == 200  # no such action without the right
    assert set(Run.objects.filter(pk__in=selected[:3]).values_list("status", flat=True)) == {"pending"}

    canceller = staff(perms=CANCELLERS)
    asked = canceller.post(LIST, body).content.decode()
    assert "Cancel 3 run(s) (interrupt)?" in asked and "1 already finished, left as they were" in asked
    assert "what it already wrote to the thread stays" in asked
    assert set(Run.objects.filter(pk__in=selected[:3]).values_list("status", flat=True)) == {"pending"}
    response = canceller.post(LIST, {**body, "confirmed": "yes"}, follow=True)
    assert (
        "Cancel (interrupt) requested for 3 run(s); 1 already finished, left as they were." in response.content.decode()
    )
    assert set(Run.objects.filter(pk__in=selected[:3]).values_list("status", "cancel_action")) == {
        ("interrupted", "interrupt")
    }
    assert Run.objects.get(pk=world.runs["success"]).status == "success"
    assert set(Run.objects.filter(pk__in=selected[:3]).values_list("cancelled_by", flat=True)) == {canceller.user.pk}
    audited = {e.object_id: (e.user, e.get_change_message()) for e in LogEntry.objects.filter(object_id__in=selected)}
    assert audited == {pk: (canceller.user, "Cancelled run (interrupt): the run is interrupted") for pk in selected[:3]}


def test_only_staff_sessions_with_the_right_watch_others_runs(world, owner, other):
    run = Run.objects.get(pk=world.runs["success"])
    viewer, canceller = staff(perms=VIEW_ALL).user, staff(perms=CANCELLERS).user
    assert _visible_run(owner.user, run.thread_id, run.pk, staff_session=False) == (run, True)
    assert _visible_run(other.user, run.thread_id, run.pk, staff_session=True) == (None, False)
    assert _visible_run(viewer, run.thread_id, run.pk, staff_session=True) == (run, False)
    assert _visible_run(canceller, run.thread_id, run.pk, staff_session=True) == (run, True)
    assert _visible_run(canceller, run.thread_id, run.pk, staff_session=False) == (None, False)  # an API key
    assert _visible_run(staff().user, run.thread_id, run.pk, staff_session=True) == (None, False)


def test_content_preview_is_one_short_line():
    assert content_preview({"type": "ai", "content": "a\nb", "tool_calls": [{"name": "t"}]}) == "a b → t()"
    assert content_preview({"message": "x"}) == '{"message":"x"}'
    assert len(content_preview("y" * 1000)) == 160


def test_health_panel_shows_queue_depth_leased_workers_and_orphans(owner, django_assert_max_num_queries):
    from django.utils import timezone

    from runs.models import ORPHAN_MESSAGE

    now = timezone.now()
    rows = [
        ("running", "host-a:11:aaaa", now + timezone.timedelta(seconds=25), ""),
        ("running", "host-a:11:aaaa", now + timezone.timedelta(seconds=20), ""),
        ("running", "host-b:12:bbbb", now + timezone.timedelta(seconds=10), ""),
        ("pending", "", None, ""),
        ("queued", "", None, ""),
        ("error", "host-c:13:cccc", None, ORPHAN_MESSAGE),
    ]
    for index, (status, worker_id, lease, error) in enumerate(rows):
        thread = ThreadMeta.objects.create(thread_id=f"health-{index}-{owner.user.pk}", owner=owner.user)
        finished = now if status == "error" else None
        Run.objects.create(
            run_id=f"health-run-{index}-{owner.user.pk}",
            thread=thread,
            owner=owner.user,
            assistant_id="lead_agent",
            status=status,
            worker_id=worker_id,
            lease_expires_at=lease,
            error=error,
            finished_at=finished,
        )
    support = staff(perms=VIEW_ALL)
    with django_assert_max_num_queries(8):
        html = support.get("/admin/checkpoints/settings/").content.decode()
    assert '<td id="queue-queued">1</td>' in html and '<td id="queue-pending">1</td>' in html
    assert '<td id="queue-running">3</td>' in html
    assert re.search(r'<td id="orphaned">1 since this process started', html)
    workers = re.findall(
        r'<tr class="live-worker"><td>([^<]+)</td><td>(\d+)</td><td>32</td>\s*<td>([\d.]+) s ago', html
    )
    assert [(w, int(n)) for w, n, _ in workers] == [("host-a:11:aaaa", 2), ("host-b:12:bbbb", 1)]
    assert 4 <= float(workers[0][2]) <= 7 and 19 <= float(workers[1][2]) <= 22
    assert '<td id="channel-mode">full</td>' in html and '<td id="backend">' in html


async def _close_code(path: str, headers: list[tuple[bytes, bytes]]) -> int:
    from channels.routing import URLRouter
    from channels.testing import WebsocketCommunicator

    from deerflow_site.ws_auth import websocket_auth_stack
    from runs.routing import websocket_urlpatterns

    communicator = WebsocketCommunicator(websocket_auth_stack(URLRouter(websocket_urlpatterns)), path, headers)
    connected, _ = await communicator.connect()
    assert connected
    closed = await communicator.receive_output(timeout=5)
    await communicator.disconnect()
    return closed["code"]


async def test_the_run_websocket_refuses_a_staff_session_without_the_view_right_and_any_foreign_key(owner):
    from asgiref.sync import sync_to_async

    from deerflow_site.services import api_key_create

    run = await sync_to_async(pending_run)(owner.user, "ws")
    path = f"/ws/threads/{run.thread_id}/runs/{run.pk}"
    no_right = await sync_to_async(staff)()
    cookie = f"sessionid={no_right.cookies['sessionid'].value}".encode()
    session = [(b"cookie", cookie), (b"origin", b"http://testserver"), (b"host", b"testserver")]
    assert await _close_code(path, session) == 4404

    viewer = await sync_to_async(staff)(perms=VIEW_ALL)
    _, key = await sync_to_async(api_key_create)(username=viewer.user.username)
    assert await _close_code(path, [(b"x-api-key", key.encode())]) == 4404  # a staff user's key stays its own


def test_run_page_shows_the_webhook_delivery_and_never_its_token(owner):
    from runs.services.webhooks import webhook_record_delivery

    run = pending_run(owner.user, "wh")
    Run.objects.filter(pk=run.pk).update(status="success", webhook="https://hooks.example.com/in?token=s3cret")
    history = [{"status_code": 500, "error": None, "elapsed_ms": 4, "refused": False}] * 3
    content = {
        "url": "https://hooks.example.com/in?…",
        "delivered": False,
        "status_code": 500,
        "error": None,
        "attempts": 3,
        "history": history,
    }
    webhook_record_delivery(thread_id=run.thread_id, run_id=run.run_id, delivered=False, content=content)
    html = staff(perms=VIEW_ALL).get(f"{LIST}{run.run_id}/change/").content.decode()
    groups = GROUP.findall(html)
    assert ("webhook", "webhook https://hooks.example.com/in?… · not delivered · HTTP 500 · 3 attempts") in groups
    assert "<td>webhook.failed</td><td>webhook</td>" in html
    assert "s3cret" not in html


# -- the job in a browser: a run is stuck -------------------------------------------

CHROMIUM = "/usr/bin/chromium"
PASSWORD = "pw-console-h1-stuck"
STAFF_SCRIPT = """
from django.contrib.auth.models import Permission, User
user, _ = User.objects.get_or_create(username="stuck-support", defaults={{"is_staff": True}})
user.set_password("{password}")
user.save()
user.user_permissions.set(Permission.objects.filter(codename__in=["view_threadmeta", "view_run", "view_runevent", "change_run"]))
"""
SHOTS = Path(__file__).resolve().parents[2] / "docs" / "console"


def _until(predicate, within: float, what: str):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.05)
    raise AssertionError(f"not reached within {within} s: {what}")


def _overflow(page) -> int:
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


def _readable(locator) -> bool:
    colour, background = locator.evaluate("e => [getComputedStyle(e).color, getComputedStyle(e).backgroundColor]")
    return colour != background


@pytest.mark.live
@pytest.mark.sqlite_only
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Chromium at /usr/bin/chromium")
def test_job_a_stuck_run_is_found_watched_live_and_cancelled_in_four_clicks(api_server, tmp_path):
    """Runs list → "running" → the run (live: one growing message, status announced) → cancel → confirm.

    Budget 4 clicks (it took 5 to find and watch, 4 to cancel); the run page
    turns into the saved timeline when the run ends, without a reload.
    """
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    api_server.manage("shell", "-c", STAFF_SCRIPT.format(password=PASSWORD))
    shots = SHOTS if os.environ.get("CONSOLE_SCREENSHOTS") == "1" else tmp_path
    base = f"http://127.0.0.1:{api_server.port}"
    with httpx.Client(base_url=api_server.url, headers={"x-api-key": api_server.api_key("alice")}) as api:
        thread_id = api.post("/threads", json={}).json()["thread_id"]
        words = " ".join(f"word{i}" for i in range(60))
        body = {
            "assistant_id": "lead_agent",
            "input": {"messages": [{"role": "user", "content": f"/slow 20 {words}"}]},
            "stream_mode": ["messages-tuple", "values"],
        }
        run_id = api.post(f"/threads/{thread_id}/runs", json=body).json()["run_id"]
        status = lambda: api.get(f"/threads/{thread_id}/runs/{run_id}").json()["status"]  # noqa: E731
        _until(lambda: status() == "running", 30, "the slow run runs")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
            try:
                page = browser.new_page(viewport={"width": 1440, "height": 900})
                page.goto(f"{base}/admin/login/")
                page.fill("#id_username", "stuck-support")
                page.fill("#id_password", PASSWORD)
                page.click("input[type=submit]")
                page.wait_for_selector("#site-name")
                page.goto(f"{base}/admin/runs/run/")
                clicks = 0
                for selector in ("#changelist-filter a[href*='outcome=running']", f"a:has-text('{run_id}')"):
                    page.click(selector)
                    clicks += 1
                message = page.locator("#live-messages .live-message .text").first
                message.wait_for()
                grown = len(message.inner_text())
                _until(lambda: len(message.inner_text()) > grown, 15, "the streamed message grows")
                assert page.locator("#live-messages .live-message").count() == 1  # tokens merge into one message
                assert page.locator("#run-status").inner_text() in ("Run running", "Run running: watching live")
                assert page.locator("#run-status").get_attribute("aria-live") == "polite"
                _until(
                    lambda: "timeline-event" in page.request.get(f"{base}/admin/runs/run/{run_id}/change/").text(),
                    5,
                    "the journal persisting the running run's events while it runs",
                )
                for scheme in ("light", "dark"):
                    page.emulate_media(color_scheme=scheme)
                    assert _readable(page.locator("#live-messages .live-message").first), scheme
                    page.screenshot(path=str(shots / f"job-stuck-run-live-{scheme}.png"), full_page=True)
                page.emulate_media(color_scheme="light")
                for width in (1440, 375):
                    page.set_viewport_size({"width": width, "height": 900})
                    assert _overflow(page) == 0, f"the live run page overflows at {width} px"
                page.set_viewport_size({"width": 1440, "height": 900})

                page.click("#cancel-rollback")
                clicks += 1
                assert "put back to its state before the run" in page.locator("#cancel-effect").inner_text()
                assert status() == "running"  # asking changed nothing
                page.click("#confirm-cancel")
                clicks += 1
                assert clicks <= 4
                page.wait_for_selector("ul.messagelist li.success")
                # The run ends while the page is open: its saved outcome replaces the live view, no reload.
                page.wait_for_selector("#run-outcome-badge:has-text('rolled back')", timeout=30_000)
                assert page.locator("#live").count() == 0 and page.locator("#cancel-panel").count() == 0
                # Whether the end arrived on the live stream or the cancel's redirect already found the run
                # ended, the status line names the saved outcome.
                assert "rolled back" in page.locator("#run-status").inner_text()
                assert "by stuck-support" in page.locator("#cancelled-by").inner_text()
                assert (
                    page.locator(".field-status .readonly").first.inner_text() == "Error"
                )  # the fields are current too
                assert page.locator("#timeline .timeline-event").count() >= 2
                for scheme in ("light", "dark"):
                    page.emulate_media(color_scheme=scheme)
                    assert _readable(page.locator("#timeline .group-head td").first), scheme
                    page.screenshot(path=str(shots / f"job-stuck-run-cancelled-{scheme}.png"), full_page=True)
            finally:
                browser.close()


def test_the_run_records_who_cancelled_it_and_the_first_request_wins(owner, other):
    from runs.services.cancel import run_cancel

    first = pending_run(owner.user, "who")
    run_cancel(run=first, action="interrupt", by=owner.user)
    run_cancel(run=first, action="rollback", by=other.user)  # too late: changes nothing
    fresh = Run.objects.get(pk=first.pk)
    assert (fresh.cancel_action, fresh.cancelled_by) == ("interrupt", owner.user)

    unattended = pending_run(owner.user, "sys")
    run_cancel(run=unattended, action="interrupt")
    assert Run.objects.get(pk=unattended.pk).cancelled_by is None  # the server's own cancels name nobody


async def test_a_cancel_through_the_api_records_the_caller(owner, closing_savers, runtime):
    from channels.db import database_sync_to_async as db

    by_route = await db(pending_run)(owner.user, "api")
    answer = await db(owner.client.post)(f"/api/threads/{by_route.thread_id}/runs/{by_route.run_id}/cancel")
    assert answer.status_code == 202, answer.content
    assert (await Run.objects.aget(pk=by_route.pk)).cancelled_by_id == owner.user.pk

    by_bulk = await db(pending_run)(owner.user, "bulk")
    answer = await db(owner.client.post)("/api/runs/cancel", {"thread_id": by_bulk.thread_id}, format="json")
    assert answer.status_code == 204, answer.content
    assert (await Run.objects.aget(pk=by_bulk.pk)).cancelled_by_id == owner.user.pk
