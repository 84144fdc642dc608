"""``manage.py reencrypt``: everything langgraph.json's ``encryption.path`` or ``LANGGRAPH_AES_JSON_KEYS``
seals, opened and sealed again.

Custom handlers own their keys (a KMS rotates them); what was sealed with
an old key stays readable only while the handler still opens it. This
walks every sealed JSON and text column (``core.encrypted_fields``), the
Store's values (``checkpoints.sealed_store``) and every checkpoint value,
opens each with the context it was sealed with and seals it again with the
handlers as they are now, so the old key can go. What was stored before
encryption was configured (plaintext, or sealed with ``LANGGRAPH_AES_KEY``)
is sealed too, with ``default_context``. Each row is replaced by
compare-and-swap on what was read, batch by batch: runs and requests may
write meanwhile, and a rerun finishes an interrupted pass. A row the
handler refuses (a context it has no key for) is counted and left.

With ``LANGGRAPH_AES_JSON_KEYS`` the same pass moves the JSON columns and
the Store to the current ``LANGGRAPH_AES_KEY`` (a row with nothing stale is
skipped) and seals a listed key's values stored before it was listed;
``manage.py encrypt_checkpoints`` rotates the checkpoints.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.apps import apps
from django.db import connection, models, transaction

from checkpoints.backend import current_backend
from checkpoints.encryption import HandlerResealer, SealingCipher, reseal
from checkpoints.runtime import checkpoint_keyring, store_index
from checkpoints.sealed_store import FIELD as STORE_FIELD
from checkpoints.sealed_store import MODEL as STORE_MODEL
from core.custom_encryption import (
    CONTEXT_KEY,
    SEALED_TEXT,
    CustomEncryption,
    active,
    fixed_scope,
    open_json,
    open_text,
    seal_json,
    seal_text,
)
from core.encrypted_fields import EncryptedJSONField, EncryptedTextField

logger = logging.getLogger(__name__)

SEALED_STORE = (STORE_MODEL, STORE_FIELD)


@dataclass
class ColumnReport:
    """One column's rows: sealed again, changed meanwhile (left as written), refused by the handler."""

    resealed: int = 0
    raced: int = 0
    refused: int = 0


@dataclass
class ReencryptReport:
    columns: dict[str, ColumnReport] = field(default_factory=dict)
    checkpoints: dict[str, ColumnReport] = field(default_factory=dict)


def sealed_columns() -> Iterator[tuple[type[models.Model], EncryptedJSONField | EncryptedTextField]]:
    """Every model column the JSON handlers seal."""
    for model in apps.get_models():
        for column in model._meta.concrete_fields:
            if isinstance(column, EncryptedJSONField | EncryptedTextField) and column.sealed_as[0]:
                yield model, column


def reencrypt(
    custom: CustomEncryption, *, default_context: dict[str, Any], dry_run: bool = False, batch_size: int = 500
) -> ReencryptReport:
    """Seal again every sealed column and (with blob handlers) every checkpoint value."""
    report = ReencryptReport()
    if custom.seals_json:
        for model, column in sealed_columns():
            if isinstance(column, EncryptedTextField) and not custom.handlers:
                continue  # LANGGRAPH_AES_JSON_KEYS seal keys; a text column has none
            name = f"{model._meta.db_table}.{column.column}"
            report.columns[name] = _reseal_column(
                model, column, default_context=default_context, dry_run=dry_run, batch_size=batch_size
            )
    kind = current_backend().kind
    if custom.seals_json and kind != "memory" and (custom.json_keys is not None or store_index() is None):
        report.columns["store.value"] = _reseal_store(
            default_context=default_context, dry_run=dry_run, batch_size=batch_size
        )  # sealed by checkpoints.sealed_store
    if custom.seals_blobs and kind != "memory":
        resealer = HandlerResealer(SealingCipher(checkpoint_keyring(), custom), default_context)
        found = reseal(connection, kind, resealer, dry_run=dry_run, batch_size=batch_size)
        for table, count in found.resealed.items():
            report.checkpoints[table] = ColumnReport(count, found.raced[table], found.refused[table])
    return report


