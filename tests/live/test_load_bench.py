"""The load benchmark (``bench.load``) works: a few operations on 1 and 2 servers give its tables, with no error.

SQLite and the Redis of REDIS_URL, in the SQLite pass only: it checks the
benchmark, not the backend (the PostgreSQL pass is the longer one, and
runs the soak); a handful of operations per phase and 6 streams, so a broken
operation, a configuration that does not start or a table that lost a row
fails here rather than in a 13-minute run.
"""

from __future__ import annotations

import json

import pytest

from bench.load.__main__ import main
from bench.load.report import op_rows, resource_verdict
from bench.load.workload import MIX
from tests.live.support import REDIS_URL

pytestmark = [pytest.mark.live, pytest.mark.sqlite_only]


async def test_a_small_run_measures_every_operation_on_one_and_two_servers(tmp_path, capsys):
    if not REDIS_URL:
        pytest.skip("needs Redis: set REDIS_URL")
    backend = "sqlite"
    output = tmp_path / "load.json"
    argv = ["--backends", backend, "--clients", "2", "--ops", "24", "--rounds", "2", "--streams", "6"]
    results = await main([*argv, "--redis-url", REDIS_URL, "--output", str(output), "--seed", "2"])
    table = capsys.readouterr().out

    assert [(r["backend"], r["processes"]) for r in results] == [(backend, 1), (backend, 2)]
    for result in results:
        phases = result["phases"]
        assert list(phases) == ["mix", "waits only, 1 client", "waits only, 2 clients"]
        rows = {row["op"]: row for row in op_rows(phases["mix"])}
        assert set(rows) == {*MIX, "threads.create", "all"}, table
        assert all(row["count"] > 0 and row["errors"] == 0 for row in rows.values()), table
        for label in ("waits only, 1 client", "waits only, 2 clients"):
            assert phases[label]["errors"] == {}, table
            assert len(phases[label]["latencies_ms"]["runs.wait"]) == 24
        assert set(phases["mix"]["cpu_seconds"]) >= {"server0", "worker", "driver"}
        resources = result["resources"]
        assert resources["ok"] == 6 and resources["errors"] == {}, table
        roles = [f"server{i}" for i in range(result["processes"])] + ["worker"]
        assert list(resources["samples"]) == roles
        for samples in resources["samples"].values():
            assert [s["streams"] for s in samples] == [0, 2, 3, 4, 6]
            assert resource_verdict(samples) == "bounded"
    assert f"{backend} × 2 processes" in table and f"{backend}: 2 processes / 1:" in table
    assert json.loads(output.read_text())["results"][1]["processes"] == 2
