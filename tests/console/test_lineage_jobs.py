"""Two support jobs done in a real browser (Debian's Chromium driven by Playwright) against a live server.

- "My conversation lost its last answer": find the thread, read it and its
  runs, open the lineage, compare the branch that holds the answer with HEAD.
  It took 7 clicks and a search (thread, lineage, expand, guess a node, the
  diff against its parent, copy an id, compare); the budget is 3 and a search.
- "The database is growing": the storage page says which threads are large
  and why, preview retention, apply, and see the thread resumes. It took
  3–5 clicks and the API to check the thread; the budget is 3, no API.

Each job runs in the light and the dark scheme, checks that nothing is
wider than the window at 1440 and 375 px, and takes a screenshot per
scheme (to docs/console/ with ``CONSOLE_SCREENSHOTS=1``).
"""

from __future__ import annotations

import os
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage

from runs.models import Run
from tests.checkpoints.support import accessor, empty_checkpoint_tables, invoke
from tests.console import VIEW_ALL, staff
from tests.console.test_checkpoints import settled_ends
from threads.models import ThreadMeta

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not os.path.exists("/usr/bin/chromium"), reason="needs Chromium at /usr/bin/chromium"),
]

CHROMIUM = "/usr/bin/chromium"
WIDTHS = (1440, 375)
SCHEMES = ("light", "dark")
DOCS = Path(__file__).resolve().parents[2] / "docs" / "console"


class Clicks:
    """Count what a person clicks to get an answer."""

    def __init__(self, page) -> None:
        self.page, self.count = page, 0

    def click(self, selector: str) -> None:
        self.count += 1
        self.page.click(selector)


def overflow(page) -> int:
    """CSS pixels the page is wider than the window (0: nothing scrolls sideways)."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


def assert_fits(page, what: str, scheme: str) -> None:
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        assert overflow(page) == 0, f"{what} overflows at {width} px ({scheme})"
    page.set_viewport_size({"width": 1440, "height": 900})


def contrast(page, selector: str) -> float:
    """WCAG contrast ratio of the element's text against what is painted under it (translucent layers blended)."""
    return page.locator(selector).first.evaluate(
        """e => {
            const parse = s => { const v = s.match(/[\\d.]+/g).map(Number); return [v[0], v[1], v[2], v[3] ?? 1]; };
            const layers = [];
            for (let n = e; n; n = n.parentElement) {
                const c = parse(getComputedStyle(n).backgroundColor);
                if (c[3] > 0) layers.push(c);
                if (c[3] >= 1) break;
            }
            let bg = [255, 255, 255];
            for (const [r, g, b, a] of layers.reverse()) bg = [r * a + bg[0] * (1 - a), g * a + bg[1] * (1 - a), b * a + bg[2] * (1 - a)];
            const lum = ([r, g, b]) => {
                const c = v => (v /= 255) <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
                return 0.2126 * c(r) + 0.7152 * c(g) + 0.0722 * c(b);
            };
            const [x, y] = [lum(parse(getComputedStyle(e).color)), lum(bg)].sort((p, q) => q - p);
            return (x + 0.05) / (y + 0.05);
        }"""
    )


@pytest.fixture
def shots(tmp_path) -> Path:
    return DOCS if os.environ.get("CONSOLE_SCREENSHOTS") == "1" else tmp_path


@contextmanager
def chromium():
    """Playwright's browser; its sync API runs an event loop, so seed the database before, and check after."""
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


def signed_in(browser, live_server, client, scheme: str):
    context = browser.new_context(viewport={"width": 1440, "height": 900}, color_scheme=scheme)
    context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_server.url}])
    return context, context.new_page()


def turn(acc, thread: ThreadMeta, text: str, checkpoint_id: str | None = None) -> None:
    """One turn as a run writes it: a finished run row, its id in the checkpoints' metadata."""
    run = Run.objects.create(
        run_id=uuid.uuid4().hex, thread=thread, owner=thread.owner, assistant_id="lead_agent", status="success"
    )
    config = acc.config(thread.thread_id, checkpoint_id, metadata={"run_id": run.run_id})
    acc.graph.invoke({"messages": [HumanMessage(text)]}, config)


def lost_answer_thread(owner) -> ThreadMeta:
    """The answer about shipping was asked, answered, then the question edited: the answer left HEAD."""
    thread = ThreadMeta.objects.create(
        thread_id=f"lost-{uuid.uuid4().hex[:10]}", owner=owner.user, display_name="Refund for order 1042"
    )
    acc = accessor("full")
    turn(acc, thread, "Refund for order 1042")
    first_end = settled_ends(acc, thread.thread_id)[0]
    turn(acc, thread, "And the shipping cost?")
    turn(acc, thread, "And the delivery date?", checkpoint_id=first_end)
    return thread


def test_job_my_conversation_lost_its_last_answer_in_three_clicks(owner, live_server, shots):
    thread = lost_answer_thread(owner)
    support = staff(perms=(*VIEW_ALL, "threads.change_threadmeta"))
    with chromium() as browser:
        for scheme in SCHEMES:
            _lost_answer_job(browser, live_server, support, thread, scheme, shots)


