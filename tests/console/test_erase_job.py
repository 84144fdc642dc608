"""Job: "delete everything you hold about me" — find the user, see what they own, erase it, in a real browser.

Before: no page did it; support deleted thread by thread in the API and the
account in the admin, which refused while the user owned anything
(``PROTECT``). Budget: 4 clicks (Users, the user, Erase user…, confirm).
"""

from __future__ import annotations

import pytest
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.auth import get_user_model

from tests.console import staff
from tests.console.test_lineage_jobs import SCHEMES, Clicks, assert_fits, chromium, shots, signed_in  # noqa: F401
from tests.deerflow_site.test_user_erase import finished_run, new_thread, put_item
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)


def test_job_erase_a_user_in_four_clicks(owner, other, live_server, shots):  # noqa: F811
    threads = [new_thread(owner), new_thread(owner)]
    finished_run(threads[0], owner.user, events=3)
    put_item(owner, ["notes"], "a")
    kept = new_thread(other)
    user_id, username = owner.user.pk, owner.user.username
    support = staff(perms=("auth.view_user", "auth.change_user", "auth.delete_user"))
    with chromium() as browser:
        for scheme in SCHEMES:
            context, page = signed_in(browser, live_server, support, scheme)
            clicks = Clicks(page)
            page.goto(f"{live_server.url}/admin/")
            clicks.click("a:has-text('Users')")
            clicks.click(f"a:text-is('{username}')")
            clicks.click("#erase-user-link")
            page.wait_for_selector("#erase-holdings")
            assert page.locator("#count-threads").inner_text() == "2"
            assert page.locator("#count-runs").inner_text() == "1"
            assert page.locator("#count-store-items").inner_text() == "1"
            assert "cannot be undone" in page.locator("#erase-user").inner_text()
            assert_fits(page, "the erase preview", scheme)
            page.screenshot(path=str(shots / f"job-erase-user-{scheme}.png"), full_page=True)
            if scheme == SCHEMES[-1]:
                page.fill("#confirm-username", username)
                clicks.click("#confirm-erase")
                page.wait_for_selector("ul.messagelist li.success")
                assert f"Erased {username} and everything they owned" in page.locator("ul.messagelist").text_content()
                assert clicks.count <= 4
            context.close()
    assert not get_user_model().objects.filter(pk=user_id).exists()
    assert list(ThreadMeta.objects.values_list("thread_id", flat=True)) == [kept]
    assert LogEntry.objects.filter(action_flag=DELETION, object_id=str(user_id), user_id=support.user.pk).exists()
