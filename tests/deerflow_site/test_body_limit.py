"""A body over limits.max_body_bytes is refused 413 at the ASGI edge, before Django reads or parses it.

The real ASGI application, called the way a server calls it: a scope, and a
``receive`` that hands the body over in chunks (and counts how much of it
was asked for).
"""

from __future__ import annotations

import asyncio
import json

import pytest
from django.conf import settings
from django.core.signals import request_started

from deerflow_site.asgi import application
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)

CHUNK = 64 * 1024


class Client:
    """One HTTP request through the ASGI app; the answer and how many body chunks the app pulled."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.pulled = 0
        self.sent: list[dict] = []

    async def post(self, path: str, chunks, *, content_length: int | None = None) -> tuple[int, dict]:
        headers = [(b"x-api-key", self.key.encode()), (b"content-type", b"application/json")]
        if content_length is not None:
            headers.append((b"content-length", str(content_length).encode()))
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 80),
        }
        chunks = iter(chunks)

        async def receive():
            chunk = next(chunks, None)
            if chunk is None:  # the client waits for its answer: Django listens for a disconnect meanwhile
                await asyncio.Event().wait()
            self.pulled += 1
            return {"type": "http.request", "body": chunk[0], "more_body": chunk[1]}

        async def send(message):
            self.sent.append(message)

        await application(scope, receive, send)
        start = next(m for m in self.sent if m["type"] == "http.response.start")
        body = b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")
        return start["status"], json.loads(body)


def endless(size: int = CHUNK):
    while True:
        yield b"x" * size, True


@pytest.fixture
def requests_seen():
    seen: list[object] = []

    def note(sender, **kwargs):
        seen.append(sender)

    request_started.connect(note, weak=False)
    yield seen
    request_started.disconnect(note)


async def test_a_declared_length_over_the_limit_is_refused_before_django_sees_the_request(
    owner, runtime, requests_seen
):
    limit = settings.DEERFLOW_CONFIG.limits.max_body_bytes
    client = Client(owner.key)
    status, body = await client.post("/api/threads", endless(), content_length=limit + 1)

    assert status == 413
    assert str(limit) in body["detail"] and "limits.max_body_bytes" in body["detail"]
    assert client.pulled == 0  # not one byte of the body was read
    assert requests_seen == []  # Django never started the request


async def test_a_chunked_body_is_cut_off_once_it_passes_the_limit(owner, runtime, requests_seen):
    limit = settings.DEERFLOW_CONFIG.limits.max_body_bytes
    before = await ThreadMeta.objects.acount()
    client = Client(owner.key)
    status, body = await client.post("/api/threads", endless())

    assert status == 413
    assert "limits.max_body_bytes" in body["detail"]
    # Read up to the chunk that crossed the limit, and no further.
    assert client.pulled == limit // CHUNK + 1
    assert await ThreadMeta.objects.acount() == before


async def test_a_body_under_the_limit_is_served_whole(owner, runtime):
    raw = json.dumps({"metadata": {"via": "chunks"}}).encode()
    client = Client(owner.key)
    status, body = await client.post("/api/threads", [(raw[:10], True), (raw[10:], False)], content_length=len(raw))

    assert status == 200, body
    assert body["metadata"]["via"] == "chunks"
