"""A server stopped with SIGTERM while ~50 streams are open says so in a line or two, without tracebacks.

uvicorn gives open requests ``GRACEFUL_SHUTDOWN_SECONDS``, then cancels
them; each cut stream logged ``timeout graceful shutdown exceeded`` and a
traceback, and Django's ``RequestAborted`` came back as ``Task exception was
never retrieved``: about 50 tracebacks for one clean stop. The log is read
here as an operator would read it.
"""

from __future__ import annotations

import asyncio
import signal

import httpx
import pytest

from tests.live.server import LiveServer
from tests.live.support import human

pytestmark = [pytest.mark.live, pytest.mark.backend_free]

STREAMS = 50
NOISE = ("Traceback", "never retrieved", "Task was destroyed", "Exception in ASGI application", "ERROR")


async def open_stream(http: httpx.AsyncClient, url: str, opened: asyncio.Queue) -> None:
    """Stream a slow run until the server cuts it; report once its first event arrived."""
    thread_id = (await http.post(f"{url}/threads", json={})).json()["thread_id"]
    body = {"assistant_id": "lead_agent", "input": human("/slow 60"), "stream_mode": ["values"]}
    try:
        async with http.stream("POST", f"{url}/threads/{thread_id}/runs/stream", json=body) as response:
            async for _line in response.aiter_lines():
                if opened is not None:
                    opened.put_nowait(thread_id)
                    opened = None
    except httpx.HTTPError:
        pass  # the server went away: what this test does to it


async def test_a_sigterm_with_fifty_open_streams_logs_no_traceback(tmp_path):
    server = LiveServer(tmp_path).setup().start()
    opened: asyncio.Queue = asyncio.Queue()
    limits = httpx.Limits(max_connections=STREAMS + 5)
    async with httpx.AsyncClient(headers={"x-api-key": server.api_key("alice")}, timeout=120, limits=limits) as http:
        streams = [asyncio.create_task(open_stream(http, server.url, opened)) for _ in range(STREAMS)]
        try:
            async with asyncio.timeout(90):
                for _ in range(STREAMS):
                    await opened.get()
            code = await asyncio.to_thread(server.stop, signal.SIGTERM, 30)
        finally:
            if server.process is not None:
                server.kill()
            for task in streams:
                task.cancel()
            await asyncio.gather(*streams, return_exceptions=True)
    log = (tmp_path / f"server-{server.port}.log").read_text(errors="replace")
    stop = log[log.index("Shutting down") :] if "Shutting down" in log else log
    assert code == -signal.SIGTERM, stop[-3000:]
    assert "runtime stopped" in stop
    noise = [line for line in stop.splitlines() if any(word in line for word in NOISE)]
    assert not noise, f"{len(noise)} noisy lines, e.g. {noise[:5]}\n{stop[-3000:]}"
