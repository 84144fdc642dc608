"""Per-run costs of ``/runs/wait``, counted: ours against LangGraph alone running the same graph.

    .venv/bin/python -m bench.run_costs [--runs 40] [--backend sqlite|postgres] [--profile 25]

One process, the real ASGI app in process (httpx's ASGI transport, an API
key, the run executed by the process's worker), ``--runs`` waits on five
existing threads of the demo graph after a warm-up. Counted per run:

- Django queries, by statement and table (an execute wrapper on every connection);
- thread hops (``sync_to_async`` calls, by the function they carry), the
  event loop waiting on the database thread;
- LangGraph saver calls (``aget_tuple``, ``aput``, ``aput_writes``, ``alist``);
- wall time, and CPU time of the whole process (every thread, the in-process
  httpx client included), per run.

The floor is LangGraph alone: the same demo graph compiled with the same
async saver class on its own database, ``ainvoke`` on five existing threads,
no HTTP. The table prints both and the ratio; ``--profile N`` adds cProfile's
top N functions by own time for our side (the event loop thread only).
PostgreSQL runs on a throwaway database next to ``DATABASE_URL``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import cProfile
import io
import os
import pstats
import re
import sys
import tempfile
import time
from pathlib import Path

INPUT = {"messages": [{"role": "user", "content": "benchmark turn"}]}
SAVER_METHODS = ("aget_tuple", "aput", "aput_writes", "alist")
THREADS = 5


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run_costs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--profile", type=int, default=0, help="print cProfile's top N functions (our side)")
    parser.add_argument("--quick", action="store_true", help="10 runs: a sanity run")
    parser.add_argument(
        "--config-yaml", default="", help="more config.yaml lines, e.g. 'thread_stream: {flush_interval_ms: 5}'"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.runs = 10
    return args


class Counts:
    """What one side did, summed over the measured runs."""

    def __init__(self) -> None:
        self.queries: collections.Counter[str] = collections.Counter()
        self.hops: collections.Counter[str] = collections.Counter()
        self.saver: collections.Counter[str] = collections.Counter()
        self.query_seconds: collections.Counter[str] = collections.Counter()
        self.hop_seconds: collections.Counter[str] = collections.Counter()
        self.saver_seconds: collections.Counter[str] = collections.Counter()
        self.seconds = 0.0
        self.cpu_seconds = 0.0  # the whole process, every thread: steadier than wall time on a busy machine
        self.active = False


def _statement(sql: str) -> str:
    verb = re.match(r"\s*(\w+)", sql)
    table = re.search(r'(?:FROM|INTO|UPDATE)\s+"?(\w+)"?', sql, re.I)
    return f"{verb.group(1).upper() if verb else '?'} {table.group(1) if table else ''}".strip()


def _instrument(counts: Counts) -> None:
    """Count queries, hops and saver calls while ``counts.active``."""
    import asgiref.sync
    from django.db import connections
    from django.db.backends.signals import connection_created

    def wrapper(execute, sql, params, many, context):
        if not counts.active:
            return execute(sql, params, many, context)
        statement = _statement(sql)
        counts.queries[statement] += 1
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            counts.query_seconds[statement] += time.perf_counter() - started

    def add(connection, **_):
        if wrapper not in connection.execute_wrappers:  # Django reconnects the same wrapper object
            connection.execute_wrappers.append(wrapper)

    connection_created.connect(lambda sender, connection, **kw: add(connection), weak=False)
    for connection in connections.all():
        add(connection)

    original_call = asgiref.sync.SyncToAsync.__call__

    async def hop(self, *args, **kwargs):
        if not counts.active:
            return await original_call(self, *args, **kwargs)
        name = getattr(self.func, "__qualname__", repr(self.func))
        return await _counted(counts.hops, counts.hop_seconds, name, original_call(self, *args, **kwargs))

    asgiref.sync.SyncToAsync.__call__ = hop
    _count_saver_calls(counts)


async def _counted(calls: collections.Counter, seconds: collections.Counter, name: str, awaitable):
    """Await ``awaitable``, counting the call and the time it was awaited under ``name``."""
    calls[name] += 1
    started = time.perf_counter()
    try:
        return await awaitable
    finally:
        seconds[name] += time.perf_counter() - started


def _count_saver_calls(counts: Counts) -> None:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    classes = [AsyncSqliteSaver]
    with contextlib.suppress(ImportError):
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        classes.append(AsyncPostgresSaver)
    for cls in classes:
        for name in SAVER_METHODS:
            original = getattr(cls, name)

            def counted(original=original, name=name):
                async def call(self, *args, **kwargs):
                    if not counts.active:
                        return await original(self, *args, **kwargs)
                    return await _counted(counts.saver, counts.saver_seconds, name, original(self, *args, **kwargs))

                return call

            setattr(cls, name, counted())


def api_key() -> str:
    from django.core.management import call_command

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        call_command("create_api_key", "bench")
    return out.getvalue().strip().splitlines()[-1]


async def ours(runs: int, counts: Counts, profile: cProfile.Profile | None, key: str) -> None:
    import httpx

    from deerflow_site import lifecycle
    from deerflow_site.asgi import application

    await lifecycle.startup()
    transport = httpx.ASGITransport(app=application)
    body = {"assistant_id": "lead_agent", "input": INPUT}
    try:
        async with httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1/api", headers={"x-api-key": key}, timeout=60
        ) as http:
            threads = []
            for _ in range(THREADS):  # warm-up: one run per thread
                thread_id = (await http.post("/threads", json={})).json()["thread_id"]
                assert (await http.post(f"/threads/{thread_id}/runs/wait", json=body)).status_code == 200
                threads.append(thread_id)
            counts.active = True
            if profile:
                profile.enable()
            started, cpu = time.perf_counter(), time.process_time()
            for i in range(runs):
                answer = await http.post(f"/threads/{threads[i % THREADS]}/runs/wait", json=body)
                assert answer.status_code == 200, answer.text
            counts.seconds = time.perf_counter() - started
            counts.cpu_seconds = time.process_time() - cpu
            if profile:
                profile.disable()
            await asyncio.sleep(0.2)  # the journal's trailing flush belongs to the runs
            counts.active = False
    finally:
        await lifecycle.shutdown()


async def langgraph_alone(runs: int, counts: Counts, backend: str, workdir: Path, database_url: str | None) -> None:
    from runs.demo_agent import builder

    if backend == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        manager = AsyncSqliteSaver.from_conn_string(str(workdir / "floor.db"))
    else:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        manager = AsyncPostgresSaver.from_conn_string(database_url)
    async with manager as saver:
        await saver.setup()
        graph = builder.compile(checkpointer=saver)
        configs = [{"configurable": {"thread_id": f"floor-{i}"}} for i in range(THREADS)]
        for config in configs:
            await graph.ainvoke(INPUT, config)
        counts.active = True
        started, cpu = time.perf_counter(), time.process_time()
        for i in range(runs):
            await graph.ainvoke(INPUT, configs[i % THREADS])
        counts.seconds = time.perf_counter() - started
        counts.cpu_seconds = time.process_time() - cpu
        counts.active = False


def _per_run(counter: collections.Counter, runs: int) -> float:
    return sum(counter.values()) / runs


def report(args, mine: Counts, floor: Counts, profile: cProfile.Profile | None) -> None:
    n = args.runs
    print(f"\n== {args.backend}: per run of /runs/wait on an existing thread ({n} runs, in process)")
    print(f"{'':28}{'ours':>10}{'LangGraph':>12}{'ratio':>8}")
    rows = [
        ("wall ms", mine.seconds / n * 1000, floor.seconds / n * 1000),
        ("CPU ms (all threads)", mine.cpu_seconds / n * 1000, floor.cpu_seconds / n * 1000),
        ("saver calls", _per_run(mine.saver, n), _per_run(floor.saver, n)),
        ("Django queries", _per_run(mine.queries, n), 0.0),
        ("thread hops", _per_run(mine.hops, n), 0.0),
    ]
    for name, value, base in rows:
        ratio = f"{value / base:.2f}" if base else "–"
        print(f"{name:28}{value:10.1f}{base:12.1f}{ratio:>8}")
    print("\nsaver calls per run, ours / LangGraph (count, then ms, awaited from the caller):")
    for name in SAVER_METHODS:
        if mine.saver[name] or floor.saver[name]:
            print(
                f"  {name:26}{mine.saver[name] / n:6.2f}{floor.saver[name] / n:8.2f}"
                f"{mine.saver_seconds[name] / n * 1000:9.2f}{floor.saver_seconds[name] / n * 1000:8.2f}"
            )
    print("\nDjango queries per run (count, ms in the driver: SQLite's lock waits show under BEGIN):")
    for name, count in mine.queries.most_common():
        print(f"  {count / n:6.2f}{mine.query_seconds[name] / n * 1000:8.2f}  {name}")
    print("\nthread hops per run (count, ms awaited; the hop's function included):")
    for name, count in mine.hops.most_common():
        print(f"  {count / n:6.2f}{mine.hop_seconds[name] / n * 1000:8.2f}  {name}")
    if profile:
        print(f"\ncProfile, our side, top {args.profile} by own time (event loop thread):")
        stream = io.StringIO()
        pstats.Stats(profile, stream=stream).sort_stats("tottime").print_stats(args.profile)
        print(stream.getvalue())


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench-run-costs-"))
    with contextlib.ExitStack() as stack:
        database_url = None
        if args.backend == "postgres":
            from tests.live.server import fresh_postgres_database

            base = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
            database_url = stack.enter_context(fresh_postgres_database(base, migrated=False))
            os.environ["DATABASE_URL"] = database_url
        else:
            os.environ.pop("DATABASE_URL", None)
        config = workdir / "config.yaml"
        config.write_text(
            f"database: {{backend: sqlite, sqlite_dir: {workdir}/data}}\nauth: {{bootstrap_admin: false}}\n"
            + args.config_yaml
        )
        os.environ["DEERFLOW_CONFIG"] = str(config)
        os.environ["DEERFLOW_VAR_DIR"] = str(workdir / "var")
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deerflow_site.settings")
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        mine, floor = Counts(), Counts()
        _instrument(mine)
        profile = cProfile.Profile() if args.profile else None
        asyncio.run(ours(args.runs, mine, profile, api_key()))
        _count_saver_calls(floor)
        floor_url = None
        if database_url:
            floor_url = stack.enter_context(fresh_postgres_database(base, migrated=False))
        asyncio.run(langgraph_alone(args.runs, floor, args.backend, workdir, floor_url))
        report(args, mine, floor, profile)


if __name__ == "__main__":
    main()
