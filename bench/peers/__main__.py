"""Ours against the LangGraph dev server: the same langgraph-sdk workload on both, alternating.

    .venv/bin/python -m bench.peers [--quick] [--repeat 15] [--turns 200] [--seconds 10] [--backends sqlite,postgres]

The servers serve ``bench/peers/agent.py`` (``echo: <last human text>``)
as ``echo``: per backend, ours in full mode and ours in delta mode (the mode
is frozen per process, so one server process per mode, each on its own SQLite
database or its own throwaway PostgreSQL database), each through
``config.yaml`` ``graphs:``, and the reference, ``langgraph dev`` from its own
venv (``bench/peers/reference.py``; installed on first use). Each gets a
thread of ``--turns`` turns of ~500-character human messages and their echo
answers, written in one ``POST /threads`` with ``supersteps`` (two per turn:
the human message, then the answer, both as the ``echo`` node), and a short
thread for runs.

Every row compares one of ours with the reference: its samples alternate
between the two (the order flips at each sample), the first of each is a
warm-up and is dropped, the table gives medians of ``--repeat``. The 8-client
row is one window of ``--seconds`` per server, each client looping
``runs.wait`` on a thread of its own. The *body only* rows send the state and
history requests on the SDK's own connection and receive the body without
parsing it: the server's side of those rows, where the parsed rows also carry
the SDK's JSON decode (most of a 23 MB page, on both sides). The read rows
of the first backend's full mode are also sampled on the *floor*
(``bench/peers/floor.py``: our own answers, captured, served with no work),
the least any server can score through this client. The table prints ratios ours/reference
and which side is better; the raw samples go to
``bench/results/peers-<time>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from langgraph_sdk import get_client

from bench.checkpoints.__main__ import case_database, postgres_available, postgres_base_url
from bench.checkpoints.workload import digest, human_text
from bench.peers.floor import FloorServer, body_name
from bench.peers.reference import ReferenceServer, ensure_venv, installed_versions
from tests.live.server import ROOT, LiveServer

AGENT = f"{ROOT / 'bench' / 'peers' / 'agent.py'}:graph"
GRAPH = "echo"
CLIENTS = 8
# The largest history page the rows read; the long thread must fit in it (2 checkpoints a turn, plus 1).
HISTORY_ALL = 1000
BACKEND_NAMES = {"sqlite": "", "postgres": "PostgreSQL"}


@dataclass
class Target:
    """One server as the workload sees it: its SDK client and its threads."""

    name: str
    client: Any
    long_thread: str = ""
    short_thread: str = ""
    info: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    ours: str  # "sqlite-full", "postgres-delta", …: which of our servers the row measures
    measure: Callable[[Target, int], Awaitable[float]]
    floor: bool = False  # a read row sampled on the floor server too


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15, help="samples per row and server, after one warm-up")
    parser.add_argument("--turns", type=int, default=200, help="turns of the long thread")
    parser.add_argument("--seconds", type=float, default=10.0, help="window of the 8-client row, per server")
    parser.add_argument("--backends", default="sqlite,postgres", help="ours on these (PostgreSQL from DATABASE_URL)")
    parser.add_argument("--quick", action="store_true", help="3 samples, 50 turns, 3 s windows: a sanity run")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat, args.turns, args.seconds = 3, 50, 3.0
    if not 1 <= 2 * args.turns + 1 <= HISTORY_ALL:
        parser.error(f"--turns must be between 1 and {(HISTORY_ALL - 1) // 2}: the whole history is one page")
    return args


def conversation(turns: int) -> list[dict]:
    """Return the supersteps of a ``turns``-turn thread: the human message, then the echo answer."""
    steps = []
    for turn in range(turns):
        text = human_text(turn)
        for message in ({"type": "human", "content": text}, {"type": "ai", "content": f"echo: {text}"}):
            steps.append({"updates": [{"values": {"messages": [message]}, "as_node": GRAPH}]})
    return steps


def run_input(label: str) -> tuple[dict, str]:
    """Return a run's input (a ~500-character message starting with ``label``) and the answer it must get."""
    text = f"{label} {human_text(len(label))}"[:500]
    return {"messages": [{"role": "user", "content": text}]}, f"echo: {text}"


# -- what one sample measures (milliseconds) --------------------------------------


async def wait_round_trip(target: Target, index: int, *, long: bool = False) -> float:
    payload, answer = run_input(f"wait {index}")
    thread = target.long_thread if long else target.short_thread
    started = time.perf_counter()
    values = await target.client.runs.wait(thread, GRAPH, input=payload)
    elapsed = time.perf_counter() - started
    assert values["messages"][-1]["content"] == answer, values["messages"][-1]
    return elapsed * 1000


