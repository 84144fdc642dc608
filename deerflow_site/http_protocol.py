"""uvicorn's httptools protocol with limits on the request head, answered as JSON ``414``/``431``.

On httptools, uvicorn takes a request line and a header block of any size:
it buffers them whole, then refuses a URL over 65,535 bytes (the most
``httptools.parse_url`` reads) with a plain-text ``400 Invalid HTTP request
received.`` and closes the socket at once. A client still sending (a
``GET …/events?event_types=`` with 5,000 values is ~100 KB) then gets a reset
that destroys the answer before it is read: the connection looks dropped.

Here the URL and the header block have limits of their own, checked as the
parser hands them over (and, for one header that never ends, as its bytes
arrive), and the answer is ``{"detail": …}`` like every other error. The
connection is then half-closed and drained for ``LINGER_SECONDS`` so the
client reads the answer instead of a reset.
"""

from __future__ import annotations

import json

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

# httptools.parse_url's own limit: uvicorn could not serve a longer URL anyway.
MAX_URL_BYTES = 65_535
# Header names, values and their separators. Browsers send a few KiB (cookies
# included); h11's default for the whole head is 16 KiB.
MAX_HEADER_BYTES = 65_536
# One header value is buffered by httptools until it ends: bytes past this
# much of an unfinished head are refused as they arrive.
_MAX_HEAD_BYTES = MAX_URL_BYTES + MAX_HEADER_BYTES + 4096
# Seconds a refused connection goes on reading (and dropping) what the client
# still sends, so that it closes with a FIN after the answer, not a reset.
LINGER_SECONDS = 2.0


class RequestHeadTooLarge(Exception):
    """A request line or header block over its limit; ``status`` is 414 or 431."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def _url_too_long() -> RequestHeadTooLarge:
    return RequestHeadTooLarge(414, f"request URL over {MAX_URL_BYTES} bytes (the server's limit)")


def _headers_too_large() -> RequestHeadTooLarge:
    return RequestHeadTooLarge(431, f"request header block over {MAX_HEADER_BYTES} bytes (the server's limit)")


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` that answers an oversized request head 414/431 with a JSON detail."""

    _head_open = False  # between a request's first byte and the end of its headers
    _head_bytes = 0  # bytes received while the head was open (after its first chunk)
    _header_bytes = 0
    _too_large: RequestHeadTooLarge | None = None

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_open, self._head_bytes, self._header_bytes = True, 0, 0

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > MAX_URL_BYTES:
            self._too_large = _url_too_long()
            raise self._too_large

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value) + 4  # ": " and CRLF
        if self._header_bytes > MAX_HEADER_BYTES:
            self._too_large = _headers_too_large()
            raise self._too_large
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._head_open = False
        super().on_headers_complete()

    def data_received(self, data: bytes) -> None:
        if self._too_large is not None:
            return  # the rest of a refused request: dropped until the linger closes the connection
        if self._head_open:
            self._head_bytes += len(data)
            if self._head_bytes > _MAX_HEAD_BYTES:
                self._too_large = _headers_too_large() if self.headers else _url_too_long()
                self._refuse(self._too_large)
                return
        super().data_received(data)

    def send_400_response(self, msg: str) -> None:
        """Answer a parser error: ours (a callback above raised it) as 414/431, any other as uvicorn does."""
        if self._too_large is None:
            super().send_400_response(msg)
        else:
            self._refuse(self._too_large)

    def _refuse(self, error: RequestHeadTooLarge) -> None:
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "-"
        self.logger.warning("%s - refused a request: %s (%d)", client, error.detail, error.status)
        body = json.dumps({"detail": error.detail}).encode()
        content = [STATUS_LINE[error.status]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.append(b"content-type: application/json\r\ncontent-length: %d\r\n" % len(body))
        content.append(b"connection: close\r\n\r\n" + body)
        self.transport.write(b"".join(content))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_SECONDS, self.transport.close)
