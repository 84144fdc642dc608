import time

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from checkpoints.checks import GraphTolerantChecks
from core.custom_encryption import EncryptionError, context_argument, fixed_scope
from deerflow_site.deerflow_import.importer import ImportOptions, ImportReport, deerflow_import
from deerflow_site.deerflow_import.owners import DEFAULT_NULL_OWNER, OwnerMapError, user_map_load
from deerflow_site.deerflow_import.source import SourceRefused, source_open

PROGRESS_EVERY_SECONDS = 2.0


class Command(GraphTolerantChecks, BaseCommand):
    help = (
        "Import a DeerFlow deployment (threads, runs, events, feedback, checkpoints, Store items) and verify it. "
        "Idempotent: run it again to finish an interrupted import."
    )

    def add_arguments(self, parser):
        parser.add_argument("--source", required=True, help="sqlite:///path/to/deerflow.db or a postgresql:// URL.")
        parser.add_argument("--users", help="A JSON object or CSV (deerflow_user_id,username) mapping owners.")
        parser.add_argument("--create-users", action="store_true", help="Create a user for every unmapped owner.")
        parser.add_argument(
            "--null-owner", default=DEFAULT_NULL_OWNER, help="The user that owns DeerFlow's NULL-owner threads."
        )
        parser.add_argument("--dry-run", action="store_true", help="Print what would be imported; write nothing.")
        parser.add_argument("--verify-only", action="store_true", help="Only compare imported threads with the source.")
        parser.add_argument("--batch-size", type=int, default=500, help="Source rows per transaction (default 500).")
        parser.add_argument(
            "--context",
            default="{}",
            help="With langgraph.json's encryption.path: the encryption context (a JSON object) what is imported "
            "is sealed with.",
        )

    def handle(self, *args, **options):
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        try:
            context = context_argument(options["context"])
            mapping = user_map_load(options["users"]) if options["users"] else {}
            source = source_open(options["source"])
        except (OwnerMapError, SourceRefused, OSError, ValueError) as exc:
            raise CommandError(str(exc)) from None
        self.phase, self.printed_at = "", 0.0
        try:
            self.stdout.write(f"Source: {source.kind} {source.flavour}")
            with fixed_scope(context):
                report = deerflow_import(source, self._options(options, mapping), self._progress)
        except (OwnerMapError, SourceRefused) as exc:
            raise CommandError(str(exc)) from None
        except EncryptionError as exc:
            raise CommandError(
                f"import stopped in {self.phase or 'its first batch'}: {exc} (finished batches are kept; give the "
                "context to seal with, --context '{\"tenant_id\": …}', and run the command again)"
            ) from None
        except DatabaseError as exc:
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CommandError(
                f"import stopped in {self.phase or 'its first batch'}: {first_line} "
                "(finished batches are kept; run the command again to finish)"
            ) from None
        finally:
            source.close()
        self._summary(report, dry_run=options["dry_run"])
        if not report.ok:
            raise CommandError(f"verification failed for {len(report.verification.failures)} thread(s)")

    def _options(self, options, mapping) -> ImportOptions:
        return ImportOptions(
            batch_size=options["batch_size"],
            dry_run=options["dry_run"],
            verify_only=options["verify_only"],
            mapping=mapping,
            create_users=options["create_users"],
            null_owner=options["null_owner"],
        )

    def _progress(self, phase: str, done: int, total: int) -> None:
        """Print a phase's progress at most every 2 seconds, and when it ends."""
        now = time.monotonic()
        if phase != self.phase or done >= total or now - self.printed_at >= PROGRESS_EVERY_SECONDS:
            self.stdout.write(f"  {phase}: {done}/{total}")
            self.printed_at = now
        self.phase = phase

    def _summary(self, report: ImportReport, *, dry_run: bool) -> None:
        written = "would import" if dry_run else "imported"
        self.stdout.write(f"{'table':<14}{'found':>10}{written:>14}{'present':>10}{'failed':>8}")
        for name, tally in report.tallies.items():
            self.stdout.write(f"{name:<14}{tally.found:>10}{tally.imported:>14}{tally.present:>10}{tally.failed:>8}")
            for problem in tally.problems:
                self.stdout.write(f"  failed: {problem}")
        if report.users_to_create:
            verb = "would create" if dry_run else "created"
            self.stdout.write(f"users {verb}: {', '.join(report.users_to_create)}")
        for note in report.notes:
            self.stdout.write(f"note: {note}")
        if (verification := report.verification) is not None:
            self.stdout.write(
                f"verification: {verification.matched}/{verification.checked} threads equal to the source"
                f" ({'OK' if verification.ok else 'FAILED'})"
            )
            for failure in verification.failures[:20]:
                self.stdout.write(f"  differs: {failure}")
