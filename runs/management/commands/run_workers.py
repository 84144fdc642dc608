import asyncio
import logging
import signal

from django.core.management.base import BaseCommand

logger = logging.getLogger(__name__)

# Tasks still alive after the runtime closed (a dependency's, or one the stop abandoned) get this long.
LEFTOVER_TASKS_SECONDS = 1.0


class Command(BaseCommand):
    help = (
        "Execute runs admitted by any server process: claim pending runs from the database "
        "(a conditional UPDATE decides each claim) until SIGTERM/SIGINT. A stop ends within "
        "runs.execution.worker.STOP_DEADLINE_SECONDS (25 s): past it the runs still held are "
        "failed as shut down and the process exits with status 1."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--capacity", type=int, default=None, help="Runs executed at once (default: runs.capacity)."
        )

    def handle(self, *args, capacity: int | None, **options):
        # Not asyncio.run: its teardown cancels the tasks left and waits for
        # them without a bound, and one that ignores its cancel (see
        # runs.execution.worker.stop_tasks) kept the process alive.
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve(capacity))
        finally:
            asyncio.set_event_loop(None)
            loop.close()

    async def _serve(self, capacity: int | None) -> None:
        # Every manage.py command imports this module: the runtime loads only when workers run.
        from django.conf import settings

        from deerflow_site import lifecycle
        from runs.execution.runtime import get_worker
        from runs.execution.worker import STOP_DEADLINE_SECONDS

        if capacity is not None:
            settings.DEERFLOW_CONFIG.runs.capacity = capacity
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await lifecycle.startup(claim=True)
        worker = get_worker()
        self.stdout.write(f"run worker {worker.worker_id} claiming runs (capacity {worker.capacity})")
        self.stdout.flush()
        await stop.wait()
        lifecycle.arm_stop_deadline(STOP_DEADLINE_SECONDS, worker_id=worker.worker_id)
        self.stdout.write("stopping: running runs end as shut down")
        self.stdout.flush()
        await lifecycle.shutdown()
        await _end_leftover_tasks()
        self.stdout.write("stopped")
        self.stdout.flush()


async def _end_leftover_tasks() -> None:
    """Cancel the tasks still alive, wait a bounded while, and name those abandoned (the loop closes without them)."""
    # Loaded with the runtime, not when manage.py lists its commands.
    from runs.execution.worker import stop_tasks

    left = asyncio.all_tasks() - {asyncio.current_task()}
    for task in await stop_tasks(left, within=LEFTOVER_TASKS_SECONDS):
        logger.warning("stopped: task %s did not end when cancelled; abandoned", task.get_name())
