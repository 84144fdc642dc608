"""Streaming agents: N concurrent runs whose model streams tokens, each token timed from the model to its follower.

    .venv/bin/python -m bench.agents [--quick] [--ns 10,30,50,100,300,1000] [--rate 20] [--seconds 20]
                                     [--targets sqlite-1,postgres-1,postgres-2,dev] [--second classic|websocket]
                                     [--py-spy TARGET@N]

Every target (``bench/agents/servers.py``) serves ``bench/agents/agent.py``:
a fake chat model streaming ``--rate`` tokens/s for ``--seconds`` with a
tool call halfway, each token stamped with the wall clock when the model
yielded it. For each N the client (``bench/agents/client.py``) makes N
threads, then starts N runs, spread evenly over a ramp of
``min(seconds / 3, max(1, N / 50))`` seconds; each run is followed by a
protocol-v2 SSE stream and every other run also by the classic run stream
(or ``--second websocket``: the protocol-v2 WebSocket). Every follower
checks that it got every token exactly once and in order, and times each
from the model's stamp to its arrival.

The targets run side by side, N by N, their order flipping at each N (the
machine's speed drifts by the minute; ``bench.peers`` alternates for the
same reason). A target stops ramping at the first N where p99 passes
250 ms or a run does not finish; that N is reported. Per target and N: runs
that finished, tokens delivered, missing / duplicated / reordered tokens,
latency p50 and p99 (all tokens; *steady*: tokens said while every run was
streaming; per follower kind), token events delivered per second, server CPU
seconds per 1,000 delivered tokens (servers and run worker, or the whole
reference; *+db*: PostgreSQL and Redis), peak RSS and open fds of the
serving processes (summed), database rows written per run (and PostgreSQL's
transactions per run, reads included), the client's share of a core and
its loop lag p99 (how late this process woke a 50 ms timer: the client's own
part of a token's latency). Then ours against ``langgraph dev`` per N. Raw
samples: ``bench/results/agents-<time>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

import yaml

from bench.agents.client import Workload, drive_level, make_threads
from bench.agents.report import limit_text, passes_limit, print_comparison, print_target, summarize
from bench.agents.servers import TARGETS, Target, running_target
from bench.load.cluster import machine_busy_seconds
from tests.live.server import ROOT

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
SETTLE_SECONDS = 30.0
IDLE_CORES = 0.15


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.agents", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ns", default="10,30,50,100,300,1000", help="concurrent runs per level, in order")
    parser.add_argument("--targets", default="sqlite-1,postgres-1,postgres-2,dev", help=", ".join(TARGETS))
    parser.add_argument("--rate", type=float, default=20.0, help="tokens per second of each run's model")
    parser.add_argument("--seconds", type=float, default=20.0, help="streaming time of each run (tool call halfway)")
    parser.add_argument("--start-delay", type=float, default=1.0, help="seconds from a run's start to its first token")
    parser.add_argument("--second", choices=("classic", "websocket"), default="classic", help="odd runs' 2nd follower")
    parser.add_argument("--quick", action="store_true", help="N = 10, 30 and 5 s runs: a sanity run (~2 min)")
    parser.add_argument("--keep-going", action="store_true", help="ramp on past the 250 ms limit")
    parser.add_argument("--py-spy", default="", help="TARGET@N[,…]: py-spy the target's serving processes at that N")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config.yaml key of ours, dotted, its value YAML (e.g. thread_stream.flush_interval_ms=200)",
    )
    parser.add_argument("--postgres-url", default=os.environ.get("DATABASE_URL") or DEFAULT_POSTGRES_URL)
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    if args.quick:
        args.ns, args.seconds = "10,30", 5.0
    args.ns = [int(n) for n in args.ns.split(",") if n]
    args.overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set {item!r}: expected KEY=VALUE")
        args.overrides[key] = yaml.safe_load(value)
    args.targets = [t for t in args.targets.split(",") if t]
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        parser.error(f"unknown targets {unknown}; choose from {', '.join(TARGETS)}")
    return args


def ramp_seconds(n: int, seconds: float) -> float:
    return min(seconds / 3, max(1.0, n / 50))


async def settle(target: Target) -> None:
    """Wait until the target's processes are idle (its runs finalized), at most SETTLE_SECONDS."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < deadline:
        before = target.cpu()["server"]
        await asyncio.sleep(1.0)
        if target.cpu()["server"] - before < IDLE_CORES:
            return


