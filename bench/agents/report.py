"""Summaries of a level (one N on one target) and the tables: one per target, then ours against ``langgraph dev``."""

from __future__ import annotations

import math
import statistics
from collections import Counter

from bench.agents.client import RunRecord
from bench.load.report import percentile

LIMIT_MS = 250.0
FOLLOWER_KINDS = ("v2-sse", "classic", "v2-ws")


def _ms(values_ns: list[int], p: float) -> float:
    return percentile(values_ns, p) / 1e6 if values_ns else math.nan


def summarize(
    level: dict,
    *,
    n: int,
    tokens: int,
    cpu_before: dict[str, float],
    cpu_after: dict[str, float],
    driver_cpu: float,
    machine_busy: float,
    resource_samples: list[dict],
    writes_before: dict[str, int],
    writes_after: dict[str, int],
) -> dict:
    """Everything the tables show about one level, and the raw per-kind latencies (ms) for the JSON."""
    records: list[RunRecord] = level["records"]
    followers = [f for r in records for f in r.followers]
    expected = [f for f in followers if f.expects_tokens]
    latencies = [lat for f in expected for lat in f.latencies_ns]
    by_kind = {kind: [lat for f in expected if f.kind == kind for lat in f.latencies_ns] for kind in FOLLOWER_KINDS}
    checks = Counter()
    for follower in expected:
        checks.update(follower.check(tokens))
    ends = Counter(f.end for f in followers)
    # Steady window: every run has said its first token and none its last.
    firsts = [min(f.stamps_ns) for f in expected if f.stamps_ns]
    lasts = [max(f.stamps_ns) for f in expected if f.stamps_ns]
    steady: list[int] = []
    if firsts and len(firsts) == len(expected) and max(firsts) < min(lasts):
        low, high = max(firsts), min(lasts)
        steady = [lat for f in expected for s, lat in zip(f.stamps_ns, f.latencies_ns, strict=True) if low <= s <= high]
    arrivals = [s + lat for f in expected for s, lat in zip(f.stamps_ns, f.latencies_ns, strict=True)]
    span = (max(arrivals) - min(arrivals)) / 1e9 if len(arrivals) > 1 else math.nan
    delivered = len(latencies)
    cpu = {role: cpu_after.get(role, 0.0) - cpu_before.get(role, 0.0) for role in cpu_after}
    per_thousand = {role: seconds / delivered * 1000 for role, seconds in cpu.items()} if delivered else {}
    peak = {
        key: max((sum(p[key] for p in sample.values()) for sample in resource_samples), default=0)
        for key in ("rss_kib", "fds")
    }
    runs_ok = sum(1 for r in records if not r.error and all(f.end == "completed" for f in r.followers))
    writes = {key: (writes_after[key] - writes_before.get(key, 0)) / max(1, len(records)) for key in writes_after}
    return {
        "n": n,
        "runs": len(records),
        "runs_ok": runs_ok,
        "run_errors": Counter(r.error for r in records if r.error),
        "follower_ends": dict(ends),
        "followers": len(followers),
        "followers_expecting_tokens": len(expected),
        # langgraph dev: protocol-v2 followers of runs made through POST /runs (it sends them no tokens).
        "followers_without_tokens": len(followers) - len(expected),
        "tokens_to_those": sum(len(f.indices) for f in followers if not f.expects_tokens),
        "tokens_per_follower": tokens,
        "delivered": delivered,
        "missing": checks["missing"],
        "duplicated": checks["duplicated"],
        "reordered": checks["reordered"],
        "unexpected": checks["unexpected"],
        "p50_ms": _ms(latencies, 50),
        "p99_ms": _ms(latencies, 99),
        "max_ms": max(latencies) / 1e6 if latencies else math.nan,
        "steady_tokens": len(steady),
        "steady_p99_ms": _ms(steady, 99),
        "v2_to_event_p50_ms": _ms(to_event := [x for f in expected for x in f.to_event_ns], 50),
        "v2_to_event_p99_ms": _ms(to_event, 99),
        "kinds": {
            kind: {"count": len(values), "p50_ms": _ms(values, 50), "p99_ms": _ms(values, 99)}
            for kind, values in by_kind.items()
            if values
        },
        "events_per_s": delivered / span if span and span > 0 else math.nan,
        "wall_seconds": level["wall_seconds"],
        "cut": level["cut"],
        "cpu_seconds": cpu,
        "cpu_per_1k": per_thousand,
        "driver_cpu_seconds": driver_cpu,
        "driver_core_share": driver_cpu / level["wall_seconds"],
        "machine_busy": machine_busy,
        "loop_lag_p99_ms": percentile(level["loop_lag_ms"], 99) if level["loop_lag_ms"] else math.nan,
        "peak_rss_mib": peak["rss_kib"] / 1024,
        "peak_fds": peak["fds"],
        "resource_samples": resource_samples,
        "writes_per_run": writes,
        "start_ms_median": statistics.median(starts)
        if (starts := [r.start_ms for r in records if r.run_id])
        else math.nan,
        "raw": [
            {
                "run": f.run,
                "kind": f.kind,
                "server": f.server,
                "end": f.end,
                "indices": f.indices,
                "latency_ms": [round(lat / 1e6, 2) for lat in f.latencies_ns],
                "stamp_ms": [round(s / 1e6 % 1e6, 2) for s in f.stamps_ns],
                "to_event_ms": [round(lat / 1e6, 2) for lat in f.to_event_ns],
            }
            for f in followers
        ],
    }


