"""What custom auth costs a request: the same routes with our API key and with a langgraph.json ``auth.path``.

    .venv/bin/python -m bench.auth_cost [--requests 300] [--threads 50]

One process, SQLite in a temporary folder, Django's whole request stack
(middleware, authentication, DRF views) through its test client, no network.
Each route is called ``--requests`` times per side, alternating sides in
rounds of 50, after a warm-up. The custom side is
``tests/fixtures/custom_auth`` (``Authorization: Bearer <user>:<org>``, an
async authenticate handler, a threads handler returning an ``org_id``
filter): its cost is the handler calls (authenticate, then the route's
``@auth.on``) and the filter in SQL, with ``auth.cache`` off and on.
Reported: median and p95 per request and custom ÷ API key.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from bench.in_process import setup_sqlite_django

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "tests" / "fixtures" / "custom_auth"
ROUND = 50


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.auth_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--threads", type=int, default=50, help="threads each side's user owns")
    parser.add_argument("--quick", action="store_true", help="100 requests: a sanity run")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests = 100
    return args


def _timed(call, client, count: int) -> list[float]:
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        response = call(client)
        samples.append(time.perf_counter() - started)
        assert response.status_code == 200, response.content[:200]
    return samples


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    config = setup_sqlite_django("bench-auth-cost-") / "config.yaml"
    from django.conf import settings
    from rest_framework.test import APIClient

    from deerflow_site.config import parse_config
    from deerflow_site.custom_auth import AuthCache
    from deerflow_site.services import api_key_create

    _, key = api_key_create(username="keyed")
    keyed = APIClient(HTTP_X_API_KEY=key)
    bearer = APIClient(HTTP_AUTHORIZATION="Bearer alice:acme")
    loaded = parse_config({"langgraph_json": str(PROJECT / "langgraph.json")}, source=config).graph_sources().auth
    assert loaded is not None
    cached = AuthCache(cache_keys=("authorization",), ttl_seconds=600, max_size=100)
    sides = {
        "API key": (keyed, None),
        "custom auth": (bearer, loaded),
        "custom auth, auth.cache": (bearer, type(loaded)(**{**loaded.__dict__, "cache": cached})),
    }
    for client, auth in sides.values():
        settings.DEERFLOW = {**settings.DEERFLOW, "AUTH": auth}
        for _ in range(args.threads):
            assert client.post("/api/threads", {}, format="json").status_code == 200
    routes = {
        "POST /threads/search": lambda c: c.post("/api/threads/search", {"limit": 10}, format="json"),
        "GET /threads/{id}": lambda c: c.get(f"/api/threads/{c.thread_id}"),
        "GET /info": lambda c: c.get("/api/info"),
    }
    for client, auth in sides.values():
        settings.DEERFLOW = {**settings.DEERFLOW, "AUTH": auth}
        client.thread_id = client.post("/api/threads/search", {"limit": 1}, format="json").json()[0]["thread_id"]
    samples: dict[tuple[str, str], list[float]] = {}
    for route, call in routes.items():
        for client, auth in sides.values():  # warm-up
            settings.DEERFLOW = {**settings.DEERFLOW, "AUTH": auth}
            _timed(call, client, 10)
        for _ in range(max(1, args.requests // ROUND)):
            for side, (client, auth) in sides.items():
                settings.DEERFLOW = {**settings.DEERFLOW, "AUTH": auth}
                samples.setdefault((route, side), []).extend(_timed(call, client, ROUND))
    print(f"Per request, Django test client, SQLite, {args.threads} threads per user ({args.requests} requests a cell)")
    print(f"{'route':24} {'side':26} {'median ms':>10} {'p95 ms':>8} {'÷ API key':>10}")
    for route in routes:
        base = statistics.median(samples[(route, "API key")])
        for side in sides:
            cell = sorted(samples[(route, side)])
            median = statistics.median(cell)
            p95 = cell[int(len(cell) * 0.95) - 1]
            print(f"{route:24} {side:26} {median * 1000:>10.2f} {p95 * 1000:>8.2f} {median / base:>9.2f}x")


if __name__ == "__main__":
    main()
