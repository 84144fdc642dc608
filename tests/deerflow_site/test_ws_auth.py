"""WebSocket identity by origin: a session cookie counts only from the server's own origin, an API key from any."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.test import Client

from deerflow_site.ws_auth import websocket_auth_stack

pytestmark = pytest.mark.django_db(transaction=True)
SERVER = b"127.0.0.1:8000"


async def whoami(scope, receive, send):
    """Accept, then close with 4000 + 1 for a user and 4000 for nobody (the scope's user, resolved)."""
    await receive()
    user = await sync_to_async(lambda: scope["user"].is_authenticated and scope["user"].username)()
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.close", "code": 4001 if user else 4000})


async def identity(headers: list[tuple[bytes, bytes]], query: str = "") -> bool:
    socket = WebsocketCommunicator(websocket_auth_stack(whoami), f"/ws/x{query}", headers=headers)
    connected, _ = await socket.connect(timeout=5)
    assert connected
    closed = await socket.receive_output(timeout=5)
    await socket.disconnect()
    return closed["code"] == 4001


def session_cookie() -> bytes:
    client = Client()
    client.force_login(get_user_model().objects.create_user("ws-session-user"))
    return f"sessionid={client.cookies['sessionid'].value}".encode()


@pytest.mark.parametrize(
    ("origin", "counts"),
    [
        (b"http://127.0.0.1:8000", True),  # the server's own page (the console)
        (b"https://127.0.0.1:8000", True),  # behind a TLS proxy the socket is ws, the page https
        (b"http://127.0.0.1:5173", False),  # another port of the same host: cookies travel, the origin differs
        (b"http://localhost:8000", False),
        (b"https://evil.example", False),
    ],
)
async def test_a_session_cookie_counts_only_from_the_servers_own_origin(origin, counts):
    cookie = await sync_to_async(session_cookie)()
    headers = [(b"cookie", cookie), (b"host", SERVER), (b"origin", origin)]
    assert await identity(headers) is counts


async def test_a_session_cookie_from_a_csrf_trusted_origin_counts(settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://console.example"]
    cookie = await sync_to_async(session_cookie)()
    assert await identity([(b"cookie", cookie), (b"host", SERVER), (b"origin", b"https://console.example")])
    assert not await identity([(b"cookie", cookie), (b"host", SERVER), (b"origin", b"https://other.example")])


async def test_an_api_key_in_the_query_counts_from_another_origin(owner):
    headers = [(b"host", SERVER), (b"origin", b"http://127.0.0.1:5173")]
    assert await identity(headers, f"?api_key={owner.key}")
    assert not await identity(headers, "?api_key=dfk_wrong")
