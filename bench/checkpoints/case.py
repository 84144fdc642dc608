"""One benchmark case in its own process: write a thread, or read it through the routes.

The parent (``bench.checkpoints.__main__``) starts this module with a config
file naming the backend, the channel mode and the history cache, because the
mode is frozen per process exactly as in production. Phases:

- ``write``: migrate, create the thread through ``POST /threads``, run N demo
  agent turns through the process's saver (timed per turn), measure storage;
- ``read``: time ``GET /state`` and ``POST /history`` (limit 10 and 100) through
  Django's full request stack (middleware, API-key auth, DRF views, the
  accessor) and check the materialized messages.

Usage: ``python -m bench.checkpoints.case <spec.json> <result.json>``.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

THREAD_ID = "bench-thread"
USERNAME = "bench"


def setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deerflow_site.settings")
    import django

    django.setup()


def api_client(key: str):
    from django.test import Client

    return Client(HTTP_X_API_KEY=key)


def key_file(spec: dict[str, Any]) -> Path:
    return Path(spec["workdir"]) / "api_key"


# -- write phase -------------------------------------------------------------------


def prepare(spec: dict[str, Any]) -> str:
    """Migrate the fresh database, create an API key and the thread; return the key."""
    from django.core.management import call_command

    from deerflow_site.services import api_key_create

    call_command("migrate", interactive=False, verbosity=0)
    _, key = api_key_create(username=USERNAME)
    key_file(spec).write_text(key)
    response = api_client(key).post("/api/threads", {"thread_id": THREAD_ID}, content_type="application/json")
    assert response.status_code == 200, response.content
    return key


class SaverClock:
    """Time the saver calls a turn makes: reads (head and delta history) and stores (put, put_writes).

    Wraps the bound saver instance's methods (``functools.wraps`` keeps the
    signatures LangGraph inspects); stores run on LangGraph's background
    threads, all finished when ``invoke`` returns.
    """

    READS = ("get_tuple", "get_delta_channel_history")
    STORES = ("put", "put_writes")

    def __init__(self, saver) -> None:
        self.totals = {"read": 0.0, "store": 0.0}
        self.lock = threading.Lock()
        for kind, names in (("read", self.READS), ("store", self.STORES)):
            for name in names:
                setattr(saver, name, self._timed(kind, getattr(saver, name)))

    def _timed(self, kind: str, method):
        @functools.wraps(method)
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                with self.lock:
                    self.totals[kind] += (time.perf_counter() - started) * 1000

        return timed

    def take(self) -> dict[str, float]:
        with self.lock:
            totals, self.totals = self.totals, {"read": 0.0, "store": 0.0}
        return totals


def write_turns(turns: int) -> dict[str, list[float]]:
    """Run the demo agent ``turns`` times on the thread; return per-turn ms (total, saver reads, saver stores)."""
    from langchain_core.messages import HumanMessage

    from bench.checkpoints.workload import human_text
    from checkpoints.accessor import state_accessor

    accessor = state_accessor("lead_agent")
    clock = SaverClock(accessor.saver)
    series: dict[str, list[float]] = {"write_ms": [], "saver_read_ms": [], "saver_store_ms": []}
    for turn in range(turns):
        config = accessor.config(THREAD_ID)
        started = time.perf_counter()
        accessor.graph.invoke({"messages": [HumanMessage(content=human_text(turn))]}, config)
        series["write_ms"].append((time.perf_counter() - started) * 1000)
        totals = clock.take()
        series["saver_read_ms"].append(totals["read"])
        series["saver_store_ms"].append(totals["store"])
    return series


SQLITE_TABLES = ("checkpoints", "writes")
POSTGRES_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes", "checkpoint_migrations")


def sqlite_bytes(path: str) -> dict[str, int]:
    """Return the checkpoint tables' bytes (dbstat pages incl. indexes) once the WAL is folded in.

    The savers keep their connections open, so the WAL is checkpointed
    (TRUNCATE) first: its pages then count in the tables they belong to.
    """
    import sqlite3

    wal = Path(f"{path}-wal")
    wal_before = wal.stat().st_size if wal.exists() else 0
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        rows = conn.execute(
            "SELECT s.tbl_name, SUM(d.pgsize) FROM dbstat d JOIN sqlite_schema s ON d.name = s.name GROUP BY s.tbl_name"
        ).fetchall()
    finally:
        conn.close()
    tables = {name: size for name, size in rows if name in SQLITE_TABLES}
    wal_after = wal.stat().st_size if wal.exists() else 0
    return {
        "stored": sum(tables.values()) + wal_after,
        "tables": tables,
        "wal_before_checkpoint": wal_before,
        "file": Path(path).stat().st_size + wal_after,
    }


def postgres_bytes() -> dict[str, int]:
    """Return ``pg_total_relation_size`` (heap, TOAST, indexes) of LangGraph's checkpoint tables."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT t, pg_total_relation_size(t::regclass) FROM unnest(%s::text[]) AS t", [list(POSTGRES_TABLES)]
        )
        tables = dict(cursor.fetchall())
    return {"stored": sum(tables.values()), "tables": tables}


