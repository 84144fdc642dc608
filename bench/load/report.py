"""The tables: operations per configuration, the 2-process/1-process ratios, CPU per 1,000 operations, resources."""

from __future__ import annotations

import math
from itertools import pairwise

# fds after the last batch of streams may exceed fds after the first batch by this much before we call it growth.
FD_SLACK = 20
# RSS that rises at every sample after the first batch, by more than this fraction in all, is flagged.
RSS_GROWTH = 0.10


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0-100) of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def op_rows(phase: dict) -> list[dict]:
    """One row per operation of a phase (count, ops/s, p50/p95/p99 ms, errors), then ``all``."""
    wall = phase["wall_seconds"]
    names = sorted(set(phase["latencies_ms"]) | set(phase["errors"]))
    rows = []
    for name in names:
        latencies = phase["latencies_ms"].get(name, [])
        rows.append(_row(name, latencies, sum(phase["errors"].get(name, {}).values()), wall))
    everything = [v for values in phase["latencies_ms"].values() for v in values]
    errors = sum(sum(c.values()) for c in phase["errors"].values())
    rows.append(_row("all", everything, errors, wall))
    return rows


def _row(name: str, latencies: list[float], errors: int, wall: float) -> dict:
    row = {"op": name, "count": len(latencies), "ops_per_s": len(latencies) / wall, "errors": errors}
    for p in (50, 95, 99):
        row[f"p{p}_ms"] = percentile(latencies, p) if latencies else float("nan")
    return row


def cpu_per_thousand(phase: dict) -> dict[str, float]:
    """CPU seconds per role per 1,000 successful operations of the phase."""
    ops = sum(map(len, phase["latencies_ms"].values()))
    return {role: seconds / ops * 1000 for role, seconds in phase["cpu_seconds"].items()} if ops else {}


def print_config(result: dict) -> None:
    head = f"{result['backend']} × {result['processes']} process{'es' if result['processes'] > 1 else ''}"
    print(f"\n== {head} ({result['execute']}; {result['clients']} clients)")
    print(f"{'op':<30} {'count':>6} {'ops/s':>7} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'errors':>6}")
    for label, phase in result["phases"].items():
        rows = op_rows(phase)
        if label != "mix":
            rows = [dict(rows[-1], op=label)]
        for row in rows:
            print(
                f"{row['op']:<30} {row['count']:>6} {row['ops_per_s']:>7.1f} {row['p50_ms']:>8.1f} "
                f"{row['p95_ms']:>8.1f} {row['p99_ms']:>8.1f} {row['errors']:>6}"
            )
    for label, phase in result["phases"].items():
        per_thousand = cpu_per_thousand(phase)
        total = sum(phase["cpu_seconds"].values())
        busy = total / (phase["wall_seconds"] * result["cores"]) * 100
        parts = ", ".join(f"{role} {seconds:.1f}" for role, seconds in per_thousand.items())
        print(
            f"CPU s per 1,000 ops, {label}: {parts} (all {total:.1f} s in {phase['wall_seconds']:.1f} s: "
            f"{busy:.0f}% of {result['cores']} cores; driver {phase['cpu_seconds']['driver'] / phase['wall_seconds'] * 100:.0f}% "
            f"of a core; the machine, every process: {phase['machine_busy'] * 100:.0f}% busy, load {phase['loadavg']:.1f})"
        )
    for op, messages in sorted((op, m) for phase in result["phases"].values() for op, m in phase["errors"].items()):
        for message, count in messages.items():
            print(f"  error ×{count} {op}: {message}")


def _throughput(result: dict, phase: str, op: str | None = None) -> float:
    data = result["phases"][phase]
    count = len(data["latencies_ms"].get(op, [])) if op else sum(map(len, data["latencies_ms"].values()))
    return count / data["wall_seconds"]


def print_summary(results: list[dict]) -> None:
    """Throughput per configuration and, per backend, 2 processes over 1."""
    if not results:
        return
    clients = results[0]["clients"]
    print(
        f"\n{'backend':<9} {'processes':>9} {'mix ops/s':>10} {'mix waits/s':>12} {'waits/s 1c':>11} {f'waits/s {clients}c':>12}"
    )
    for result in results:
        print(
            f"{result['backend']:<9} {result['processes']:>9} {_throughput(result, 'mix'):>10.1f} "
            f"{_throughput(result, 'mix', 'runs.wait'):>12.1f} {_throughput(result, 'waits only, 1 client'):>11.1f} "
            f"{_throughput(result, f'waits only, {clients} clients'):>12.1f}"
        )
    for backend in dict.fromkeys(r["backend"] for r in results):
        by_processes = {r["processes"]: r for r in results if r["backend"] == backend}
        if 1 in by_processes and 2 in by_processes:
            one, two = by_processes[1], by_processes[2]
            waits = f"waits only, {clients} clients"
            print(
                f"{backend}: 2 processes / 1: mix throughput {_throughput(two, 'mix') / _throughput(one, 'mix'):.2f}x, "
                f"waits/s at {clients} clients {_throughput(two, waits) / _throughput(one, waits):.2f}x"
            )


def resource_verdict(samples: list[dict]) -> str:
    """``bounded``, or what grows between the first batch of streams and the last."""
    if len(samples) < 3:
        return "too few samples"
    first, last = samples[1], samples[-1]
    problems = []
    if last["fds"] > first["fds"] + FD_SLACK:
        problems.append(f"fds {first['fds']} -> {last['fds']}")
    rss = [s["rss_kib"] for s in samples[1:]]
    if all(b > a for a, b in pairwise(rss)) and rss[-1] > rss[0] * (1 + RSS_GROWTH):
        problems.append(f"RSS {rss[0] / 1024:.0f} -> {rss[-1] / 1024:.0f} MiB at every sample")
    return "GROWING: " + "; ".join(problems) if problems else "bounded"


def print_resources(results: list[dict]) -> None:
    print("\nResources after N streams against server0 (RSS MiB / open fds)")
    for result in results:
        resources = result["resources"]
        marks = [s["streams"] for s in next(iter(resources["samples"].values()))]
        print(f"{result['backend']} × {result['processes']}: streams " + " ".join(f"{m:>11}" for m in marks))
        for role, samples in resources["samples"].items():
            cells = " ".join(f"{s['rss_kib'] / 1024:>6.0f} / {s['fds']:<3}" for s in samples)
            print(f"  {role:<8} {cells}  {resource_verdict(samples)}")
        errors = sum(sum(c.values()) for c in resources["errors"].values())
        print(f"  {resources['ok']} streams ok, {errors} errors, {resources['wall_seconds']:.0f} s")
