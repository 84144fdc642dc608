import asyncio
import signal

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = (
        "Execute runs admitted by any server process: claim pending runs from the database "
        "(a conditional UPDATE decides each claim) until SIGTERM/SIGINT."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--capacity", type=int, default=None, help="Runs executed at once (default: runs.capacity)."
        )

    def handle(self, *args, capacity: int | None, **options):
        asyncio.run(self._serve(capacity))

    async def _serve(self, capacity: int | None) -> None:
        from django.conf import settings

        from deerflow_site import lifecycle
        from runs.execution.runtime import get_worker

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
        self.stdout.write("stopping: running runs end as shut down")
        await lifecycle.shutdown()
