"""``after_seconds`` (a delayed start) and ``webhook`` (the final record POSTed) in-process.

The real ASGI app and run worker on the test's loop, the real database, and a
real HTTP receiver on 127.0.0.1 (``tests.receiver``). The worker polls only
every 30 s here: a delayed run that starts on time was woken by its timer.
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import threading
import time
import uuid
from datetime import datetime, timedelta

import pytest
from channels.db import database_sync_to_async as db
from django.conf import settings
from django.utils import timezone

from runs.execution.webhooks import adeliver
from runs.models import ORPHAN_MESSAGE, Cron, Run, RunEvent
from runs.services import lifecycle as run_lifecycle
from runs.services.admission import run_admit
from runs.services.webhooks import WebhookJob, address_problem, redacted_url
from tests.helpers import in_process_api
from tests.receiver import WebhookReceiver
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)

POLL_SECONDS = 30.0


def human(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


def body(text: str, **options) -> dict:
    return {"assistant_id": "lead_agent", "input": human(text), **options}


def moment(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


@pytest.fixture
def webhooks(monkeypatch):
    """The process's ``runs.webhooks`` settings, for a test to tune (restored afterwards)."""
    cfg = settings.DEERFLOW_CONFIG.runs.webhooks

    def tune(**fields):
        for name, value in fields.items():
            monkeypatch.setattr(cfg, name, value)
        return cfg

    return tune


@pytest.fixture
async def http(owner, monkeypatch):
    monkeypatch.setattr(settings.DEERFLOW_CONFIG.runs, "poll_seconds", POLL_SECONDS)
    async with in_process_api(owner.key) as client:
        yield client


@pytest.fixture
def receiver():
    with WebhookReceiver() as server:
        yield server


async def new_thread(http) -> str:
    return (await http.post("/threads", json={})).json()["thread_id"]


async def wait_run(http, thread_id: str, run_id: str, wanted: set[str], within: float = 30) -> dict:
    deadline = time.monotonic() + within
    while True:
        run = (await http.get(f"/threads/{thread_id}/runs/{run_id}")).json()
        if run["status"] in wanted:
            return run
        assert time.monotonic() < deadline, f"run {run_id} stuck in {run['status']}"
        await asyncio.sleep(0.05)


async def webhook_events(run_id: str, within: float = 10) -> list[RunEvent]:
    """Wait for the run's webhook outcome to be recorded (it follows the delivery)."""
    deadline = time.monotonic() + within
    while True:
        events = await db(list)(RunEvent.objects.filter(run_id=run_id, category="webhook"))
        if events:
            return events
        assert time.monotonic() < deadline, f"no webhook event for run {run_id}"
        await asyncio.sleep(0.05)


# -- validation: 422, nothing written ------------------------------------------------

ROUTES = ["/threads/{t}/runs", "/threads/{t}/runs/stream", "/threads/{t}/runs/wait", "/runs", "/runs/stream"]
BAD_OPTIONS = [
    ({"after_seconds": -1}, "after_seconds: Ensure this value is greater than or equal to 0"),
    ({"after_seconds": "5"}, "after_seconds: A valid number is required"),
    ({"after_seconds": True}, "after_seconds: A valid number is required"),
    ({"after_seconds": 86_401}, "after_seconds: must be at most 86400 seconds (runs.max_after_seconds)"),
    ({"after_seconds": 10**400}, "after_seconds"),
    ({"webhook": 5}, "webhook: Not a valid string"),
    ({"webhook": "ftp://example.com/hook"}, "webhook: must be an http:// or https:// URL"),
    ({"webhook": "http:///hook"}, "webhook: must name a host"),
    ({"webhook": "http://127.0.0.1:9/hook"}, "webhook: 127.0.0.1 is a loopback address"),
    ({"webhook": "http://localhost:9/hook"}, "webhook: localhost resolves to"),
    ({"webhook": "http://10.1.2.3/hook"}, "webhook: 10.1.2.3 is a private address"),
    ({"webhook": "http://169.254.169.254/latest"}, "webhook: 169.254.169.254 is a link-local address"),
    ({"webhook": "http://[::ffff:127.0.0.1]/"}, "a loopback address"),
    ({"webhook": "http://[2002:7f00:1::]:9145/h"}, "webhook: 2002:7f00:1:: is a 6to4 address embedding 127.0.0.1"),
    ({"webhook": "http://[64:ff9b::a00:1]/h"}, "webhook: 64:ff9b::a00:1 is a NAT64 address embedding 10.0.0.1"),
    ({"webhook": "http://no-such-host.invalid/hook"}, "webhook: host no-such-host.invalid does not resolve"),
]


