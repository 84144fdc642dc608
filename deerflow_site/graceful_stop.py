"""A server stop that ends the HTTP requests still open the way a client leaving would: quietly.

On SIGTERM uvicorn stops accepting connections and gives open requests
``timeout_graceful_shutdown`` seconds; then it cancels their tasks. A
cancelled request logged ``Exception in ASGI application`` with a
traceback, and Django's disconnect listener, orphaned by the cancel, came
back as ``Task exception was never retrieved: RequestAborted``: about 200
lines for a stop with 50 open streams.

So ``STREAMS_CUT_MARGIN_SECONDS`` before the grace ends, each request still
open receives ``http.disconnect``: Django ends its view as it does for a
client that left (a streaming response is cancelled, its generator
closed), and the body is closed here (or a 503 sent if no response had
started), so uvicorn's grace ends with no task left to cancel. Requests
that finish within the grace are untouched.
"""

from __future__ import annotations

import asyncio
import json
import sys

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.importer import import_from_string

# How long before uvicorn's grace ends the open requests are ended here.
STREAMS_CUT_MARGIN_SECONDS = 1.0
_STOPPING_BODY = json.dumps({"detail": "The server is shutting down; retry on another one."}).encode()


class EndOnStop:
    """ASGI middleware: once ``cut`` is done, an HTTP request still open is told its client disconnected."""

    def __init__(self, app) -> None:
        self.app = app
        self._cut: asyncio.Future | None = None

    @property
    def cut(self) -> asyncio.Future:
        """The serving loop's one future every open request's disconnect listener also waits on."""
        if self._cut is None:
            self._cut = asyncio.get_running_loop().create_future()
        return self._cut

    def arm(self, after: float) -> None:
        """End the open requests ``after`` seconds from now (call on the serving loop when the stop begins)."""
        cut = self.cut

        def end_open_requests() -> None:
            if not cut.done():
                cut.set_result(None)

        asyncio.get_running_loop().call_later(after, end_open_requests)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        response = {"started": False, "complete": False, "cut": False}

        async def tracked_send(message):
            if message["type"] == "http.response.start":
                response["started"] = True
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                response["complete"] = True
            await send(message)

        async def ended_at_cut():
            """``receive``, answering ``http.disconnect`` once the cut comes first."""
            cut = self.cut
            if cut.done():
                response["cut"] = True
                return {"type": "http.disconnect"}
            receiving = asyncio.ensure_future(receive())
            try:
                await asyncio.wait({receiving, cut}, return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                receiving.cancel()  # Django cancels its listener once the response has ended
                raise
            if receiving.done():
                return receiving.result()
            receiving.cancel()
            response["cut"] = True
            return {"type": "http.disconnect"}

        await self.app(scope, _once_body_read(receive, ended_at_cut), tracked_send)
        if response["cut"] and not response["complete"]:
            await _finish(send, started=response["started"])


def _once_body_read(receive, then):
    """Return a ``receive`` that reads the request body plainly, then waits through ``then`` (the disconnect listener)."""
    body_read = False

    async def receive_message():
        nonlocal body_read
        if body_read:
            return await then()
        message = await receive()
        body_read = message["type"] != "http.request" or not message.get("more_body", False)
        return message

    return receive_message


async def _finish(send, *, started: bool) -> None:
    """Close a cut response: end a started body, or answer 503 when nothing was sent yet."""
    if not started:
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(_STOPPING_BODY)).encode())]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": _STOPPING_BODY})
        return
    await send({"type": "http.response.body", "body": b"", "more_body": False})


class _Server(uvicorn.Server):
    """uvicorn's server, arming the app's cut when its stop begins."""

    def __init__(self, config: uvicorn.Config, *, app: EndOnStop, cut_after: float) -> None:
        super().__init__(config)
        self._app, self._cut_after = app, cut_after

    async def shutdown(self, sockets=None) -> None:
        self._app.arm(self._cut_after)
        await super().shutdown(sockets)


def serve(app_path: str, *, timeout_graceful_shutdown: int, **options) -> None:
    """``uvicorn.run(app_path, …)``, with the app's open requests ended quietly at a stop (see the module)."""
    app = EndOnStop(import_from_string(app_path))
    config = uvicorn.Config(app, timeout_graceful_shutdown=timeout_graceful_shutdown, **options)
    server = _Server(config, app=app, cut_after=max(0.0, timeout_graceful_shutdown - STREAMS_CUT_MARGIN_SECONDS))
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    if not server.started:
        sys.exit(STARTUP_FAILURE)  # as uvicorn.run: the runtime did not start
