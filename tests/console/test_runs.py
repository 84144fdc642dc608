"""The console's run pages over seeded runs: list, grouped timeline, usage, cancel rights and actions."""

from __future__ import annotations

import re

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
    assert "demo-echo" in success and ">16<" in success and re.search(r"\d+\.\d s", success)
    failed = re.search(rf"<tr>(?:(?!</tr>).)*{world.runs['failed']}(?:(?!</tr>).)*</tr>", html, re.S).group(0)
    assert "demo failure requested" in failed
    assert world.runs["rolled_back"] in support.get(LIST, {"cancel_action__exact": "rollback"}).content.decode()
    by_thread = support.get(LIST, {"thread": world.full_thread}).content.decode()
    assert world.runs["success"] in by_thread and world.runs["cancelled"] not in by_thread


def test_run_page_groups_the_timeline_per_model_and_tool_call(world, django_assert_max_num_queries):
    support = staff(perms=VIEW_ALL)
    with django_assert_max_num_queries(12):
        html = support.get(f"{LIST}{world.runs['success']}/change/").content.decode()
    groups = re.findall(
        r'<tbody class="timeline-group" data-kind="([^"]+)">\s*<tr class="group-head"><td colspan="6">([^<]*)</td>',
        html,
    )
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
        "success": ("Success", ""),
        "failed": ("Error", "demo failure requested"),
        "cancelled": ("Interrupted", ""),
        "rolled_back": ("Error", "Rolled back by user"),
        "interrupted": ("Interrupted", ""),
    }
    for role, (status, error) in expected.items():
        with django_assert_max_num_queries(12):
            html = support.get(f"{LIST}{world.runs[role]}/change/").content.decode()
        assert re.search(rf'<div class="readonly">{status}</div>', html), role
        assert (f"<pre>{error}</pre>" in html) == bool(error), role
        assert "cancel-panel" not in html and "live-events" not in html, role


def test_failed_run_page_shows_the_error_and_no_cancel(world):
    html = staff(perms=CANCELLERS).get(f"{LIST}{world.runs['failed']}/change/").content.decode()
    assert re.search(r'id="run-error"><h2>Error</h2><pre>demo failure requested</pre>', html)
    assert "cancel-panel" not in html  # finished: nothing to cancel


def test_cancel_buttons_and_posts_need_the_change_permission(owner):
    run = pending_run(owner.user)
    viewer, canceller = staff(perms=VIEW_ALL), staff(perms=CANCELLERS)
    page = f"{LIST}{run.pk}/change/"
    assert "cancel-rollback" not in viewer.get(page).content.decode()
    assert viewer.post(f"{LIST}{run.pk}/cancel/", {"action": "rollback"}).status_code == 403
    assert Run.objects.get(pk=run.pk).status == "pending"

    html = canceller.get(page).content.decode()
    assert 'id="cancel-rollback"' in html and 'data-ws-path="/ws/threads/' in html
    response = canceller.post(f"{LIST}{run.pk}/cancel/", {"action": "rollback"}, follow=True)
    fresh = Run.objects.get(pk=run.pk)
    assert (fresh.status, fresh.cancel_action, fresh.error) == ("error", "rollback", "Rolled back by user")
    assert "Cancel (rollback) requested; the run is error." in response.content.decode()
    entry = LogEntry.objects.get(object_id=run.pk)  # the audit: who, what, on which run, what came of it
    assert (entry.user, entry.get_change_message()) == (canceller.user, "Cancelled run (rollback): the run is error")


def test_cancel_refusals_are_admin_messages(world, owner):
    canceller = staff(perms=CANCELLERS)
    finished = canceller.post(f"{LIST}{world.runs['success']}/cancel/", {"action": "interrupt"}, follow=True)
    assert f"Run {world.runs['success']} is not cancellable (status: success)" in finished.content.decode()
    run = pending_run(owner.user, "bad")
    bad = canceller.post(f"{LIST}{run.pk}/cancel/", {"action": "explode"}, follow=True)
    assert bad.status_code == 200 and "Action: must be interrupt or rollback" in bad.content.decode()
    assert Run.objects.get(pk=run.pk).status == "pending"
    refused = {e.object_id: e.get_change_message() for e in LogEntry.objects.filter(user=canceller.user)}
    assert refused == {
        world.runs["success"]: f"Cancelled run (interrupt): refused: Run {world.runs['success']} is not cancellable "
        "(status: success)",
        run.pk: "Cancelled run (explode): refused: action: must be interrupt or rollback",
    }
    assert canceller.get(f"{LIST}{run.pk}/cancel/").status_code == 405
    assert canceller.post(f"{LIST}{run.pk}/change/", {}).status_code == 403  # the form never saves


def test_bulk_cancel_selected_cancels_unfinished_runs_only(world, owner):
    runs = [pending_run(owner.user, f"bulk{i}") for i in range(3)]
    selected = [*(run.pk for run in runs), world.runs["success"]]
    body = {"action": "cancel_selected_interrupt", "_selected_action": selected}
    assert staff(perms=VIEW_ALL).post(LIST, body).status_code == 200  # no such action without the right
    assert set(Run.objects.filter(pk__in=selected[:3]).values_list("status", flat=True)) == {"pending"}

    response = staff(perms=CANCELLERS).post(LIST, body, follow=True)
    assert (
        "Cancel (interrupt) requested for 3 run(s); 1 already finished, left as they were." in response.content.decode()
    )
    assert set(Run.objects.filter(pk__in=selected[:3]).values_list("status", "cancel_action")) == {
        ("interrupted", "interrupt")
    }
    assert Run.objects.get(pk=world.runs["success"]).status == "success"


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
    groups = re.findall(
        r'<tbody class="timeline-group" data-kind="([^"]+)">\s*<tr class="group-head"><td colspan="6">([^<]*)</td>',
        html,
    )
    assert ("webhook", "webhook https://hooks.example.com/in?… · not delivered · HTTP 500 · 3 attempts") in groups
    assert "<td>webhook.failed</td><td>webhook</td>" in html
    assert "s3cret" not in html
