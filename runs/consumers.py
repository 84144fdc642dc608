"""WebSocket stream of a run: the same events as SSE, for frontends.

``/ws/threads/{thread_id}/runs/{run_id}?last_event_id=…`` replays after that
id (``-1`` or none: from the start) then follows live. Each message is
``{"event", "data", "id"}``; the last is ``{"event": "end", "data": outcome}``
before a normal close. The client may send ``{"action": "cancel",
"cancel_action": "interrupt"|"rollback"}``. Close codes: 4401 no identity,
4404 not the caller's run (the same answer as for a missing one). A staff
session (the console) may watch any run with ``runs.view_run`` and cancel it
with ``runs.change_run``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from types import SimpleNamespace
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer, AsyncWebsocketConsumer
from django.conf import settings
from django.utils.datastructures import CaseInsensitiveMapping

from core.bridge import END_EVENT, ReplayGap, dumps, from_start
from core.bridge_runtime import get_bridge
from core.custom_encryption import request_scope
from runs.api.commands import ProtocolError, Subscriptions, adispatch, error_envelope
from runs.models import Run
from runs.services.cancel import arun_cancel
from runs.streaming.protocol import EventFilter, filter_methods
from runs.streaming.sse import METADATA_EVENT, RunEndWatch, interrupted, reader_idle_timeout, run_metadata
from threads.selectors import owned_thread_or_none
from threads.stream_follow import Incarnation, ResumeGap, check_resume, follow_thread, replay, wait_owned

logger = logging.getLogger(__name__)

# How long a run's socket waits for its next event before asking the run row whether it ended.
IDLE_SECONDS = 15
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
# Subscriptions one protocol socket may hold: the JS client opens two (root and
# watcher) plus one per subgraph it shows; each live event is matched against all.
MAX_SUBSCRIPTIONS = 64


async def _accept_user(consumer: AsyncWebsocketConsumer):
    """Accept the socket and return its authenticated user; else close it with 4401 and return None.

    Accept first, then close with a code: a refused handshake would only
    show the client a bare 403, with no reason it can act on.
    """
    await consumer.accept()
    user = consumer.scope.get("user")
    if user is None or not user.is_authenticated:
        await consumer.close(code=CLOSE_UNAUTHENTICATED)
        return None
    return user


def _visible_run(user, thread_id: str, run_id: str, *, staff_session: bool) -> tuple[Run | None, bool]:
    """Return (the run, may cancel it): the caller's own, or any run for a staff session with the right.

    Staff watch with ``runs.view_run`` and cancel with ``runs.change_run``,
    as on the console's run page; an API key never reaches another user's run.
    """
    run = Run.objects.filter(pk=run_id, thread_id=thread_id).select_related("thread").first()
    if run is None:
        return None, False
    if owned_thread_or_none(thread_id=thread_id, owner=user) is not None:  # the caller's scope (custom auth's too)
        return run, True
    if staff_session and user.is_staff and user.has_perm("runs.view_run"):
        return run, user.has_perm("runs.change_run")
    return None, False


class RunStreamConsumer(AsyncJsonWebsocketConsumer):
    """Relay one run's bridge events to a WebSocket."""

    async def connect(self) -> None:
        if (user := await _accept_user(self)) is None:
            return
        kwargs = self.scope["url_route"]["kwargs"]
        staff_session = not self.scope.get("api_key_auth")
        self.user = user  # who cancels, when this socket asks to (Run.cancelled_by)
        self.run, self.may_cancel = await database_sync_to_async(_visible_run)(
            user, kwargs["thread_id"], kwargs["run_id"], staff_session=staff_session
        )
        if self.run is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        query = parse_qs(self.scope.get("query_string", b"").decode())
        after = (query.get("last_event_id") or [None])[0]
        self.pump = asyncio.ensure_future(self._pump(after))

    async def _pump(self, after: str | None) -> None:
        bridge = get_bridge()
        try:
            if from_start(after):
                await self.send_json({"event": METADATA_EVENT, "data": run_metadata(self.run), "id": None})
            idle = reader_idle_timeout(self.run, IDLE_SECONDS)
            watch = RunEndWatch(self.run.run_id)
            async for event in bridge.subscribe(self.run.run_id, after=after, idle_timeout=idle):
                if event is None:
                    # Idle: a finished run's stream holds no end marker (it expired, or
                    # never reached this bridge), so the row says when to stop, as for SSE.
                    if await watch.over():
                        break
                    continue
                if event.event == END_EVENT:
                    await self.send_json({"event": "end", "data": event.data, "id": event.id})
                    break
                await self.send_json({"event": event.event, "data": event.data, "id": event.id})
        except (ReplayGap, ValueError) as exc:
            await self.send_json({"event": "error", "data": {"message": str(exc), "name": type(exc).__name__}})
        except Exception as exc:
            # The bridge failed (Redis away past its retry): say so and close, never leave the client hanging.
            logger.warning("run %s: WebSocket stream interrupted", self.run.run_id, exc_info=True)
            await self.send_json({"event": "error", "data": interrupted(exc)})
            await self.close(code=1011)
            return
        await self.close(code=1000)

    async def receive_json(self, content, **kwargs) -> None:
        if getattr(self, "run", None) is None:
            return
        if not isinstance(content, dict) or content.get("action") != "cancel":
            await self.send_json({"event": "error", "data": {"message": 'expected {"action": "cancel"}'}})
            return

        if not self.may_cancel:
            await self.send_json({"event": "error", "data": {"message": "cancelling this run needs runs.change_run"}})
            return
        action = content.get("cancel_action") or "interrupt"
        if action not in ("interrupt", "rollback"):
            await self.send_json({"event": "error", "data": {"message": "cancel_action must be interrupt or rollback"}})
            return
        await arun_cancel(run=self.run, action=action, by=self.user)

    async def disconnect(self, code) -> None:
        pump = getattr(self, "pump", None)
        if pump is not None:
            pump.cancel()


