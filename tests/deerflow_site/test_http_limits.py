"""A request head over the server's limits is answered 414/431 with {"detail"}, never a dropped connection.

Raw sockets against a real ``manage.py serve`` process (uvicorn on
httptools), as the limits live in the HTTP protocol, below Django.
"""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import pytest

from deerflow_site.http_protocol import MAX_HEADER_BYTES, MAX_URL_BYTES

pytestmark = pytest.mark.live

THREAD = "00000000-0000-4000-8000-000000000001"


def exchange(server, head: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``head`` whole (as a client does before it reads), then read the answer to the end."""
    address = urlsplit(server.url)
    with socket.create_connection((address.hostname, address.port), timeout=30) as sock:
        sock.sendall(head)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    status_line, _, rest = received.partition(b"\r\n")
    header_lines, _, body = rest.partition(b"\r\n\r\n")
    headers = dict(line.decode().split(": ", 1) for line in header_lines.split(b"\r\n"))
    return int(status_line.split()[1]), {k.lower(): v for k, v in headers.items()}, body


def request(server, target: str, *headers: str) -> bytes:
    lines = [f"GET {target} HTTP/1.1", "Host: 127.0.0.1", f"x-api-key: {server.api_key('alice')}", *headers]
    return ("\r\n".join([*lines, "Connection: close", "", ""])).encode()


def events_url(count: int) -> str:
    types = ",".join(f"custom.event-{i:05d}" for i in range(count))
    return f"/api/threads/{THREAD}/runs/{THREAD}/events?event_types={types}"


def test_a_url_over_the_limit_is_a_414_with_a_detail(api_server):
    target = events_url(5000)  # the request: 5,000 comma-separated values, ~100 KB
    assert len(target) > MAX_URL_BYTES
    status, headers, body = exchange(api_server, request(api_server, target))
    assert status == 414
    assert headers["content-type"] == "application/json"
    assert headers["connection"] == "close"
    assert json.loads(body) == {"detail": f"request URL over {MAX_URL_BYTES} bytes (the server's limit)"}


def test_a_url_under_the_limit_still_reaches_the_route(api_server):
    target = events_url(2500)
    assert len(target) < MAX_URL_BYTES
    status, _, body = exchange(api_server, request(api_server, target))
    assert status == 404 and json.loads(body) == {"detail": f"Thread {THREAD} not found"}


@pytest.mark.parametrize(
    "headers",
    [
        [f"x-filler-{i}: {'v' * 1000}" for i in range(80)],  # many headers: counted as they complete
        [f"x-filler: {'v' * 4_000_000}"],  # one header that never seems to end: cut off while it arrives
    ],
    ids=["many", "one-huge"],
)
def test_a_header_block_over_the_limit_is_a_431_with_a_detail(api_server, headers):
    status, headers_out, body = exchange(api_server, request(api_server, "/api/info", *headers))
    assert status == 431
    assert headers_out["content-type"] == "application/json"
    assert json.loads(body) == {"detail": f"request header block over {MAX_HEADER_BYTES} bytes (the server's limit)"}


def test_a_huge_request_line_sent_whole_still_gets_its_answer(api_server):
    # 8 MB: far more than the socket buffers hold. A server that closes on
    # the first bytes resets the connection while the client still sends, and
    # over a real network the reset destroys the answer (the issue's "dropped
    # connection"); the server reads and drops the rest instead.
    status, _, body = exchange(api_server, request(api_server, "/api/info?q=" + "x" * 8_000_000))
    assert status == 414 and "detail" in json.loads(body)


def test_the_connection_after_a_refusal_is_served_normally(api_server):
    exchange(api_server, request(api_server, events_url(5000)))
    status, _, body = exchange(api_server, request(api_server, "/api/ok"))
    assert status == 200 and json.loads(body) == {"ok": True}
