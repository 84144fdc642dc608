"""Retention from the console: preview (dry run) → apply on a confirmation form, the permission,
the refusal while a run is unfinished, the admin log, the changelist action and the storage page.

The oracle for "apply does what the preview said" is the saver API and the
per-thread storage accounting, read before and after.
"""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.admin.sites import site
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from langchain_core.messages import HumanMessage

from checkpoints.accessor import thread_config
from checkpoints.storage import thread_storage_get, thread_tables_read
from console.lineage.totals import storage_totals_get
from console.retention import preview_retention
from runs.models import Run
from tests.checkpoints.support import accessor, checkpoint_tuples, empty_checkpoint_tables, invoke
from tests.console.test_checkpoints import new_thread, settled_ends
from threads.models import ThreadMeta
from threads.ttl_sweep import threads_sweep_expired

pytestmark = pytest.mark.django_db(transaction=True)

PREVIEW = "admin:checkpoints_retention_preview"


def staff(client, *perms: str, superuser: bool = False):
    User = get_user_model()
    name = f"staff-{uuid.uuid4().hex[:6]}"
    if superuser:
        user = User.objects.create_superuser(name, password="pw-staff-123")
    else:
        user = User.objects.create_user(name, password="pw-staff-123", is_staff=True)
        user.user_permissions.add(*Permission.objects.filter(codename__in=perms))
    client.force_login(user)
    return user


def ids(thread_id: str) -> list[str]:
    return [t.config["configurable"]["checkpoint_id"] for t in checkpoint_tuples(accessor("full").saver, thread_id)]


def with_abandoned_branch(owner, mode: str = "full") -> ThreadMeta:
    """Three turns, then a fork from the end of the first one that the main line then leaves behind."""
    thread = new_thread(owner, f"{mode} with a branch")
    acc = accessor(mode, 2)
    invoke(acc, thread.thread_id, "one", "two", "three")
    ends = settled_ends(acc, thread.thread_id)
    acc.graph.invoke({"messages": [HumanMessage("abandoned")]}, acc.config(thread.thread_id, ends[0]))
    acc.graph.invoke({"messages": [HumanMessage("main goes on")]}, acc.config(thread.thread_id, ends[-1]))
    return thread


def preview(client, *threads: ThreadMeta):
    return client.get(reverse(PREVIEW), {"ids": ",".join(t.thread_id for t in threads)})


def listed(body: str, section: str) -> list[str]:
    block = re.search(rf'<ul class="{section}">(.*?)</ul>', body, re.S).group(1)
    return re.findall(r"<li><code>([^<]+)</code>", block)


@pytest.mark.parametrize("mode", ["full", "delta"])
def test_preview_then_apply_changes_storage_as_the_preview_said(client, owner, mode):
    user = staff(client, superuser=True)
    thread = with_abandoned_branch(owner, mode)
    before_ids, before = ids(thread.thread_id), thread_storage_get(thread_id=thread.thread_id)
    holders = thread_tables_read(thread_id=thread.thread_id, serde=accessor("full").saver.serde).snapshots().values()
    lineage_url = reverse("admin:checkpoints_lineage", args=[thread.thread_id])
    assert client.get(lineage_url, {"collapse": 0}).content.decode().count('class="ring"') == before["snapshot_count"]
    response = preview(client, thread)
    body = response.content.decode()
    assert response.status_code == 200 and 'id="apply-retention-button"' in body
    deleted = listed(body, "deleted")
    thinned = listed(body, "thinned")
    saved = int(re.search(r'class="bytes-saved">(\d+)<', body).group(1))
    assert deleted and set(deleted) <= set(before_ids) and saved > 0
    assert (len(thinned) > 0) == (mode == "delta")
    assert ids(thread.thread_id) == before_ids  # a preview changes nothing

    applied = client.post(reverse(PREVIEW), {"ids": thread.thread_id}, follow=True)
    assert applied.status_code == 200
    after_ids, after = ids(thread.thread_id), thread_storage_get(thread_id=thread.thread_id)
    assert set(after_ids) == set(before_ids) - set(deleted)
    assert before["total"]["bytes"] - after["total"]["bytes"] == saved
    # Snapshots go when thinned, and with the deleted checkpoints that held them (a fork's first one).
    assert before["snapshot_count"] - after["snapshot_count"] == len(thinned) + sum(h in deleted for h in holders)
    assert after["orphans"] == {"writes": 0, "blobs": 0, "parents": 0}
    # The lineage (whose SQLite rows are cached per process) draws the thinned thread as it now is.
    redrawn = client.get(lineage_url, {"collapse": 0}).content.decode()
    assert redrawn.count('class="ring"') == after["snapshot_count"]
    assert redrawn.count("data-checkpoint-id=") == len(after_ids)
    message = f"deleted {len(deleted)} checkpoint(s), thinned {len(thinned)} snapshot(s)"
    assert message in applied.content.decode()
    entry = LogEntry.objects.get(object_id=thread.thread_id)
    assert entry.user_id == user.pk and entry.is_change()
    assert entry.get_change_message().startswith("Applied checkpoint retention (keep_latest): " + message)
    assert f"saved {saved:,} bytes" in entry.get_change_message()
    # The thread still answers and takes a turn.
    acc = accessor(mode, 2)
    assert acc.get(thread.thread_id).values["messages"][-1].content == "echo: main goes on"


