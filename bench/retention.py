"""Retention, measured: retained bytes and history-read latency before and after snapshot thinning.

    .venv/bin/python -m bench.retention [--quick] [--turns 1000] [--backends sqlite,postgres]
                                        [--cadence 10] [--full-cap-mb 1024] [--output results.json]

For each backend, one process on a fresh database (SQLite in a temporary
folder; PostgreSQL in a throwaway database next to ``DATABASE_URL``, default
postgresql://postgres@127.0.0.1:5432/test, dropped afterwards) drives the real
demo graph through the accessor, one ``invoke`` per turn of ~500 characters
(``bench.checkpoints.workload``):

- full mode: N turns, then the thread's retained bytes (skipped, with a note,
  when the estimated payload passes ``--full-cap-mb``: full mode is quadratic);
- delta mode (``--cadence``): N turns; bytes and read latency (history with
  limit 10 and 100 from the head, and the state of an old checkpoint, a
  quarter of the way in); a retention pass with snapshot thinning (timed);
  bytes and latency again; every read after must equal the read before.

Bytes are the payload LangGraph's tables hold for the thread (storage
accounting: checkpoint rows, write rows, blobs); PostgreSQL's "stored" column
is after TOAST compression. Reads use the raw saver (no history cache), so
they show what replaying further back costs. Prints one table per backend;
the raw numbers go to bench/results/retention-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.checkpoints.__main__ import case_database, postgres_available, postgres_base_url
from bench.checkpoints.workload import estimated_full_bytes, human_text

ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.retention", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N = 60, two repetitions: a sanity run (~1 min)")
    parser.add_argument("--turns", type=int, default=1000, help="thread length N (default 1000)")
    parser.add_argument("--backends", default="sqlite,postgres", help="sqlite, postgres or both")
    parser.add_argument("--cadence", type=int, default=10, help="delta snapshot_frequency (default 10)")
    parser.add_argument("--full-cap-mb", type=float, default=1024, help="skip full mode above this estimate")
    parser.add_argument("--repetitions", type=int, default=5, help="timed reads per measurement (median)")
    parser.add_argument("--output", help="where to write the raw JSON (default bench/results/)")
    parser.add_argument("--child", nargs=2, metavar=("SPEC", "RESULT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.turns, args.repetitions = min(args.turns, 60), 2
    args.backends = [b for b in args.backends.split(",") if b]
    return args


# -- the child process: one backend, one fresh database ---------------------------------


def _accessor(mode: str, cadence: int):
    from checkpoints.accessor import StateAccessor
    from checkpoints.graphs import resolve_graph
    from checkpoints.runtime import sync_resources

    resources = sync_resources()
    return StateAccessor(resolve_graph("lead_agent"), mode, cadence, saver=resources.saver, store=resources.store)


def _write(acc, thread_id: str, turns: int) -> float:
    from langchain_core.messages import HumanMessage

    started = time.perf_counter()
    for turn in range(turns):
        acc.graph.invoke({"messages": [HumanMessage(human_text(turn))]}, acc.config(thread_id))
    return time.perf_counter() - started


def _bytes(thread_id: str) -> dict[str, Any]:
    from checkpoints.storage import thread_storage_get

    report = thread_storage_get(thread_id=thread_id)
    return {
        "bytes": report["total"]["bytes"],
        "stored_bytes": report["total"]["stored_bytes"],
        "tables": report["tables"],
        "checkpoints": report["checkpoint_count"],
        "snapshots": report["snapshot_count"],
    }


def _timed(read, repetitions: int) -> tuple[float, Any]:
    """Return (median ms over ``repetitions`` after one untimed warm-up, the last result)."""
    result = read()
    samples = []
    for _ in range(repetitions):
        started = time.perf_counter()
        result = read()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples), result


def _messages(values: dict) -> list[tuple[str, str, str]]:
    return [(m.type, m.content, m.id) for m in values.get("messages", [])]


def _reads(acc, thread_id: str, old_id: str, repetitions: int) -> tuple[dict[str, float], dict[str, Any]]:
    """Time the three reads; return (ms by read, what they returned, for the before/after check)."""
    timings, seen = {}, {}
    for name, read in (
        ("history_10", lambda: [_messages(s.values) for s in acc.history(thread_id, limit=10)]),
        ("history_100", lambda: [_messages(s.values) for s in acc.history(thread_id, limit=100)]),
        ("old_state", lambda: _messages(acc.get(thread_id, checkpoint_id=old_id).values)),
    ):
        timings[name], seen[name] = _timed(read, repetitions)
    return timings, seen


def _old_checkpoint(acc, thread_id: str, turns: int) -> str:
    """The checkpoint ending turn N/4 (turn t's last checkpoint is step 3t + 1 on a linear thread)."""
    from checkpoints.accessor import thread_config

    step = 3 * (turns // 4) + 1
    for item in acc.saver.list(thread_config(thread_id), filter={"step": step}):
        return item.config["configurable"]["checkpoint_id"]
    raise LookupError(f"no checkpoint at step {step}")


def run_full(spec: dict[str, Any]) -> dict[str, Any]:
    estimate = estimated_full_bytes(spec["turns"])
    if estimate > spec["full_cap_mb"] * MIB:
        return {"skipped": f"estimated {estimate / MIB:,.0f} MiB > cap {spec['full_cap_mb']:,.0f} MiB"}
    acc = _accessor("full", spec["cadence"])
    seconds = _write(acc, "bench-full", spec["turns"])
    return {"write_seconds": seconds, **_bytes("bench-full")}


def run_delta(spec: dict[str, Any]) -> dict[str, Any]:
    from django.db import transaction

    from checkpoints.retention import RetentionPolicy, RetentionRun

    thread_id, turns, reps = "bench-delta", spec["turns"], spec["repetitions"]
    acc = _accessor("delta", spec["cadence"])
    result: dict[str, Any] = {"write_seconds": _write(acc, thread_id, turns)}
    old_id = _old_checkpoint(acc, thread_id, turns)
    result["before"] = _bytes(thread_id)
    result["reads_before"], seen_before = _reads(acc, thread_id, old_id, reps)
    # The service's two phases, timed apart: the plan (reads, verification)
    # holds no lock; the apply is the write transaction.
    run = RetentionRun(
        thread_id=thread_id, policy=RetentionPolicy(thin_snapshots=True), graph_id="lead_agent", saver=acc.saver
    )
    started = time.perf_counter()
    plan = run.plan({})
    result["plan_seconds"] = time.perf_counter() - started
    started = time.perf_counter()
    with transaction.atomic():
        run.apply(plan, {})
    result["apply_seconds"] = time.perf_counter() - started
    report = plan.report
    result["thinned"] = len(report.thinned)
    result["kept_snapshots"] = [k["reason"] for k in report.kept_snapshots]
    result["after"] = _bytes(thread_id)
    result["reads_after"], seen_after = _reads(acc, thread_id, old_id, reps)
    result["identical"] = seen_before == seen_after
    result["old_state_messages"] = len(seen_after["old_state"])
    return result


def child(spec_path: str, result_path: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deerflow_site.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    spec = json.loads(Path(spec_path).read_text())
    result = {"delta": run_delta(spec), "full": run_full(spec)}
    Path(result_path).write_text(json.dumps(result))


# -- the parent: one child per backend, then the table ----------------------------------


def run_backend(backend: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    workdir = root / backend
    workdir.mkdir(parents=True)
    with case_database(backend, workdir) as (database, env_extra):
        # Full mode freezes the process without a history cache: the reads hit the saver.
        config = {"database": {**database, "checkpoint_channel_mode": "full"}}
        (workdir / "config.yaml").write_text(yaml.safe_dump(config))
        spec = {
            "turns": args.turns,
            "cadence": args.cadence,
            "repetitions": args.repetitions,
            "full_cap_mb": args.full_cap_mb,
        }
        (workdir / "spec.json").write_text(json.dumps(spec))
        env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
        env.update(DEERFLOW_CONFIG=str(workdir / "config.yaml"), DEERFLOW_VAR_DIR=str(workdir / "var"), **env_extra)
        command = [
            sys.executable,
            "-m",
            "bench.retention",
            "--child",
            str(workdir / "spec.json"),
            str(workdir / "result.json"),
        ]
        completed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        if completed.returncode:
            raise RuntimeError(f"{backend} failed:\n{completed.stdout[-2000:]}\n{completed.stderr[-4000:]}")
        return json.loads((workdir / "result.json").read_text())


def _mib(value: float) -> str:
    return f"{value / MIB:,.2f}"


def _ratio(value: float, base: float) -> str:
    return f"{value / base:,.1f}x" if base else "-"


def print_report(backend: str, turns: int, cadence: int, result: dict[str, Any]) -> None:
    delta, full = result["delta"], result["full"]
    before, after = delta["before"], delta["after"]
    print(f"\n== {backend}: N = {turns} turns (~500 characters each), delta cadence {cadence}")
    print(
        f"{'storage':30} {'MiB':>10} {'stored MiB':>11} {'rows':>8} {'snapshots':>10} {'vs thinned':>11} {'stored vs':>10}"
    )
    rows = [("delta, thinned", after), ("delta, un-thinned", before)]
    if "skipped" not in full:
        rows.append(("full", full))
    for label, size in rows:
        rows_total = sum(t["rows"] for t in size["tables"].values())
        print(
            f"{label:30} {_mib(size['bytes']):>10} {_mib(size['stored_bytes']):>11} {rows_total:>8} "
            f"{size.get('snapshots', 0):>10} {_ratio(size['bytes'], after['bytes']):>11} "
            f"{_ratio(size['stored_bytes'], after['stored_bytes']):>10}"
        )
    if "skipped" in full:
        print(f"{'full':30} skipped: {full['skipped']}")
    print(
        f"thinning: {delta['thinned']} snapshots dropped; plan and verification {delta['plan_seconds']:.2f} s "
        f"(no lock), write transaction {delta['apply_seconds']:.2f} s; kept: {delta['kept_snapshots']}"
    )
    print(f"\n{'read (median ms)':30} {'before':>10} {'after':>10} {'after/before':>13}")
    for name, label in (
        ("history_10", "history limit 10"),
        ("history_100", "history limit 100"),
        ("old_state", "state of an old checkpoint"),
    ):
        b, a = delta["reads_before"][name], delta["reads_after"][name]
        print(f"{label:30} {b:>10.1f} {a:>10.1f} {_ratio(a, b):>13}")
    print(f"every read identical after thinning: {delta['identical']}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    backends = list(args.backends)
    notes = []
    if "postgres" in backends and (reason := postgres_available(postgres_base_url())):
        backends.remove("postgres")
        notes.append(f"PostgreSQL skipped: {reason} (set DATABASE_URL)")
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-retention-") as tmp:
        for backend in backends:
            started = time.perf_counter()
            print(f"retention bench: {backend}, N = {args.turns} …", end="", flush=True)
            results[backend] = run_backend(backend, args, Path(tmp))
            print(f" {time.perf_counter() - started:.0f} s", flush=True)
    for backend, result in results.items():
        print_report(backend, args.turns, args.cadence, result)
    for note in notes:
        print(f"note: {note}")
    output = Path(args.output) if args.output else ROOT / "bench" / "results" / f"retention-{int(time.time())}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(
        json.dumps({"args": {k: v for k, v in vars(args).items() if k != "child"}, "results": results}, indent=1)
    )
    print(f"\nraw numbers: {output}")
    return 0 if all(r["delta"]["identical"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
