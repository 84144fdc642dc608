"""The console's Health page (queue, workers, long runs, each linked) and its 403/404 pages inside the layout."""

from __future__ import annotations

import re
import uuid

import pytest
from django.utils import timezone

from runs.models import Run
from tests.console import VIEW_ALL, staff
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)

HEALTH = "/admin/runs/health/"


def _run(owner, *, status: str, started_minutes_ago: float | None = None, created_minutes_ago: float = 0, **fields):
    thread = ThreadMeta.objects.create(thread_id=f"h-{uuid.uuid4().hex[:10]}", owner=owner)
    run = Run.objects.create(
        run_id=uuid.uuid4().hex, thread=thread, owner=owner, assistant_id="lead_agent", status=status, **fields
    )
    now = timezone.now()
    started = now - timezone.timedelta(minutes=started_minutes_ago) if started_minutes_ago is not None else None
    Run.objects.filter(pk=run.pk).update(
        created_at=now - timezone.timedelta(minutes=created_minutes_ago), started_at=started
    )
    return run


def test_health_lists_long_running_and_long_waiting_runs_linked_to_their_pages(owner, django_assert_max_num_queries):
    stuck = _run(owner.user, status="running", started_minutes_ago=12, created_minutes_ago=12, worker_id="w:1:a")
    _run(owner.user, status="running", started_minutes_ago=1, created_minutes_ago=1, worker_id="w:1:a")
    waiting = _run(owner.user, status="pending", created_minutes_ago=9)
    delayed = _run(owner.user, status="queued", created_minutes_ago=9, not_before=timezone.now())
    _run(owner.user, status="error", started_minutes_ago=30, created_minutes_ago=30)
    support = staff(perms=VIEW_ALL)
    with django_assert_max_num_queries(10):
        html = support.get(HEALTH).content.decode()
    listed = re.findall(r'<tr class="long-run"><td><a href="/admin/runs/run/(\w+)/change/">', html)
    assert listed == [stuck.pk, waiting.pk]  # oldest first; a run delayed until now waited under the threshold
    assert delayed.pk not in html
    assert re.search(r'<a id="health-running" href="/admin/runs/run/\?outcome=running">2</a>', html)
    assert '<a id="health-pending" href="/admin/runs/run/?outcome=pending">1</a>' in html
    assert '<a id="health-queued" href="/admin/runs/run/?outcome=queued">1</a>' in html
    assert re.search(r"<td>running</td><td>12 min \d+ s</td>", html)
    assert listed == re.findall(
        r"/admin/runs/run/(\w+)/change/", support.get(HEALTH, {"minutes": "5"}).content.decode()
    )
    shorter = support.get(HEALTH, {"minutes": "1"}).content.decode()
    assert len(re.findall(r'<tr class="long-run">', shorter)) == 3


def test_health_is_listed_for_run_viewers_only(owner):
    assert 'href="/admin/runs/health/"' in staff(perms=VIEW_ALL).get("/admin/").content.decode()
    nobody = staff()
    assert 'href="/admin/runs/health/"' not in nobody.get("/admin/").content.decode()
    refused = nobody.get(HEALTH)
    assert refused.status_code == 403
    assert '<code id="missing-permission">runs.view_run</code>' in refused.content.decode()


def test_a_403_inside_the_console_keeps_its_layout_and_names_the_permission(owner):
    viewer = staff(perms=VIEW_ALL)
    refused = viewer.get(f"/admin/auth/user/{owner.user.pk}/change/")  # the owner link of a view-only user
    html = refused.content.decode()
    assert refused.status_code == 403
    assert 'id="site-name"' in html and 'id="nav-sidebar"' in html  # the console's header and sidebar
    assert '<code id="missing-permission">auth.view_user</code>' in html
    run = _run(owner.user, status="pending")
    cancel = viewer.post(f"/admin/runs/run/{run.pk}/cancel/", {"action": "interrupt", "confirmed": "yes"})
    assert cancel.status_code == 403 and "runs.change_run" in cancel.content.decode()


def test_a_404_inside_the_console_keeps_its_layout(owner):
    viewer = staff(perms=VIEW_ALL)
    missing = viewer.get("/admin/runs/run/no-such-run/cancel/?action=interrupt")
    html = missing.content.decode()
    assert missing.status_code == 404
    assert 'id="site-name"' in html and 'id="not-found"' in html and "no-such-run" not in html
    assert "/api/" not in html
    assert viewer.get("/api/no-such-route").json() == {"detail": "No route /api/no-such-route"}