def test_apply_is_refused_with_the_service_message_while_a_run_is_unfinished(client, owner):
    staff(client, superuser=True)
    thread = with_abandoned_branch(owner)
    Run.objects.create(
        run_id=uuid.uuid4().hex, thread=thread, owner=owner.user, assistant_id="lead_agent", status="running"
    )
    before = ids(thread.thread_id)
    body = preview(client, thread).content.decode()
    assert "applying will be refused" in body and listed(body, "deleted")  # the dry run is still shown
    response = client.post(reverse(PREVIEW), {"ids": thread.thread_id}, follow=True)
    assert f"Thread {thread.thread_id} has an unfinished run; prune its checkpoints after it finishes." in (
        response.content.decode()
    )
    assert ids(thread.thread_id) == before
    # The refusal is in the audit too: who tried what, and why nothing happened.
    entry = LogEntry.objects.get(object_id=thread.thread_id)
    assert entry.get_change_message() == (
        "Applied checkpoint retention (keep_latest): refused: "
        f"Thread {thread.thread_id} has an unfinished run; prune its checkpoints after it finishes."
    )


def test_apply_needs_the_dedicated_permission(client, owner):
    thread = with_abandoned_branch(owner)
    before = ids(thread.thread_id)
    staff(client, "view_threadmeta", "change_threadmeta")
    body = preview(client, thread).content.decode()
    assert 'id="apply-retention-button"' not in body and 'id="apply-needs-permission"' in body
    assert client.post(reverse(PREVIEW), {"ids": thread.thread_id}).status_code == 403
    assert ids(thread.thread_id) == before
    staff(client, "view_threadmeta", "apply_retention")
    assert 'id="apply-retention-button"' in preview(client, thread).content.decode()
    assert client.post(reverse(PREVIEW), {"ids": thread.thread_id}).status_code == 302
    assert len(ids(thread.thread_id)) < len(before)


def test_apply_needs_csrf(owner):
    from django.test import Client

    csrf_client = Client(enforce_csrf_checks=True)
    staff(csrf_client, superuser=True)
    thread = with_abandoned_branch(owner)
    assert csrf_client.post(reverse(PREVIEW), {"ids": thread.thread_id}).status_code == 403


def test_preview_queries_do_not_grow_with_checkpoints(client, owner):
    staff(client, superuser=True)
    small, large = with_abandoned_branch(owner), with_abandoned_branch(owner)
    invoke(accessor("full"), large.thread_id, *[f"more {i}" for i in range(4)])
    counts = []
    for thread in (small, large):
        with CaptureQueriesContext(connection) as captured:
            assert preview(client, thread).status_code == 200
        counts.append(len(captured))
    assert counts[0] == counts[1], counts


def test_preview_rejects_bad_selections(client, owner):
    staff(client, superuser=True)
    assert client.get(reverse(PREVIEW)).status_code == 400
    assert client.get(reverse(PREVIEW), {"ids": ",".join(str(i) for i in range(51))}).status_code == 400
    body = client.get(reverse(PREVIEW), {"ids": "no-such-thread"}).content.decode()
    assert "Thread no-such-thread not found" in body


