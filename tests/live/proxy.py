"""A TCP proxy a test can cut: the live server reaches PostgreSQL or Redis through it.

``cut()`` closes every proxied connection and refuses new ones until
``restore()``: to the server it looks like the dependency went away and came
back, without stopping a service other tests share.
"""

from __future__ import annotations

import asyncio
import threading

from tests.live.server import free_port


class TcpProxy:
    """Forward 127.0.0.1:``port`` to ``target_port``, in a thread with its own event loop."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        self._open = True
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tcp-proxy", daemon=True)

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        self._ready.wait(5)
        return self

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def cut(self) -> None:
        """Drop every connection and refuse new ones."""
        asyncio.run_coroutine_threadsafe(self._set_open(False), self._loop).result(5)

    def restore(self) -> None:
        asyncio.run_coroutine_threadsafe(self._set_open(True), self._loop).result(5)

    async def _set_open(self, value: bool) -> None:
        self._open = value
        if not value:
            for writer in list(self._writers):
                writer.transport.abort()
            self._writers.clear()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._accept, "127.0.0.1", self.port))
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            for writer in list(self._writers):
                writer.transport.abort()
            # The connections' pipes end with their transports: let them, so none is destroyed pending.
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._open:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()
