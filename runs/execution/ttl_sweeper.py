"""The TTL sweep on the worker's poll: expired threads deleted or pruned, a bounded batch a pass.

The rules (which threads, which strategy, one process winning each thread)
are ``threads.ttl_sweep``'s; this runs them off the event loop.
"""

from __future__ import annotations

from datetime import datetime

from channels.db import database_sync_to_async

from threads.ttl_sweep import SweepReport, threads_sweep_expired


async def asweep_expired_threads(*, now: datetime | None = None) -> SweepReport:
    """Delete or prune a bounded batch of threads whose TTL ran out; return what was done."""
    return await database_sync_to_async(threads_sweep_expired)(now=now)
