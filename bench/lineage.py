"""The console's lineage page, measured: render time for threads of 100, 1,000 and 5,000 checkpoints.

    .venv/bin/python -m bench.lineage [--quick] [--sizes 100,1000,5000] [--backends sqlite,postgres]
                                      [--repetitions 7] [--output results.json]

For each backend, one process on a fresh database (SQLite in a temporary
folder; PostgreSQL in a throwaway database next to ``DATABASE_URL``, default
postgresql://postgres@127.0.0.1:5432/test, dropped afterwards), frozen in
delta mode (cadence 10: long threads are delta threads), writes one thread
per size with the real demo graph (~500-character turns, three checkpoints
each) plus an abandoned fork every 100 checkpoints, so the drawing has lanes.
It then times, through Django's whole request stack (test client, a staff
session), the first view and then the median of ``--repetitions`` after
one warm-up of each:

- ``cold``: the first ``GET …/lineage/`` of the thread in the process (on
  SQLite every row is decoded then, snapshots included; later views reuse
  the decoded rows, see ``console.lineage.lineage``);
- ``read``: ``thread_lineage_get`` alone (the bulk metadata read, the
  protection planner and the lane layout);
- ``page``: ``GET …/lineage/`` (collapsed stretches, page 1);
- ``expanded``: ``GET …/lineage/?collapse=0`` (50 nodes drawn);
- ``last page``: the expanded view's last page (the root end);

and counts the page's queries on Django's connection (cold / warm). Prints
one table per backend; the raw numbers go to bench/results/lineage-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.checkpoints.__main__ import case_database, postgres_available, postgres_base_url
from bench.checkpoints.workload import human_text

ROOT = Path(__file__).resolve().parents[1]
CADENCE = 10
FORK_EVERY = 100
TARGET_MS = 1000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.lineage", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="sizes 100 and 1,000, three repetitions")
    parser.add_argument("--sizes", default="100,1000,5000", help="checkpoints per thread (comma-separated)")
    parser.add_argument("--backends", default="sqlite,postgres", help="sqlite, postgres or both")
    parser.add_argument("--repetitions", type=int, default=7, help="timed requests per measurement (median)")
    parser.add_argument("--output", help="where to write the raw JSON (default bench/results/)")
    parser.add_argument("--child", nargs=2, metavar=("SPEC", "RESULT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.repetitions = "100,1000", 3
    args.sizes = [int(n) for n in str(args.sizes).split(",") if n]
    args.backends = [b for b in args.backends.split(",") if b]
    return args


# -- the child process: one backend, one fresh database ---------------------------------


def _seed(thread_id: str, size: int) -> dict[str, Any]:
    """Write turns until the thread has ``size`` checkpoints, forking every FORK_EVERY."""
    from langchain_core.messages import HumanMessage

    from checkpoints.accessor import state_accessor

    acc = state_accessor("lead_agent")
    count, forks, turn, started = 0, 0, 0, time.perf_counter()
    while count < size:
        checkpoint_id = None
        if count and count // FORK_EVERY > forks:
            # Resume two turns back with a raw invoke: LangGraph forks, the main line then goes on.
            checkpoint_id = acc.history(thread_id, limit=7)[-1].config["configurable"]["checkpoint_id"]
            forks += 1
        acc.graph.invoke({"messages": [HumanMessage(human_text(turn))]}, acc.config(thread_id, checkpoint_id))
        if checkpoint_id:
            head = acc.history(thread_id, limit=4)[-1].config["configurable"]["checkpoint_id"]
            acc.graph.invoke({"messages": [HumanMessage(human_text(turn + 1))]}, acc.config(thread_id, head))
            turn += 1
        turn += 1
        count = _count(thread_id)
    return {"checkpoints": count, "forks": forks, "turns": turn, "write_seconds": time.perf_counter() - started}


def _count(thread_id: str) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM checkpoints WHERE thread_id = %s", [thread_id])
        return cursor.fetchone()[0]


def _median_ms(call, repetitions: int) -> float:
    call()
    samples = []
    for _ in range(repetitions):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def _measure(client, thread_id: str, repetitions: int) -> dict[str, Any]:
    from django.db import connection
    from django.urls import reverse

    from console.lineage import lineage

    url = reverse("admin:checkpoints_lineage", args=[thread_id])
    queries: list[str] = []

    def counted(execute, sql, params, many, context):
        queries.append(sql)
        return execute(sql, params, many, context)

    def get(**params):
        response = client.get(url, params)
        assert response.status_code == 200, response.status_code
        return response

    lineage.row_cache.clear()
    with connection.execute_wrapper(counted):
        started = time.perf_counter()
        body = get().content.decode()
        cold_ms = (time.perf_counter() - started) * 1000
    cold_queries = len(queries)
    queries.clear()
    with connection.execute_wrapper(counted):
        get()
    last = lineage.thread_lineage_get(thread_id=thread_id, collapsed=False).pages
    return {
        "cold_page_ms": cold_ms,
        "read_ms": _median_ms(lambda: lineage.thread_lineage_get(thread_id=thread_id), repetitions),
        "page_ms": _median_ms(get, repetitions),
        "expanded_ms": _median_ms(lambda: get(collapse=0), repetitions),
        "last_page_ms": _median_ms(lambda: get(collapse=0, page=last), repetitions),
        "queries_cold": cold_queries,
        "queries": len(queries),
        "pages_expanded": last,
        "page_bytes": len(body),
    }


def child(spec_path: str, result_path: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deerflow_site.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from threads.models import ThreadMeta

    call_command("migrate", interactive=False, verbosity=0)
    spec = json.loads(Path(spec_path).read_text())
    staff = get_user_model().objects.create_superuser("bench-staff", password="bench-staff-pw")
    client = Client()
    client.force_login(staff)
    results = {}
    for size in spec["sizes"]:
        thread = ThreadMeta.objects.create(thread_id=f"bench-lineage-{size}", owner=staff)
        seeded = _seed(thread.thread_id, size)
        results[str(size)] = {**seeded, **_measure(client, thread.thread_id, spec["repetitions"])}
    Path(result_path).write_text(json.dumps(results))


# -- the parent: one child per backend, then the table ----------------------------------


def run_backend(backend: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    workdir = root / backend
    workdir.mkdir(parents=True)
    with case_database(backend, workdir) as (database, env_extra):
        config = {
            "database": {
                **database,
                "checkpoint_channel_mode": "delta",
                "checkpoint_delta": {"snapshot_frequency": CADENCE},
            }
        }
        (workdir / "config.yaml").write_text(yaml.safe_dump(config))
        (workdir / "spec.json").write_text(json.dumps({"sizes": args.sizes, "repetitions": args.repetitions}))
        env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
        env.update(DEERFLOW_CONFIG=str(workdir / "config.yaml"), DEERFLOW_VAR_DIR=str(workdir / "var"), **env_extra)
        env.pop("DJANGO_DEBUG", None)
        command = [sys.executable, "-m", "bench.lineage", "--child", str(workdir / "spec.json"), str(workdir / "out")]
        completed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        if completed.returncode:
            raise RuntimeError(f"{backend} failed:\n{completed.stdout[-2000:]}\n{completed.stderr[-4000:]}")
        return json.loads((workdir / "out").read_text())


def print_report(backend: str, result: dict[str, Any]) -> None:
    print(f"\n== {backend}: delta mode, cadence {CADENCE}, a fork every {FORK_EVERY} checkpoints (median ms)")
    print(
        f"{'checkpoints':>11} {'forks':>6} {'cold':>8} {'read':>8} {'page':>8} {'expanded':>9} {'last page':>10} "
        f"{'queries':>8} {'pages':>6}"
    )
    for row in result.values():
        print(
            f"{row['checkpoints']:>11,} {row['forks']:>6} {row['cold_page_ms']:>8.1f} {row['read_ms']:>8.1f} "
            f"{row['page_ms']:>8.1f} {row['expanded_ms']:>9.1f} {row['last_page_ms']:>10.1f} "
            f"{row['queries_cold']:>3} / {row['queries']:<3} {row['pages_expanded']:>6}"
        )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    backends = list(args.backends)
    notes = []
    if "postgres" in backends and (reason := postgres_available(postgres_base_url())):
        backends.remove("postgres")
        notes.append(f"PostgreSQL skipped: {reason} (set DATABASE_URL)")
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-lineage-") as tmp:
        for backend in backends:
            started = time.perf_counter()
            print(f"lineage bench: {backend}, sizes {args.sizes} …", end="", flush=True)
            results[backend] = run_backend(backend, args, Path(tmp))
            print(f" {time.perf_counter() - started:.0f} s", flush=True)
    for backend, result in results.items():
        print_report(backend, result)
    slow = [
        f"{backend} {size}: {row['page_ms']:.0f} ms"
        for backend, result in results.items()
        for size, row in result.items()
        if row["page_ms"] >= TARGET_MS
    ]
    print(f"\ntarget: every page under {TARGET_MS} ms — {'missed: ' + ', '.join(slow) if slow else 'met'}")
    for note in notes:
        print(f"note: {note}")
    output = Path(args.output) if args.output else ROOT / "bench" / "results" / f"lineage-{int(time.time())}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(
        json.dumps({"args": {k: v for k, v in vars(args).items() if k != "child"}, "results": results}, indent=1)
    )
    print(f"raw numbers: {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