def _reseal_column(
    model: type[models.Model],
    column: EncryptedJSONField | EncryptedTextField,
    *,
    default_context: dict[str, Any],
    dry_run: bool,
    batch_size: int,
) -> ColumnReport:
    qn = connection.ops.quote_name
    pk = model._meta.pk
    assert pk is not None and pk.column and column.column, "concrete columns of a model with a primary key"
    table, name, key = qn(model._meta.db_table), qn(column.column), qn(pk.column)
    is_json = isinstance(column, EncryptedJSONField)
    # Compared as text: jsonb's text form on PostgreSQL, the stored text on SQLite.
    as_text = f"{name}::text" if connection.vendor == "postgresql" and is_json else name
    assign = "%s::jsonb" if connection.vendor == "postgresql" and is_json else "%s"
    select = f"SELECT {key}, {as_text} FROM {table} WHERE {key} > %s AND {name} IS NOT NULL ORDER BY {key} LIMIT %s"
    update = f"UPDATE {table} SET {name} = {assign} WHERE {key} = %s AND {as_text} = %s"
    after: Any = -1 if isinstance(pk, models.AutoField | models.BigAutoField) else ""
    counts = ColumnReport()
    while True:
        with connection.cursor() as cursor:
            cursor.execute(select, [after, batch_size])
            rows = cursor.fetchall()
        if not rows:
            return counts
        after = rows[-1][0]
        changes = []
        for key, text in rows:
            try:
                sealed = _sealed_again(column.sealed_as, text, is_json=is_json, default_context=default_context)
            except Exception:
                logger.warning("%s %s: not sealed again", column, key, exc_info=True)
                counts.refused += 1
                continue
            if sealed is not None:
                changes.append((sealed, key, text))
        _apply(update, changes, counts, dry_run=dry_run)


def _reseal_store(*, default_context: dict[str, Any], dry_run: bool, batch_size: int) -> ColumnReport:
    """The Store's values (LangGraph's ``store`` table, keyed by prefix and key), sealed again."""
    counts = ColumnReport()
    with connection.cursor() as cursor:
        if "store" not in connection.introspection.table_names(cursor):
            return counts
    as_text, assign = ("value::text", "%s::jsonb") if connection.vendor == "postgresql" else ("value", "%s")
    select = f"SELECT prefix, key, {as_text} FROM store WHERE (prefix, key) > (%s, %s) ORDER BY prefix, key LIMIT %s"
    update = f"UPDATE store SET value = {assign} WHERE prefix = %s AND key = %s AND {as_text} = %s"
    after = ("", "")
    while True:
        with connection.cursor() as cursor:
            cursor.execute(select, [*after, batch_size])
            rows = cursor.fetchall()
        if not rows:
            return counts
        after = rows[-1][:2]
        changes = []
        for prefix, key, text in rows:
            try:
                sealed = _sealed_again(SEALED_STORE, text, is_json=True, default_context=default_context)
            except Exception:
                logger.warning("store item %s/%s: not sealed again", prefix, key, exc_info=True)
                counts.refused += 1
                continue
            if sealed is not None:
                changes.append((sealed, prefix, key, text))
        _apply(update, changes, counts, dry_run=dry_run)


def _apply(update: str, changes: list[tuple[Any, ...]], counts: ColumnReport, *, dry_run: bool) -> None:
    """Write a batch's changes, each by compare-and-swap on the text it was read as (a miss: written meanwhile)."""
    if dry_run:
        counts.resealed += len(changes)
        return
    with transaction.atomic(), connection.cursor() as cursor:
        for change in changes:
            cursor.execute(update, list(change))
            if cursor.rowcount:
                counts.resealed += 1
            else:
                counts.raced += 1


def _sealed_again(
    sealed_as: tuple[str, str], text: str, *, is_json: bool, default_context: dict[str, Any]
) -> str | None:
    """The column's new stored text: opened with its context and sealed again with it (None: nothing to seal)."""
    model, name = sealed_as
    if is_json:
        stored = json.loads(text)
        if stored is None or stored == {}:
            return None
        custom = active()
        if custom is not None and custom.json_keys is not None and not custom.json_keys.stale(stored):
            return None  # every listed key's value already sealed with the current key
        context = stored.get(CONTEXT_KEY) if isinstance(stored, dict) else None
        plain = open_json(model, name, stored)
        with fixed_scope(context if isinstance(context, dict) else default_context):
            return json.dumps(seal_json(model, name, plain), ensure_ascii=False)
    if not text:
        return None
    context = json.loads(text[len(SEALED_TEXT) :]).get(CONTEXT_KEY) if text.startswith(SEALED_TEXT) else None
    plain = open_text(model, name, text)
    with fixed_scope(context if isinstance(context, dict) else default_context):
        return seal_text(model, name, plain)