def _lost_answer_job(browser, live_server, support, thread: ThreadMeta, scheme: str, shots: Path) -> None:
    context, page = signed_in(browser, live_server, support, scheme)
    clicks = Clicks(page)
    page.goto(f"{live_server.url}/admin/threads/threadmeta/?q=Refund+for+order")
    clicks.click(f"#result_list a[href*='/{thread.thread_id}/']")
    page.wait_for_selector("#lineage-link")
    assert "echo: And the delivery date?" in page.content()
    clicks.click("#lineage-link")
    page.wait_for_selector("#lineage svg")
    assert_fits(page, "the lineage", scheme)
    tip = page.locator("#lineage a.row", has_text="not in HEAD")
    assert "2 messages not in HEAD" in tip.text_content()
    assert "echo: And the shipping cost?" in tip.text_content()
    assert page.locator("#lineage a.run").count() >= 3  # every run's checkpoints link to it
    page.screenshot(path=str(shots / f"job-lost-answer-lineage-{scheme}.png"), full_page=True)
    clicks.count += 1
    tip.click()
    page.wait_for_selector("#diff")
    assert "(HEAD)" in page.locator("#diff-base").inner_text()
    added = page.locator("#diff tr.diff-added").all_inner_texts()
    assert any("echo: And the shipping cost?" in row for row in added), added
    assert clicks.count <= 3
    for sign in ("added", "removed"):
        ratio = contrast(page, f"#diff tr.diff-{sign} td.diff-sign")
        assert ratio >= 3, f"the diff's {sign} sign is hard to read ({scheme}): {ratio:.1f}"
    assert_fits(page, "the checkpoint page", scheme)
    page.screenshot(path=str(shots / f"job-lost-answer-{scheme}.png"), full_page=True)
    # Beyond the job: bringing the answer back starts with a confirmation that says what changes.
    page.click("#restore-link")
    panel = page.locator("#confirm-panel")
    panel.wait_for()
    assert "2 messages leave the conversation, 2 come back" in panel.inner_text()
    assert_fits(page, "the restore confirmation", scheme)
    page.screenshot(path=str(shots / f"job-lost-answer-restore-{scheme}.png"), full_page=True)
    context.close()


def large_threads(owner) -> tuple[ThreadMeta, ThreadMeta]:
    """A long full-mode thread retention cannot shrink, and a smaller one with an abandoned branch."""
    linear = ThreadMeta.objects.create(
        thread_id=f"big-{uuid.uuid4().hex[:10]}", owner=owner.user, display_name="Long full-mode thread"
    )
    invoke(accessor("full"), linear.thread_id, *[f"{i} " + "words " * 4_000 for i in range(4)])
    branched = lost_answer_thread(owner)
    return linear, branched


def test_job_the_database_is_growing_in_three_clicks(owner, live_server, shots):
    empty_checkpoint_tables()
    linear, branched = large_threads(owner)
    acc = accessor("full")
    before = [m.content for m in acc.get(branched.thread_id).values["messages"]]
    support = staff(perms=(*VIEW_ALL, "threads.apply_retention"))
    with chromium() as browser:
        for scheme in SCHEMES:
            _storage_job(browser, live_server, support, (linear, branched), scheme, shots)
    # It resumes: the head kept its conversation, and a new turn continues it.
    assert [m.content for m in acc.get(branched.thread_id).values["messages"]] == before
    invoke(acc, branched.thread_id, "still there?")
    after = [m.content for m in acc.get(branched.thread_id).values["messages"]]
    assert after == [*before, "still there?", "echo: still there?"]


def _storage_job(browser, live_server, support, threads: tuple[ThreadMeta, ThreadMeta], scheme: str, shots) -> None:
    linear, branched = threads
    context, page = signed_in(browser, live_server, support, scheme)
    clicks = Clicks(page)
    page.goto(f"{live_server.url}/admin/")
    clicks.click("a:has-text('Checkpoint storage')")
    page.wait_for_selector(f"#guidance-{linear.thread_id}")
    why = page.locator(f"#guidance-{linear.thread_id}").inner_text()
    assert "full-mode history" in why and "Retention reclaims nothing" in why
    assert_fits(page, "the storage page", scheme)
    page.screenshot(path=str(shots / f"job-storage-{scheme}.png"), full_page=True)
    clicks.click(f"#guidance-{branched.thread_id} a.preview-link")
    page.wait_for_selector(".retention-summary")
    ratio = contrast(page, ".retention-thread h2 a")
    assert ratio >= 3, f"the preview's caption link is hard to read ({scheme}): {ratio:.1f}"
    lost = page.locator(".lost-branches").inner_text()
    assert "2 messages not in HEAD" in lost and "echo: And the shipping cost?" in lost
    assert_fits(page, "the retention preview", scheme)
    page.screenshot(path=str(shots / f"job-retention-preview-{scheme}.png"), full_page=True)
    if scheme == SCHEMES[-1]:
        clicks.click("#apply-retention-button")
        page.wait_for_selector("ul.messagelist li.success")
        assert "kept: the thread reads and resumes from it as before" in page.locator("ul.messagelist").inner_text()
        assert clicks.count <= 3
    context.close()
