"""``useStream`` of ``@langchain/react`` v1 in a real browser against a real server, over SSE and over WebSocket.

The page (``tests/live/usestream``: ``package.json`` and its lock pin the
library, React and vite) is built with ``vite build`` at test time and
served by a static server of the test on another port, so every call is
cross-origin and goes through the server's CORS (``cors.allow_origins`` is
that origin). Headless Debian Chromium runs it, driven by Playwright, as in
the console's browser test. Per transport, as a person uses the page: send a
message and watch the reply grow token by token, answer an interrupt, then
reload in the middle of a slow reply and see the conversation come back and
the reply finish. The same page from an origin the server does not list is
stopped by the browser before any command reaches the server.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest

from tests.live.server import CHROMIUM, CHROMIUM_ARGS, LiveServer, free_port
from tests.live.support import npm_ci_once

pytestmark = [
    pytest.mark.live,
    pytest.mark.sqlite_only,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Chromium at /usr/bin/chromium (apt-get install chromium; .ci/run does)"
    ),
]
PAGE_DIR = Path(__file__).parent / "usestream"
WORDS = " ".join(f"w{index}" for index in range(12))
# Playwright's waits are in milliseconds; a run on the loaded two-core machine may take a while to start.
WAIT_MS = 30_000
# Every text each AI message showed and every status, in order, as the DOM changed: the test reads the
# page a person sees, not the library's state.
RECORDER = """
window.__aiTexts = {};
window.__statuses = [];
new MutationObserver(() => {
  for (const item of document.querySelectorAll("li[data-type='ai']")) {
    const seen = (window.__aiTexts[item.dataset.testid] ??= []);
    if (seen[seen.length - 1] !== item.textContent) seen.push(item.textContent);
  }
  const status = document.querySelector("[data-testid='status']")?.textContent;
  if (status && window.__statuses[window.__statuses.length - 1] !== status) window.__statuses.push(status);
}).observe(document, { childList: true, subtree: true, characterData: true });
"""


def _playwright():
    return pytest.importorskip("playwright.sync_api", reason="needs the playwright package (pip install -e '.[test]')")


@pytest.fixture(scope="module")
def page_dist(tmp_path_factory) -> Path:
    """Install the pinned packages once (npm ci), then build the page with vite into this process's folder.

    The SQLite and PostgreSQL passes run side by side: each builds into a
    folder of its own, so vite's one-build-per-project lock is not needed.
    """
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("needs Node.js and npm")
    npm_ci_once(PAGE_DIR, "@langchain/react")
    vite = PAGE_DIR / "node_modules" / "vite" / "bin" / "vite.js"
    dist = tmp_path_factory.mktemp("usestream-dist")
    command = ["node", str(vite), "build", "--outDir", str(dist), "--emptyOutDir", "--bypass-lock"]
    build = subprocess.run(command, cwd=PAGE_DIR, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    return dist


@pytest.fixture(scope="module")
def page_origin(page_dist):
    """Serve the built page from its own origin (another port than the API's)."""
    handler = functools.partial(_QuietHandler, directory=str(page_dist))
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass


@pytest.fixture(scope="module")
def api_server(tmp_path_factory, page_origin):
    """A server that lets the page's origin in, and nothing else."""
    server = LiveServer(tmp_path_factory.mktemp("usestream"), config={"cors": {"allow_origins": [page_origin]}})
    server.setup().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser():
    with _playwright().sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser):
    """A fresh browser context; its console is printed (pytest shows it when the test fails)."""
    context = browser.new_context()
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
    page.on("pageerror", lambda error: console.append(f"pageerror: {error}"))
    # What went over the wire, to tell the transports apart.
    page.requests = []
    page.sockets = []
    page.on("request", lambda req: page.requests.append(f"{req.method} {urlsplit(req.url).path}"))
    page.on("websocket", lambda socket: page.sockets.append(socket.url))
    page.add_init_script(RECORDER)
    try:
        yield page
    finally:
        print("browser console:\n" + "\n".join(console))
        context.close()


def _send(page, text: str) -> None:
    page.get_by_test_id("prompt").fill(text)
    page.get_by_test_id("send").click()


def _ai_texts(page, index: int) -> list[str]:
    return page.evaluate(f"window.__aiTexts['message-{index}'] ?? []")


def _thread_messages(server: LiveServer, key: str, thread_id: str) -> list[str]:
    state = httpx.get(f"{server.url}/threads/{thread_id}/state", headers={"x-api-key": key}, timeout=10)
    assert state.status_code == 200, state.text
    return [m["content"] for m in state.json()["values"]["messages"]]


