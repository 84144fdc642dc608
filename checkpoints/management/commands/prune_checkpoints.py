"""``manage.py prune_checkpoints``: a retention pass over threads, with a dry run."""

from __future__ import annotations

import argparse
import json
from collections import Counter

from django.core.management.base import BaseCommand, CommandError

from checkpoints.checks import GraphTolerantChecks
from checkpoints.errors import CheckpointNotFoundError
from checkpoints.retention import (
    CheckpointProtectedError,
    RetentionConflictError,
    RetentionPolicy,
    RetentionReport,
    retention_scope,
)
from checkpoints.storage import UnsupportedBackendError, require_table_backend
from core.errors import DomainError


def _reason_kind(reason: str) -> str:
    # "lineage of checkpoint X (…)" and friends group under their first words.
    return reason.split(" (")[0] if not reason.startswith("lineage of") else "lineage of " + reason[11:].split(" ")[0]


class Command(GraphTolerantChecks, BaseCommand):
    help = (
        "Delete checkpoints nothing can need (metadata-only leaves; off-chain leaf branches with --siblings) "
        "and thin delta snapshots (--thin-snapshots). Heads, their lineage, resume targets, branch parents "
        "and pending writes are always kept. --dry-run shows what would go and why the rest stays."
    )

    def add_arguments(self, parser):
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--thread", action="append", dest="threads", metavar="ID", help="A thread (repeatable).")
        target.add_argument("--all", action="store_true", dest="all_threads", help="Every thread.")
        parser.add_argument("--dry-run", action="store_true", help="Report only; change nothing.")
        parser.add_argument("--max-delete", type=int, default=None, metavar="N", help="Delete at most N per thread.")
        parser.add_argument(
            "--siblings",
            action=argparse.BooleanOptionalAction,
            default=False,
            help="Also delete off-chain leaf sibling branches (default: off).",
        )
        parser.add_argument("--thin-snapshots", action="store_true", help="Drop delta snapshots no one needs.")
        parser.add_argument(
            "--checkpoint",
            action="append",
            dest="checkpoints",
            default=[],
            metavar="ID",
            help="Delete exactly this checkpoint and its subtree (repeatable; one --thread); refused if protected.",
        )
        parser.add_argument("--json", action="store_true", dest="as_json", help="Print each report as JSON.")

    def handle(
        self,
        *args,
        threads,
        all_threads,
        dry_run,
        max_delete,
        siblings,
        thin_snapshots,
        checkpoints,
        as_json,
        **options,
    ):
        try:
            require_table_backend()
            policy = RetentionPolicy(
                prune_siblings=siblings,
                prune_metadata_only=not checkpoints,
                thin_snapshots=thin_snapshots,
                max_delete=max_delete,
                delete_ids=frozenset(checkpoints),
            )
        except (UnsupportedBackendError, ValueError) as exc:
            raise CommandError(str(exc)) from None
        if checkpoints and (all_threads or len(threads) != 1):
            raise CommandError("--checkpoint needs exactly one --thread")
        scope = retention_scope()
        failed = []
        for thread_id in scope.thread_ids() if all_threads else threads:
            try:
                report = scope.prune(thread_id=thread_id, policy=policy, dry_run=dry_run)
            except (CheckpointProtectedError, CheckpointNotFoundError) as exc:
                raise CommandError(str(exc.args[0])) from None
            except (DomainError, RetentionConflictError) as exc:
                failed.append(thread_id)
                self.stderr.write(f"thread {thread_id}: skipped: {exc}")
                continue
            self._print(report, as_json=as_json, verbose=options["verbosity"] > 1)
        if failed and not all_threads:
            raise CommandError(f"{len(failed)} thread(s) not pruned: {', '.join(failed)}")

    def _print(self, report: RetentionReport, *, as_json: bool, verbose: bool) -> None:
        if as_json:
            self.stdout.write(json.dumps(report.as_dict() if verbose else report.summary(), indent=2))
            return
        summary = report.summary()
        shapes = Counter(d["shape"] for d in report.deleted)
        verb = "would delete" if report.dry_run else "deleted"
        self.stdout.write(
            f"thread {report.thread_id} ({report.backend}){' [dry run]' if report.dry_run else ''}: "
            f"{verb} {len(report.deleted)} checkpoint(s) {dict(shapes) or ''}, "
            f"thinned {len(report.thinned)} snapshot(s), protected {len(report.protected)}, "
            f"kept {len(report.kept)}; saves {summary['bytes_saved']['total']:,} bytes"
            + (" (max-delete reached)" if report.max_delete_reached else "")
        )
        for deleted in report.deleted:
            self.stdout.write(f"  delete {deleted['checkpoint_id']} ({deleted['shape']})")
        for thinned in report.thinned:
            self.stdout.write(f"  thin   {thinned['checkpoint_id']} ({thinned['channel']} snapshot)")
        for kept in report.kept_snapshots:
            self.stdout.write(f"  keep snapshot {kept['checkpoint_id']}: {kept['reason']}")
        reasons = Counter(_reason_kind(reason) for entry in report.protected for reason in entry["reasons"][:1])
        for reason, count in reasons.most_common():
            self.stdout.write(f"  protected {count}: {reason}")
        if verbose:
            for entry in report.protected:
                self.stdout.write(f"  protected {entry['checkpoint_id']}: {'; '.join(entry['reasons'])}")
            for entry in report.kept:
                self.stdout.write(f"  kept {entry['checkpoint_id']}: {entry['reason']}")