async def sse_first_event(target: Target, index: int) -> float:
    payload, _ = run_input(f"stream {index}")
    started = time.perf_counter()
    first = None
    events = []
    async for part in target.client.runs.stream(target.short_thread, GRAPH, input=payload):
        if first is None:
            first = time.perf_counter() - started
        events.append(part.event)
    assert events[0] == "metadata" and "values" in events, events
    return first * 1000


async def get_state(target: Target, index: int) -> float:
    started = time.perf_counter()
    state = await target.client.threads.get_state(target.long_thread)
    elapsed = time.perf_counter() - started
    assert len(state["values"]["messages"]) == target.info["messages"], len(state["values"]["messages"])
    return elapsed * 1000


def history(limit: int) -> Callable[[Target, int], Awaitable[float]]:
    async def measure(target: Target, index: int) -> float:
        started = time.perf_counter()
        entries = await target.client.threads.get_history(target.long_thread, limit=limit)
        elapsed = time.perf_counter() - started
        assert len(entries) == min(limit, target.info["history_entries"]), (len(entries), limit)
        return elapsed * 1000

    return measure


BODY_ROWS = (None, 10, 100)  # GET state, then history limits: the rows also read body only


def _body_request(target: Target, limit: int | None) -> tuple[str, str, dict | None]:
    if limit is None:
        return "GET", f"/threads/{target.long_thread}/state", None
    return "POST", f"/threads/{target.long_thread}/history", {"limit": limit}


async def _receive_body(target: Target, limit: int | None) -> tuple[float, bytes]:
    """Send the row's request on the SDK's own connection; return ms until the last body byte, and the body."""
    method, path, payload = _body_request(target, limit)
    chunks = []
    started = time.perf_counter()
    async with target.client.http.client.stream(method, path, json=payload) as response:
        response.raise_for_status()
        async for chunk in response.aiter_bytes():
            chunks.append(chunk)
    return (time.perf_counter() - started) * 1000, b"".join(chunks)


def body_only(limit: int | None) -> Callable[[Target, int], Awaitable[float]]:
    """The row's request with its body received but not parsed: the server's side of the row.

    The parsed rows include the SDK turning the JSON into Python objects
    (limit 100 is 23 MB: most of that row on both sides). The body must be
    the one ``prepare`` parsed and checked, byte for byte in length.
    """

    async def measure(target: Target, index: int) -> float:
        elapsed, body = await _receive_body(target, limit)
        assert len(body) == target.info[f"body_bytes_{limit}"], (len(body), target.info[f"body_bytes_{limit}"])
        return elapsed

    return measure


async def long_wait(target: Target, index: int) -> float:
    return await wait_round_trip(target, index, long=True)


def suffix(backend: str, mode: str) -> str:
    """Say which of ours a row measures: nothing for SQLite in full mode (the issue's rows)."""
    parts = [part for part in ("ours delta" if mode == "delta" else "", BACKEND_NAMES[backend]) if part]
    return f" ({', '.join(parts)})" if parts else ""


def rows(turns: int, backends: list[str]) -> list[Row]:
    """The table's rows in the order they run (the long-thread waits last: they grow the thread)."""
    out, last = [], []
    for backend in backends:
        floor = backend == backends[0]
        full = f"{backend}-full"
        out += [
            Row(f"{backend}_wait", f"runs/wait round trip{suffix(backend, 'full')}, ms", full, wait_round_trip),
            Row(f"{backend}_sse_first_event", f"SSE first event{suffix(backend, 'full')}, ms", full, sse_first_event),
        ]
        for mode in ("full", "delta"):
            key, label = f"{backend}_{mode}", suffix(backend, mode)
            on_floor = floor and mode == "full"
            out.append(
                Row(f"{key}_state", f"GET state, {turns} turns{label}, ms", f"{backend}-{mode}", get_state, on_floor)
            )
            out += [
                Row(
                    f"{key}_history_{limit}",
                    f"POST history limit {limit:,}, {turns} turns{label}, ms",
                    f"{backend}-{mode}",
                    history(limit),
                    on_floor,
                )
                for limit in (10, 100, 1000)
            ]
            out += [
                Row(
                    f"{key}_{'state' if limit is None else f'history_{limit}'}_body",
                    f"{'GET state' if limit is None else f'POST history limit {limit:,}'}, {turns} turns{label},"
                    " body only, ms",
                    f"{backend}-{mode}",
                    body_only(limit),
                    on_floor,
                )
                for limit in BODY_ROWS
            ]
            last.append(
                Row(
                    f"{key}_long_wait",
                    f"runs/wait on the {turns}-turn thread{label}, ms",
                    f"{backend}-{mode}",
                    long_wait,
                )
            )
    return out + last


