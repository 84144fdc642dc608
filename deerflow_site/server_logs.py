"""What the ASGI server logs: the API key a WebSocket URL may carry redacted, a 4xx's detail and chosen headers added.

Browsers cannot set headers on a WebSocket, so a frontend passes its key as
``?api_key=`` (``deerflow_site.ws_auth``), and uvicorn logs every WebSocket
handshake and HTTP request with its path and query string. Secrets never
reach the logs (DESIGN §9): the value is replaced before a record is formatted.

A refused request's access line says why (``"POST /api/threads/t/state
HTTP/1.1" 422 - values.messages: …``): an operator reading the log sees
what the client was told without reproducing the request.
"""

from __future__ import annotations

import contextvars
import copy
import logging
import re

import orjson
import uvicorn.config
import uvicorn.logging

from runs.services.run_request import headers_matching

# uvicorn's loggers of handshakes ("uvicorn.error") and requests ("uvicorn.access").
SERVER_LOGGERS = ("uvicorn.error", "uvicorn.access")
REDACTED = "[redacted]"
_QUERY_KEY = re.compile(r"([?&]api_key=)[^&#\s\"]*")


def redacted(text: str) -> str:
    """Return ``text`` with the value of every ``api_key`` query parameter replaced."""
    return _QUERY_KEY.sub(rf"\g<1>{REDACTED}", text) if "api_key=" in text else text


class RedactQueryKeys(logging.Filter):
    """Redact ``api_key`` query values in a record's message and its arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redacted(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redacted(arg) if isinstance(arg, str) else arg for arg in record.args)
        return True


# A detail longer than this is cut in the log line (a body is at most a few KiB).
DETAIL_CHARS = 300
# The detail of the response being started in this task (set just before its start goes out).
_detail: contextvars.ContextVar[str | None] = contextvars.ContextVar("client_error_detail", default=None)


# The request headers langgraph.json's http.logging_headers chose, of the request this task serves.
_headers: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("logged_headers", default=None)


class AppendClientErrorDetail(logging.Filter):
    """Give uvicorn's access record the answer's detail (a 4xx) and the chosen request headers."""

    def filter(self, record: logging.LogRecord) -> bool:
        if detail := _detail.get():
            record.client_error_detail = detail
        if headers := _headers.get():
            record.request_headers = headers
        return True


class AccessFormatter(uvicorn.logging.AccessFormatter):
    """uvicorn's access line, with `` - <detail>`` after a refused request's status and the chosen headers."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        if detail := getattr(record, "client_error_detail", None):
            line = f"{line} - {detail}"
        if headers := getattr(record, "request_headers", None):
            line = f"{line} headers={orjson.dumps(headers).decode()}"
        return line


def server_log_config() -> dict:
    """uvicorn's logging configuration with ``AccessFormatter`` for the access lines."""
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["formatters"]["access"]["()"] = f"{__name__}.AccessFormatter"
    return config


def client_error_detail(body: bytes) -> str | None:
    """Return the ``detail`` of a JSON error body, cut to ``DETAIL_CHARS``, else None."""
    try:
        detail = orjson.loads(body).get("detail")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    if not isinstance(detail, str):
        return None
    detail = redacted(detail)
    return detail if len(detail) <= DETAIL_CHARS else detail[: DETAIL_CHARS - 1] + "…"


def log_client_error_details(app):
    """Wrap an HTTP ASGI app: a 4xx's start waits for its first body chunk, whose detail the access line gets."""

    async def with_details(scope, receive, send):
        held: dict | None = None

        async def send_with_detail(message):
            nonlocal held
            if message["type"] == "http.response.start" and 400 <= message["status"] < 500:
                held = message  # uvicorn logs the access line as the start goes out
                return
            if held is not None and message["type"] == "http.response.body":
                start, held = held, None
                _detail.set(client_error_detail(message.get("body", b"")))
                try:
                    await send(start)
                finally:
                    _detail.set(None)
            await send(message)

        await app(scope, receive, send_with_detail)

    return with_details


def log_request_headers(app, rules: dict[str, list[str]] | None):
    """Wrap an HTTP ASGI app: its access line records the request headers ``rules`` (http.logging_headers) pick.

    The same matching as ``http.configurable_headers``: never a header that
    looks like a secret (authorization, API keys, cookies), whatever the rules.
    """
    if not rules:
        return app

    async def with_headers(scope, receive, send):
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope.get("headers", [])}
        _headers.set(dict(sorted(headers_matching(headers, rules).items())) or None)
        await app(scope, receive, send)

    return with_headers


def redact_query_keys() -> None:
    """Put the filters on the server's loggers (once: a logger keeps one filter of a class)."""
    for name in SERVER_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(existing, RedactQueryKeys) for existing in logger.filters):
            logger.addFilter(RedactQueryKeys())
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(existing, AppendClientErrorDetail) for existing in access.filters):
        access.addFilter(AppendClientErrorDetail())
