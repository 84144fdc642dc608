"""History and state reads against the byte floor: old path vs new path vs orjson.

    .venv/bin/python -m bench.reads [--quick] [--turns 200] [--modes full,delta] [--backends sqlite,postgres] [--reps 7]

For each backend and mode, one process writes a thread of N demo-agent turns
(``bench.checkpoints``' write phase: ~500-character messages), another reads
it in-process through Django's whole request stack. Each row alternates, in
the same process, three ways of producing the same response:

- ``old``: the same route with the previous decoding and encoding
  (``thread_state`` per snapshot, no shared decodes, DRF's JSON renderer),
  kept here as the reference;
- ``uncached``: the route as it is now with the encoded-state cache off
  (``checkpoint_state_cache.max_mb: 0``): what a state never read before costs;
- ``cached``: the route as it is now, the cache warm (the warm-up filled it):
  what a re-read costs (a frontend reopening a thread, a console page);
- ``floor``: ``orjson.dumps`` of the parsed response (the bytes alone).

Medians of ``--reps`` samples after one warm-up. The table gives the ratios
to the floor; the raw samples go to ``bench/results/reads-<time>.json``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.checkpoints.__main__ import ROOT, case_database, postgres_available, postgres_base_url, run_case

THREAD_ID = "bench-thread"
ROWS = (("state", None), ("history", 10), ("history", 100), ("history", 1000))
WAYS = ("old", "uncached", "cached", "floor")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.reads", description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--modes", default="full,delta")
    parser.add_argument("--backends", default="sqlite")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="50 turns, 2 repetitions: a sanity run")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    if args.quick:
        args.turns, args.reps = 50, 2
    return args


# -- the read process --------------------------------------------------------------


class PlainEncoder:
    """The previous view code: ``thread_state`` per snapshot through DRF's JSON renderer (the reference)."""

    def state(self, snapshot, select=None) -> bytes:
        from rest_framework.renderers import JSONRenderer

        from checkpoints.serialization import thread_state

        return JSONRenderer().render(thread_state(snapshot))

    def states(self, snapshots, select=None):
        from rest_framework.renderers import JSONRenderer

        from checkpoints.serialization import thread_state

        yield JSONRenderer().render([thread_state(s) for s in snapshots])


def old_response(client, path: str, limit: int | None) -> bytes:
    """Answer through the same route and request stack with the previous decoding and encoding."""
    from contextlib import nullcontext
    from unittest import mock

    from checkpoints import accessor

    with (
        mock.patch.object(accessor, "StateEncoder", PlainEncoder),
        mock.patch.object(accessor, "shared_decodes", nullcontext),
    ):
        return uncached_response(client, path, limit)


def uncached_response(client, path: str, limit: int | None) -> bytes:
    """Answer through the route as it is, the encoded-state cache off for the call."""
    from django.conf import settings

    database = settings.DEERFLOW_CONFIG.database
    bound, database.checkpoint_state_cache.max_mb = database.checkpoint_state_cache.max_mb, 0
    try:
        return new_response(client, path, limit)
    finally:
        database.checkpoint_state_cache.max_mb = bound


def new_response(client, path: str, limit: int | None) -> bytes:
    if limit is None:
        response = client.get(path)
    else:
        response = client.post(path, {"limit": limit}, content_type="application/json")
    assert response.status_code == 200, response.status_code
    return b"".join(response.streaming_content) if response.streaming else response.content


def read_main(spec: dict[str, Any]) -> dict[str, Any]:
    import orjson

    from bench.checkpoints.case import api_client, key_file

    client = api_client(key_file(spec).read_text())
    base = f"/api/threads/{THREAD_ID}"
    rows: dict[str, Any] = {}
    for route, limit in ROWS:
        path = f"{base}/state" if limit is None else f"{base}/history"
        name = route if limit is None else f"{route}_{limit}"
        parsed = json.loads(new_response(client, path, limit))
        equal = (
            parsed
            == json.loads(old_response(client, path, limit))
            == json.loads(uncached_response(client, path, limit))
        )
        samples: dict[str, list[float]] = {way: [] for way in WAYS}
        calls = {
            "old": functools.partial(old_response, client, path, limit),
            "uncached": functools.partial(uncached_response, client, path, limit),
            "cached": functools.partial(new_response, client, path, limit),
            "floor": functools.partial(orjson.dumps, parsed),
        }
        for rep in range(spec["reps"] + 1):
            order = WAYS if rep % 2 else ("cached", "uncached", "old", "floor")
            for way in order:
                started = time.perf_counter()
                size = len(calls[way]())
                if rep:
                    samples[way].append((time.perf_counter() - started) * 1000)
        rows[name] = {"samples": samples, "bytes": size, "equal": equal}
    return rows