@pytest.mark.parametrize("route", ROUTES)
async def test_bad_delays_and_webhooks_are_422_and_write_nothing(http, route):
    thread_id = await new_thread(http)
    threads_before = (await http.post("/threads/count", json={})).json()
    for options, detail in BAD_OPTIONS:
        response = await http.post(route.format(t=thread_id), json=body("hi", **options))
        assert response.status_code == 422, (options, response.text)
        assert detail in response.json()["detail"], response.text
    assert await db(Run.objects.count)() == 0
    assert (await http.post("/threads/count", json={})).json() == threads_before


async def test_the_private_address_refusal_says_why_and_how_to_allow_it(http):
    thread_id = await new_thread(http)
    response = await http.post(f"/threads/{thread_id}/runs", json=body("hi", webhook="http://192.168.1.20/hook"))
    assert response.status_code == 422
    assert response.json()["detail"] == (
        "webhook: 192.168.1.20 is a private address; webhooks may not call loopback, private, link-local, "
        "multicast or reserved addresses (runs.webhooks.allow_private allows them)"
    )


async def test_a_batch_with_one_refused_webhook_starts_nothing(http):
    response = await http.post(
        "/runs/batch", json=[body("one", webhook="https://93.184.215.14/ok"), body("two", webhook="http://127.0.0.1/")]
    )
    assert response.status_code == 422
    assert "[1].webhook: 127.0.0.1 is a loopback address" in response.json()["detail"]
    assert await db(Run.objects.count)() == 0


async def test_crons_refuse_what_runs_refuse_and_store_a_delay(http):
    refused = await http.post(
        "/runs/crons", json={"schedule": "*/5 * * * *", **body("x", webhook="http://10.0.0.7/hook")}
    )
    assert refused.status_code == 422 and "10.0.0.7 is a private address" in refused.json()["detail"]
    too_late = await http.post("/runs/crons", json={"schedule": "*/5 * * * *", **body("x", after_seconds=-3)})
    assert too_late.status_code == 422 and "after_seconds" in too_late.json()["detail"]
    assert await db(Cron.objects.count)() == 0
    created = await http.post("/runs/crons", json={"schedule": "*/5 * * * *", **body("x", after_seconds=2.5)})
    assert created.status_code == 200, created.text
    assert created.json()["payload"]["after_seconds"] == 2.5


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("127.0.0.1", "a loopback address"),
        ("::1", "a loopback address"),
        ("10.0.0.1", "a private address"),
        ("172.16.5.4", "a private address"),
        ("fd00::1", "a private address"),
        ("169.254.169.254", "a link-local address"),
        ("fe80::1", "a link-local address"),
        ("224.0.0.251", "a multicast address"),
        ("0.0.0.0", "an unspecified address"),
        ("240.0.0.1", "a reserved address"),
        ("100.64.0.1", "not a public address"),
        ("::ffff:10.0.0.1", "a private address"),
        # IPv6 forms that carry an IPv4 address the packet ends up at (Python calls 2002::/16 global).
        ("2002:7f00:1::", "a 6to4 address embedding 127.0.0.1, a loopback address"),
        ("2002:a00:1:ffff::1", "a 6to4 address embedding 10.0.0.1, a private address"),
        ("2002:a9fe:a9fe::", "a 6to4 address embedding 169.254.169.254, a link-local address"),
        ("2002:6440:1::", "a 6to4 address embedding 100.64.0.1, not a public address"),
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "a Teredo address embedding 127.0.0.1, a loopback address"),
        ("2001:0:4136:e378:8000:63bf:a247:28f1", "a private address"),  # client 93.184.215.14; 2001::/23 is not global
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "a Teredo address embedding 192.0.2.45, a private address"),
        ("64:ff9b::7f00:1", "a NAT64 address embedding 127.0.0.1, a loopback address"),
        ("64:ff9b::c0a8:114", "a NAT64 address embedding 192.168.1.20, a private address"),
        ("::7f00:1", "an IPv4-compatible address embedding 127.0.0.1, a loopback address"),
        ("::5db8:d70e", "a reserved address"),
        ("93.184.215.14", None),
        ("2606:4700::1111", None),
        ("2002:5db8:d70e::1", None),
        ("64:ff9b::5db8:d70e", None),
    ],
)
def test_which_addresses_a_webhook_may_call(address, problem):
    assert address_problem(address) == problem


