"""The runs executing on this process's loop: each in a task of its own, found by run id to cancel it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.db import close_old_connections

from core.bridge import StreamBridge
from core.custom_encryption import fixed_scope
from core.sync_threads import own_sync_thread
from runs.execution.executor import SHUTDOWN, RunExecution
from runs.execution.tasks import spawn
from runs.models import Run
from threads.models import ThreadMeta
from threads.services import thread_delete

logger = logging.getLogger(__name__)

# Called with (run_id, thread_id) of the run a finished run promoted from its thread's queue.
Promote = Callable[[str, str], Awaitable[None]]


class LocalRuns:
    """The runs this worker executes now, by run id; a run leaves once its task ends."""

    def __init__(self, *, bridge: StreamBridge, worker_id: str, on_promoted: Promote) -> None:
        self.bridge = bridge
        self.worker_id = worker_id
        self._on_promoted = on_promoted
        self.tasks: dict[str, asyncio.Task] = {}
        self._executions: dict[str, RunExecution] = {}

    def __len__(self) -> int:
        return len(self.tasks)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self.tasks

    def ids(self) -> list[str]:
        return list(self.tasks)

    def start(self, run: Run) -> None:
        """Execute a run this worker claimed, in a task of its own (call on the loop)."""
        execution = RunExecution(run, bridge=self.bridge, worker_id=self.worker_id)
        run_id = run.run_id
        self._executions[run_id] = execution
        self.tasks[run_id] = task = spawn(self._execute(execution), f"run-{run_id}")
        task.add_done_callback(lambda _t: self._forget(run_id))

    def _forget(self, run_id: str) -> None:
        self.tasks.pop(run_id, None)
        self._executions.pop(run_id, None)

    async def _execute(self, execution: RunExecution) -> None:
        # One ORM thread per run (reused, core.sync_threads), and at
        # the end its pooled connection handed back: 40 runs without this
        # exhausted an 8-connection pool (spike §5). SQLite's stays with the
        # thread unless it was left unusable.
        async with own_sync_thread():
            try:
                # What the run writes is sealed with the context of the request that started it.
                with fixed_scope(execution.run.encryption_context):
                    await execution.execute()
                if execution.promoted_run_id:
                    await self._on_promoted(execution.promoted_run_id, execution.run.thread_id)
                if execution.run.kwargs.get("on_completion") == "delete":
                    await database_sync_to_async(_delete_finished_thread)(execution.run.thread_id)
            except Exception:
                logger.exception("run %s: executor crashed", execution.run.run_id)
            finally:
                await sync_to_async(close_old_connections)()

    def cancel(self, run_id: str, action: str) -> bool:
        """Cancel a run executing here with ``action``; False if it is not here.

        The first action wins (``RunExecution.cancel``): the same request also
        arrives by the channel layer and by every lease renewal, and a second
        cancel landing while the run restores its rollback point would cut the
        restore short.
        """
        task = self.tasks.get(run_id)
        execution = self._executions.get(run_id)
        if task is None or execution is None or task.done():
            return False
        execution.cancel(action)
        return True

    async def shut_down(self, *, within: float) -> None:
        """Cancel every run here as shut down and give them ``within`` seconds to record their end."""
        for run_id in self.ids():
            self.cancel(run_id, SHUTDOWN)
        if self.tasks:
            await asyncio.wait(list(self.tasks.values()), timeout=within)


def _delete_finished_thread(thread_id: str) -> None:
    """Delete a stateless run's thread once it finished (``on_completion: delete``).

    Waiters already have the outcome: it travels in the stream's end marker.
    """
    thread = ThreadMeta.objects.filter(pk=thread_id).first()
    if thread is not None:
        thread_delete(thread=thread)
