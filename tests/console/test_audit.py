"""The staff-action log: every audited console action is listed with who, what, when and its outcome; nobody edits it."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry

from tests.console import VIEW_ALL, staff
from tests.console.test_runs import CANCELLERS, LIST, pending_run

pytestmark = pytest.mark.django_db(transaction=True)

LOG = "/admin/admin/logentry/"


def test_a_cancel_is_listed_with_who_what_and_outcome_and_the_log_is_read_only(owner):
    run = pending_run(owner.user, "audit")
    canceller = staff(perms=CANCELLERS)
    canceller.post(f"{LIST}{run.pk}/cancel/", {"action": "interrupt", "confirmed": "yes"})
    entry = LogEntry.objects.get(object_id=run.pk)

    auditor = staff(perms=("admin.view_logentry",))
    page = auditor.get(LOG, {"q": run.pk}).content.decode()
    assert canceller.user.username in page and "Cancelled run (interrupt): the run is interrupted" in page
    assert f"/admin/runs/run/{run.pk}/change/" in page  # the object is one click away
    assert auditor.get(f"{LOG}{entry.pk}/change/").status_code == 200  # readable …
    assert auditor.post(f"{LOG}{entry.pk}/delete/", {"post": "yes"}).status_code == 403  # … never deletable
    assert LogEntry.objects.filter(pk=entry.pk).exists()


def test_the_log_needs_its_own_view_permission(owner):
    assert staff(perms=VIEW_ALL).get(LOG).status_code == 403
