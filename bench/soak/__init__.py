"""The fault soak: mixed traffic across two servers and a run worker on PostgreSQL and Redis while
processes are killed and restarted, Redis restarts and the database is cut; then the invariants.

``python -m bench.soak`` runs it and prints the table (``bench/README.md``);
``soak()`` is what the test calls at CI size.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.soak.cluster import FAULT_KINDS, Cluster, Fault, FaultLog
from bench.soak.invariants import Check, check_all
from bench.soak.traffic import Budget, Client, Ledger, create_crons, disable_crons

# How long the runs may take to end once traffic stops: slow replies queued behind each other, then
# leases of orphaned runs (3 s) and a few claim polls.
SETTLE_SECONDS = 90
# The longest the traffic waits past --seconds for every fault kind to have been injected once.
CYCLE_GRACE_SECONDS = 90
RUN_ERRORS = "SELECT left(error, 100), count(*) FROM runs_run WHERE status = 'error' GROUP BY 1 ORDER BY 2 DESC"


@dataclass
class Result:
    seconds: float
    mode: str
    ledger: Ledger
    faults: list[Fault]
    checks: list[Check] = field(default_factory=list)
    settled_in: float = 0.0
    run_statuses: list[str] = field(default_factory=list)  # every run's final status
    run_errors: dict[str, int] = field(default_factory=dict)  # the errors runs ended with, and how often

    @property
    def violations(self) -> list[str]:
        broken = [f"fault {f.kind} on {f.target}: {f.error}" for f in self.faults if f.error]
        return broken + [v for check in self.checks for v in check.violations]


async def _faults(cluster: Cluster, log: FaultLog, rng: random.Random, stop: asyncio.Event, cycled: asyncio.Event):
    """Inject faults one after another, every kind once per shuffled round, until ``stop``."""
    order: list[str] = []
    while not stop.is_set():
        try:  # a pause between faults (the schedule), cut short when the traffic ends
            await asyncio.wait_for(stop.wait(), rng.uniform(2, 4))
            return
        except TimeoutError:
            pass
        if not order:
            order = rng.sample(FAULT_KINDS, len(FAULT_KINDS))
        await asyncio.to_thread(cluster.inject, order.pop(), rng, log)
        if {f.kind for f in log.faults} >= set(FAULT_KINDS):
            cycled.set()


async def _drive(cluster: Cluster, ledger: Ledger, log: FaultLog, *, seconds, requests, clients, crons, seed) -> float:
    """Traffic and faults until ``seconds`` passed and every fault kind was injected (or the request budget ran out)."""
    await create_crons(cluster.urls[0], cluster.key, ledger, crons)
    stop, cycled = asyncio.Event(), asyncio.Event()
    budget = Budget(requests)
    users = [Client(i, cluster.urls, cluster.key, ledger, log, seed) for i in range(clients)]
    started = time.monotonic()
    faults = asyncio.create_task(_faults(cluster, log, random.Random(f"{seed}:faults"), stop, cycled))
    loops = [asyncio.create_task(user.loop(stop, budget)) for user in users]
    deadline = started + seconds
    while not all(loop.done() for loop in loops):
        now = time.monotonic()
        if now >= deadline and (cycled.is_set() or now >= deadline + CYCLE_GRACE_SECONDS):
            break
        await asyncio.sleep(0.2)
    stop.set()
    await asyncio.gather(*loops)
    elapsed = time.monotonic() - started
    await faults  # the fault in progress is undone: every process is back
    for user in users:
        await user.close()
    await disable_crons(cluster.urls[0], cluster.key, ledger)
    return elapsed


def soak(
    *,
    base_url: str,
    seconds: float = 60,
    requests: int | None = None,
    clients: int = 6,
    crons: int = 2,
    seed: int = 1,
    mode: str = "full",
    workdir: Path | None = None,
) -> Result:
    """Run the whole soak on a throwaway database next to ``base_url``'s; return what happened."""
    with tempfile.TemporaryDirectory(prefix="soak-") as scratch:
        folder = workdir or Path(scratch)
        ledger, log = Ledger(), FaultLog()
        with Cluster(folder, base_url, mode=mode) as cluster:
            elapsed = asyncio.run(
                _drive(
                    cluster, ledger, log, seconds=seconds, requests=requests, clients=clients, crons=crons, seed=seed
                )
            )
            with cluster.connect() as conn:
                settled_in, checks = check_all(conn, cluster.urls[0], cluster.key, ledger, SETTLE_SECONDS)
                statuses = [status for (status,) in conn.execute("SELECT status FROM runs_run")]
                errors = dict(conn.execute(RUN_ERRORS).fetchall())
        return Result(elapsed, mode, ledger, log.faults, checks, settled_in, statuses, errors)
