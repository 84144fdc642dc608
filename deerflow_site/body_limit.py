"""Request bodies over ``limits.max_body_bytes`` are answered 413 before Django reads them.

Django's own limit (``DATA_UPLOAD_MAX_MEMORY_SIZE``) applies when a view
reads ``request.body``, but under ASGI Django first copies the whole body
into a spooled temporary file, whatever its size. This ASGI wrapper stands
in front of it: a ``Content-Length`` over the limit is refused without
calling Django at all, and a body without one (chunked) is counted as it
arrives and cut off once it passes the limit. Either way the answer is the
API's 413 ``{"detail": ...}``, and nothing was parsed or written.
"""

from __future__ import annotations

import json

from core import validation


def _declared_length(scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # Django answers a malformed one
    return None


async def _refuse(send) -> None:
    body = json.dumps({"detail": validation.body_too_large()}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def limit_request_bodies(app):
    """Wrap an ASGI app so HTTP request bodies over the configured limit get a 413 instead."""

    async def guarded(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        limit = validation.limits().max_body_bytes
        declared = _declared_length(scope)
        if declared is not None and declared > limit:
            return await _refuse(send)
        if declared is not None:
            return await app(scope, receive, send)

        received = 0
        overflowed = False
        started = False

        async def counting_receive():
            nonlocal received, overflowed
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    overflowed = True
                    return {"type": "http.disconnect"}  # Django stops reading and answers nothing
            return message

        async def tracking_send(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await app(scope, counting_receive, tracking_send)
        if overflowed and not started:
            await _refuse(send)

    return guarded