def test_the_redacted_url_keeps_no_credentials_or_query_values():
    assert (
        redacted_url("https://u:pw@Hooks.example.com:8443/in/x?token=s3cret#f")
        == "https://hooks.example.com:8443/in/x?…"
    )
    assert redacted_url("http://[::1]/a") == "http://[::1]/a"


# -- after_seconds ---------------------------------------------------------------------


def test_no_claim_takes_a_delayed_run_before_its_time(owner):
    thread = ThreadMeta.objects.create(thread_id=f"d-{uuid.uuid4().hex}", owner=owner.user)
    run, _ = run_admit(
        owner=owner.user,
        thread=thread,
        assistant_id="lead_agent",
        strategy="reject",
        metadata={},
        kwargs={},
        after_seconds=60,
    )
    assert run.status == "pending"
    assert timedelta(seconds=59) < run.not_before - run.created_at <= timedelta(seconds=60)
    assert run_lifecycle.run_claim(run_id=run.run_id, worker_id="w", lease_seconds=30) is None
    assert run_lifecycle.run_claim_pending(worker_id="w", limit=10, lease_seconds=30) == []
    assert run_lifecycle.next_delayed_start() == run.not_before

    Run.objects.filter(pk=run.pk).update(not_before=timezone.now() - timedelta(seconds=1))
    assert run_lifecycle.next_delayed_start() is None
    assert run_lifecycle.run_claim_pending(worker_id="w", limit=10, lease_seconds=30) == [run.run_id]


async def test_a_delayed_run_waits_pending_then_starts_at_its_time_not_at_the_next_poll(http):
    thread_id = await new_thread(http)
    admitted = (await http.post(f"/threads/{thread_id}/runs", json=body("later", after_seconds=1.5))).json()
    assert admitted["status"] == "pending"
    not_before, created = moment(admitted["not_before"]), moment(admitted["created_at"])
    assert abs((not_before - created).total_seconds() - 1.5) < 0.05
    assert admitted["kwargs"]["after_seconds"] == 1.5

    early = (await http.get(f"/threads/{thread_id}/runs/{admitted['run_id']}")).json()
    assert (early["status"], early["started_at"]) == ("pending", None)
    assert (await http.get(f"/threads/{thread_id}")).json()["status"] == "idle"

    done = await wait_run(http, thread_id, admitted["run_id"], {"success"})
    started = moment(done["started_at"])
    assert started >= not_before
    # Started by the claim loop's timer: the next poll was 30 s away.
    assert (started - not_before).total_seconds() < 5


async def test_wait_and_stream_on_a_delayed_run_wait_longer(http):
    thread_id = await new_thread(http)
    asked = time.monotonic()
    waited = await http.post(f"/threads/{thread_id}/runs/wait", json=body("w", after_seconds=1))
    assert waited.status_code == 200
    assert [m["content"] for m in waited.json()["messages"]] == ["w", "echo: w"]
    assert time.monotonic() - asked >= 1

    streamed = await http.post("/runs/stream", json=body("s", after_seconds=1, stream_mode=["values"]))
    events = [line.removeprefix("event: ") for line in streamed.text.splitlines() if line.startswith("event: ")]
    assert events[0] == "metadata" and events[-1] == "values"
    for run in await db(list)(Run.objects.all()):
        assert run.started_at >= run.not_before


async def test_joining_a_run_that_ended_before_it_started_answers_at_once(http, monkeypatch):
    """Its stream holds its admission's metadata and no end: the join and join stream answer from the row, not after an idle wait."""
    # A heartbeat far beyond the test's patience: a join stream that waited one out fails here.
    monkeypatch.setattr(settings.DEERFLOW_CONFIG.stream_bridge, "heartbeat_seconds", 120)
    thread_id = await new_thread(http)
    admitted = (await http.post(f"/threads/{thread_id}/runs", json=body("never", after_seconds=60))).json()
    run_url = f"/threads/{thread_id}/runs/{admitted['run_id']}"
    assert (await http.post(f"{run_url}/cancel")).status_code == 202

    streamed = await asyncio.wait_for(http.get(f"{run_url}/stream"), timeout=30)
    assert streamed.status_code == 200
    assert [line for line in streamed.text.splitlines() if line.startswith("event: ")] == ["event: metadata"]
    joined = await asyncio.wait_for(http.get(f"{run_url}/join"), timeout=30)
    assert joined.status_code == 200
    assert joined.json() == {}


