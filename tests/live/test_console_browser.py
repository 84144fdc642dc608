"""The support console in a real browser: headless Debian Chromium driven by Playwright, against a real server.

One scenario, as a support person works: log in, find a thread by its title,
read its conversation, open its lineage and click the forked branch's head,
read the diff against its parent, preview and apply retention, watch a slow
run's events arrive live over the run WebSocket and cancel it with rollback;
then a staff user without the permissions sees no cancel and no apply button. Playwright never downloads a browser here:
it drives ``/usr/bin/chromium`` (``apt-get install chromium``; ``.ci/run``
installs it). Screenshots go to a temporary folder, or to ``docs/console/``
with ``CONSOLE_SCREENSHOTS=1`` (how the README's pictures are made).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest

from tests.live.server import ROOT, LiveServer

CHROMIUM = Path("/usr/bin/chromium")
# Root (CI) needs --no-sandbox; containers often have a tiny /dev/shm.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-dev-shm-usage"]
# Decided before any server starts: without the browser there is nothing to drive.
pytestmark = [
    pytest.mark.live,
    pytest.mark.sqlite_only,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Chromium at /usr/bin/chromium (apt-get install chromium; .ci/run does)"
    ),
]
PASSWORD = "pw-console-browser-1"
# Many words: the demo model streams one token per word, about 0.3 s apart at /slow 20.
LONG_QUESTION = " ".join(f"word{index}" for index in range(60))
# Staff accounts: "console-support" may cancel runs and apply retention, "console-viewer" may only look.
STAFF_SCRIPT = """
from django.contrib.auth.models import Permission, User
views = ["view_threadmeta", "view_run", "view_runevent"]
for name, codenames in (("console-support", views + ["change_run", "apply_retention"]), ("console-viewer", views)):
    user, _ = User.objects.get_or_create(username=name, defaults={{"is_staff": True}})
    user.set_password("{password}")
    user.save()
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
"""


def _playwright():
    return pytest.importorskip("playwright.sync_api", reason="needs the playwright package (pip install -e '.[test]')")


def _until(predicate, within: float, what: str):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.05)
    raise AssertionError(f"not reached within {within} s: {what}")


@pytest.fixture(scope="module")
def console_server(api_server):
    """The session's server, with the two staff accounts."""
    api_server.manage("shell", "-c", STAFF_SCRIPT.format(password=PASSWORD))
    return api_server


@pytest.fixture
def api(console_server):
    with httpx.Client(base_url=console_server.url, headers={"x-api-key": console_server.api_key("alice")}) as client:
        yield client


@pytest.fixture
def shots(tmp_path) -> Path:
    folder = ROOT / "docs" / "console" if os.environ.get("CONSOLE_SCREENSHOTS") == "1" else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _start_slow_run(api: httpx.Client, thread_id: str, seconds: int) -> str:
    body = {
        "assistant_id": "lead_agent",
        "input": {"messages": [{"role": "user", "content": f"/slow {seconds} {LONG_QUESTION}"}]},
        "stream_mode": ["messages-tuple", "values"],
    }
    run = api.post(f"/threads/{thread_id}/runs", json=body)
    assert run.status_code == 200, run.text
    return run.json()["run_id"]


def _turn(api: httpx.Client, thread_id: str, text: str, **extra) -> None:
    body = {"assistant_id": "lead_agent", "input": {"messages": [{"role": "user", "content": text}]}, **extra}
    answer = api.post(f"/threads/{thread_id}/runs/wait", json=body)
    assert answer.status_code == 200, answer.text


def _run_status(api: httpx.Client, thread_id: str, run_id: str) -> dict:
    return api.get(f"/threads/{thread_id}/runs/{run_id}").json()


def _log_in(browser, server: LiveServer, username: str):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(f"http://127.0.0.1:{server.port}/admin/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")
    return page


