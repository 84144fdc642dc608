"""Load: N concurrent langgraph-sdk clients against 1 and 2 server processes plus a run worker.

    .venv/bin/python -m bench.load [--clients 8] [--seconds 30 | --ops N] [--backends sqlite,postgres]
                                   [--processes 1,2] [--rounds 3] [--streams 1000] [--execute server|worker]
                                   [--quick]

Per backend, every process count runs side by side, each on its own fresh
database (a SQLite file, or a PostgreSQL database ``load_<random>`` dropped
afterwards) with the Redis stream bridge and channel layer
(``bench/load/cluster.py`` says why). Each phase is split into ``--rounds``
that alternate between the configurations (1, 2, 2, 1, 1, 2, …): on a
machine shared with other jobs the load drifts by the minute, and a
comparison measured minutes apart measured the drift. The same seed gives
every configuration the same clients and the same sequence of operations.
The phases:

1. mix: ``--clients`` SDK clients in this one process, spread round-robin over
   the servers, loop a seeded mix of runs.wait, runs.stream (values and
   messages-tuple), the protocol-v2 thread stream over SSE, get_state and
   get_history(limit=10) (``bench/load/workload.py``);
2. waits only, with 1 client and with ``--clients`` clients;
3. resources: ``--streams`` streams against the first server (4 at a time),
   sampling RSS and open fds of every server and the worker at 0, ¼, ½, ¾
   and all of them.

CPU seconds of every process (servers, worker, this driver, Redis, the
database's PostgreSQL backends) are read from /proc around each phase.
Prints one table per configuration, the 2-process/1-process ratios and the
resource table; the raw samples go to bench/results/load-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

from bench.load.cluster import Cluster, machine_busy_seconds, open_fds, rss_kib, running_cluster
from bench.load.report import print_config, print_resources, print_summary
from bench.load.workload import MIX, LoadClient, Samples, drive, drive_streams, human

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
STREAM_CONCURRENCY = 4
SAMPLE_POINTS = 4


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--seconds", type=float, default=None, help="length of each phase (default 30; 20 for waits)")
    budget.add_argument("--ops", type=int, default=None, help="operations per phase (shared out among the clients)")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--processes", default="1,2", help="server processes per configuration")
    parser.add_argument("--streams", type=int, default=1000, help="streams of the resource check")
    parser.add_argument(
        "--execute",
        choices=("server", "worker"),
        default="server",
        help="who executes runs: the servers that admit them (default) or only the run worker",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--rounds", type=int, default=3, help="each phase is split into rounds that alternate the process counts"
    )
    parser.add_argument("--quick", action="store_true", help="4 s phases and 100 streams: a sanity run")
    parser.add_argument("--postgres-url", default=os.environ.get("DATABASE_URL") or DEFAULT_POSTGRES_URL)
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL,
        help="the Redis database the stream bridge and channel layer use (streams expire after 15 min)",
    )
    parser.add_argument("--output", help="where to write the raw JSON (default bench/results/)")
    args = parser.parse_args(argv)
    args.backends = [b for b in args.backends.split(",") if b]
    args.processes = [int(p) for p in args.processes.split(",") if p]
    if args.quick:
        args.seconds, args.streams = 4.0, min(args.streams, 100)
    if args.ops is None:
        args.mix_seconds = args.seconds or 30.0
        args.wait_seconds = args.seconds or 20.0
    else:
        args.mix_seconds = args.wait_seconds = None
    return args


async def measure_phase(cluster: Cluster, clients: list[LoadClient], mix: dict, seconds, ops) -> dict:
    before, driver, machine = cluster.cpu_snapshot(), time.process_time(), machine_busy_seconds()
    samples, wall = await drive(clients, mix=mix, seconds=seconds, ops=ops)
    after = cluster.cpu_snapshot()
    cpu = {role: after[role] - before.get(role, 0.0) for role in after}
    cpu["driver"] = time.process_time() - driver
    busy, total = (b - a for a, b in zip(machine, machine_busy_seconds(), strict=True))
    return {
        "wall_seconds": wall,
        "latencies_ms": {op: [s * 1000 for s in values] for op, values in samples.latencies.items()},
        "errors": {op: dict(counter) for op, counter in samples.errors.items()},
        "cpu_seconds": cpu,
        "machine_busy": busy / total if total else 0.0,
        "loadavg": os.getloadavg()[0],
    }


async def measure_resources(cluster: Cluster, total: int) -> dict:
    """Drive ``total`` streams against server0 and sample every server's and the worker's RSS and fds."""
    pids = {role: pid for role, pid in cluster.pids.items() if role != "redis"}
    marks = {round(total * k / SAMPLE_POINTS) for k in range(SAMPLE_POINTS + 1)}
    samples: dict[str, list[dict]] = {role: [] for role in pids}

    def sample(done: int) -> None:
        if done in marks:
            marks.discard(done)
            for role, pid in pids.items():
                samples[role].append({"streams": done, "rss_kib": rss_kib(pid), "fds": open_fds(pid)})

    clients = [LoadClient(1000 + i, cluster.urls[0], cluster.api_key, 0) for i in range(STREAM_CONCURRENCY)]
    sample(0)
    started = time.monotonic()
    result = await drive_streams(clients, total, sample)
    return {
        "samples": samples,
        "ok": result.ops - len(result.latencies.get("threads.create", [])),
        "errors": {op: dict(c) for op, c in result.errors.items()},
        "wall_seconds": time.monotonic() - started,
    }


def merge_phase(into: dict | None, part: dict) -> dict:
    """Add one round of a phase to the rounds before it (latencies, errors, CPU and wall time add up)."""
    if into is None:
        return part
    wall = into["wall_seconds"] + part["wall_seconds"]
    merged = {
        "wall_seconds": wall,
        "latencies_ms": {
            op: into["latencies_ms"].get(op, []) + part["latencies_ms"].get(op, [])
            for op in _keys(into["latencies_ms"], part["latencies_ms"])
        },
        "errors": {
            op: dict(Counter(into["errors"].get(op, {})) + Counter(part["errors"].get(op, {})))
            for op in _keys(into["errors"], part["errors"])
        },
        "cpu_seconds": {
            role: into["cpu_seconds"].get(role, 0.0) + part["cpu_seconds"].get(role, 0.0)
            for role in _keys(into["cpu_seconds"], part["cpu_seconds"])
        },
    }
    for key in ("machine_busy", "loadavg"):
        merged[key] = (into[key] * into["wall_seconds"] + part[key] * part["wall_seconds"]) / wall
    return merged


def _keys(first: dict, second: dict) -> list:
    return list(dict.fromkeys([*first, *second]))


async def warm_up(cluster: Cluster) -> None:
    """First imports and connections of every server, not measured."""
    for i, url in enumerate(cluster.urls):
        client = LoadClient(-1 - i, url, cluster.api_key, 0)
        await client.ensure_thread(Samples())
        await client.client.runs.wait(client.thread_id, "lead_agent", input=human("warm up"))


async def run_backend(backend: str, args: argparse.Namespace, workdir: Path) -> list[dict]:
    """Measure every process count of ``backend``, their rounds interleaved (see the module docstring)."""
    with ExitStack() as stack:
        clusters = {}
        for processes in args.processes:
            clusters[processes] = cluster = stack.enter_context(
                running_cluster(
                    backend=backend,
                    processes=processes,
                    workdir=workdir / str(processes),
                    postgres_url=args.postgres_url,
                    redis_url=args.redis_url,
                    execute_in_server=args.execute == "server",
                )
            )
            print(f"{backend} × {processes}: servers {cluster.urls}, pids {cluster.pids}", flush=True)
            await warm_up(cluster)
        workloads = [("mix", MIX, args.clients, args.mix_seconds)]
        workloads += [
            (f"waits only, {n} client{'s' if n > 1 else ''}", {"runs.wait": 1}, n, args.wait_seconds)
            for n in (1, args.clients)
        ]
        phases: dict[int, dict] = {p: {} for p in clusters}
        for offset, (label, mix, count, seconds) in enumerate(workloads):
            # Each configuration keeps its clients (threads, random sequences) from one round to the next.
            groups = {
                p: [LoadClient(100 * offset + i, c.urls[i % p], c.api_key, args.seed) for i in range(count)]
                for p, c in clusters.items()
            }
            for round_ in range(args.rounds):
                order = list(clusters) if round_ % 2 == 0 else list(reversed(clusters))
                for p in order:
                    part = await measure_phase(
                        clusters[p],
                        groups[p],
                        mix,
                        seconds / args.rounds if seconds else None,
                        -(-args.ops // args.rounds) if args.ops else None,
                    )
                    phases[p][label] = merge_phase(phases[p].get(label), part)
        results = []
        for p, cluster in clusters.items():
            results.append(
                {
                    "backend": backend,
                    "processes": p,
                    "clients": args.clients,
                    "execute": "servers execute" if args.execute == "server" else "worker executes",
                    "cores": os.cpu_count(),
                    "phases": phases[p],
                    "resources": await measure_resources(cluster, args.streams),
                }
            )
    return results


async def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp:
        for backend in args.backends:
            for result in await run_backend(backend, args, Path(tmp) / backend):
                print_config(result)
                results.append(result)
    print_summary(results)
    print_resources(results)
    output = (
        Path(args.output) if args.output else ROOT / "bench" / "results" / f"load-{time.strftime('%Y%m%d-%H%M%S')}.json"
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({"args": {k: v for k, v in vars(args).items()}, "results": results}))
    print(f"\nraw samples: {output}")
    return results


if __name__ == "__main__":
    asyncio.run(main())
