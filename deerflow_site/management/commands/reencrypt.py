"""``manage.py reencrypt``: everything langgraph.json's ``encryption.path`` seals, sealed again (``deerflow_site.reencrypt``)."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from core.custom_encryption import active, context_argument
from deerflow_site.reencrypt import reencrypt


class Command(BaseCommand):
    help = (
        "With langgraph.json's encryption.path: open every value its handlers sealed (thread, run, assistant, "
        "cron and event columns, checkpoints) with the context it was sealed with and seal it again, so a key "
        "its key service rotated out can go; what was stored before (plaintext, or sealed with "
        "LANGGRAPH_AES_KEY) is sealed with --context. With LANGGRAPH_AES_JSON_KEYS: seal every listed key's "
        "value in those JSON columns with the current LANGGRAPH_AES_KEY. Safe while runs write "
        "(compare-and-swap per row); --dry-run counts."
    )

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="Count the rows to seal; change nothing.")
        parser.add_argument("--batch-size", type=int, default=500, help="Rows read and sealed per transaction.")
        parser.add_argument(
            "--context",
            default="{}",
            help="The encryption context (a JSON object) for what was never sealed by the handlers.",
        )

    def handle(self, *args, dry_run: bool, batch_size: int, context: str, **options):
        custom = active()
        if custom is None:
            raise CommandError(
                "neither langgraph.json's encryption.path nor LANGGRAPH_AES_JSON_KEYS is configured: nothing seals "
                "JSON (manage.py encrypt_checkpoints rotates LANGGRAPH_AES_KEY on checkpoints)"
            )
        try:
            default_context = context_argument(context)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        started = time.monotonic()
        report = reencrypt(custom, default_context=default_context, dry_run=dry_run, batch_size=batch_size)
        verb = "would seal" if dry_run else "sealed"
        refused = 0
        for name, counts in [*report.columns.items(), *report.checkpoints.items()]:
            refused += counts.refused
            if counts.resealed or counts.raced or counts.refused:
                extra = f", {counts.raced} rewritten meanwhile (left as written)" if counts.raced else ""
                extra += f", {counts.refused} refused by the handler (left; see the log)" if counts.refused else ""
                self.stdout.write(f"{name}: {verb} {counts.resealed} rows again{extra}")
        self.stdout.write(f"done in {time.monotonic() - started:.1f} s")
        if refused:
            raise CommandError(f"{refused} rows were refused by the handlers: rerun with a --context they accept")