class ThreadStreamConsumer(AsyncWebsocketConsumer):
    """The protocol-v2 WebSocket ``/api/threads/{id}/stream/events``: commands in, responses and events out.

    Every inbound frame is a command envelope (the JS client sends all its
    commands here; the Python client only a first ``subscription.subscribe``).
    One pump follows the thread's log and sends each event once if any of the
    socket's subscriptions matches. A thread that does not exist yet (the
    client minted its id) or is not the caller's gets nothing until an in-band
    ``run.start`` makes it theirs: the two cases look the same; a deleted
    thread goes back to that wait, and the id's next life, if the caller's, is
    sent from its first event. Each subscription honours its own ``since`` as
    the SSE stream does (``resume_gap`` outside the log). Close codes: 4401 no
    identity, 1011 the log could not be followed; the socket stays open
    across runs.
    """

    async def connect(self) -> None:
        if (user := await _accept_user(self)) is None:
            return
        self.user = user
        self.thread_id = self.scope["url_route"]["kwargs"]["thread_id"]
        # The handshake's headers: a run.start copies those http.configurable_headers names (as over HTTP).
        self.handshake_headers = {
            name.decode("latin-1"): value.decode("latin-1") for name, value in self.scope.get("headers", [])
        }
        self.encryption_request = SimpleNamespace(user=user, headers=CaseInsensitiveMapping(self.handshake_headers))
        self.subscriptions = Subscriptions(self._subscribed)
        # The life of the thread the pump follows (None while it waits for one) and the seq it passed.
        self.incarnation: Incarnation | None = None
        self.position = 0
        # Each subscription's ``since``: the pump sends it only later events.
        self.cursors: dict[str, int] = {}
        # Held while the pump sends one event and while a subscription replays,
        # so a replay covers exactly (since, position] and the pump the rest, in order.
        self.sending = asyncio.Lock()
        self.pump: asyncio.Task | None = None

    async def receive(self, text_data=None, bytes_data=None) -> None:
        if getattr(self, "user", None) is None:
            return
        try:
            message = json.loads(text_data if text_data is not None else bytes_data)
        except ValueError:
            await self.send_json(error_envelope(None, "invalid_argument", "Protocol commands must be valid JSON."))
            return
        try:
            # A run.start seals with the handshake's X-Encryption-Context, as over HTTP (core.custom_encryption).
            with request_scope(self.encryption_request):
                response = await adispatch(
                    user=self.user,
                    thread_id=self.thread_id,
                    message=message,
                    subscriptions=self.subscriptions,
                    headers=self.handshake_headers,
                )
        except Exception as exc:  # the mode gate and storage errors: said on this command, the socket lives
            logger.info("thread %s: WebSocket command failed: %r", self.thread_id, exc)
            response = error_envelope(
                message.get("id") if isinstance(message, dict) else None, "unknown_error", str(exc)
            )
        await self.send_json(response)

    async def send_json(self, content) -> None:
        await self.send(text_data=dumps(content))

    async def _subscribed(self, subscription_id: str, event_filter: EventFilter, since: int | None) -> int:
        """Replay this subscription's events after ``since`` that the pump passed; start the pump first.

        Costs one page read per 500 matching rows (the database filters the
        channels): a narrow subscription on a 4,080-event log reads its few
        rows, not the log, and ``MAX_SUBSCRIPTIONS`` bounds what each event
        is matched against.
        """
        if len(self.subscriptions.filters) > MAX_SUBSCRIPTIONS:
            del self.subscriptions.filters[subscription_id]
            raise ProtocolError(
                "invalid_argument", f"A socket holds at most {MAX_SUBSCRIPTIONS} subscriptions; unsubscribe one first."
            )
        async with self.sending:
            # What the pump must not send this subscription again (or before its first catch-up: at all).
            self.cursors = {k: v for k, v in self.cursors.items() if k in self.subscriptions.filters}
            self.cursors[subscription_id] = since or 0
            if self.incarnation is None:  # no life followed yet: the pump's catch-up serves ``since``
                if self.pump is None:
                    self.pump = asyncio.ensure_future(self._pump())
                return 0
            try:
                if since is not None:
                    await check_resume(self.incarnation, since)
            except ResumeGap as gap:
                del self.subscriptions.filters[subscription_id]
                extra = {"since": gap.since, "min_available_seq": gap.min_available_seq}
                raise ProtocolError("resume_gap", str(gap), **extra) from None
            replayed = 0
            rows = replay(self.incarnation, since or 0, self.position + 1, methods=filter_methods(event_filter))
            async for row in rows:
                if event_filter.matches(row):
                    await self.send_json(row)
                    replayed += 1
            return replayed

    async def _pump(self) -> None:
        """Follow the caller's thread life after life; the first from the lowest ``since`` asked."""
        bridge = get_bridge()
        heartbeat = settings.DEERFLOW_CONFIG.stream_bridge.heartbeat_seconds
        first = True
        try:
            while True:
                incarnation = await wait_owned(bridge, self.thread_id, self.user.pk)
                async with self.sending:
                    since = self._start(first)
                    await check_resume(incarnation, since)
                    self.incarnation, self.position = incarnation, since
                async for event in follow_thread(bridge, incarnation, since=since, idle_timeout=heartbeat):
                    if event is not None:
                        await self._deliver(event)
                async with self.sending:
                    self.incarnation = None
                first = False
        except ResumeGap as gap:
            await self.send_json({"type": "error", "id": None, **gap.body()})
        except Exception as exc:
            logger.warning("thread %s: protocol WebSocket stream interrupted", self.thread_id, exc_info=True)
            await self.send_json(error_envelope(None, "unknown_error", interrupted(exc)["message"]))
            await self.close(code=1011)

    def _start(self, first: bool) -> int:
        """Return where to follow a life from: the lowest ``since`` of the first, the start of a later one."""
        if not first:  # every ``since`` counted another life's events
            self.cursors.clear()
            return 0
        live = [self.cursors.get(key, 0) for key in self.subscriptions.filters]
        return min(live, default=0)

    async def _deliver(self, event: dict) -> None:
        async with self.sending:
            self.position = seq = event["seq"]
            if any(
                seq > self.cursors.get(key, 0) and f.matches(event) for key, f in self.subscriptions.filters.items()
            ):
                await self.send_json(event)

    async def disconnect(self, code) -> None:
        if (pump := getattr(self, "pump", None)) is not None:
            pump.cancel()