def stored_bytes() -> dict[str, int]:
    from checkpoints.backend import current_backend

    backend = current_backend()
    return sqlite_bytes(backend.sqlite_path) if backend.kind == "sqlite" else postgres_bytes()


def run_write(spec: dict[str, Any]) -> dict[str, Any]:
    prepare(spec)
    return {**write_turns(spec["turns"]), "bytes": stored_bytes()}


# -- read phase ---------------------------------------------------------------------


def timed(call, repetitions: int) -> tuple[list[float], Any]:
    """Return each call's milliseconds and the last response (which must be 200).

    The first sample is the cold one (empty history cache); the report uses
    the median of the others and keeps the cold one in the JSON.
    """
    samples, response = [], None
    for _ in range(repetitions + 1):
        started = time.perf_counter()
        response = call()
        body = response_body(response)  # a streamed answer is encoded as it is read: part of the time
        samples.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, body[:500]
    return samples, response


def response_body(response) -> bytes:
    """Return the whole body of a response, streamed (a large history) or not, once."""
    if not hasattr(response, "_bench_body"):
        response._bench_body = b"".join(response.streaming_content) if response.streaming else response.content
    return response._bench_body


def run_read(spec: dict[str, Any]) -> dict[str, Any]:
    from bench.checkpoints.workload import digest, expected_digest
    from checkpoints.accessor import state_accessor
    from checkpoints.history_cache import process_stats

    client = api_client(key_file(spec).read_text())
    reps = spec["repetitions"]
    # Compile the graph and load the URL conf first: reads no checkpoint, so the cache stays cold.
    state_accessor("lead_agent")
    assert client.get("/api/info").status_code == 200
    base = f"/api/threads/{THREAD_ID}"
    state_ms, state = timed(lambda: client.get(f"{base}/state"), reps["state"])
    reads = {"state": state_ms}
    history_digests = {}
    for limit in (10, 100):
        samples, response = timed(
            lambda limit=limit: client.post(f"{base}/history", {"limit": limit}, content_type="application/json"),
            reps[f"history_{limit}"],
        )
        reads[f"history_{limit}"] = samples
        entries = json.loads(response_body(response))
        history_digests[limit] = digest([m for e in entries for m in e["values"].get("messages", [])])
    messages = json.loads(response_body(state))["values"]["messages"]
    return {
        "reads_ms": reads,
        "state_digest": digest(messages),
        "history_digests": history_digests,
        "messages_ok": digest(messages) == expected_digest(spec["turns"]),
        "message_count": len(messages),
        "cache_counters": process_stats.snapshot(),
        "info": client.get("/api/info").json()["checkpoints"],
    }


def main(spec_path: str, result_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    setup_django()
    from checkpoints.runtime import close_sync_resources

    try:
        result = run_write(spec) if spec["phase"] == "write" else run_read(spec)
    finally:
        close_sync_resources()
    Path(result_path).write_text(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:3])