async def alternate(
    row: Row, ours: Target, reference: Target, repeat: int, floor: Target | None = None
) -> dict[str, Any]:
    """Sample ``row`` repeat + 1 times on each side, rotating the order each time; drop the first sample of each."""
    sides = [("ours", ours), ("reference", reference)] + ([("floor", floor)] if floor is not None else [])
    samples: dict[str, list[float]] = {side: [] for side, _ in sides}
    for index in range(repeat + 1):
        shift = index % len(sides)
        for side, target in sides[shift:] + sides[:shift]:
            samples[side].append(await row.measure(target, index))
    result = {"key": row.key, "label": row.label, "unit": "ms", "ours_mode": row.ours, "warmup": {}, "samples": {}}
    for side, values in samples.items():
        result["warmup"][side], result["samples"][side] = values[0], values[1:]
        result[side] = statistics.median(values[1:])
    return result


async def waits_per_second(target: Target, threads: list[str], seconds: float) -> dict[str, Any]:
    """Run one ``runs.wait`` loop per thread for ``seconds``; return waits/s and the latencies."""
    latencies: list[float] = []
    deadline = time.monotonic() + seconds

    async def loop(position: int, thread_id: str) -> None:
        count = 0
        while time.monotonic() < deadline:
            payload, answer = run_input(f"client {position} wait {count}")
            started = time.perf_counter()
            values = await target.client.runs.wait(thread_id, GRAPH, input=payload)
            latencies.append((time.perf_counter() - started) * 1000)
            assert values["messages"][-1]["content"] == answer
            count += 1

    started = time.monotonic()
    await asyncio.gather(*(loop(position, thread) for position, thread in enumerate(threads)))
    return {"rate": len(latencies) / (time.monotonic() - started), "latencies_ms": latencies}


async def concurrent_row(backend: str, ours: Target, reference: Target, seconds: float) -> dict[str, Any]:
    label = f"{CLIENTS} concurrent clients{suffix(backend, 'full')}, waits/s"
    result: dict[str, Any] = {"key": f"{backend}_concurrent_waits", "label": label}
    result.update(unit="waits/s", ours_mode=f"{backend}-full", samples={})
    for side, target in (("ours", ours), ("reference", reference)):
        threads = [(await target.client.threads.create(graph_id=GRAPH))["thread_id"] for _ in range(CLIENTS)]
        window = await waits_per_second(target, threads, seconds)
        result[side] = window["rate"]
        result["samples"][side] = window["latencies_ms"]
    return result


# -- setup ----------------------------------------------------------------------------


async def prepare(target: Target, turns: int) -> float:
    """Create ``target``'s threads and record what the long one holds; return the seconds its write took."""
    started = time.perf_counter()
    thread = await target.client.threads.create(graph_id=GRAPH, supersteps=conversation(turns))
    elapsed = time.perf_counter() - started
    target.long_thread = thread["thread_id"]
    target.short_thread = (await target.client.threads.create(graph_id=GRAPH))["thread_id"]
    state = await target.client.threads.get_state(target.long_thread)
    target.info["messages"] = len(state["values"]["messages"])
    target.info["messages_digest"] = digest(state["values"]["messages"])
    entries = await target.client.threads.get_history(target.long_thread, limit=HISTORY_ALL)
    target.info["history_entries"] = len(entries)
    for limit in BODY_ROWS:
        _, body = await _receive_body(target, limit)
        parsed = json.loads(body)
        if limit is None:
            assert digest(parsed["values"]["messages"]) == target.info["messages_digest"], target.name
        else:
            assert len(parsed) == min(limit, target.info["history_entries"]), (target.name, len(parsed), limit)
        target.info[f"body_bytes_{limit}"] = len(body)
    return elapsed


def expected_digest(turns: int) -> str:
    messages = [m["values"]["messages"][0] for s in conversation(turns) for m in s["updates"]]
    return digest(messages)


async def start_floor(folder: Path, target: Target) -> FloorServer:
    """Capture ``target``'s answers to the read rows and serve them from the floor server."""
    folder.mkdir(parents=True)
    for limit in (*BODY_ROWS, HISTORY_ALL):
        _, body = await _receive_body(target, limit)
        (folder / body_name(limit)).write_bytes(body)
    return FloorServer(folder).start()


def check_threads(targets: list[Target], turns: int) -> None:
    """Fail unless every long thread holds the same conversation and history length."""
    want = expected_digest(turns)
    for target in targets:
        assert target.info["messages_digest"] == want, (target.name, "the thread's messages differ")
    entries = {t.name: t.info["history_entries"] for t in targets}
    assert len(set(entries.values())) == 1, f"history lengths differ: {entries}"


# -- report ---------------------------------------------------------------------------


def better(row: dict[str, Any]) -> str:
    ratio = row["ours"] / row["reference"]
    if row["unit"] == "waits/s":
        ratio = 1 / ratio
    return "ours" if ratio < 1 else "reference" if ratio > 1 else "even"