async def test_cancelling_a_delayed_run_before_its_time_means_it_never_runs(http):
    thread_id = await new_thread(http)
    admitted = (await http.post(f"/threads/{thread_id}/runs", json=body("never", after_seconds=1))).json()
    cancel = await http.post(f"/threads/{thread_id}/runs/{admitted['run_id']}/cancel")
    assert cancel.status_code == 202
    # Wait out the time it would have started at, and a claim pass beyond it.
    until = moment(admitted["not_before"]) + timedelta(seconds=1)
    while timezone.now() < until:  # noqa: ASYNC110 (waiting for a moment, not an event)
        await asyncio.sleep(0.05)
    run = (await http.get(f"/threads/{thread_id}/runs/{admitted['run_id']}")).json()
    assert (run["status"], run["error"], run["started_at"]) == ("interrupted", "Cancelled before it started", None)
    assert not await db(RunEvent.objects.filter(run_id=admitted["run_id"], event_type="run.start").exists)()
    assert (await http.get(f"/threads/{thread_id}/state")).json()["values"] == {}


async def test_a_delayed_run_holds_the_thread_like_any_pending_run(http):
    thread_id = await new_thread(http)
    delayed = (await http.post(f"/threads/{thread_id}/runs", json=body("first", after_seconds=1))).json()
    rejected = await http.post(f"/threads/{thread_id}/runs", json=body("second", multitask_strategy="reject"))
    assert rejected.status_code == 409
    queued = (await http.post(f"/threads/{thread_id}/runs", json=body("third", multitask_strategy="enqueue"))).json()
    assert queued["status"] == "pending"  # queued behind the delayed run, shown as pending
    third = await wait_run(http, thread_id, queued["run_id"], {"success"})
    first = (await http.get(f"/threads/{thread_id}/runs/{delayed['run_id']}")).json()
    assert first["status"] == "success"
    assert moment(third["started_at"]) >= moment(first["finished_at"])
    state = (await http.get(f"/threads/{thread_id}/state")).json()["values"]
    assert [m["content"] for m in state["messages"]] == ["first", "echo: first", "third", "echo: third"]


# -- webhooks --------------------------------------------------------------------------


async def test_the_webhook_receives_the_run_record_and_the_final_values(http, receiver, webhooks):
    webhooks(allow_private=True)
    thread_id = await new_thread(http)
    url = receiver.url("/hook?token=s3cret", host="localhost")
    run = (await http.post(f"/threads/{thread_id}/runs", json=body("hello", webhook=url))).json()
    [got] = await receiver.arrived(1)

    record = (await http.get(f"/threads/{thread_id}/runs/{run['run_id']}")).json()
    sent = dict(got.body)
    assert moment(sent.pop("webhook_sent_at")) <= timezone.now()
    values = sent.pop("values")
    assert sent == record and record["status"] == "success"
    assert values == (await http.get(f"/threads/{thread_id}/state")).json()["values"]
    assert [m["content"] for m in values["messages"]] == ["hello", "echo: hello"]
    # Pinned to the checked address, addressed to the URL's host, with its path and query.
    assert got.headers["Host"] == f"localhost:{receiver.port}"
    assert got.path == "/hook?token=s3cret"
    assert got.headers["Content-Type"] == "application/json"

    [event] = await webhook_events(run["run_id"])
    assert (event.event_type, event.content["status_code"], event.content["attempts"]) == ("webhook.sent", 200, 1)
    # The token stays out of kwargs, events and the run record.
    assert record["kwargs"]["webhook"] == f"http://localhost:{receiver.port}/hook?…"
    assert "s3cret" not in str(record) and "s3cret" not in str(event.content)
    assert (await db(Run.objects.get)(pk=run["run_id"])).webhook == url


