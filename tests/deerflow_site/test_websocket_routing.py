"""A WebSocket to a path no route serves is refused at the handshake, never an error in the router."""

from __future__ import annotations

import pytest
from channels.testing import WebsocketCommunicator

from deerflow_site import lifecycle
from deerflow_site.asgi import application
from deerflow_site.consumers import UNKNOWN_PATH_CLOSE_CODE

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("path", ["/ws/nope", "/api/threads/x/stream", "/", "/ws/threads/t/runs"])
async def test_an_unknown_websocket_path_is_refused_cleanly(path):
    communicator = WebsocketCommunicator(application, path)
    try:
        connected, code = await communicator.connect(timeout=5)
        assert (connected, code) == (False, UNKNOWN_PATH_CLOSE_CODE)
        await communicator.disconnect()
    finally:
        await lifecycle.shutdown()  # the app started this loop's runtime: close it with the loop
