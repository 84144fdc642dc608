"""Semantic Store search (langgraph.json ``store.index``) at 10,000 and 100,000 items, on both backends.

    .venv/bin/python -m bench.store_search [--items 10000,100000] [--dims 384] [--queries 30] [--quick]

The Stores as the server builds them (``checkpoints.store_index``): SQLite
with sqlite-vec where the interpreter loads extensions, else our numpy
``vec_distance_cosine``; PostgreSQL with pgvector where the database has it,
else the exact ``store_cosine_distance`` scan. Each case loads ``--items``
items of one user (one text field each; the embedding is a deterministic
unit vector per text, so the model costs nothing and only the Store is
measured), then times ``--queries`` searches of 10 results with a query,
and the same searches without one (newest first, the unranked floor), and
reports p50/p95 and their ratio. The worst case on purpose: every item sits
under the searched prefix, so the scan covers all of them. PostgreSQL is a
throwaway database next to ``DATABASE_URL``; SQLite a temporary file.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import tempfile
import time
import zlib
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from langgraph.store.base import PutOp
from langgraph.store.base.embed import ensure_embeddings

from bench.pg_saver import PG_KWARGS, throwaway_database
from checkpoints.store_index import (
    PG_FLAVOUR_SQL,
    StoreIndex,
    can_load_sqlite_extensions,
    exact_postgres_stores,
    postgres_flavour,
    prepare_sqlite,
    sqlite_stores,
)

NAMESPACE = ("users", "1", "memories")
LOAD_BATCH = 1000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.store_search", description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", default="10000,100000")
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--database-url", default="")
    parser.add_argument("--quick", action="store_true", help="1,000 items, 5 queries: a sanity run")
    args = parser.parse_args(argv)
    if args.quick:
        args.items, args.queries = "1000", 5
    args.items = [int(n) for n in args.items.split(",")]
    args.backends = args.backends.split(",")
    return args


def embedder(dims: int):
    def embed(texts: list[str]) -> list[list[float]]:
        return [np.random.default_rng(zlib.crc32(t.encode())).standard_normal(dims).tolist() for t in texts]

    return embed


@contextmanager
def sqlite_store(index: StoreIndex):
    with tempfile.TemporaryDirectory() as folder:
        conn = sqlite3.connect(Path(folder) / "store.db", isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        prepare_sqlite(conn)
        store = sqlite_stores()[0](conn, index=index.config())
        store.setup()
        flavour = "sqlite-vec" if can_load_sqlite_extensions() else "numpy scoring"
        try:
            yield store, flavour
        finally:
            conn.close()


@contextmanager
def postgres_store(index: StoreIndex, base_url: str):
    from langgraph.store.postgres import PostgresStore
    from psycopg_pool import ConnectionPool

    with throwaway_database(base_url) as url, ConnectionPool(url, kwargs=PG_KWARGS, min_size=1, max_size=2) as pool:
        with pool.connection() as conn:
            flavour = postgres_flavour(conn.execute(PG_FLAVOUR_SQL).fetchone())
        store_class = PostgresStore if flavour == "pgvector" else exact_postgres_stores()[0]
        store = store_class(pool, index=index.config())
        store.setup()
        yield store, "pgvector" if flavour == "pgvector" else "exact scan"


def load(store, items: int) -> float:
    started = time.perf_counter()
    for first in range(0, items, LOAD_BATCH):
        store.batch(
            [
                PutOp(NAMESPACE, f"item-{n}", {"text": f"memory number {n} about topic {n % 97}"})
                for n in range(first, min(items, first + LOAD_BATCH))
            ]
        )
    return items / (time.perf_counter() - started)


def timed(fn, queries: int) -> list[float]:
    fn(0)  # warm-up, discarded
    samples = []
    for n in range(1, queries + 1):
        started = time.perf_counter()
        fn(n)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def p(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1] if len(samples) > 1 else samples[0]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    base_url = args.database_url or os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"
    index = StoreIndex(
        dims=args.dims, embed="bench", fields=["text"], embeddings=ensure_embeddings(embedder(args.dims))
    )
    rows = []
    for backend in args.backends:
        for items in args.items:
            opened = sqlite_store(index) if backend == "sqlite" else postgres_store(index, base_url)
            with opened as (store, flavour):
                rate = load(store, items)
                ranked = timed(
                    lambda n: store.search(NAMESPACE, query=f"topic {n % 97} memory", limit=10), args.queries
                )
                plain = timed(lambda n: store.search(NAMESPACE, limit=10), args.queries)
                rows.append((backend, flavour, items, rate, ranked, plain))
                print(
                    f"  {backend} {items}: loaded at {rate:,.0f} items/s, search p50 {p(ranked, 50):.1f} ms", flush=True
                )
    print(f"\nSemantic Store search, {args.dims} dimensions, 10 results, {args.queries} queries per row")
    print(
        f"{'backend':<9} {'scoring':<14} {'items':>8} {'load/s':>8} {'query p50':>10} {'p95':>8} "
        f"{'no query p50':>13} {'ratio':>7} {'µs/item':>8}"
    )
    for backend, flavour, items, rate, ranked, plain in rows:
        p50 = p(ranked, 50)
        print(
            f"{backend:<9} {flavour:<14} {items:>8,} {rate:>8,.0f} {p50:>8.1f}ms {p(ranked, 95):>6.1f}ms "
            f"{p(plain, 50):>11.2f}ms {p50 / p(plain, 50):>6.0f}× {p50 * 1000 / items:>8.2f}"
        )


if __name__ == "__main__":
    main()
