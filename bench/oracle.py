"""Timing as an existence oracle: does another user's thread answer slower or faster than no thread at all?

    .venv/bin/python -m bench.oracle [--quick] [--samples 300] [--turns 50] [--backends sqlite,postgres]

The isolation matrix (``tests/test_isolation_matrix.py``) proves that another
user's thread and an id that exists nowhere get the same status and body.
What a test cannot prove is that they take the same time, so this measures
it, against a real server process (``make run``'s), over HTTP with httpx:
alice owns a thread of ``--turns`` demo-agent turns; bob asks for it and
for ids that exist nowhere, on every route that takes a thread id, the two
kinds interleaved in random order. Per route the table gives both medians,
their difference with a bootstrap 95 % interval, and the median of alice's
own reads of the same route (what reading it really costs, for scale).

An interval that holds 0 (or lies within a fraction of a millisecond, far
below the network jitter any real attacker faces) says the timing tells
nothing; a difference the size of alice's own read would be an oracle.
PostgreSQL runs when ``DATABASE_URL`` is set, on a throwaway database.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from tests.live.server import LiveServer, serving

ROUTES = (
    ("GET", "/threads/{id}", None),
    ("GET", "/threads/{id}/state", None),
    ("POST", "/threads/{id}/history", {"limit": 10}),
    ("GET", "/threads/{id}/runs", None),
    ("POST", "/threads/{id}/runs/wait", {"assistant_id": "lead_agent", "input": {"messages": []}}),
    # Protocol-v2 commands answer 200 envelopes: the body must match too (tests/test_isolation_matrix.py).
    (
        "POST",
        "/threads/{id}/commands",
        {"id": 1, "method": "subscription.subscribe", "params": {"channels": ["values"]}},
    ),
    ("POST", "/threads/{id}/commands", {"id": 1, "method": "state.get", "params": {}}),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.oracle", description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=300, help="per route and kind (default 300)")
    parser.add_argument("--turns", type=int, default=50, help="turns in alice's thread (default 50)")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="60 samples, 10 turns: a sanity run")
    args = parser.parse_args(argv)
    if args.quick:
        args.samples, args.turns = 60, 10
    return args


def timed(http: httpx.Client, method: str, path: str, body) -> tuple[float, int]:
    started = time.perf_counter()
    answer = http.request(method, path, json=body)
    return (time.perf_counter() - started) * 1000, answer.status_code


def bootstrap_interval(a: list[float], b: list[float], rng: random.Random, rounds: int = 2000) -> tuple[float, float]:
    """A 95 % interval of median(a) - median(b), resampling both."""
    diffs = sorted(
        statistics.median(rng.choices(a, k=len(a))) - statistics.median(rng.choices(b, k=len(b))) for _ in range(rounds)
    )
    return diffs[int(rounds * 0.025)], diffs[int(rounds * 0.975)]


def measure(server: LiveServer, args: argparse.Namespace) -> list[dict]:
    rng = random.Random(args.seed)
    base = server.url
    alice = httpx.Client(base_url=base, headers={"x-api-key": server.api_key("alice")}, timeout=60)
    bob = httpx.Client(base_url=base, headers={"x-api-key": server.api_key("bob")}, timeout=60)
    thread = alice.post("/threads", json={}).json()["thread_id"]
    for turn in range(args.turns):
        body = {"assistant_id": "lead_agent", "input": {"messages": [{"role": "user", "content": f"turn {turn}"}]}}
        assert alice.post(f"/threads/{thread}/runs/wait", json=body).status_code == 200
    rows = []
    for method, route, body in ROUTES:
        plan = ["other"] * args.samples + ["missing"] * args.samples + ["own"] * (args.samples // 3)
        rng.shuffle(plan)
        samples: dict[str, list[float]] = {"other": [], "missing": [], "own": []}
        statuses: dict[str, set[int]] = {"other": set(), "missing": set(), "own": set()}
        # Warm-up: the first requests of a route pay imports and caches.
        for _ in range(5):
            timed(bob, method, route.format(id=thread), body)
        for kind in plan:
            if kind == "own" and method == "POST" and route.endswith("/wait"):
                continue  # alice's wait would run the graph: not a read
            client = alice if kind == "own" else bob
            target = str(uuid.uuid4()) if kind == "missing" else thread
            ms, status = timed(client, method, route.format(id=target), body)
            samples[kind].append(ms)
            statuses[kind].add(status)
        low, high = bootstrap_interval(samples["other"], samples["missing"], rng)
        rows.append(
            {
                "route": f"{method} {route}" + (f" {body['method']}" if body and "method" in body else ""),
                "other_ms": statistics.median(samples["other"]),
                "missing_ms": statistics.median(samples["missing"]),
                "low": low,
                "high": high,
                "own_ms": statistics.median(samples["own"]) if samples["own"] else None,
                "statuses": {k: sorted(v) for k, v in statuses.items()},
            }
        )
    return rows


def print_table(name: str, rows: list[dict]) -> None:
    print(f"\n== {name}: bob reads alice's thread ('other') or an id that exists nowhere ('missing')")
    print(f"{'route':34}{'other ms':>10}{'missing ms':>12}{'diff 95% CI ms':>20}{'own ms':>9}  statuses")
    for row in rows:
        own = f"{row['own_ms']:.2f}" if row["own_ms"] is not None else "–"
        interval = f"[{row['low']:+.2f}, {row['high']:+.2f}]"
        statuses = f"other {row['statuses']['other']}, missing {row['statuses']['missing']}"
        print(f"{row['route']:34}{row['other_ms']:10.2f}{row['missing_ms']:12.2f}{interval:>20}{own:>9}  {statuses}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    database_url = os.environ.get("DATABASE_URL")
    with tempfile.TemporaryDirectory(prefix="bench-oracle-") as tmp:
        for name in args.backends.split(","):
            if name == "postgres" and not database_url:
                print("postgres: skipped (DATABASE_URL not set)")
                continue
            with serving(Path(tmp), name, postgres_base=database_url) as server:
                print_table(name, measure(server, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
