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
