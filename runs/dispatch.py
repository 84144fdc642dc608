"""The port between the run services and whatever executes runs in this process.

Services announce what they decided (a run admitted, a cancel requested, a
run promoted behind a cancelled one, a finished run's webhook) through this
module and never import the execution package. The run worker plugs itself
in when the process starts (``runs.execution.runtime``); a process that
executes nothing still has one (``claim`` off), which wakes the claimers of
other processes over the channel layer and delivers its webhooks.
"""

from __future__ import annotations

import asyncio
import re
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from core.errors import Unavailable

if TYPE_CHECKING:
    from runs.models import Run


class Executor(Protocol):
    """What the services ask of this process's run worker."""

    worker_id: str
    loop: asyncio.AbstractEventLoop | None

    def dispatch_soon(
        self,
        run_id: str,
        *,
        thread_id: str | None = None,
        not_before: datetime | None = None,
        admitted: Run | None = None,
    ) -> None:
        """Start an admitted run here, or wake the claimers (after the admission committed)."""

    async def dispatch(self, run_id: str, *, thread_id: str | None = None, admitted: Run | None = None) -> bool:
        """Claim and start a pending run now; False when another process got it first."""

    def wake(self) -> None:
        """Look for pending runs now instead of at the next poll."""

    async def signal_cancel(self, *, run_id: str, worker_id: str, action: str) -> None:
        """Tell the worker executing ``run_id`` (this one or another process's) to cancel it."""

    def cancel_local(self, run_id: str, action: str) -> bool:
        """Cancel a run this worker executes (on its loop)."""

    def send_webhook(self, job: Any) -> None:
        """Deliver a finished run's webhook (on its loop)."""


_plugged: Executor | None = None
# The executor being stopped: runs it cancels still end, and their webhooks go through it.
_closing: Executor | None = None


def plug(executor: Executor) -> None:
    """Make ``executor`` the one the services reach (at start-up)."""
    global _plugged
    _plugged = executor


def unplug() -> Executor | None:
    """Take the executor out for its stop; it still sends the webhooks of the runs it ends meanwhile."""
    global _plugged, _closing
    executor, _plugged = _plugged, None
    _closing = executor
    return executor


def closed() -> None:
    """Forget the executor whose stop has ended."""
    global _closing
    _closing = None


def current() -> Executor | None:
    """This process's executor, None when none was plugged in (a management command, the admin under WSGI)."""
    return _plugged


def get() -> Executor:
    """This process's executor; 503 where start-up plugged none in."""
    if _plugged is None:
        raise Unavailable("The run worker is not running in this process.")
    return _plugged


def webhook_sink() -> Executor | None:
    """The executor that sends this process's webhooks: the running one, else the one stopping."""
    return _plugged or _closing


def worker_group(worker_id: str) -> str:
    """Return the channel-layer group a worker listens on for cancel signals."""
    return "runs.worker." + re.sub(r"[^A-Za-z0-9_.-]", "-", worker_id)[:80]