def print_table(results: list[dict[str, Any]]) -> None:
    """Print ours, the reference and their ratio; for read rows also the floor and the floor's ratio."""
    width = max(len(r["label"]) for r in results)
    print(
        f"\n{'row':<{width}}  {'ours':>10}  {'reference':>10}  {'ours/ref':>9}  better     {'floor':>8}  {'floor/ref':>9}"
    )
    print("-" * (width + 68))
    for row in results:
        ratio = row["ours"] / row["reference"]
        line = f"{row['label']:<{width}}  {row['ours']:>10,.1f}  {row['reference']:>10,.1f}  {ratio:>8.2f}x  {better(row):<9}"
        if "floor" in row:
            line += f"  {row['floor']:>8,.1f}  {row['floor'] / row['reference']:>8.2f}x"
        print(line)


async def run(args: argparse.Namespace, workdir: Path, langgraph: Path, stack: ExitStack) -> dict[str, Any]:
    servers: list[Any] = []
    backends = args.backends.split(",")
    try:
        ours: dict[str, LiveServer] = {}
        for backend in backends:
            for mode in ("full", "delta"):
                name = f"{backend}-{mode}"
                _, env = stack.enter_context(case_database(backend, workdir / name))
                config = {"graphs": {GRAPH: AGENT}, "database": {"checkpoint_channel_mode": mode}}
                ours[name] = LiveServer(workdir / name, config=config, database_url=env.get("DATABASE_URL")).setup()
        reference = ReferenceServer(workdir / "reference", {GRAPH: AGENT})
        for server in ours.values():
            servers.append(server.start())
        servers.append(reference.start(langgraph))
        targets = {
            name: Target(f"ours-{name}", get_client(url=server.url, api_key=server.api_key("alice"), timeout=600))
            for name, server in ours.items()
        }
        targets["reference"] = Target("reference", get_client(url=reference.url, api_key=None, timeout=600))
        for name in ours:
            targets[name].info["server"] = await targets[name].client.http.get("/info")
            got = targets[name].info["server"]["checkpoints"]["channel_mode"]
            assert got == name.split("-")[1], f"ours-{name} runs in {got} mode"
        targets["reference"].info["server"] = reference.info()
        setup_seconds = {}
        for target in targets.values():
            setup_seconds[target.name] = await prepare(target, args.turns)
            print(f"{target.name}: {args.turns}-turn thread written in {setup_seconds[target.name]:.1f} s", flush=True)
        check_threads(list(targets.values()), args.turns)
        results = []
        floor_server = await start_floor(workdir / "floor", targets[f"{backends[0]}-full"])
        servers.append(floor_server)
        targets["floor"] = Target("floor", get_client(url=floor_server.url, api_key=None, timeout=600))
        targets["floor"].long_thread = targets[f"{backends[0]}-full"].long_thread
        targets["floor"].info = targets[f"{backends[0]}-full"].info
        for row in rows(args.turns, backends):
            floor = targets["floor"] if row.floor else None
            results.append(await alternate(row, targets[row.ours], targets["reference"], args.repeat, floor))
            print(
                f"  {row.label}: ours {results[-1]['ours']:,.1f}, reference {results[-1]['reference']:,.1f}"
                + (f", floor {results[-1]['floor']:,.1f}" if floor else ""),
                flush=True,
            )
        # The issue's table puts the 8-client row after the full-mode reads.
        for backend in backends:
            at = next(i for i, r in enumerate(results) if r["key"] == f"{backend}_full_history_1000") + 1
            row = await concurrent_row(backend, targets[f"{backend}-full"], targets["reference"], args.seconds)
            results.insert(at, row)
        return {
            "targets": {t.name: t.info for t in targets.values()},
            "setup_seconds": setup_seconds,
            "rows": results,
        }
    finally:
        for server in servers:
            server.stop()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    langgraph = ensure_venv()
    report: dict[str, Any] = {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "reference_versions": installed_versions(),
        "load_average_before": os.getloadavg(),
    }
    for backend in args.backends.split(","):
        if backend == "postgres" and (why := postgres_available(postgres_base_url())):
            raise SystemExit(f"PostgreSQL does not answer ({why}); run with --backends sqlite")
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp, ExitStack() as stack:
        report.update(asyncio.run(run(args, Path(tmp), langgraph, stack)))
    report["load_average_after"] = os.getloadavg()
    print_table(report["rows"])
    print(f"\nreference: {', '.join(f'{k} {v}' for k, v in report['reference_versions'].items())}")
    print(
        f"load average before / after: {report['load_average_before'][0]:.1f} / {report['load_average_after'][0]:.1f}"
    )
    output = args.output or ROOT / "bench" / "results" / f"peers-{time.strftime('%Y%m%d-%H%M%S')}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=1))
    print(f"raw samples: {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