def test_changelist_action_redirects_to_the_preview(owner):
    threads = [new_thread(owner) for _ in range(2)]
    request = RequestFactory().post("/admin/threads/threadmeta/")
    response = preview_retention(site._registry[ThreadMeta], request, ThreadMeta.objects.filter(pk__in=threads))
    expected = ",".join(sorted(t.thread_id for t in threads))
    assert response.status_code == 302
    assert response["Location"] == reverse(PREVIEW) + "?ids=" + expected.replace(",", "%2C")


def test_storage_page_totals_per_table_mode_orphans_and_largest(client, owner, django_assert_max_num_queries):
    staff(client, superuser=True)
    before = storage_totals_get()
    big = new_thread(owner, "Big thread")
    invoke(accessor("full"), big.thread_id, *[f"{i} " + "x" * 50_000 for i in range(5)])
    delta = new_thread(owner, "Delta thread")
    invoke(accessor("delta", 2), delta.thread_id, "one", "two")
    # Two write rows for a checkpoint that does not exist: orphans.
    saver = accessor("full").saver
    saver.put_writes(thread_config(delta.thread_id, "1f000000-0000-6000-8000-000000000000"), [("a", 1), ("b", 2)], "t1")
    # The aggregates, then at most 7 per explained thread (its rows, references, lost branches): 2 here.
    with django_assert_max_num_queries(8 + 7 * 2):
        response = client.get(reverse("admin:checkpoints_storage"))
    assert response.status_code == 200
    after = storage_totals_get()
    per_thread = [thread_storage_get(thread_id=t.thread_id) for t in (big, delta)]
    for table in ("checkpoints", "writes"):
        grown = after.tables[table]["bytes"] - before.tables[table]["bytes"]
        assert grown == sum(report["tables"][table]["bytes"] for report in per_thread)
    assert (
        after.modes["delta"]["checkpoints"] - before.modes["delta"]["checkpoints"] == per_thread[1]["checkpoint_count"]
    )
    assert after.modes["full"]["checkpoints"] - before.modes["full"]["checkpoints"] == per_thread[0]["checkpoint_count"]
    assert after.modes["delta"]["snapshots_written"] - before.modes["delta"]["snapshots_written"] == 2
    assert after.orphans["writes"] - before.orphans["writes"] == 2
    if after.snapshots_stored is not None:
        assert after.snapshots_stored - before.snapshots_stored == per_thread[1]["snapshot_count"]
    body = response.content.decode()
    top = after.largest[0]
    assert top["thread_id"] == big.thread_id and top["bytes"] == per_thread[0]["total"]["bytes"]
    assert top["checkpoints"] == per_thread[0]["checkpoint_count"]
    assert f'href="{reverse(PREVIEW)}?ids={big.thread_id}" class="preview-link"' in body
    assert "Big thread" in body
    index = client.get("/admin/").content.decode()
    assert "Checkpoint storage" in index and "Checkpoint lineage" not in index


# -- rolled-back runs, lost answers and storage guidance ------------------------------------------------------


def with_rolled_back_run(owner, *, rolled_back: bool = True) -> tuple[ThreadMeta, str, str]:
    """Two turns, then a run that stops at an interrupt and a full-mode rollback (a restore beside it).

    Return the thread, the rolled-back run's tip (it owns the interrupt's
    writes) and the restored head.
    """
    thread = new_thread(owner, "Rolled back")
    acc = accessor("full")
    invoke(acc, thread.thread_id, "one", "two")
    before = acc.get(thread.thread_id)
    run = Run.objects.create(
        run_id=uuid.uuid4().hex,
        thread=thread,
        owner=owner.user,
        assistant_id="lead_agent",
        status="error" if rolled_back else "interrupted",
        cancel_action="rollback" if rolled_back else "",
    )
    config = acc.config(thread.thread_id, metadata={"run_id": run.run_id})
    acc.graph.invoke({"messages": [HumanMessage("/interrupt")]}, config)
    tip = acc.get(thread.thread_id).config["configurable"]["checkpoint_id"]
    # What checkpoints.rollback does in full mode: fork from the captured head, writing its messages.
    restore = acc.update(
        thread.thread_id,
        {"messages": before.values["messages"]},
        as_node="rollback_restore",
        checkpoint_id=before.config["configurable"]["checkpoint_id"],
    )
    return thread, tip, restore["configurable"]["checkpoint_id"]


