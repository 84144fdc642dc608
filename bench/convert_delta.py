"""Converting a delta thread to full storage, measured: time and bytes before and after.

    .venv/bin/python -m bench.convert_delta [--turns 200] [--cadence 10] [--backends sqlite,postgres]

For each backend, one process on a fresh database (SQLite in a temporary
folder; PostgreSQL, when ``DATABASE_URL`` is set, in a throwaway database next
to it, dropped afterwards) writes one thread of N demo-agent turns (~500
characters each, ``bench.checkpoints.workload``) in delta mode, then converts
it with ``checkpoints.convert.thread_convert``, which includes reading the
whole thread back in both modes to verify it. Bytes are the payload LangGraph's
tables hold for the thread (``thread_storage_get``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.checkpoints.__main__ import case_database
from bench.checkpoints.workload import human_text

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.convert_delta", description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200, help="thread length N (default 200)")
    parser.add_argument("--cadence", type=int, default=10, help="delta snapshot_frequency (default 10)")
    parser.add_argument(
        "--backends", default=None, help="sqlite, postgres or both (default: postgres with DATABASE_URL)"
    )
    parser.add_argument("--child", nargs=2, metavar=("SPEC", "RESULT"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def child(spec_path: str, result_path: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deerflow_site.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from langchain_core.messages import HumanMessage

    from checkpoints.accessor import StateAccessor
    from checkpoints.convert import thread_convert
    from checkpoints.graphs import resolve_graph
    from checkpoints.runtime import sync_resources
    from threads.models import ThreadMeta

    call_command("migrate", interactive=False, verbosity=0)
    spec = json.loads(Path(spec_path).read_text())
    resources = sync_resources()
    delta = StateAccessor(
        resolve_graph("lead_agent"), "delta", spec["cadence"], saver=resources.saver, store=resources.store
    )
    owner = get_user_model().objects.create(username="bench")
    thread = ThreadMeta.objects.create(thread_id="bench-convert", owner=owner, assistant_id="lead_agent")
    for turn in range(spec["turns"]):
        delta.graph.invoke({"messages": [HumanMessage(human_text(turn))]}, delta.config(thread.thread_id))
    started = time.perf_counter()
    result = thread_convert(thread_id=thread.thread_id, graph_id=thread.assistant_id)
    seconds = time.perf_counter() - started
    Path(result_path).write_text(
        json.dumps(
            {
                "outcome": result.outcome,
                "checkpoints": result.checkpoints,
                "bytes_before": result.bytes_before,
                "bytes_after": result.bytes_after,
                "seconds": seconds,
            }
        )
    )


def run_backend(backend: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    workdir = root / backend
    workdir.mkdir(parents=True)
    with case_database(backend, workdir) as (database, env_extra):
        # A full-mode process, as the operator converting before the switch runs: no history cache.
        config = {"database": {**database, "checkpoint_channel_mode": "full"}}
        (workdir / "config.yaml").write_text(yaml.safe_dump(config))
        (workdir / "spec.json").write_text(json.dumps({"turns": args.turns, "cadence": args.cadence}))
        env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
        env.update(DEERFLOW_CONFIG=str(workdir / "config.yaml"), DEERFLOW_VAR_DIR=str(workdir / "var"), **env_extra)
        command = [
            sys.executable,
            "-m",
            "bench.convert_delta",
            "--child",
            *(str(workdir / f) for f in ("spec.json", "result.json")),
        ]
        completed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        if completed.returncode:
            raise RuntimeError(f"{backend} failed:\n{completed.stdout[-2000:]}\n{completed.stderr[-4000:]}")
        return json.loads((workdir / "result.json").read_text())


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        child(*args.child)
        return
    backends = (args.backends or ("sqlite,postgres" if os.environ.get("DATABASE_URL") else "sqlite")).split(",")
    print(f"converting one {args.turns}-turn delta thread (cadence {args.cadence}) to full storage")
    print(
        f"{'backend':10} {'checkpoints':>12} {'seconds':>8} {'bytes before':>14} {'bytes after':>14} {'after/before':>13}"
    )
    with tempfile.TemporaryDirectory(prefix="bench-convert-") as tmp:
        for backend in backends:
            result = run_backend(backend, args, Path(tmp))
            ratio = result["bytes_after"] / result["bytes_before"]
            print(
                f"{backend:10} {result['checkpoints']:>12} {result['seconds']:>8.2f} "
                f"{result['bytes_before']:>14,} {result['bytes_after']:>14,} {ratio:>12.1f}x"
            )


if __name__ == "__main__":
    main()
