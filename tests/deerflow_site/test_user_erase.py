"""Erase a user (deerflow_site.user_erase): the preview counts everything, the erase leaves nothing, and no one else's.

The user's things are made through the API a client uses (threads, state,
Store items, assistants, crons, projects) and the services a run uses (run
rows and their events); another user's things sit beside them throughout.
"""

from __future__ import annotations

import uuid

import pytest
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.urls import reverse

from core.errors import Conflict
from deerflow_site.models import ApiKey
from deerflow_site.services import api_key_issue
from deerflow_site.user_erase import user_erase, user_holdings
from runs.models import Assistant, Cron, Run, RunEvent, RunStatus
from runs.services.events import run_events_append
from store.selectors import store_user_id, store_user_items_count
from tests.console import staff
from tests.helpers import raw_checkpoint_count
from tests.test_isolation_matrix import CRON_BODY, STATE_UPDATE
from threads.models import Project, ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)


def new_thread(persona) -> str:
    thread_id = persona.client.post("/api/threads", {}, format="json").json()["thread_id"]
    written = persona.client.post(f"/api/threads/{thread_id}/state", STATE_UPDATE, format="json")
    assert written.status_code == 200, written.content
    return thread_id


def finished_run(thread_id: str, by, *, events: int = 2, status: str = RunStatus.SUCCESS) -> Run:
    run = Run.objects.create(
        run_id=uuid.uuid4().hex, thread_id=thread_id, owner=by, assistant_id="lead_agent", status=status
    )
    run_events_append(
        thread_id=thread_id,
        run_id=run.run_id,
        events=[{"event_type": "llm.end", "content": {"n": i}} for i in range(events)],
    )
    return run


def put_item(persona, namespace: list[str], key: str) -> None:
    body = {"namespace": namespace, "key": key, "value": {"who": persona.user.username}}
    assert persona.client.put("/api/store/items", body, format="json").status_code in (200, 204)


def items(persona) -> list[str]:
    found = persona.client.post("/api/store/items/search", {"namespace_prefix": [], "limit": 100}, format="json")
    return sorted(item["key"] for item in found.json()["items"])


@pytest.fixture
def world(owner, other):
    """The owner's holdings, and the other user's beside them (one run of the owner's on the other's thread)."""
    mine = [new_thread(owner), new_thread(owner)]
    theirs = new_thread(other)
    finished_run(mine[0], owner.user, events=3)
    finished_run(mine[1], other.user, events=1)  # a colleague's run on the owner's thread goes with the thread
    finished_run(theirs, owner.user, events=2)  # the owner's run on another's thread goes; the thread stays
    kept = finished_run(theirs, other.user, events=2)
    put_item(owner, ["notes"], "a")
    put_item(owner, ["notes", "deep"], "b")
    put_item(other, ["notes"], "theirs")
    assistant = owner.client.post("/api/assistants", {"graph_id": "lead_agent", "name": "mine"}, format="json")
    assert assistant.status_code == 200, assistant.content
    cron = owner.client.post(f"/api/threads/{mine[0]}/runs/crons", CRON_BODY, format="json")
    assert cron.status_code == 200, cron.content
    owner.client.post("/api/projects", {"name": "mine"}, format="json")
    api_key_issue(user=owner.user, name="second")
    return {"mine": mine, "theirs": theirs, "kept": kept}


def test_the_preview_counts_everything_the_user_owns(owner, other, world):
    holdings = user_holdings(user=owner.user)
    assert (holdings.threads, holdings.runs, holdings.unfinished_runs, holdings.events) == (2, 3, 0, 6)
    assert holdings.checkpoints == sum(raw_checkpoint_count(t) for t in world["mine"]) > 0
    assert holdings.checkpoint_bytes > 0
    assert (holdings.store_items, holdings.api_keys, holdings.assistants, holdings.crons) == (2, 2, 1, 1)
    assert holdings.projects == Project.objects.filter(owner=owner.user).count()
    assert holdings.summary().startswith("2 threads, 3 runs, 6 events, ")


