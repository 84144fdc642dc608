"""What the ASGI server logs, with the API key a WebSocket URL may carry redacted.

Browsers cannot set headers on a WebSocket, so a frontend passes its key as
``?api_key=`` (``deerflow_site.ws_auth``), and uvicorn logs every WebSocket
handshake and HTTP request with its path and query string. Secrets never
reach the logs (DESIGN §9): the value is replaced before a record is formatted.
"""

from __future__ import annotations

import logging
import re

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


def redact_query_keys() -> None:
    """Put the filter on the server's loggers (once: a logger keeps one filter of a class)."""
    for name in SERVER_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(existing, RedactQueryKeys) for existing in logger.filters):
            logger.addFilter(RedactQueryKeys())