def start_py_spy(target: Target, n: int, seconds: float) -> list[subprocess.Popen]:
    """``py-spy record`` every serving process for ``seconds`` (``--py-spy``): collapsed stacks in bench/results/."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    folder = ROOT / "bench" / "results"
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    processes = []
    for role, pid in target.server_pids().items():
        out = folder / f"agents-{target.name}-n{n}-{role}-{stamp}"
        command = [py_spy, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "50"]
        command += ["--format", "raw", "--output", f"{out}.txt", "--nonblocking"]
        processes.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        print(f"  py-spy: {role} (pid {pid}) -> {out}.txt", flush=True)
    return processes


async def run_level(target: Target, n: int, work: Workload, args: argparse.Namespace) -> dict:
    threads = await make_threads(target.servers, n)
    ramp = ramp_seconds(n, work.seconds)
    deadline = work.start_delay + work.seconds + max(30.0, work.seconds)
    samples: list[dict] = []
    spies = []
    if f"{target.name}@{n}" in args.py_spy.split(","):
        spies = start_py_spy(target, n, ramp + work.start_delay + work.seconds)
    writes_before, cpu_before = target.writes(), target.cpu()
    machine_before, driver_before = machine_busy_seconds(), time.process_time()
    level = await drive_level(
        threads,
        target.servers,
        work,
        ramp_seconds=ramp,
        deadline_seconds=deadline,
        on_tick=lambda: samples.append(target.resources()),
    )
    driver = time.process_time() - driver_before
    await settle(target)
    cpu_after = target.cpu()
    busy, total = (b - a for a, b in zip(machine_before, machine_busy_seconds(), strict=True))
    writes_after = target.writes()
    for spy in spies:
        spy.wait(timeout=120)
    return summarize(
        level,
        n=n,
        tokens=work.tokens,
        cpu_before=cpu_before,
        cpu_after=cpu_after,
        driver_cpu=driver,
        machine_busy=busy / total if total else 0.0,
        resource_samples=samples,
        writes_before=writes_before,
        writes_after=writes_after,
    )


async def warm_up(target: Target, work: Workload) -> None:
    """First imports, connections and graph load of every server: two short runs each, not measured."""
    brief = Workload(rate=20, seconds=0.5, start_delay=0.2, second=work.second)
    brief.v2_tokens_for_classic_runs = work.v2_tokens_for_classic_runs
    threads = await make_threads(target.servers, 2 * len(target.servers))
    await drive_level(threads, target.servers, brief, ramp_seconds=0.0, deadline_seconds=60)


async def run(args: argparse.Namespace, workdir: Path) -> list[dict]:
    capacity = max(args.ns) + 10
    stacks: dict[str, ExitStack] = {}
    targets: dict[str, Target] = {}
    works: dict[str, Workload] = {}
    results = {name: {"name": name, "label": "", "levels": [], "info": {}, "stopped": ""} for name in args.targets}
    try:
        for name in args.targets:
            stacks[name] = stack = ExitStack()
            target = stack.enter_context(
                running_target(
                    name,
                    workdir / name,
                    capacity=capacity,
                    postgres_url=args.postgres_url,
                    redis_url=args.redis_url,
                    overrides=args.overrides,
                )
            )
            targets[name] = target
            work = Workload(args.rate, args.seconds, args.start_delay, args.second)
            # langgraph dev sends a run's tokens on the protocol-v2 stream only when run.start started it.
            work.v2_tokens_for_classic_runs = not target.is_reference
            works[name] = work
            results[name].update(label=target.label, info=target.info, servers=[s.url for s in target.servers])
            await warm_up(target, work)
            print(f"{name}: {target.label} up at {', '.join(s.url for s in target.servers)}", flush=True)
        for position, n in enumerate(args.ns):
            order = [name for name in args.targets if name in targets]
            if position % 2:
                order.reverse()
            for name in order:
                print(f"{name}: N = {n:,} ...", flush=True)
                row = await run_level(targets[name], n, works[name], args)
                results[name]["levels"].append(row)
                print(
                    f"  {row['runs_ok']}/{row['runs']} runs ok, {row['delivered']:,} tokens, p50 "
                    f"{row['p50_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms, missing {row['missing']}, "
                    f"duplicated {row['duplicated']}, reordered {row['reordered']}, "
                    f"{row['events_per_s']:.0f} events/s",
                    flush=True,
                )
                if passes_limit(row) and not args.keep_going:
                    results[name]["stopped"] = f"p99 {row['p99_ms']:.0f} ms or unfinished runs at N = {n}"
                    stacks.pop(name).close()
                    del targets[name]
            if not targets:
                break
    finally:
        for stack in stacks.values():
            stack.close()
    return [results[name] for name in args.targets]


def jsonable(value):
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and value != value:
        return None
    return value


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "load_average_before": os.getloadavg(),
        "cores": os.cpu_count(),
    }
    with tempfile.TemporaryDirectory(prefix="bench-agents-") as tmp:
        results = asyncio.run(run(args, Path(tmp)))
    report["load_average_after"] = os.getloadavg()
    report["targets"] = results
    tokens = Workload(args.rate, args.seconds, args.start_delay, args.second).tokens
    print(
        f"\n{args.rate:g} tokens/s for {args.seconds:g} s a run ({tokens} tokens, tool call halfway); followers: "
        f"protocol-v2 SSE on every run, {'the classic run stream' if args.second == 'classic' else 'the v2 WebSocket'}"
        " on every other one. Latency: model stamp → follower, ms. CPU/1k: server CPU s per 1,000 delivered tokens."
    )
    for result in results:
        print_target(result)
    print_comparison(results)
    print("\nWhere p99 passes 250 ms: " + "; ".join(f"{r['name']} {limit_text(r)}" for r in results))
    print(
        f"load average before / after: {report['load_average_before'][0]:.1f} / {report['load_average_after'][0]:.1f}"
    )
    output = args.output or ROOT / "bench" / "results" / f"agents-{time.strftime('%Y%m%d-%H%M%S')}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(jsonable(report)))
    print(f"raw samples: {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