# -- the driver ---------------------------------------------------------------------


def run_read(workdir: Path, database, env, spec: dict[str, Any]) -> dict[str, Any]:
    import yaml

    config = {"database": {**database, "checkpoint_channel_mode": spec["mode"]}}
    config_path = workdir / "config-reads.yaml"
    config_path.write_text(yaml.safe_dump(config))
    spec_path, result_path = workdir / "reads-spec.json", workdir / "reads-result.json"
    spec_path.write_text(json.dumps({**spec, "workdir": str(workdir)}))
    child_env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    child_env.update(DEERFLOW_CONFIG=str(config_path), DEERFLOW_VAR_DIR=str(workdir / "var"), **env)
    child_env.pop("DJANGO_DEBUG", None)
    command = [sys.executable, "-m", "bench.reads", "--child", str(spec_path), str(result_path)]
    completed = subprocess.run(command, cwd=ROOT, env=child_env, capture_output=True, text=True)
    if completed.returncode:
        raise RuntimeError(f"read {spec} failed:\n{completed.stdout[-2000:]}\n{completed.stderr[-4000:]}")
    return json.loads(result_path.read_text())


def print_table(results: list[dict[str, Any]]) -> None:
    header = (
        f"{'backend':>8} {'mode':>5} {'row':>12} {'MB':>6} {'old ms':>8} {'uncached':>9} {'cached':>8}"
        f" {'floor ms':>8} {'uncached/floor':>14} {'cached/floor':>12} equal"
    )
    print(header)
    print("-" * len(header))
    for result in results:
        for name, row in result["rows"].items():
            old, uncached, cached, floor = (statistics.median(row["samples"][way]) for way in WAYS)
            print(
                f"{result['backend']:>8} {result['mode']:>5} {name:>12} {row['bytes'] / 1e6:6.2f} {old:8.1f}"
                f" {uncached:9.1f} {cached:8.1f} {floor:8.2f} {uncached / floor:13.1f}x {cached / floor:11.1f}x"
                f" {'ok' if row['equal'] else 'DIFF'}"
            )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-reads-") as tmp:
        for backend in args.backends.split(","):
            if backend == "postgres" and (why := postgres_available(postgres_base_url())):
                print(f"postgres skipped: {why}")
                continue
            for mode in args.modes.split(","):
                workdir = Path(tmp) / f"{backend}-{mode}"
                workdir.mkdir()
                print(f"  {backend} {mode}: writing {args.turns} turns …", flush=True)
                with case_database(backend, workdir) as (database, env):
                    base = {"mode": mode, "turns": args.turns, "repetitions": {}}
                    run_case(workdir, database, env, {**base, "phase": "write"})
                    rows = run_read(workdir, database, env, {"mode": mode, "reps": args.reps})
                results.append({"backend": backend, "mode": mode, "turns": args.turns, "rows": rows})
    print_table(results)
    output = args.output or ROOT / "bench" / "results" / f"reads-{time.strftime('%Y%m%d-%H%M%S')}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results))
    return 0 if all(row["equal"] for r in results for row in r["rows"].values()) else 1


def child(spec_path: str, result_path: str) -> None:
    from bench.checkpoints.case import setup_django

    spec = json.loads(Path(spec_path).read_text())
    setup_django()
    from checkpoints.runtime import close_sync_resources

    try:
        result = read_main(spec)
    finally:
        close_sync_resources()
    Path(result_path).write_text(json.dumps(result))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(*sys.argv[2:4])
    else:
        sys.exit(main())
