"""The floor of the read rows: a server that only sends an answer it already holds.

``bench.peers`` captures our answers to ``GET /threads/{id}/state`` and
``POST /threads/{id}/history`` (limit 10, 100, 1,000) on the long thread,
writes them to a folder, and serves them with this ASGI app under uvicorn
(the server ours runs on) on a loopback port: no authentication, no
database, no encoding, whatever the thread id. The same SDK call against it
measures what the client and the transport cost by themselves, which no
server can go below.

    FLOOR_BODIES=<folder> uvicorn bench.peers.floor:app
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.live.server import ROOT, free_port, wait_until_answers

HEADERS = [(b"content-type", b"application/json")]


def body_name(limit: int | None) -> str:
    return "state.json" if limit is None else f"history-{limit}.json"


def _load() -> dict[str, bytes]:
    folder = Path(os.environ["FLOOR_BODIES"])
    return {path.name: path.read_bytes() for path in folder.glob("*.json")}


BODIES = _load() if "FLOOR_BODIES" in os.environ else {}


async def _request_body(receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def app(scope, receive, send):
    """Answer the stored body for the route; /ok answers for the start-up poll."""
    if scope["type"] != "http":
        return
    path, request = scope["path"], await _request_body(receive)
    status, body = 200, b'{"ok":true}'
    if path.endswith("/state"):
        body = BODIES[body_name(None)]
    elif path.endswith("/history"):
        body = BODIES[body_name(json.loads(request or b"{}").get("limit", 10))]
    elif not path.endswith("/ok"):
        status, body = 404, b'{"detail":"not found"}'
    await send({"type": "http.response.start", "status": status, "headers": HEADERS})
    await send({"type": "http.response.body", "body": body})


class FloorServer:
    """uvicorn serving ``app`` from ``folder``'s bodies on a free loopback port."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = 0
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FloorServer:
        self.port = free_port()
        command = [sys.executable, "-m", "uvicorn", "bench.peers.floor:app", "--port", str(self.port)]
        command += ["--loop", "uvloop", "--http", "httptools", "--no-access-log"]
        log = open(self.folder / "floor.log", "ab")
        env = {**os.environ, "FLOOR_BODIES": str(self.folder)}
        self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        wait_until_answers(self.process, f"{self.url}/ok", name="floor server", log=self.log)
        return self

    def log(self) -> str:
        return (self.folder / "floor.log").read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=15)
            self.process = None
