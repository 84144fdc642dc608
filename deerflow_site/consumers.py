"""WebSocket edge cases that belong to no app: a path no route serves."""

from __future__ import annotations

from channels.generic.websocket import AsyncWebsocketConsumer

# Close code for "no such endpoint" (4000-4999 are the application's; 4404 mirrors HTTP 404).
UNKNOWN_PATH_CLOSE_CODE = 4404


class UnknownPathConsumer(AsyncWebsocketConsumer):
    """Refuse the handshake of a WebSocket to a path no route serves (Channels' router would raise: a 500)."""

    async def connect(self) -> None:
        await self.close(code=UNKNOWN_PATH_CLOSE_CODE)