def test_the_erase_leaves_nothing_of_the_user_and_all_of_the_others(owner, other, world):
    user_id, store_root = owner.user.pk, store_user_id(user=owner.user)
    user_erase(user=owner.user)

    assert not get_user_model().objects.filter(pk=user_id).exists()
    assert not ThreadMeta.objects.filter(pk__in=world["mine"]).exists()
    assert [raw_checkpoint_count(t) for t in world["mine"]] == [0, 0]
    assert not Run.objects.filter(owner_id=user_id).exists()
    assert not Assistant.objects.filter(owner_id=user_id).exists()
    assert not Cron.objects.filter(owner_id=user_id).exists()
    assert not ApiKey.objects.filter(user_id=user_id).exists()
    assert store_user_items_count(user_id=store_root) == 0
    # The other user's thread, run, events, checkpoints and Store item are all there.
    assert list(Run.objects.filter(thread_id=world["theirs"])) == [world["kept"]]
    assert RunEvent.objects.filter(run=world["kept"]).count() == 2
    assert raw_checkpoint_count(world["theirs"]) > 0
    assert items(other) == ["theirs"]


def test_an_unfinished_run_refuses_the_erase_and_nothing_is_erased(owner, other, world):
    finished_run(world["mine"][0], owner.user, events=0, status=RunStatus.PENDING)
    before = user_holdings(user=owner.user)
    with pytest.raises(Conflict, match="1 unfinished run"):
        user_erase(user=owner.user)
    assert user_holdings(user=owner.user) == before
    # Asked to cancel it first, the erase goes through (an unstarted run ends at once).
    assert user_erase(user=owner.user, cancel_runs=True).unfinished_runs == 1
    assert not ThreadMeta.objects.filter(pk__in=world["mine"]).exists()


def test_a_staff_account_and_ones_own_are_not_erased(owner):
    admin = get_user_model().objects.create_user("an-admin", is_staff=True)
    with pytest.raises(Conflict, match="staff account"):
        user_erase(user=admin)
    with pytest.raises(Conflict, match="your own account"):
        user_erase(user=owner.user, by=owner.user)
    assert get_user_model().objects.filter(pk__in=[admin.pk, owner.user.pk]).count() == 2


def test_the_console_previews_asks_for_the_name_then_erases_and_logs_it(owner, other, world):
    support = staff(perms=("auth.view_user", "auth.change_user", "auth.delete_user"))
    url = reverse("admin:auth_user_erase", args=[owner.user.pk])
    page = support.get(reverse("admin:auth_user_change", args=[owner.user.pk])).content.decode()
    assert url in page and "Erase user…" in page
    preview = support.get(url).content.decode()
    assert '<td id="count-threads">2</td>' in preview and '<td id="count-store-items">2</td>' in preview

    wrong = support.post(url, {"confirm_username": "someone"})
    assert wrong.status_code == 200 and f"Type {owner.user.username} to confirm" in wrong.content.decode()
    assert ThreadMeta.objects.filter(pk__in=world["mine"]).count() == 2

    user_id = owner.user.pk
    done = support.post(url, {"confirm_username": owner.user.username})
    assert done.status_code == 302 and done["Location"] == reverse("admin:auth_user_changelist")
    assert not get_user_model().objects.filter(pk=user_id).exists()
    entry = LogEntry.objects.get(action_flag=DELETION, object_id=str(user_id))
    assert entry.user_id == support.user.pk
    assert entry.change_message.startswith(f"Erased user {owner.user.username}: 2 threads, 3 runs, 6 events")


def test_the_console_refusal_is_shown_and_logged_and_a_view_only_user_cannot_erase(owner, world):
    finished_run(world["mine"][0], owner.user, events=0, status=RunStatus.PENDING)
    support = staff(perms=("auth.view_user", "auth.change_user", "auth.delete_user"))
    url = reverse("admin:auth_user_erase", args=[owner.user.pk])
    refused = support.post(url, {"confirm_username": owner.user.username}, follow=True).content.decode()
    assert "1 unfinished run(s); cancel them first" in refused
    assert ThreadMeta.objects.filter(pk__in=world["mine"]).count() == 2
    assert LogEntry.objects.get(object_id=str(owner.user.pk)).change_message.startswith(
        f"Erased user {owner.user.username}: refused: "
    )
    viewer = staff(perms=("auth.view_user",))
    assert viewer.get(url).status_code == 403
    assert viewer.post(url, {"confirm_username": owner.user.username}).status_code == 403
    assert get_user_model().objects.filter(pk=owner.user.pk).exists()


def test_the_command_counts_on_a_dry_run_and_erases_without_one(owner, world, capsys):
    call_command("erase_user", owner.user.username, "--dry-run")
    assert f"Would erase {owner.user.username}: 2 threads, 3 runs" in capsys.readouterr().out
    assert ThreadMeta.objects.filter(pk__in=world["mine"]).count() == 2
    call_command("erase_user", owner.user.username)
    assert f"Erased {owner.user.username}: 2 threads" in capsys.readouterr().out
    with pytest.raises(CommandError, match="No user named"):
        call_command("erase_user", owner.user.username)