async def test_a_failed_run_posts_its_error(http, receiver, webhooks):
    webhooks(allow_private=True)
    run = (await http.post("/runs/wait", json=body("/fail", webhook=receiver.url()))).json()
    assert run["status"] == "error"
    [got] = await receiver.arrived(1)
    assert (got.body["status"], got.body["error"]) == ("error", "demo failure requested")


async def test_webhooks_are_retried_on_5xx_with_backoff_until_answered(http, webhooks):
    webhooks(allow_private=True, backoff_seconds=0.2, max_attempts=4)
    with WebhookReceiver(script=[(500, 0), (503, 0)]) as receiver:
        thread_id = await new_thread(http)
        run = (await http.post(f"/threads/{thread_id}/runs", json=body("retry", webhook=receiver.url()))).json()
        first, second, third = await receiver.arrived(3)
        [event] = await webhook_events(run["run_id"])
    assert first.body["run_id"] == second.body["run_id"] == third.body["run_id"] == run["run_id"]
    assert second.at - first.at >= 0.2 and third.at - second.at >= 0.4  # 0.2 s, doubling
    assert event.event_type == "webhook.sent"
    assert [a["status_code"] for a in event.content["history"]] == [500, 503, 200]
    assert len(receiver.received) == 3


async def _finished_run(owner, url: str) -> Run:
    thread = await db(ThreadMeta.objects.create)(thread_id=f"wh-{uuid.uuid4().hex}", owner=owner.user)
    now = timezone.now()
    return await db(Run.objects.create)(
        run_id=uuid.uuid4().hex,
        thread=thread,
        owner=owner.user,
        assistant_id="lead_agent",
        status="success",
        started_at=now,
        finished_at=now,
        webhook=url,
    )


async def _job(run: Run) -> WebhookJob:
    from runs.selectors import run_record

    return WebhookJob(url=run.webhook, record=await db(run_record)(run), values={"messages": []})


async def test_an_attempt_is_bounded_by_the_timeout(owner, webhooks):
    webhooks(allow_private=True, timeout_seconds=0.3, max_attempts=2, backoff_seconds=0)
    with WebhookReceiver(script=[(200, 3.0), (200, 3.0)]) as receiver:
        run = await _finished_run(owner, receiver.url())
        started = time.monotonic()
        attempts = await adeliver(await _job(run))
        elapsed = time.monotonic() - started
    assert [a.error for a in attempts] == ["timed out after 0.3 s"] * 2
    assert elapsed < 0.3 * 2 + 1.0
    [event] = await webhook_events(run.run_id)
    assert (event.event_type, event.content["attempts"], event.content["status_code"]) == ("webhook.failed", 2, None)


async def test_a_4xx_answer_is_not_retried(owner, webhooks):
    webhooks(allow_private=True, backoff_seconds=0)
    with WebhookReceiver(script=[(404, 0)]) as receiver:
        run = await _finished_run(owner, receiver.url())
        attempts = await adeliver(await _job(run))
    assert [a.status_code for a in attempts] == [404]
    assert len(receiver.received) == 1


async def test_the_address_is_checked_again_at_send_time(owner, receiver, webhooks):
    """A host that resolved to a public address at admission and to loopback now (DNS rebinding) gets nothing."""
    webhooks(allow_private=False, backoff_seconds=0)
    run = await _finished_run(owner, receiver.url(host="localhost"))
    attempts = await adeliver(await _job(run))
    assert len(attempts) == 1 and attempts[0].refused
    assert "localhost resolves to 127.0.0.1, a loopback address" in attempts[0].error
    assert receiver.received == []
    [event] = await webhook_events(run.run_id)
    assert event.event_type == "webhook.failed" and event.content["error"].startswith("refused: ")


async def test_a_run_cancelled_before_its_delayed_start_posts_its_record(http, receiver, webhooks):
    webhooks(allow_private=True)
    thread_id = await new_thread(http)
    run = (
        await http.post(f"/threads/{thread_id}/runs", json=body("x", after_seconds=30, webhook=receiver.url()))
    ).json()
    await http.post(f"/threads/{thread_id}/runs/{run['run_id']}/cancel")
    [got] = await receiver.arrived(1)
    assert (got.body["status"], got.body["error"], got.body["started_at"]) == (
        "interrupted",
        "Cancelled before it started",
        None,
    )
    assert got.body["values"] == {}


