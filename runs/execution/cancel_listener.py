"""The worker's channel-layer inbox: cancel signals addressed to it, and wake-ups for the processes that claim runs.

Both ends live here: ``send_cancel`` and ``wake_claimers`` send what the
``CancelListener`` of another process relays.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from channels.layers import get_channel_layer

from core.redis import keep_cancelled
from runs import dispatch
from runs.execution.tasks import spawn

logger = logging.getLogger(__name__)

# Every process that claims runs listens here: a process that admits runs but
# does not execute them (``execute_in_server: false``) wakes them, so a run it
# admitted starts now rather than at the next claim poll (``poll_seconds``).
CLAIMERS_GROUP = "runs.claimers"
# The group is joined again this often: a restarted Redis (or channels-redis'
# group_expiry, a day) forgets members.
REJOIN_SECONDS = 60.0


async def send_cancel(*, worker_id: str, run_id: str, action: str) -> None:
    """Ask the worker ``worker_id`` (of any process) to cancel ``run_id`` with ``action``."""
    message = {"type": "run.cancel", "run_id": run_id, "action": action}
    await get_channel_layer().group_send(dispatch.worker_group(worker_id), message)


async def wake_claimers() -> None:
    """Tell the processes that claim runs to look now (one of them wins the run; a delayed one sets their timer).

    A lost signal costs what it did before: the run waits for the next poll.
    """
    try:
        await get_channel_layer().group_send(CLAIMERS_GROUP, {"type": "runs.wake"})
    except Exception:
        logger.warning("could not wake the run workers; the run waits for their next poll", exc_info=True)


class CancelListener:
    """Relay the cancels addressed to ``worker_id`` to ``on_cancel``, and (given ``on_wake``) claimers' wake-ups.

    The channel layer's read runs in a task of its own (``read``) and the
    listener only waits on it: a cancel can be lost inside redis-py and
    channels-redis then reads on (``worker.stop_tasks``), so the stop must
    not depend on that read ending. A channel-layer error (Redis down, a
    dropped connection the client's retry could not heal) is logged, and the
    listener subscribes again after a backoff (0.5 s doubling to 10 s): a
    dead listener left cancels to the lease poll.
    """

    def __init__(
        self,
        *,
        worker_id: str,
        on_cancel: Callable[[str, str], object],
        on_wake: Callable[[], object] | None = None,
    ) -> None:
        self.group = dispatch.worker_group(worker_id)
        self._on_cancel = on_cancel
        self._on_wake = on_wake
        self.stopping = False
        # The channel layer's read in progress, if any (the stop cancels it, bounded).
        self.read: asyncio.Task | None = None

    def stop(self) -> None:
        """End the listener at its next turn (the stop cancels it as well)."""
        self.stopping = True

    async def run(self) -> None:
        """Relay messages for as long as the worker lives."""
        layer = get_channel_layer()
        # One channel name for the worker's life: a signal sent while the
        # listener was down sits under it in Redis and is delivered on return
        # (a fresh name would leave it buffered for a channel nobody reads).
        channel = await layer.new_channel()
        backoff = 0.5
        try:
            while not self.stopping:
                try:
                    await self._join(layer, channel)
                    self._relay(await self._next_message(layer, channel, within=REJOIN_SECONDS))
                    backoff = 0.5  # the layer answered
                except Exception:
                    logger.exception("cancel listener: the channel layer failed; subscribing again in %.1f s", backoff)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 10.0)
        finally:
            if self.read is not None:
                self.read.cancel()  # the worker's stop waits for it, bounded

    def _relay(self, message: dict) -> None:
        if message.get("type") == "run.cancel":
            self._on_cancel(message["run_id"], message.get("action") or "interrupt")
        elif message.get("type") == "runs.wake" and self._on_wake is not None:
            self._on_wake()

    async def _join(self, layer, channel: str) -> None:
        # keep_cancelled: a cancel redis-py drops while sending is raised once the command answers.
        await keep_cancelled(layer.group_add(self.group, channel))
        if self._on_wake is not None:
            await keep_cancelled(layer.group_add(CLAIMERS_GROUP, channel))

    async def _next_message(self, layer, channel: str, *, within: float) -> dict:
        """Return the channel's next message, or {} after ``within`` seconds (the read carries on for the next call).

        ``asyncio.wait`` on the read's task never loses the listener's own
        cancel, whatever the read does with the one it gets.
        """
        if self.read is None:
            self.read = spawn(layer.receive(channel), "runs-cancel-receive")
        done, _pending = await asyncio.wait({self.read}, timeout=within)
        if not done:
            return {}
        read, self.read = self.read, None
        return read.result()
