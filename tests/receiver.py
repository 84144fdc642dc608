"""A real HTTP server on 127.0.0.1 that records the webhooks it receives and answers as scripted."""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    """One request as the receiver saw it."""

    path: str
    headers: dict[str, str]
    body: Any
    at: float  # time.time() when it arrived


class WebhookReceiver:
    """Serve POSTs on a free port; answer each with the next scripted ``(status, delay_seconds)``.

    When the script runs out every request gets 200. ``wait_for(n)`` blocks
    until ``n`` requests arrived (no fixed sleeps in tests).
    """

    def __init__(self, script: list[tuple[int, float]] | None = None, *, tls: ssl.SSLContext | None = None) -> None:
        self.script = list(script or [])
        self.received: list[Received] = []
        self._arrived = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                with receiver._arrived:
                    status, delay = receiver.script.pop(0) if receiver.script else (200, 0.0)
                    receiver.received.append(
                        Received(self.path, dict(self.headers.items()), json.loads(raw or b"null"), time.time())
                    )
                    receiver._arrived.notify_all()
                if delay:
                    time.sleep(delay)
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except OSError:
                    pass  # the sender gave up (a timeout test)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.scheme = "https" if tls else "http"
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="webhook-receiver", daemon=True)

    def url(self, path: str = "/hook", host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.port}{path}"

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def wait_for(self, count: int, within: float = 30) -> list[Received]:
        """Return the first ``count`` requests once they arrived; fail after ``within`` seconds."""
        deadline = time.monotonic() + within
        with self._arrived:
            while len(self.received) < count:
                left = deadline - time.monotonic()
                assert left > 0, f"{len(self.received)} webhook(s) arrived, expected {count}"
                self._arrived.wait(left)
            return list(self.received[:count])

    async def arrived(self, count: int, within: float = 30) -> list[Received]:
        """``wait_for`` without blocking the event loop (the sender may run on it)."""
        return await asyncio.to_thread(self.wait_for, count, within)
