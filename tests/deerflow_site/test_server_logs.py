"""The server's log lines never carry an API key passed in a query string."""

from __future__ import annotations

import logging

import pytest

from deerflow_site.server_logs import RedactQueryKeys, redacted

pytestmark = pytest.mark.backend_free


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/ws/t/1/runs/2?api_key=dfk_secret", "/ws/t/1/runs/2?api_key=[redacted]"),
        ("/ws?last_event_id=3&api_key=dfk_s-e_c&x=1", "/ws?last_event_id=3&api_key=[redacted]&x=1"),
        ('"WebSocket /ws?api_key=abc" 403', '"WebSocket /ws?api_key=[redacted]" 403'),
        ("/ws?my_api_key=abc&api_key=", "/ws?my_api_key=abc&api_key=[redacted]"),
        ("/threads?limit=10", "/threads?limit=10"),
    ],
)
def test_the_value_of_every_api_key_parameter_is_replaced(text, expected):
    assert redacted(text) == expected


def test_a_record_is_redacted_before_it_is_formatted():
    record = logging.LogRecord(
        "uvicorn.error",
        logging.INFO,
        __file__,
        1,
        '%s - "WebSocket %s" [accepted]',
        ("127.0.0.1:5", "/ws?api_key=k1"),
        None,
    )
    assert RedactQueryKeys().filter(record) is True
    assert record.getMessage() == '127.0.0.1:5 - "WebSocket /ws?api_key=[redacted]" [accepted]'


@pytest.mark.live
def test_the_access_line_of_a_refused_request_carries_its_detail(tmp_path):
    import time

    import httpx

    from tests.live.server import LiveServer

    server = LiveServer(tmp_path, environ={"PYTHONUNBUFFERED": "1"}).setup().start()
    try:
        key = server.api_key("alice")
        with httpx.Client(base_url=server.url, headers={"x-api-key": key}) as client:
            assert client.post("/threads", json={"thread_id": "bad id"}).status_code == 422
            assert client.get("/threads/nope-404").status_code == 404
            assert client.get("/info").status_code == 200
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "/api/info" not in server.log():
            time.sleep(0.05)
        lines = server.log().splitlines()
    finally:
        server.stop()
    refused = next(line for line in lines if '"POST /api/threads HTTP/1.1" 422' in line)
    assert refused.endswith(
        "422 Unprocessable Entity - thread_id: Invalid thread id 'bad id': use 1-64 letters, digits, '_' or '-'"
    )
    missing = next(line for line in lines if '"GET /api/threads/nope-404 HTTP/1.1" 404' in line)
    assert missing.endswith(" - Thread nope-404 not found")
    ok = next(line for line in lines if '"GET /api/info HTTP/1.1" 200' in line)
    assert ok.endswith("200 OK")
