"""The admin console: threads, runs, events and keys list without N+1 queries."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth import get_user_model

from runs.models import Run, RunEvent
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client):
    admin = get_user_model().objects.create_superuser("support", password="pw-support-123")
    client.force_login(admin)
    return client


@pytest.fixture
def data(owner):
    for i in range(12):
        thread = ThreadMeta.objects.create(
            thread_id=f"adm-{i}-{uuid.uuid4().hex[:6]}", owner=owner.user, display_name=f"T{i}"
        )
        for j in range(2):
            run = Run.objects.create(
                run_id=uuid.uuid4().hex,
                thread=thread,
                owner=owner.user,
                assistant_id="lead_agent",
                status="success",
                total_tokens=10 + j,
            )
            RunEvent.objects.create(thread=thread, run=run, event_type="run.start", category="trace", seq=j + 1)


@pytest.mark.parametrize(
    "path",
    [
        "/admin/threads/threadmeta/",
        "/admin/runs/run/",
        "/admin/runs/runevent/",
        "/admin/deerflow_site/apikey/",
        "/admin/runs/assistant/",
        "/admin/runs/cron/",
    ],
)
def test_changelists_render_with_bounded_queries(staff_client, data, path, django_assert_max_num_queries):
    with django_assert_max_num_queries(12):
        response = staff_client.get(path)
    assert response.status_code == 200


def test_thread_changelist_shows_titles_and_run_counts(staff_client, data):
    response = staff_client.get("/admin/threads/threadmeta/?q=T1")
    body = response.content.decode()
    assert "T1" in body and "T11" in body
    assert ">2<" in body  # each thread has two runs


def test_run_detail_lists_its_events(staff_client, data):
    run = Run.objects.first()
    response = staff_client.get(f"/admin/runs/run/{run.pk}/change/")
    assert response.status_code == 200
    assert "run.start" in response.content.decode()


def test_admin_needs_staff(client, data):
    response = client.get("/admin/threads/threadmeta/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_checkpoint_settings_page_shows_mode_cadence_and_counters(staff_client):
    response = staff_client.get("/admin/checkpoints/settings/")
    assert response.status_code == 200
    body = response.content.decode()
    assert '<td id="channel-mode">full</td>' in body
    assert '<td id="snapshot-frequency">10</td>' in body
    assert 'class="counter"' in body and "hits" in body
    index = staff_client.get("/admin/").content.decode()
    assert "Checkpoint settings" in index


def test_assistants_and_crons_are_listed_read_only(staff_client, owner):
    from runs.models import Assistant, Cron
    from runs.services.assistants import assistant_create
    from runs.services.crons import cron_create

    assert not Assistant.objects.exists()
    assert (
        ">system<" in staff_client.get("/admin/runs/assistant/").content.decode()
    )  # lead_agent's, before any API read
    mine = assistant_create(owner=owner.user, graph_id="lead_agent", name="Console helper")
    cron = cron_create(owner=owner.user, thread=None, payload={"assistant_id": mine.assistant_id}, schedule="0 9 * * 1")
    assert "Console helper" in staff_client.get("/admin/runs/assistant/").content.decode()
    assert "Console helper" not in staff_client.get("/admin/runs/assistant/?kind=system").content.decode()
    detail = staff_client.get(f"/admin/runs/assistant/{mine.pk}/change/")
    assert detail.status_code == 200 and "Save" not in detail.content.decode()
    assert "0 9 * * 1" in staff_client.get("/admin/runs/cron/").content.decode()
    assert staff_client.get(f"/admin/runs/cron/{cron.pk}/change/").status_code == 200
    assert staff_client.post(f"/admin/runs/cron/{cron.pk}/delete/").status_code == 403
    assert Cron.objects.filter(pk=cron.pk).exists()


def test_event_and_model_filters_know_their_choices_without_scanning_the_table(
    staff_client, data, django_assert_max_num_queries
):
    run = Run.objects.first()
    Run.objects.filter(pk=run.pk).update(model_name="demo-echo")
    RunEvent.objects.create(thread=run.thread, run=run, event_type="llm.error", category="trace", seq=99)
    with django_assert_max_num_queries(12) as captured:
        response = staff_client.get("/admin/runs/runevent/?event_type=llm.error")
    body = response.content.decode()
    assert response.status_code == 200 and "?event_type=llm.human.input" in body  # a catalog choice, never seen in rows
    assert body.count("llm.error</td>") == 1 and "run.start</td>" not in body
    assert not any("DISTINCT" in q["sql"].upper() for q in captured.captured_queries)
    runs = staff_client.get("/admin/runs/run/?model_name=demo-echo").content.decode()
    assert "?model_name=demo-echo" in runs and runs.count('class="action-select"') == 1


def test_a_superuser_creates_a_key_in_the_console_shown_once_and_logged(staff_client, owner):
    from django.contrib.admin.models import ADDITION, LogEntry

    from deerflow_site.models import ApiKey, hash_api_key

    page = staff_client.post("/admin/deerflow_site/apikey/add/", {"user": owner.user.pk, "name": "agent-chat-ui"})
    assert page.status_code == 200
    raw = page.context["raw_key"]
    key = ApiKey.objects.get(digest=hash_api_key(raw))
    assert (key.user, key.name) == (owner.user, "agent-chat-ui")
    assert raw in page.content.decode()
    assert LogEntry.objects.filter(object_id=str(key.pk), action_flag=ADDITION).count() == 1
    # The key works at once, and no later page shows it again.
    from rest_framework.test import APIClient

    assert APIClient(HTTP_X_API_KEY=raw).get("/api/info").status_code == 200
    assert raw not in staff_client.get(f"/admin/deerflow_site/apikey/{key.pk}/change/").content.decode()
    assert raw not in staff_client.get("/admin/deerflow_site/apikey/").content.decode()


def test_revoking_keys_in_the_console_logs_each_and_the_key_stops_working(staff_client, owner):
    from django.contrib.admin.models import CHANGE, LogEntry
    from rest_framework.test import APIClient

    from deerflow_site.models import ApiKey

    key = ApiKey.objects.get(user=owner.user)
    answer = staff_client.post(
        "/admin/deerflow_site/apikey/", {"action": "revoke", "_selected_action": [key.pk]}, follow=True
    )
    assert "Revoked 1 key(s)." in answer.content.decode()
    assert LogEntry.objects.filter(object_id=str(key.pk), action_flag=CHANGE, change_message="Revoked").count() == 1
    assert APIClient(HTTP_X_API_KEY=owner.key).get("/api/info").status_code in (401, 403)
    # Revoking it again revokes nothing and logs nothing more.
    staff_client.post("/admin/deerflow_site/apikey/", {"action": "revoke", "_selected_action": [key.pk]})
    assert LogEntry.objects.filter(object_id=str(key.pk), change_message="Revoked").count() == 1


def test_staff_who_are_not_superusers_cannot_create_keys(owner):
    from tests.console import staff

    client = staff(perms=("deerflow_site.add_apikey", "deerflow_site.view_apikey"))
    assert client.post("/admin/deerflow_site/apikey/add/", {"user": owner.user.pk}).status_code == 403
