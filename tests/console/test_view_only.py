"""A support person who may read everything can change nothing: every staff action refuses a view-only account.

The actions the staff-action log records (cancel, retention apply, fork and
restore as head, key created or revoked, erase a user, export) each need a
permission of their own; an account holding every *view* permission gets a
403 from each, the object stays as it was, and the log records nothing.
"""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.urls import reverse

from deerflow_site.models import ApiKey
from deerflow_site.services import api_key_issue
from runs.models import Run
from tests.checkpoints.support import accessor, invoke
from tests.console import VIEW_ALL, staff
from tests.console.test_checkpoints import ids_newest_first, new_thread, post_action, settled_ends
from tests.console.test_retention import PREVIEW
from tests.console.test_runs import pending_run
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)

EVERY_VIEW = (*VIEW_ALL, "auth.view_user", "deerflow_site.view_apikey", "admin.view_logentry")


def test_an_account_that_may_view_everything_can_do_no_staff_action(owner):
    viewer = staff(perms=EVERY_VIEW)
    thread = new_thread(owner)
    invoke(accessor("full"), thread.thread_id, "one", "two")
    head_before = ids_newest_first(thread.thread_id)
    checkpoint = settled_ends(accessor("full"), thread.thread_id)[0]
    run = pending_run(owner.user)
    key, _ = api_key_issue(user=owner.user, name="kept")

    refused = {
        "cancel": viewer.post(
            reverse("admin:runs_run_cancel", args=[run.pk]), {"action": "interrupt", "confirmed": "yes"}
        ),
        "retention apply": viewer.post(reverse(PREVIEW), {"ids": thread.thread_id}),
        "fork": post_action(viewer, thread.thread_id, checkpoint, "fork"),
        "restore as head": post_action(viewer, thread.thread_id, checkpoint, "restore"),
        "key created": viewer.post(reverse("admin:deerflow_site_apikey_add"), {"user": owner.user.pk}),
        "key revoked": viewer.post(
            reverse("admin:deerflow_site_apikey_changelist"), {"action": "revoke", "_selected_action": [key.pk]}
        ),
        "erase": viewer.post(
            reverse("admin:auth_user_erase", args=[owner.user.pk]), {"confirm_username": owner.user.username}
        ),
        "export": viewer.get(reverse("admin:threads_threadmeta_export", args=[thread.pk])),
    }
    # An admin action the account may not run is not offered: the list shows itself again (200), unchanged.
    expected = {**dict.fromkeys(refused, 403), "key revoked": 200}
    assert {action: answer.status_code for action, answer in refused.items()} == expected
    assert Run.objects.get(pk=run.pk).status == "pending"
    assert ids_newest_first(thread.thread_id) == head_before
    assert ThreadMeta.objects.filter(pk=thread.pk).exists()
    assert list(ApiKey.objects.filter(user=owner.user).values_list("revoked_at", flat=True)) == [None, None]
    assert LogEntry.objects.count() == 0