async def test_an_orphaned_run_posts_its_record_when_recovered(http, owner, receiver, webhooks):
    from runs.execution.runtime import get_worker

    webhooks(allow_private=True)
    thread = await db(ThreadMeta.objects.create)(thread_id=f"or-{uuid.uuid4().hex}", owner=owner.user, status="busy")
    long_ago = timezone.now() - timedelta(minutes=5)
    run = await db(Run.objects.create)(
        run_id=uuid.uuid4().hex,
        thread=thread,
        owner=owner.user,
        assistant_id="lead_agent",
        status="running",
        worker_id="elsewhere:1:dead",
        started_at=long_ago,
        lease_expires_at=long_ago,
        webhook=receiver.url(),
    )
    assert run.run_id in await get_worker().reconcile_orphans()
    [got] = await receiver.arrived(1)
    assert (got.body["run_id"], got.body["status"]) == (run.run_id, "error")
    assert got.body["error"] == ORPHAN_MESSAGE


@pytest.fixture
def localhost_cert(tmp_path):
    """A self-signed certificate for ``localhost`` (and one for another name), made with openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a test certificate")

    def make(name: str) -> tuple[str, str]:
        cert, key = tmp_path / f"{name}.pem", tmp_path / f"{name}.key"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={name}",
             "-addext", f"subjectAltName=DNS:{name}", "-keyout", str(key), "-out", str(cert)],
            check=True, capture_output=True,
        )  # fmt: skip
        return str(cert), str(key)

    return make


def _serving(cert: str, key: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


async def test_https_goes_to_the_checked_address_and_still_verifies_the_hosts_certificate(
    owner, webhooks, localhost_cert, monkeypatch
):
    from runs.execution import webhooks as delivery

    webhooks(allow_private=True, backoff_seconds=0, max_attempts=1)
    good, wrong = localhost_cert("localhost"), localhost_cert("other.test")
    monkeypatch.setattr(delivery, "_ssl_context", ssl.create_default_context(cafile=good[0]))
    with WebhookReceiver(tls=_serving(*good)) as receiver:
        run = await _finished_run(owner, receiver.url(host="localhost"))
        [attempt] = await adeliver(await _job(run))
        assert attempt.status_code == 200, attempt.error
        [got] = await receiver.arrived(1)
        assert got.headers["Host"] == f"localhost:{receiver.port}"

    # A server whose certificate names another host is refused although the address is the same.
    monkeypatch.setattr(delivery, "_ssl_context", ssl.create_default_context(cafile=wrong[0]))
    with WebhookReceiver(tls=_serving(*wrong)) as receiver:
        run = await _finished_run(owner, receiver.url(host="localhost"))
        [attempt] = await adeliver(await _job(run))
        assert attempt.status_code is None and "CERTIFICATE_VERIFY_FAILED" in attempt.error
        assert receiver.received == []


def test_without_a_worker_the_webhook_goes_from_a_thread_and_only_after_commit(owner, receiver, webhooks):
    """A process with no run worker (a management command) still delivers; a rolled-back finish sends nothing."""
    from django.db import transaction

    from runs.dispatch import webhook_sink
    from runs.services.webhooks import webhook_after_commit

    assert webhook_sink() is None
    webhooks(allow_private=True)
    thread = ThreadMeta.objects.create(thread_id=f"nw-{uuid.uuid4().hex}", owner=owner.user)
    run = Run.objects.create(
        run_id=uuid.uuid4().hex, thread=thread, owner=owner.user, assistant_id="lead_agent", status="success",
        webhook=receiver.url(),
    )  # fmt: skip

    with pytest.raises(RuntimeError), transaction.atomic():
        webhook_after_commit(run_id=run.run_id, url=run.webhook)
        raise RuntimeError("the finishing transaction rolls back")
    assert not [t for t in threading.enumerate() if t.name == f"webhook-{run.run_id}"]

    with transaction.atomic():
        webhook_after_commit(run_id=run.run_id, url=run.webhook)
        assert not [t for t in threading.enumerate() if t.name == f"webhook-{run.run_id}"]  # not before the commit
    [got] = receiver.wait_for(1)
    assert got.body["run_id"] == run.run_id and got.body["values"] is None
    for sender in [t for t in threading.enumerate() if t.name == f"webhook-{run.run_id}"]:
        sender.join(10)
    assert RunEvent.objects.filter(run=run, event_type="webhook.sent").count() == 1
    assert len(receiver.received) == 1