def test_a_rolled_back_runs_checkpoints_are_released_not_kept_for_their_writes(client, owner):
    staff(client, superuser=True)
    kept, kept_tip, _ = with_rolled_back_run(owner, rolled_back=False)
    body = preview(client, kept).content.decode()
    assert kept_tip not in listed(body, "deleted")
    thread, tip, head = with_rolled_back_run(owner)
    body = preview(client, thread).content.decode()
    assert tip in listed(body, "deleted")
    assert "Checkpoints of rolled-back runs" in body
    assert client.post(reverse(PREVIEW), {"ids": thread.thread_id}).status_code == 302
    remaining = ids(thread.thread_id)
    assert tip not in remaining and head in remaining
    assert [m.content for m in accessor("full").get(thread.thread_id).values["messages"]] == [
        "one",
        "echo: one",
        "two",
        "echo: two",
    ]


def test_the_preview_says_which_deleted_branch_holds_messages_not_in_head(client, owner):
    staff(client, superuser=True)
    thread = with_abandoned_branch(owner)
    body = preview(client, thread).content.decode()
    lost = re.search(r'<ul class="lost-branches"[^>]*>(.*?)</ul>', body, re.S).group(1)
    assert "2 messages not in HEAD" in lost and "echo: abandoned" in lost
    assert "open the branch to compare it with HEAD first" in lost


def test_storage_page_explains_a_linear_full_thread_that_retention_cannot_shrink(client, owner):
    staff(client, superuser=True)
    empty_checkpoint_tables()
    linear = new_thread(owner, "Long full thread")
    invoke(accessor("full"), linear.thread_id, *[f"{i} " + "y" * 20_000 for i in range(4)])
    branched = with_abandoned_branch(owner)
    body = client.get(reverse("admin:checkpoints_storage")).content.decode()
    block = re.search(rf'<div class="guidance" id="guidance-{linear.thread_id}">(.*?)</div>', body, re.S).group(1)
    assert '<span class="reclaimable reclaim-zero">0\xa0bytes</span>' in block
    assert "full-mode history" in block and "Retention reclaims nothing" in block
    assert "Switch the deployment to delta mode" in block
    # Most reclaimable first: the branched thread leads though it is smaller.
    assert body.index(f'id="guidance-{branched.thread_id}"') < body.index(f'id="guidance-{linear.thread_id}"')
    other = re.search(rf'<div class="guidance" id="guidance-{branched.thread_id}">(.*?)</div>', body, re.S).group(1)
    assert "messages not in HEAD" in other


def test_the_api_prune_and_the_ttl_sweep_release_rolled_back_runs_as_the_console_does(owner):
    """``POST /threads/prune`` (keep_latest) and a keep_latest TTL expiry drop a rolled-back run's branch too."""
    thread, tip, head = with_rolled_back_run(owner)
    answer = owner.client.post(
        "/api/threads/prune", {"thread_ids": [thread.thread_id], "strategy": "keep_latest"}, format="json"
    )
    assert answer.status_code == 200, answer.content
    remaining = ids(thread.thread_id)
    assert tip not in remaining and head in remaining
    swept, swept_tip, swept_head = with_rolled_back_run(owner)
    kept, kept_tip, _ = with_rolled_back_run(owner, rolled_back=False)  # an interrupted run's tip stays
    ThreadMeta.objects.filter(pk__in=[swept.pk, kept.pk]).update(
        ttl_strategy="keep_latest", ttl=timedelta(minutes=1), expires_at=timezone.now() - timedelta(seconds=1)
    )
    report = threads_sweep_expired()
    assert {swept.thread_id, kept.thread_id} <= set(report.pruned)
    assert swept_tip not in ids(swept.thread_id) and swept_head in ids(swept.thread_id)
    assert kept_tip in ids(kept.thread_id)
