"""Orphan recovery: end the running runs no live task owns, and promote what was queued behind them.

An owner is dead when, on this host, its pid is gone (or is this process
under another nonce: its previous life), and on other hosts when its lease
expired more than ``grace_seconds`` ago. A run this worker claimed whose
task is gone here (its completion could not reach the database) is lost
the same way.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Container, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from channels.db import database_sync_to_async
from django.utils import timezone

from checkpoints.accessor import astate_accessor
from checkpoints.rollback import RollbackPoint, arestore
from core.bridge import StreamBridge
from core.custom_encryption import fixed_scope
from runs.execution.executor import thread_lock
from runs.execution.tasks import repeat_every
from runs.models import LOST_MESSAGE, ORPHAN_MESSAGE, CancelAction
from runs.services import lifecycle
from runs.services.admission import ROLLED_BACK

logger = logging.getLogger(__name__)

HOSTNAME = socket.gethostname()


def new_worker_id() -> str:
    """Return a fresh worker id, ``host:pid:nonce``: orphan recovery on the same host reads the pid back."""
    return f"{HOSTNAME}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(kw_only=True, eq=False)
class OrphanRecovery:
    """Fail the runs of dead workers (and this worker's runs without a task); every ``every`` seconds once run."""

    worker_id: str
    bridge: StreamBridge
    local: Container[str]
    grace_seconds: int
    every: float
    on_promoted: Callable[[str, str], Awaitable[None]]

    async def run(self) -> None:
        """Reconcile every ``every`` seconds until cancelled; a failed pass is logged and retried next period."""
        await repeat_every(self.every, self.reconcile, logger=logger, failure="orphan recovery failed")

    async def reconcile(self) -> list[str]:
        """End running runs that no live task owns; promote what was queued behind them; return the ended ids.

        The run fails with a message saying whose it was; if a rollback was
        requested it is carried out from the rollback point kept on the row,
        and the run ends rolled back.
        """
        failed = []
        for row in await database_sync_to_async(lifecycle.running_runs)():
            if await self._recover(row):
                failed.append(row["run_id"])
        return failed

    async def _recover(self, row: Mapping[str, Any]) -> bool:
        """End one running run if its owner is gone; False if it is owned (or its rollback must be retried)."""
        mine = row["worker_id"] == self.worker_id
        if mine and not self._lost_here(row):
            return False
        if not mine and not self._owner_dead(row["worker_id"], row["lease_expires_at"]):
            return False
        rolled_back = row["cancel_action"] == CancelAction.ROLLBACK
        if rolled_back and not await self._restore(row):
            return False  # retried on the next pass
        message = LOST_MESSAGE if mine else ORPHAN_MESSAGE
        promoted = await database_sync_to_async(lifecycle.run_fail_orphan)(
            run_id=row["run_id"], message=message, thread_id=row["thread_id"]
        )
        await apublish_orphan_end(self.bridge, row["run_id"], ROLLED_BACK if rolled_back else message)
        logger.warning("run %s of lost worker %s ended (%s)", row["run_id"], row["worker_id"], message)
        if promoted:
            await self.on_promoted(promoted, row["thread_id"])
        return True

    def _owner_dead(self, worker_id: str, lease_expires_at: datetime | None) -> bool:
        host, _, rest = worker_id.partition(":")
        pid_text, _, _nonce = rest.partition(":")
        if host == HOSTNAME and pid_text.isdigit():
            pid = int(pid_text)
            # A live pid that is ours but another nonce is this process's
            # previous life (pid reuse after a restart in a container).
            return not _pid_alive(pid) or pid == os.getpid()
        horizon = timezone.now() - timedelta(seconds=self.grace_seconds)
        return lease_expires_at is None or lease_expires_at < horizon

    def _lost_here(self, row: Mapping[str, Any]) -> bool:
        """Tell whether a run this worker claimed has no task here any more.

        A claim commits before its task starts, so only runs claimed more
        than the grace period ago count: the gap is one loop turn.
        """
        started = row["started_at"]
        horizon = timezone.now() - timedelta(seconds=self.grace_seconds)
        return row["run_id"] not in self.local and started is not None and started < horizon

    async def _restore(self, row: Mapping[str, Any]) -> bool:
        """Roll a dead run's thread back to its recorded rollback point; False to retry later."""
        try:
            recorded, context = await database_sync_to_async(lifecycle.run_rollback_point)(run_id=row["run_id"])
            if recorded is None:
                return True  # never captured: the run wrote nothing before it died
            accessor = await astate_accessor(row["assistant_id"])
            # The restored head is sealed as the run would have sealed it.
            with fixed_scope(context):
                point = RollbackPoint.from_json(recorded, accessor.saver.serde)
                async with thread_lock(row["thread_id"]):
                    await arestore(accessor, row["thread_id"], point)
        except Exception:
            logger.exception("run %s: restoring its rollback point failed", row["run_id"])
            return False
        return True


async def apublish_orphan_end(bridge: StreamBridge, run_id: str, message: str) -> None:
    """Publish the end marker of a run ended from outside its task, so its stream's readers stop waiting."""
    end = {"status": "error", "error": message, "error_name": "OrphanedRun", "values": {}}
    try:
        await bridge.publish_end(run_id, end)
    except Exception:
        logger.warning("run %s: could not publish the end marker", run_id, exc_info=True)