def test_support_reads_a_conversation_watches_a_run_live_and_rolls_it_back(console_server, api, shots):
    sync_playwright = _playwright().sync_playwright
    base = f"http://127.0.0.1:{console_server.port}/admin"
    thread_id = api.post("/threads", json={"metadata": {"ticket": "T-1042"}}).json()["thread_id"]
    answer = api.post(
        f"/threads/{thread_id}/runs/wait",
        json={
            "assistant_id": "lead_agent",
            "input": {"messages": [{"role": "user", "content": "Refund for order 1042"}]},
        },
    )
    assert answer.status_code == 200, answer.text
    _turn(api, thread_id, "And the shipping cost?")
    # Edit the second question: a run from the checkpoint after the first answer forks the lineage there.
    history = api.post(f"/threads/{thread_id}/history", json={"limit": 20}).json()
    fork_point = next(h for h in history if len(h["values"]["messages"]) == 2 and not h["next"])
    _turn(api, thread_id, "And the delivery date?", checkpoint_id=fork_point["checkpoint_id"])
    head = api.get(f"/threads/{thread_id}/state").json()
    conversation_now = [m["content"] for m in head["values"]["messages"]]
    assert conversation_now[2:] == ["And the delivery date?", "echo: And the delivery date?"]

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            page = _log_in(browser, console_server, "console-support")

            # Find the thread by its title and read its conversation.
            page.goto(f"{base}/threads/threadmeta/")
            page.fill("#searchbar", "Refund for order")
            page.press("#searchbar", "Enter")
            page.wait_for_selector(f"text={thread_id}")
            assert page.locator(".mode-badge.mode-full").count() == 1
            page.screenshot(path=str(shots / "threads.png"), full_page=True)
            page.click(f"a:has-text('{thread_id}')")
            conversation = page.locator("#conversation")
            conversation.wait_for()
            assert "Refund for order 1042" in conversation.inner_text()
            assert "echo: Refund for order 1042" in conversation.inner_text()
            assert "echo: And the delivery date?" in conversation.inner_text()
            page.screenshot(path=str(shots / "thread.png"), full_page=True)

            # Open its lineage, click the forked branch's head, read the diff against its parent.
            page.click("#lineage-link")
            page.wait_for_selector("#lineage svg")
            assert "fork ×2" in page.locator("#lineage svg").text_content()
            page.screenshot(path=str(shots / "lineage.png"), full_page=True)
            page.click(f"#lineage a.row[data-checkpoint-id='{head['checkpoint_id']}']")
            page.wait_for_selector("#diff")
            assert "(its parent)" in page.locator("#diff-base").inner_text()
            added = page.locator("#diff tr.diff-added").all_inner_texts()
            assert any("echo: And the delivery date?" in row for row in added), added
            page.screenshot(path=str(shots / "checkpoint-diff.png"), full_page=True)

            # Preview retention (the abandoned answer goes, the head's lineage stays), then apply it.
            page.goto(f"{base}/threads/threadmeta/{thread_id}/change/")
            page.click("#retention-link")
            page.wait_for_selector(".retention-summary")
            assert "Would have deleted" in page.locator(".retention-summary").inner_text()
            page.screenshot(path=str(shots / "retention-preview.png"), full_page=True)
            page.click("#apply-retention-button")
            page.wait_for_selector("ul.messagelist li.success")
            assert f"Thread {thread_id}: deleted" in page.locator("ul.messagelist").inner_text()
            after = api.get(f"/threads/{thread_id}/state").json()
            assert [m["content"] for m in after["values"]["messages"]] == conversation_now

            # Watch a slow run's events arrive live, then cancel it with rollback.
            run_id = _start_slow_run(api, thread_id, seconds=20)
            _until(lambda: _run_status(api, thread_id, run_id)["status"] == "running", 15, "the slow run runs")
            page.goto(f"{base}/runs/run/{run_id}/change/")
            page.wait_for_selector("#live-status:has-text('live')")
            tokens = page.locator("tr.live-event[data-event='messages']")
            _until(lambda: tokens.count() >= 2, 15, "two streamed tokens on the page")
            seen = tokens.count()
            _until(lambda: tokens.count() > seen, 10, "more tokens arriving while we watch")
            page.screenshot(path=str(shots / "run-live.png"), full_page=True)
            page.click("#cancel-rollback")
            page.wait_for_selector("ul.messagelist li.success")
            assert "Cancel (rollback) requested" in page.locator("ul.messagelist").inner_text()
            run = _until(
                lambda: (r := _run_status(api, thread_id, run_id))["status"] == "error" and r, 15, "the rollback ends"
            )
            assert run["error"] == "Rolled back by user"
            state = api.get(f"/threads/{thread_id}/state").json()
            assert [m["content"] for m in state["values"]["messages"]] == conversation_now
            page.reload()
            page.wait_for_selector("#run-error")
            assert "Rolled back by user" in page.locator("#run-error").inner_text()
            assert page.locator("#cancel-panel").count() == 0
            page.screenshot(path=str(shots / "run-rolled-back.png"), full_page=True)

            # A staff user without the permissions sees no cancel and no apply button.
            other_run = _start_slow_run(api, thread_id, seconds=20)
            viewer = _log_in(browser, console_server, "console-viewer")
            viewer.goto(f"{base}/runs/run/{other_run}/change/")
            viewer.wait_for_selector("#live-events")
            assert viewer.locator("#cancel-panel").count() == 0
            assert viewer.locator("#cancel-rollback").count() == 0
            viewer.goto(f"{base}/threads/threadmeta/{thread_id}/change/")
            viewer.click("#retention-link")
            viewer.wait_for_selector("#apply-needs-permission")
            assert viewer.locator("#apply-retention-button").count() == 0
            assert api.post(f"/threads/{thread_id}/runs/{other_run}/cancel").status_code in (200, 202, 204)
        finally:
            browser.close()
