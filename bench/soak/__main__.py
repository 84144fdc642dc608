"""``python -m bench.soak [--seconds 60] [--requests N] [--clients K] [--seed S]``: run the fault soak, print
its table, exit 1 on any violation."""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

from bench.soak import Result, soak
from bench.soak.cluster import FAULT_KINDS

OUTCOMES = ("ok", "refused", "fault", "other")


def report(result: Result) -> str:
    """The soak's table: requests by kind and outcome, faults by kind, invariants, violations."""
    ledger = result.ledger
    lines = [
        f"Soak ({result.mode} mode): {result.seconds:.0f} s of traffic, {ledger.requests} requests,"
        f" {len(result.faults)} faults",
        "",
    ]
    lines.append(f"{'request':<15}" + "".join(f"{o:>9}" for o in OUTCOMES))
    for kind in sorted({k for k, _ in ledger.outcomes}):
        lines.append(f"{kind:<15}" + "".join(f"{ledger.outcomes[(kind, o)]:>9}" for o in OUTCOMES))
    totals = Counter()
    for (_, outcome), n in ledger.outcomes.items():
        totals[outcome] += n
    lines.append(f"{'all':<15}" + "".join(f"{totals[o]:>9}" for o in OUTCOMES))
    lines.append("(ok: 2xx; refused: a 409 on purpose; fault: failed while a fault was in progress; other: failed)")
    lines += ["", f"{'fault':<15}{'injected':>9}  targets"]
    for kind in FAULT_KINDS:
        faults = [f for f in result.faults if f.kind == kind]
        targets = Counter(f.target for f in faults)
        lines.append(f"{kind:<15}{len(faults):>9}  " + ", ".join(f"{t} {n}" for t, n in sorted(targets.items())))
    statuses = Counter(result.run_statuses)
    lines += ["", "runs by final status: " + ", ".join(f"{s} {n}" for s, n in sorted(statuses.items()))]
    lines += [f"  error: {n} x {' '.join(message.split())}" for message, n in result.run_errors.items()]
    lines += [f"runs ended {result.settled_in:.1f} s after the traffic", ""]
    lines.append(f"{'invariant':<66}{'checked':>9}{'violations':>12}")
    for check in result.checks:
        lines.append(f"{check.name:<66}{check.checked:>9}{len(check.violations):>12}")
    violations = result.violations
    lines += ["", f"violations: {len(violations)}"]
    lines += [f"  {v}" for v in violations[:50]]
    if ledger.failures:
        lines += ["", f"requests that failed outside every fault window: {len(ledger.failures)}"]
        lines += [f"  {f}" for f in ledger.failures[:30]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument(
        "--seconds", type=float, default=60, help="traffic time (default 60; longer if a fault kind is missing)"
    )
    parser.add_argument("--requests", type=int, default=None, help="stop after this many requests (default: no cap)")
    parser.add_argument("--clients", type=int, default=6, help="concurrent clients (default 6)")
    parser.add_argument("--crons", type=int, default=2, help="threads with a cron firing every 3 s (default 2)")
    parser.add_argument("--seed", type=int, default=1, help="seeds the traffic mix and the fault schedule")
    parser.add_argument(
        "--mode", choices=["full", "delta"], default="full", help="checkpoint channel mode of every process"
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
        help="a PostgreSQL server (DATABASE_URL); the soak creates and drops a soak_* database on it",
    )
    args = parser.parse_args(argv)
    result = soak(
        base_url=args.database_url,
        seconds=args.seconds,
        requests=args.requests,
        clients=args.clients,
        crons=args.crons,
        seed=args.seed,
        mode=args.mode,
    )
    print(report(result))
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main())
