"""Import benchmark: a generated DeerFlow database into a fresh deployment, with verification.

    .venv/bin/python -m bench.deerflow_import --threads 1000 --runs 10000 --events 100000

Builds the source with ``bench.deerflow_source`` (SQLite; one checkpointed
turn of a real graph per run), migrates a fresh SQLite target in a temporary
folder, then runs the import in this process as ``manage.py
import_deerflow --create-users`` does and prints rows per second per phase,
the total time and the verification's result.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import yaml

from bench.deerflow_source import DeerFlowSource, generate


class PhaseClock:
    """The import's progress callback: when each phase started and ended, and its row count."""

    def __init__(self) -> None:
        self.phases: dict[str, list[float]] = {}
        self.rows: dict[str, int] = {}

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.perf_counter()
        self.phases.setdefault(phase, [now, now])[1] = now
        self.rows[phase] = done


def _run_import(source_path: Path, batch_size: int):
    # Django is configured for the target only now, after DEERFLOW_CONFIG/DATABASE_URL are set.
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from deerflow_site.deerflow_import.importer import ImportOptions, deerflow_import
    from deerflow_site.deerflow_import.source import source_open

    source = source_open(f"sqlite:///{source_path}")
    clock = PhaseClock()
    started = time.perf_counter()
    report = deerflow_import(source, ImportOptions(batch_size=batch_size, create_users=True), clock)
    source.close()
    return report, clock, time.perf_counter() - started


def _print(report, clock: PhaseClock, total: float, build_seconds: float) -> None:
    print(f"source built in {build_seconds:.1f} s")
    print(f"{'phase':<14}{'rows':>10}{'seconds':>10}{'rows/s':>10}")
    for phase, (start, end) in clock.phases.items():
        rows = report.tallies[phase].imported if phase in report.tallies else clock.rows[phase]
        seconds = end - start
        print(f"{phase:<14}{rows:>10}{seconds:>10.1f}{rows / seconds if seconds else 0:>10.0f}")
    verification = report.verification
    print(f"total {total:.1f} s; verification {verification.matched}/{verification.checked} threads equal"
          f" ({'OK' if verification.ok else 'FAILED: ' + '; '.join(verification.failures[:3])})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.deerflow_import", description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--batch-size", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        source_path = Path(workdir) / "deerflow.db"
        started = time.perf_counter()
        source = DeerFlowSource.sqlite(str(source_path))
        generate(source, threads=args.threads, runs=args.runs, events=args.events)
        source.close()
        build_seconds = time.perf_counter() - started
        config = Path(workdir) / "config.yaml"
        database = {"backend": "sqlite", "sqlite_dir": str(Path(workdir) / "data"), "checkpoint_channel_mode": "full"}
        config.write_text(yaml.safe_dump({"database": database}))
        os.environ.pop("DATABASE_URL", None)
        os.environ.update(DEERFLOW_CONFIG=str(config), DJANGO_SETTINGS_MODULE="deerflow_site.settings")
        report, clock, total = _run_import(source_path, args.batch_size)
        _print(report, clock, total, build_seconds)


if __name__ == "__main__":
    main()
