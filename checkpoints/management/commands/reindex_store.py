"""``manage.py reindex_store``: re-embed the Store's items after ``store.index``'s model or ``fields`` change."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from checkpoints.backend import current_backend
from checkpoints.runtime import close_sync_resources, setup_tables, store_index
from checkpoints.store_index import PG_FLAVOUR_SQL, EmbeddingFailed, Flavour, ReindexReport, postgres_flavour, reindex


def _flavour() -> Flavour:
    if connection.vendor == "sqlite":
        return "sqlite"
    with connection.cursor() as cursor:
        cursor.execute(PG_FLAVOUR_SQL)
        return postgres_flavour(cursor.fetchone())


class Command(BaseCommand):
    help = (
        "Re-embed every indexed Store item with langgraph.json's current store.index (its function and fields), "
        "batch by batch; each batch is replaced in one transaction, so a rerun finishes an interrupted one. "
        "Items stored with index=false stay unembedded unless --all. --rebuild drops the vector table first "
        "(needed when dims change on pgvector, or to move an exact-search PostgreSQL database to pgvector)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="Count what would be embedded; change nothing.")
        parser.add_argument("--all", action="store_true", help="Embed items stored with index=false too.")
        parser.add_argument("--rebuild", action="store_true", help="Drop and recreate the vector table first.")
        parser.add_argument("--batch-size", type=int, default=256, help="Items embedded and written per transaction.")

    def handle(self, *args, dry_run: bool, all: bool, rebuild: bool, batch_size: int, **options):
        index = store_index()
        if index is None:
            raise CommandError("no Store index is configured (langgraph.json store.index): nothing to re-embed")
        if current_backend().kind == "memory":
            raise CommandError("the memory backend's Store lives in the serving process: nothing to re-embed here")
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        if rebuild and not dry_run:
            with connection.cursor() as cursor:
                cursor.execute("DROP TABLE IF EXISTS store_vectors")
                cursor.execute("DROP TABLE IF EXISTS vector_migrations")
            close_sync_resources()  # the Stores choose their flavour again, on the empty table
            setup_tables()
        flavour, started = _flavour(), time.monotonic()
        verb = "would embed" if dry_run else "re-embedded"

        def progress(report: ReindexReport) -> None:
            if report.items % (batch_size * 20) < batch_size:
                self.stdout.write(f"  {report.items} items read, {report.embedded} {verb}")

        try:
            report = reindex(
                index,
                connection,
                flavour=flavour,
                everything=all,
                dry_run=dry_run,
                batch_size=batch_size,
                progress=progress,
            )
        except EmbeddingFailed as exc:
            raise CommandError(f"{exc}; the batches before it are re-embedded, rerun to finish") from exc
        self.stdout.write(
            f"{verb} {report.embedded} of {report.items} items ({report.texts} texts, {flavour} index, "
            f"dims {index.dims}, fields {', '.join(index.fields)}); {report.skipped} without vectors left so"
            f"{' (--all embeds them)' if report.skipped else ''}; {time.monotonic() - started:.1f} s"
            + (" after rebuilding the vector table" if rebuild and not dry_run else "")
        )
