"""Checkpoint channel modes, measured: full vs delta on SQLite and PostgreSQL.

    .venv/bin/python -m bench.checkpoints [--quick] [--turns 50,200,1000] [--backends sqlite,postgres]

For each backend and thread length N, on a fresh database per mode:

- full: one process writes N demo-agent turns, another reads them;
- delta (cadence 10): one process writes, one reads with the history cache
  off (``max_entries: 0``) and one with it on (the default memory LRU).

Every case is its own process because the mode is frozen per process, as in
production. PostgreSQL comes from ``DATABASE_URL`` (default
postgresql://postgres@127.0.0.1:5432/test); each case creates and drops its own
throwaway database. Prints two tables with delta/full ratios and the targets;
the raw samples go to bench/results/checkpoints-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml

from bench.checkpoints.report import print_report
from bench.checkpoints.workload import estimated_full_bytes, expected_digest

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/test"
SNAPSHOT_FREQUENCY = 10
GIB = 1024**3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.checkpoints", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N = 20, 50 and few repetitions: a sanity run")
    parser.add_argument("--turns", default="50,200,1000", help="comma-separated thread lengths")
    parser.add_argument("--backends", default="sqlite,postgres", help="sqlite, postgres or both")
    parser.add_argument(
        "--size-cap-mb",
        type=float,
        default=GIB / 2**20,
        help="skip full mode when its estimated cumulative payload exceeds this (default 1024 MiB)",
    )
    parser.add_argument("--allow-large", action="store_true", help="ignore the size cap")
    parser.add_argument("--output", help="where to write the raw JSON (default bench/results/)")
    args = parser.parse_args(argv)
    if args.quick:
        args.turns = "20,50"
    args.turns = [int(n) for n in str(args.turns).split(",") if n]
    args.backends = [b for b in args.backends.split(",") if b]
    return args


def repetitions(turns: int, quick: bool) -> dict[str, int]:
    """Return read repetitions per route: fewer where one read deserializes thousands of messages."""
    if quick:
        return {"state": 5, "history_10": 5, "history_100": 3}
    if turns >= 1000:
        return {"state": 9, "history_10": 5, "history_100": 3}
    return {"state": 21, "history_10": 11, "history_100": 5}


# -- databases ------------------------------------------------------------------------


def postgres_base_url() -> str:
    return os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL


def postgres_available(url: str) -> str | None:
    """Return None when PostgreSQL answers, else why not."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=3):
            return None
    except psycopg.Error as exc:
        return str(exc).strip().splitlines()[0]


@contextmanager
def case_database(backend: str, workdir: Path):
    """Yield the ``database:`` config and env of a fresh database; drop it afterwards."""
    if backend == "sqlite":
        yield {"backend": "sqlite", "sqlite_dir": str(workdir / "data")}, {}
        return
    import psycopg

    base = urlsplit(postgres_base_url())
    name = f"bench_ckpt_{uuid.uuid4().hex[:10]}"
    admin = urlunsplit(base._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield {"backend": "postgres"}, {"DATABASE_URL": urlunsplit(base._replace(path=f"/{name}"))}
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- child processes --------------------------------------------------------------------


def run_case(workdir: Path, database: dict[str, Any], env_extra: dict[str, str], spec: dict[str, Any]) -> dict:
    """Run one phase in a fresh process configured like a production server; return its result."""
    cache = spec.pop("cache", "on")
    config = {
        "database": {
            **database,
            "checkpoint_channel_mode": spec["mode"],
            "checkpoint_delta": {"snapshot_frequency": SNAPSHOT_FREQUENCY},
            "checkpoint_cache": {"type": "memory", "max_entries": 128 if cache == "on" else 0},
        }
    }
    config_path = workdir / f"config-{spec['phase']}-{cache}.yaml"
    config_path.write_text(yaml.safe_dump(config))
    spec_path, result_path = workdir / "spec.json", workdir / "result.json"
    spec_path.write_text(json.dumps({**spec, "workdir": str(workdir)}))
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(DEERFLOW_CONFIG=str(config_path), DEERFLOW_VAR_DIR=str(workdir / "var"), **env_extra)
    env.pop("DJANGO_DEBUG", None)
    command = [sys.executable, "-m", "bench.checkpoints.case", str(spec_path), str(result_path)]
    completed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if completed.returncode:
        raise RuntimeError(f"case {spec} failed:\n{completed.stdout[-2000:]}\n{completed.stderr[-4000:]}")
    return json.loads(result_path.read_text())


def run_mode(backend: str, mode: str, turns: int, workdir: Path, quick: bool) -> dict[str, Any]:
    """Write a thread in ``mode`` on a fresh database and read it back (delta: cache off and on)."""
    workdir.mkdir(parents=True)
    reps = repetitions(turns, quick)
    with case_database(backend, workdir) as (database, env):
        base = {"mode": mode, "turns": turns, "repetitions": reps}
        result = {"write": run_case(workdir, database, env, {**base, "phase": "write"})}
        caches = ("off", "on") if mode == "delta" else ("on",)
        for cache in caches:
            result[f"read_cache_{cache}"] = run_case(workdir, database, env, {**base, "phase": "read", "cache": cache})
    return result


def run_cell(backend: str, turns: int, args: argparse.Namespace, root: Path, index: int) -> dict[str, Any]:
    """Run full and delta for one (backend, N); alternate their order between cells."""
    cell: dict[str, Any] = {"backend": backend, "turns": turns, "expected_digest": expected_digest(turns)}
    estimate = estimated_full_bytes(turns)
    skip_full = estimate > args.size_cap_mb * 2**20 and not args.allow_large
    modes = ["full", "delta"] if index % 2 == 0 else ["delta", "full"]
    for mode in modes:
        if mode == "full" and skip_full:
            cell["full_skipped"] = f"estimated {estimate / 2**20:,.0f} MiB > cap {args.size_cap_mb:,.0f} MiB"
            continue
        started = time.perf_counter()
        print(f"  {backend:8} N={turns:<5} {mode:5} …", end="", flush=True)
        cell[mode] = run_mode(backend, mode, turns, root / f"{backend}-{turns}-{mode}", args.quick)
        print(f" {time.perf_counter() - started:6.1f} s", flush=True)
    return cell


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    notes = []
    backends = list(args.backends)
    if "postgres" in backends and (reason := postgres_available(postgres_base_url())):
        backends.remove("postgres")
        notes.append(f"PostgreSQL skipped: {reason} (set DATABASE_URL)")
    cells = []
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as tmp:
        print(f"checkpoint bench: turns {args.turns}, backends {backends}, delta cadence {SNAPSHOT_FREQUENCY}")
        for backend in backends:
            for index, turns in enumerate(args.turns):
                cells.append(run_cell(backend, turns, args, Path(tmp), index))
    output = Path(args.output) if args.output else ROOT / "bench" / "results" / f"checkpoints-{int(time.time())}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({"args": vars(args), "cells": cells}, indent=1))
    ok = print_report(cells, notes)
    print(f"\nraw samples: {output}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
