"""``manage.py encrypt_checkpoints``: seal every stored checkpoint value with the current ``LANGGRAPH_AES_KEY``."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from checkpoints.backend import current_backend
from checkpoints.encryption import FALLBACK_KEYS_ENV, KEY_ENV, KeyringCipher, KeyringError, KeyringResealer, reseal
from checkpoints.runtime import checkpoint_keyring
from core.custom_encryption import active


class Command(BaseCommand):
    help = (
        f"Seal with {KEY_ENV} every stored checkpoint value (SQLite checkpoints and writes, PostgreSQL channel "
        f"blobs and writes) that is plaintext or sealed with a key of {FALLBACK_KEYS_ENV}: the rotation of a key, "
        "or the encryption of what was stored before one was set. Safe while runs write: each row is replaced by "
        "compare-and-swap. After it, the fallback keys can be removed. --dry-run counts."
    )

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="Count the rows to seal; change nothing.")
        parser.add_argument("--batch-size", type=int, default=500, help="Rows read and sealed per transaction.")

    def handle(self, *args, dry_run: bool, batch_size: int, **options):
        custom = active()
        if custom is not None and custom.seals_blobs:
            raise CommandError(
                "langgraph.json's encryption.path seals checkpoints with its own blob handlers: their keys rotate "
                "in your key service, and manage.py reencrypt seals everything again with them; this command "
                "rotates LANGGRAPH_AES_KEY only"
            )
        keyring = checkpoint_keyring()
        if keyring is None:
            raise CommandError(f"{KEY_ENV} is not set: there is no key to seal checkpoints with")
        kind = current_backend().kind
        if kind == "memory":
            raise CommandError("the memory backend keeps no checkpoints on disk: nothing to seal")
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        started = time.monotonic()
        try:
            resealer = KeyringResealer(KeyringCipher(keyring))
            report = reseal(connection, kind, resealer, dry_run=dry_run, batch_size=batch_size)
        except KeyringError as exc:
            raise CommandError(f"{exc}; the batches before it are sealed, rerun once the key is configured") from exc
        verb = "would seal" if dry_run else "sealed"
        for table, count in report.resealed.items():
            raced = (
                f", {report.raced[table]} rewritten by a run meanwhile (left as written)" if report.raced[table] else ""
            )
            self.stdout.write(
                f"{table}: {verb} {count} rows with key {keyring.current_id}; "
                f"{report.current[table]} already sealed with it{raced}"
            )
        self.stdout.write(f"done in {time.monotonic() - started:.1f} s")