def passes_limit(row: dict) -> bool:
    """Whether this level is past the target: p99 over 250 ms, or a run that did not finish."""
    return not row["p99_ms"] <= LIMIT_MS or row["cut"] > 0 or row["runs_ok"] < row["runs"]


def _num(value: float, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:,.{digits}f}"


HEADER = (
    f"{'N':>5} {'runs ok':>9} {'tokens':>9} {'miss':>5} {'dup':>4} {'ord':>4} "
    f"{'p50 ms':>7} {'p99 ms':>7} {'steady':>7} {'v2 p99':>7} {'2nd p99':>7} "
    f"{'ev/s':>7} {'CPU/1k':>7} {'+db':>6} {'RSS MiB':>8} {'fds':>5} {'rows/run':>8} {'tx/run':>7} "
    f"{'ev99':>6} {'busy':>5} {'client':>6} {'lag99':>6}"
)


def level_line(row: dict) -> str:
    kinds = row["kinds"]
    second = kinds.get("classic") or kinds.get("v2-ws") or {}
    per_1k = row["cpu_per_1k"]
    backing = per_1k.get("postgres", 0.0) + per_1k.get("redis", 0.0) if per_1k else math.nan
    writes = row["writes_per_run"]
    return (
        f"{row['n']:>5} {row['runs_ok']:>4}/{row['runs']:<4} {row['delivered']:>9,} {row['missing']:>5} "
        f"{row['duplicated']:>4} {row['reordered']:>4} {_num(row['p50_ms']):>7} {_num(row['p99_ms']):>7} "
        f"{_num(row['steady_p99_ms']):>7} {_num(kinds.get('v2-sse', {}).get('p99_ms', math.nan)):>7} "
        f"{_num(second.get('p99_ms', math.nan)):>7} {_num(row['events_per_s'], 0):>7} "
        f"{_num(per_1k.get('server', math.nan), 2):>7} {_num(backing, 2) if backing else '–':>6} "
        f"{_num(row['peak_rss_mib'], 0):>8} {row['peak_fds']:>5} {_num(writes.get('rows', math.nan), 0):>8} "
        f"{_num(writes.get('commits', math.nan), 0):>7} {_num(row['v2_to_event_p99_ms'], 0):>6} "
        f"{row['machine_busy'] * 100:>4.0f}% {row['driver_core_share'] * 100:>5.0f}% "
        f"{_num(row['loop_lag_p99_ms'], 0):>6}"
    )


def print_target(result: dict) -> None:
    print(f"\n== {result['label']} [{result['name']}]")
    print(HEADER)
    for row in result["levels"]:
        print(level_line(row))
    for row in result["levels"]:
        problems = dict(row["run_errors"])
        ends = {end: count for end, count in row["follower_ends"].items() if end != "completed"}
        if problems or ends or row["unexpected"]:
            print(
                f"  N={row['n']}: run errors {problems or 'none'}; follower ends other than completed {ends or 'none'}"
            )
    for row in result["levels"][:1]:
        if row["followers_without_tokens"]:
            print(
                f"  protocol-v2 followers of runs made through POST /runs get no tokens here (not counted as missing;"
                f" they got {row['tokens_to_those']} at N={row['n']}): only run.start runs stream tokens on v2"
            )
    print(f"  p99 passes {LIMIT_MS:.0f} ms at: {limit_text(result)}")


def limit_text(result: dict) -> str:
    past = [row["n"] for row in result["levels"] if passes_limit(row)]
    if past:
        return f"N = {past[0]:,}"
    tried = result["levels"][-1]["n"] if result["levels"] else 0
    return f"not reached (up to N = {tried:,})"


def print_comparison(results: list[dict]) -> None:
    """Per N, each of ours against ``langgraph dev``: p99, CPU per 1,000 events (server only) and events/s."""
    reference = next((r for r in results if r["name"] == "dev"), None)
    if reference is None:
        return
    ref_rows = {row["n"]: row for row in reference["levels"]}
    print("\nOurs / langgraph dev, per N (ratios < 1: ours lower; events/s > 1: ours delivered more)")
    print(
        f"{'target':<12} {'N':>5} {'p99 ms':>8} {'dev':>8} {'ratio':>7} {'CPU/1k':>7} {'dev':>7} {'ratio':>7} "
        f"{'ev/s':>7} {'dev':>7} {'ratio':>7}"
    )
    for result in results:
        if result["name"] == "dev":
            continue
        for row in result["levels"]:
            ref = ref_rows.get(row["n"])
            if ref is None:
                continue
            ours_cpu, ref_cpu = row["cpu_per_1k"].get("server", math.nan), ref["cpu_per_1k"].get("server", math.nan)
            print(
                f"{result['name']:<12} {row['n']:>5} {_num(row['p99_ms']):>8} {_num(ref['p99_ms']):>8} "
                f"{_ratio(row['p99_ms'], ref['p99_ms']):>7} {_num(ours_cpu, 2):>7} {_num(ref_cpu, 2):>7} "
                f"{_ratio(ours_cpu, ref_cpu):>7} {_num(row['events_per_s'], 0):>7} "
                f"{_num(ref['events_per_s'], 0):>7} {_ratio(row['events_per_s'], ref['events_per_s']):>7}"
            )


def _ratio(a: float, b: float) -> str:
    if not a or not b or math.isnan(a) or math.isnan(b):
        return "–"
    return f"{a / b:.2f}x"
