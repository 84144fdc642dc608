"""The PostgreSQL savers' per-saver lock, measured: upstream's savers against ours on one pool.

    .venv/bin/python -m bench.pg_saver [--seconds 5] [--clients 1,8,32] [--quick]

One saver, shared as a server process shares it, on a pool of 10
connections; ``--clients`` callers (coroutines for the async saver, threads
for the sync one) each read the head of a thread of 20 checkpoints, list its
last 10 and write one checkpoint with a pending write, as a run's start and
step do, over and over for ``--seconds`` (after a discarded half-second
warm-up of each). Reported per saver and client
count: operations per second (one read + one listing + one write is three)
and p50/p99 of one operation, and ours ÷ upstream's. PostgreSQL is a
throwaway database next to ``DATABASE_URL``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import connect
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from checkpoints.pg_saver import PooledAsyncPostgresSaver, PooledPostgresSaver

POOL_SIZE = 10
HISTORY = 20
PG_KWARGS = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.pg_saver", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--database-url", default="")
    parser.add_argument("--quick", action="store_true", help="1 s per case: a sanity run")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = 1.0
    args.clients = [int(n) for n in args.clients.split(",")]
    return args


@contextmanager
def throwaway_database(base_url: str):
    import os

    base = base_url or os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"
    name = f"bench_pg_saver_{uuid.uuid4().hex[:8]}"
    admin = urlunsplit(urlsplit(base)._replace(path="/postgres"))
    with connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(base)._replace(path=f"/{name}"))
    finally:
        with connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _config(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def _summary(samples: list[float], seconds: float) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "ops": len(samples) / seconds,
        "p50": statistics.median(ordered) * 1000,
        "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
    }


async def _async_case(url: str, saver_class, clients: int, seconds: float) -> dict[str, float]:
    async with AsyncConnectionPool(url, kwargs=PG_KWARGS, min_size=POOL_SIZE, max_size=POOL_SIZE) as pool:
        saver = saver_class(pool)
        threads = [f"bench-{uuid.uuid4().hex}" for _ in range(clients)]
        for thread_id in threads:
            for step in range(HISTORY):
                await saver.aput(_config(thread_id), empty_checkpoint(), {"step": step}, {})
        samples: list[float] = []
        deadline = time.perf_counter() + seconds

        async def client(thread_id: str) -> None:
            step = HISTORY
            while time.perf_counter() < deadline:
                for operation in ("read", "list", "write"):
                    started = time.perf_counter()
                    if operation == "read":
                        await saver.aget_tuple(_config(thread_id))
                    elif operation == "list":
                        [_ async for _ in saver.alist(_config(thread_id), limit=10)]
                    else:
                        written = await saver.aput(_config(thread_id), empty_checkpoint(), {"step": step}, {})
                        await saver.aput_writes(written, [("messages", step)], str(uuid.uuid4()))
                        step += 1
                    samples.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(client(t) for t in threads))
        return _summary(samples, time.perf_counter() - started)


def _sync_case(url: str, saver_class, clients: int, seconds: float) -> dict[str, float]:
    with ConnectionPool(url, kwargs=PG_KWARGS, min_size=POOL_SIZE, max_size=POOL_SIZE) as pool:
        saver = saver_class(pool)
        threads = [f"bench-{uuid.uuid4().hex}" for _ in range(clients)]
        for thread_id in threads:
            for step in range(HISTORY):
                saver.put(_config(thread_id), empty_checkpoint(), {"step": step}, {})
        samples: list[float] = []
        lock = threading.Lock()
        deadline = time.perf_counter() + seconds

        def client(thread_id: str) -> None:
            step, mine = HISTORY, []
            while time.perf_counter() < deadline:
                for operation in ("read", "list", "write"):
                    started = time.perf_counter()
                    if operation == "read":
                        saver.get_tuple(_config(thread_id))
                    elif operation == "list":
                        list(saver.list(_config(thread_id), limit=10))
                    else:
                        written = saver.put(_config(thread_id), empty_checkpoint(), {"step": step}, {})
                        saver.put_writes(written, [("messages", step)], str(uuid.uuid4()))
                        step += 1
                    mine.append(time.perf_counter() - started)
            with lock:
                samples.extend(mine)

        workers = [threading.Thread(target=client, args=(t,)) for t in threads]
        started = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        return _summary(samples, time.perf_counter() - started)


CASES: dict[str, tuple[type, type, Callable]] = {
    "async (runs, reads on the loop)": (AsyncPostgresSaver, PooledAsyncPostgresSaver, _async_case),
    "sync (request threads)": (PostgresSaver, PooledPostgresSaver, _sync_case),
}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with throwaway_database(args.database_url) as url:
        with connect(url, autocommit=True) as conn:
            PostgresSaver(conn).setup()
        print(f"PostgreSQL savers on a pool of {POOL_SIZE}, {args.seconds:g} s per case; ops = read, list 10, write")
        print(
            f"{'saver':34} {'clients':>7} {'upstream ops/s':>15} {'ours ops/s':>11} {'ratio':>6} {'p99 up':>8} {'p99 ours':>9}"
        )
        for label, (upstream, ours, case) in CASES.items():
            for clients in args.clients:
                results = {}
                # Alternating, after a discarded warm-up of each: neither side pays for a cold database.
                for saver_class, seconds in (
                    (upstream, 0.5),
                    (ours, 0.5),
                    (upstream, args.seconds),
                    (ours, args.seconds),
                ):
                    if case is _async_case:
                        results[saver_class] = asyncio.run(case(url, saver_class, clients, seconds))
                    else:
                        results[saver_class] = case(url, saver_class, clients, seconds)
                theirs, mine = results[upstream], results[ours]
                print(
                    f"{label:34} {clients:>7} {theirs['ops']:>15.0f} {mine['ops']:>11.0f} "
                    f"{mine['ops'] / theirs['ops']:>5.2f}x {theirs['p99']:>6.1f}ms {mine['p99']:>7.1f}ms"
                )


if __name__ == "__main__":
    main()
