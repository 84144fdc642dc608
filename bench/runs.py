"""Run benchmark: /runs/wait round-trips per second and SSE time to first event.

    .venv/bin/python -m bench.runs [--quick] [--seconds 5] [--concurrency 1,8,32]

Each backend gets a real server process started as `make run` would
(SQLite always; PostgreSQL when DATABASE_URL is set, on a throwaway database).
Clients are the official langgraph-sdk. Numbers are medians over the window.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from langgraph_sdk import get_client

from tests.live.server import LiveServer, serving

INPUT = {"messages": [{"role": "user", "content": "benchmark turn"}]}


async def wait_throughput(client, threads: list[str], seconds: float) -> tuple[float, float]:
    """Return (runs per second, median latency ms) with one client loop per thread."""
    latencies: list[float] = []
    deadline = time.monotonic() + seconds

    async def loop(thread_id: str) -> None:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            values = await client.runs.wait(thread_id, "lead_agent", input=INPUT)
            assert values["messages"][-1]["content"] == "echo: benchmark turn"
            latencies.append(time.perf_counter() - started)

    started = time.monotonic()
    await asyncio.gather(*(loop(t) for t in threads))
    return len(latencies) / (time.monotonic() - started), statistics.median(latencies) * 1000


async def sse_first_event(client, threads: list[str], rounds: int) -> tuple[float, float]:
    """Return (median, p95) ms from POST /runs/stream to its first event, all clients at once."""
    samples: list[float] = []

    async def one(thread_id: str) -> None:
        started = time.perf_counter()
        first = None
        async for part in client.runs.stream(thread_id, "lead_agent", input=INPUT, stream_mode="messages-tuple"):
            if first is None:
                first = time.perf_counter() - started
                assert part.event == "metadata"
        samples.append(first * 1000)

    for _ in range(rounds):
        await asyncio.gather(*(one(t) for t in threads))
    samples.sort()
    return statistics.median(samples), samples[max(0, int(len(samples) * 0.95) - 1)]


async def bench_backend(name: str, server: LiveServer, levels: list[int], seconds: float, rounds: int) -> list[dict]:
    client = get_client(url=server.url, api_key=server.api_key("bench"), timeout=120)
    threads = [(await client.threads.create())["thread_id"] for _ in range(max(levels))]
    await client.runs.wait(threads[0], "lead_agent", input=INPUT)  # warm up
    rows = []
    for level in levels:
        rps, latency = await wait_throughput(client, threads[:level], seconds)
        ttfe, ttfe_p95 = await sse_first_event(client, threads[:level], rounds)
        rows.append(
            {
                "backend": name,
                "clients": level,
                "rps": rps,
                "wait_ms": latency,
                "ttfe_ms": ttfe,
                "ttfe_p95_ms": ttfe_p95,
            }
        )
    return rows


def print_table(rows: list[dict]) -> None:
    print(
        f"{'backend':<9} {'clients':>7} {'wait runs/s':>12} {'wait p50 ms':>12} {'SSE 1st ev p50 ms':>18} {'p95 ms':>8}"
    )
    for row in rows:
        print(
            f"{row['backend']:<9} {row['clients']:>7} {row['rps']:>12.1f} {row['wait_ms']:>12.1f} "
            f"{row['ttfe_ms']:>18.1f} {row['ttfe_p95_ms']:>8.1f}"
        )
    backends = sorted({r["backend"] for r in rows})
    if len(backends) == 2:
        print("\nratios postgres/sqlite (runs/s):")
        for level in sorted({r["clients"] for r in rows}):
            pair = {r["backend"]: r for r in rows if r["clients"] == level}
            print(f"  {level:>3} clients: {pair['postgres']['rps'] / pair['sqlite']['rps']:.2f}x")
    for backend in backends:
        mine = sorted((r for r in rows if r["backend"] == backend), key=lambda r: r["clients"])
        print(f"{backend}: throughput {mine[-1]['clients']} vs 1 client: {mine[-1]['rps'] / mine[0]['rps']:.2f}x")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 s windows, one SSE round")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", default="1,8,32")
    args = parser.parse_args()
    seconds, rounds = (1.0, 1) if args.quick else (args.seconds, args.rounds)
    levels = [int(x) for x in args.concurrency.split(",")]
    database_url = os.environ.get("DATABASE_URL")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("sqlite", "postgres"):
            if name == "postgres" and not database_url:
                print("postgres: skipped (DATABASE_URL not set)")
                continue
            with serving(Path(tmp), name, postgres_base=database_url) as server:
                rows += await bench_backend(name, server, levels, seconds, rounds)
    print_table(rows)


if __name__ == "__main__":
    asyncio.run(main())