@pytest.mark.parametrize("transport", ["sse", "websocket"])
def test_usestream_streams_answers_an_interrupt_and_rehydrates_after_a_reload(transport, page, page_origin, api_server):
    expect = _playwright().expect
    key = api_server.api_key("alice")
    query = urlencode({"api": api_server.url, "key": key, "transport": transport})
    page.goto(f"{page_origin}/index.html?{query}")
    expect(page.get_by_test_id("status")).to_have_text("idle", timeout=WAIT_MS)

    # A reply streams in token by token: the page shows growing prefixes before the whole reply.
    first = f"/slow 3 {WORDS}"
    _send(page, first)
    expect(page.get_by_test_id("message-0")).to_have_text(first, timeout=WAIT_MS)
    expect(page.get_by_test_id("message-1")).to_have_text(f"echo: {first}", timeout=WAIT_MS)
    shown = _ai_texts(page, 1)
    partial = [text for text in shown if text and text != f"echo: {first}"]
    assert len(partial) >= 2, shown
    assert all(f"echo: {first}".startswith(text.strip()) for text in partial), shown
    assert [len(text) for text in partial] == sorted(len(text) for text in partial), shown
    expect(page.get_by_test_id("status")).to_have_text("idle", timeout=WAIT_MS)

    # An interrupt shows its payload; answering it resumes the graph.
    _send(page, "/interrupt")
    expect(page.get_by_test_id("interrupt-payload")).to_have_text('{"question":"approve?"}', timeout=WAIT_MS)
    page.get_by_test_id("answer").fill(f"yes over {transport}")
    page.get_by_test_id("respond").click()
    expect(page.get_by_test_id("message-3")).to_have_text(f"resumed: yes over {transport}", timeout=WAIT_MS)
    expect(page.get_by_test_id("interrupt")).to_have_count(0)
    expect(page.get_by_test_id("status")).to_have_text("idle", timeout=WAIT_MS)

    # Reload while a slow reply is streaming: the conversation comes back and the reply finishes.
    # 10 s: room for the reload and the rehydration on a loaded machine before the reply ends.
    slow = f"/slow 10 {WORDS}"
    _send(page, slow)
    expect(page.get_by_test_id("message-5")).to_contain_text("echo:", timeout=WAIT_MS)
    thread_id = parse_qs(urlsplit(page.url).query)["thread"][0]
    before_reload = page.get_by_test_id("message-5").text_content()
    assert before_reload != f"echo: {slow}", "the reply finished before the reload; nothing was mid-run"
    page.reload()
    expect(page.get_by_test_id("thread-id")).to_have_text(thread_id, timeout=WAIT_MS)
    expect(page.get_by_test_id("message-0")).to_have_text(first, timeout=WAIT_MS)
    expect(page.get_by_test_id("message-1")).to_have_text(f"echo: {first}")
    expect(page.get_by_test_id("message-2")).to_have_text("/interrupt")
    expect(page.get_by_test_id("message-3")).to_have_text(f"resumed: yes over {transport}")
    expect(page.get_by_test_id("message-4")).to_have_text(slow)
    expect(page.get_by_test_id("message-5")).to_have_text(f"echo: {slow}", timeout=WAIT_MS)
    after_reload = _ai_texts(page, 5)
    assert after_reload[0] != f"echo: {slow}", f"the reloaded page saw no partial reply: {after_reload}"
    expect(page.locator("li[data-testid^='message-']")).to_have_count(6)
    expect(page.get_by_test_id("status")).to_have_text("idle", timeout=WAIT_MS)
    assert "running" in page.evaluate("window.__statuses"), "the reloaded page never knew a run was going on"
    assert page.get_by_test_id("error").count() == 0
    assert _thread_messages(api_server, key, thread_id) == [
        first,
        f"echo: {first}",
        "/interrupt",
        f"resumed: yes over {transport}",
        slow,
        f"echo: {slow}",
    ]
    _assert_transport(page, transport, thread_id)


def _assert_transport(page, transport: str, thread_id: str) -> None:
    """The chosen transport carried the protocol: SSE posts commands and streams, WebSocket does both in-band."""
    stream_path = f"/api/threads/{thread_id}/stream/events"
    posted = {request for request in page.requests if request.startswith("POST ")}
    if transport == "sse":
        assert {f"POST {stream_path}", f"POST /api/threads/{thread_id}/commands"} <= posted, page.requests
        assert page.sockets == []
    else:
        assert page.sockets, "no WebSocket was opened"
        assert all(urlsplit(url).path == stream_path and "api_key=" in url for url in page.sockets), page.sockets
        assert not {f"POST {stream_path}", f"POST /api/threads/{thread_id}/commands"} & posted, page.requests


def test_a_page_on_an_origin_that_is_not_allowed_cannot_use_the_server(page, page_origin, api_server):
    """The same page from http://localhost:<port>, an origin the server does not list: the browser stops it."""
    expect = _playwright().expect
    key = api_server.api_key("alice")
    port = urlsplit(page_origin).port
    page.goto(f"http://localhost:{port}/index.html?{urlencode({'api': api_server.url, 'key': key})}")
    expect(page.get_by_test_id("status")).to_have_text("idle", timeout=WAIT_MS)
    # Chromium says why (the library retries for ~20 s before it shows its own error).
    with page.expect_console_message(lambda m: "blocked by CORS policy" in m.text, timeout=WAIT_MS) as blocked:
        _send(page, "hello from a stranger")
    assert "No 'Access-Control-Allow-Origin' header" in blocked.value.text
    # The preflight failed, so the command never ran: the thread the page minted does not exist.
    command = next(request for request in page.requests if request.endswith("/commands"))
    thread_id = command.split("/")[3]
    missing = httpx.get(f"{api_server.url}/threads/{thread_id}", headers={"x-api-key": key}, timeout=10)
    assert missing.status_code == 404, missing.text
