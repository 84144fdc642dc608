"""Checkpoints encrypted at rest: ``LANGGRAPH_AES_KEY``, fallback keys, and rotation on every backend.

The Platform's built-in encryption, on the savers this server builds
(SQLite, PostgreSQL, memory): with ``LANGGRAPH_AES_KEY`` set (16, 24 or 32
bytes: AES-128/192/256), every value a saver serializes — a SQLite
checkpoint with its channel values, a PostgreSQL channel blob, every pending
write — is sealed with AES-EAX (LangGraph's ``EncryptedSerializer``, its
nonce + tag + ciphertext layout) before it is stored; on PostgreSQL the
primitive channel values upstream keeps inline in the ``checkpoints`` row go
to sealed blobs too (``checkpoints.pg_saver.SealsPrimitives``). Checkpoint
metadata stays readable, as on the Platform.

The envelope names the key: a value's type is ``msgpack+aes.<key id>`` (the
first 8 hex digits of the key's SHA-256). Reads accept the current key and
every key of ``LANGGRAPH_AES_FALLBACK_KEYS`` (comma-separated), and
LangGraph's own ``+aes`` envelope (no key id: each configured key is tried;
EAX's tag tells the right one). ``manage.py encrypt_checkpoints`` re-seals,
with the current key, every stored value that is plaintext or sealed with
another key, and moves PostgreSQL's inline primitive values into sealed
blobs, each row by compare-and-swap so a run writing meanwhile loses
nothing; after it, the fallback keys can go. The Platform rotates only on its
own gRPC PostgreSQL saver; here it is one command on both backends.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from core.aes_json import ENV as AES_JSON_ENV
from core.aes_json import parse_keys
from core.custom_encryption import (
    CustomEncryption,
    aes_json_keys,
    current_context,
    fixed_scope,
    listed_json_keys,
    open_blob,
    seal_blob,
)

logger = logging.getLogger(__name__)

KEY_ENV = "LANGGRAPH_AES_KEY"
FALLBACK_KEYS_ENV = "LANGGRAPH_AES_FALLBACK_KEYS"
CIPHER = "aes"  # LangGraph's envelope name; ours adds ".<key id>"
_NONCE, _TAG = 16, 16


class KeyringError(ValueError):
    """A key is malformed, or a value is sealed with a key that is not configured."""


def key_id(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:8]


def _key(text: str, name: str) -> bytes:
    key = text.encode()
    if len(key) not in (16, 24, 32):
        raise KeyringError(f"{name} must be 16, 24 or 32 bytes (AES-128, -192 or -256), got {len(key)}")
    return key


@dataclass(frozen=True)
class Keyring:
    """The key new values are sealed with, and every key a read may open them with."""

    current: bytes
    fallbacks: tuple[bytes, ...] = ()

    @property
    def current_id(self) -> str:
        return key_id(self.current)

    def key(self, ident: str) -> bytes | None:
        return next((k for k in (self.current, *self.fallbacks) if key_id(k) == ident), None)


def keyring_from(env: Mapping[str, str]) -> Keyring | None:
    """The keyring ``env`` configures (None without ``LANGGRAPH_AES_KEY``); a malformed key raises KeyringError."""
    current = env.get(KEY_ENV)
    if not current:
        if env.get(FALLBACK_KEYS_ENV):
            raise KeyringError(f"{FALLBACK_KEYS_ENV} is set without {KEY_ENV}: set the key new values are sealed with")
        return None
    fallbacks = [f for f in (env.get(FALLBACK_KEYS_ENV) or "").split(",") if f.strip()]
    return Keyring(
        _key(current, KEY_ENV),
        tuple(_key(f.strip(), f"each key of {FALLBACK_KEYS_ENV}") for f in fallbacks),
    )


def json_keys_from(
    env: Mapping[str, str], keyring: Keyring | None, *, handlers: Any | None, index_fields: list[str] | None
) -> CustomEncryption | None:
    """``LANGGRAPH_AES_JSON_KEYS``'s sealing (``core.aes_json``), or None; KeyringError saying what is wrong."""
    raw = env.get(AES_JSON_ENV) or ""
    if not raw.strip():
        return None
    if keyring is None:
        raise KeyringError(f"{AES_JSON_ENV} is set without {KEY_ENV}: set the key the listed JSON keys are sealed with")
    if handlers is not None:
        raise KeyringError(
            f"{AES_JSON_ENV} is set with langgraph.json's encryption.path: the handlers decide what JSON is "
            "sealed; use one of the two"
        )
    try:
        keys = parse_keys(raw)
    except ValueError as exc:
        raise KeyringError(str(exc)) from None
    if not keys:
        return None
    if embedded := sorted({k for path in index_fields or [] for k in path.split(".")} & keys):
        raise KeyringError(
            f"{AES_JSON_ENV} lists {', '.join(embedded)}, which store.index embeds: its values would be embedded "
            "as ciphertext; drop the path from store.index.fields or the key from the list"
        )
    return aes_json_keys(keys, KeyringCipher(keyring))


class KeyringCipher:
    """LangGraph's ``CipherProtocol`` over a keyring: AES-EAX, the sealing key named in the envelope."""

    def __init__(self, keyring: Keyring) -> None:
        from Crypto.Cipher import AES  # pycryptodome: loaded only when a key is configured

        self._aes = AES
        self.keyring = keyring
        self.name = f"{CIPHER}.{keyring.current_id}"

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        cipher = self._aes.new(self.keyring.current, self._aes.MODE_EAX)
        sealed, tag = cipher.encrypt_and_digest(plaintext)
        return self.name, cipher.nonce + tag + sealed

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        nonce, tag, sealed = ciphertext[:_NONCE], ciphertext[_NONCE : _NONCE + _TAG], ciphertext[_NONCE + _TAG :]
        if ciphername == CIPHER:  # LangGraph's own envelope names no key: the one whose tag verifies
            candidates = [self.keyring.current, *self.keyring.fallbacks]
        elif ciphername.startswith(f"{CIPHER}.") and (key := self.keyring.key(ciphername[len(CIPHER) + 1 :])):
            candidates = [key]
        else:
            raise KeyringError(
                f"a checkpoint value is sealed with {ciphername!r}, whose key is neither {KEY_ENV} nor one of "
                f"{FALLBACK_KEYS_ENV}: configure that key to read it"
            )
        for key in candidates:
            try:
                return self._aes.new(key, self._aes.MODE_EAX, nonce=nonce).decrypt_and_verify(sealed, tag)
            except ValueError:  # the tag does not verify with this key
                continue
        raise KeyringError(f"no configured key opens a checkpoint value sealed with {ciphername!r}")


CUSTOM = "custom"  # the envelope of a value sealed by langgraph.json's encryption.path blob handlers
_CUSTOM_MAGIC = b"LGC1"


class SealingCipher:
    """New values sealed by the custom blob handlers when configured, else with the keyring; both read.

    A custom envelope keeps the context the value was sealed with in
    plaintext before the handler's ciphertext (``LGC1``, its length, its
    JSON), so a read needs no request: the decrypt handler gets that context.
    Values sealed with ``LANGGRAPH_AES_KEY`` before custom encryption was set
    stay readable while the key stays configured.
    """

    def __init__(self, keyring: Keyring | None, custom: Any | None) -> None:
        self.keyring_cipher = KeyringCipher(keyring) if keyring is not None else None
        self.custom = custom
        if custom is None:
            assert self.keyring_cipher is not None, "checkpoint_serde builds a cipher only with a key or handlers"
            self.name = self.keyring_cipher.name
        else:
            self.name = CUSTOM

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        if self.custom is None:
            assert self.keyring_cipher is not None
            return self.keyring_cipher.encrypt(plaintext)
        context = current_context()
        header = json.dumps(context, separators=(",", ":"), sort_keys=True).encode()
        sealed = seal_blob(self.custom, plaintext, context)
        return CUSTOM, _CUSTOM_MAGIC + len(header).to_bytes(4, "big") + header + sealed

    @staticmethod
    def _envelope(ciphertext: bytes) -> tuple[dict[str, Any], bytes]:
        """A custom envelope's context (its plaintext header) and the handler's ciphertext."""
        if ciphertext[:4] != _CUSTOM_MAGIC:
            raise KeyringError("a checkpoint value's custom envelope is malformed")
        size = int.from_bytes(ciphertext[4:8], "big")
        return json.loads(ciphertext[8 : 8 + size]), ciphertext[8 + size :]

    @staticmethod
    def context_of(ciphertext: bytes) -> dict[str, Any]:
        """The context a custom envelope was sealed with."""
        return SealingCipher._envelope(ciphertext)[0]

    def opened(self, ciphertext: bytes) -> tuple[dict[str, Any], bytes]:
        """A custom envelope's context and the plaintext the blob handler opens."""
        if self.custom is None:
            raise KeyringError(
                "a checkpoint value is sealed by custom encryption handlers, but langgraph.json names no "
                "encryption.path: configure the handlers that sealed it to read it"
            )
        context, sealed = self._envelope(ciphertext)
        return context, open_blob(self.custom, sealed, context)

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        if ciphername == CUSTOM:
            return self.opened(ciphertext)[1]
        if self.keyring_cipher is None:
            raise KeyringError(
                f"a checkpoint value is sealed with {ciphername!r} but no {KEY_ENV} is configured: set the key "
                "that sealed it to read it"
            )
        return self.keyring_cipher.decrypt(ciphername, ciphertext)


class KeepsListedKeysOut:
    """A saver that copies no ``LANGGRAPH_AES_JSON_KEYS`` key into a checkpoint's metadata.

    LangGraph copies a run's scalar ``configurable`` and metadata values into
    every checkpoint's metadata (``get_checkpoint_metadata``), which savers
    store in the clear: an ``api_key`` passed in ``configurable`` would sit
    there in plaintext beside its sealed copy in the run's kwargs. The saver
    gets the config without the listed keys; the graph still has them.
    """

    def put(self, config, checkpoint, metadata, new_versions):
        return super().put(_unlisted(config), checkpoint, metadata, new_versions)  # type: ignore[misc]

    async def aput(self, config, checkpoint, metadata, new_versions):
        return await super().aput(_unlisted(config), checkpoint, metadata, new_versions)  # type: ignore[misc]


def _unlisted(config: Any) -> Any:
    if not (keys := listed_json_keys()):
        return config
    trimmed = dict(config)
    for part in ("configurable", "metadata"):
        if isinstance(values := config.get(part), Mapping) and keys & set(values):
            trimmed[part] = {k: v for k, v in values.items() if k not in keys}
    return trimmed


def thread_sealing_context(connection: Any, kind: str, thread_id: str) -> dict[str, Any] | None:
    """The context the thread's newest checkpoint value was sealed with by custom handlers (None: none was).

    What rewrites a thread's checkpoints outside a run (``convert_checkpoints``)
    seals them with it, as the run that wrote them did.
    """
    where = {
        "sqlite": ("checkpoints", "checkpoint", "checkpoint_id"),
        "postgres": ("checkpoint_blobs", "blob", "version"),
    }.get(kind)
    if where is None:  # the memory backend
        return None
    table, column, newest = where
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {column} FROM {table} WHERE thread_id = %s AND type LIKE %s ORDER BY {newest} DESC LIMIT 1",
            [thread_id, f"%+{CUSTOM}"],
        )
        row = cursor.fetchone()
    return SealingCipher.context_of(bytes(row[0])) if row else None


def checkpoint_serde(keyring: Keyring | None, custom: Any | None = None) -> EncryptedSerializer | None:
    """The serializer the savers get: LangGraph's default, sealed by custom blob handlers or the keyring.

    ``custom`` is langgraph.json's ``encryption.path`` when it has blob
    handlers (``core.custom_encryption``). None: no encryption.
    """
    if keyring is None and custom is None:
        return None
    return EncryptedSerializer(SealingCipher(keyring, custom), JsonPlusSerializer())


def plain_bytes(type_: str, blob: bytes, serde: Any) -> tuple[str, bytes]:
    """A stored value's serializer type and plaintext bytes, opened with ``serde``'s cipher if it is sealed."""
    if "+" not in type_:
        return type_, blob
    inner, ciphername = type_.split("+", 1)
    cipher = getattr(serde, "cipher", None)
    if cipher is None:
        raise KeyringError(f"a checkpoint value is sealed ({type_!r}) but no {KEY_ENV} is configured")
    return inner, cipher.decrypt(ciphername, blob)


# -- re-sealing (rotation, and encrypting what was stored before the key) --------------------

# Per backend: each table of serialized values, its key columns, its type and value columns.
RESEAL_TABLES = {
    "sqlite": [
        ("checkpoints", ("thread_id", "checkpoint_ns", "checkpoint_id"), "type", "checkpoint"),
        ("writes", ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"), "type", "value"),
    ],
    "postgres": [
        ("checkpoint_blobs", ("thread_id", "checkpoint_ns", "channel", "version"), "type", "blob"),
        ("checkpoint_writes", ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"), "type", "blob"),
    ],
}


@dataclass
class ResealReport:
    """Rows per table: re-sealed, already current, changed meanwhile (skipped), refused by a handler (left)."""

    resealed: dict[str, int]
    current: dict[str, int]
    raced: dict[str, int]
    refused: dict[str, int]


class KeyringResealer:
    """``LANGGRAPH_AES_KEY``'s rotation: what is plaintext or sealed with another key, sealed with the current one."""

    def __init__(self, cipher: KeyringCipher) -> None:
        self.cipher = cipher

    def current(self, type_: str) -> bool:
        return type_.endswith(f"+{self.cipher.name}")

    def resealed(self, type_: str, value: bytes) -> tuple[str, bytes]:
        inner, _, ciphername = type_.partition("+")
        return self.sealed(inner, self.cipher.decrypt(ciphername, value) if ciphername else value)

    def sealed(self, type_: str, plain: bytes) -> tuple[str, bytes]:
        name, sealed = self.cipher.encrypt(plain)
        return f"{type_}+{name}", sealed


class HandlerResealer:
    """langgraph.json's blob handlers: every value opened and sealed again, with the context it was sealed
    with (``default_context`` for what they never sealed): what their key service now seals with."""

    def __init__(self, cipher: SealingCipher, default_context: dict[str, Any]) -> None:
        self.cipher = cipher
        self.default_context = default_context

    def current(self, type_: str) -> bool:
        return False  # a handler's key is inside its ciphertext: every value is sealed again

    def resealed(self, type_: str, value: bytes) -> tuple[str, bytes]:
        inner, _, ciphername = type_.partition("+")
        if ciphername == CUSTOM:
            context, plain = self.cipher.opened(value)
            return self.sealed(inner, plain, context)
        return self.sealed(inner, self.cipher.decrypt(ciphername, value) if ciphername else value)

    def sealed(self, type_: str, plain: bytes, context: dict[str, Any] | None = None) -> tuple[str, bytes]:
        with fixed_scope(self.default_context if context is None else context):
            name, sealed = self.cipher.encrypt(plain)
        return f"{type_}+{name}", sealed


def reseal(
    connection: Any,
    kind: str,
    resealer: KeyringResealer | HandlerResealer,
    *,
    dry_run: bool = False,
    batch_size: int = 500,
) -> ResealReport:
    """Seal again every stored value ``resealer`` does not call current.

    ``connection`` is Django's (LangGraph's tables live in its database).
    Each row is replaced by compare-and-swap on its type and bytes, so a value
    a run rewrote meanwhile is left as the run wrote it (sealed as runs seal
    now). A value the handler refuses is counted and left as it is. Batches
    commit one by one: a rerun finishes an interrupted one.
    """
    from django.db import transaction  # Django's transaction on the caller's connection

    report = ResealReport(resealed={}, current={}, raced={}, refused={})
    for table, keys, type_column, value_column in RESEAL_TABLES[kind]:
        columns = ", ".join(keys)
        marks = ", ".join(["%s"] * len(keys))
        select = (
            f"SELECT {columns}, {type_column}, {value_column} FROM {table} "
            f"WHERE ({columns}) > ({marks}) ORDER BY {columns} LIMIT %s"
        )
        where = " AND ".join(f"{k} = %s" for k in keys)
        update = (
            f"UPDATE {table} SET {type_column} = %s, {value_column} = %s "
            f"WHERE {where} AND {type_column} = %s AND {value_column} = %s"
        )
        after: tuple = ("",) * (len(keys) - 1) + (-1 if keys[-1] == "idx" else "",)
        counts = {"resealed": 0, "current": 0, "raced": 0, "refused": 0}
        while True:
            with connection.cursor() as cursor:
                cursor.execute(select, [*after, batch_size])
                rows = cursor.fetchall()
            if not rows:
                break
            after = tuple(rows[-1][: len(keys)])
            changes = []
            for row in rows:
                key, type_, value = row[: len(keys)], row[len(keys)], row[len(keys) + 1]
                if value is None or type_ == "empty":
                    continue
                if resealer.current(type_):
                    counts["current"] += 1
                    continue
                try:
                    new_type, sealed = resealer.resealed(type_, bytes(value))
                except Exception:
                    logger.warning("%s %s: not sealed again", table, key, exc_info=True)
                    counts["refused"] += 1
                    continue
                changes.append((new_type, sealed, *key, type_, bytes(value)))
            if dry_run:
                counts["resealed"] += len(changes)
                continue
            with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
                for change in changes:
                    cursor.execute(update, list(change))
                    counts["resealed" if cursor.rowcount else "raced"] += 1
        for name, count in counts.items():
            getattr(report, name)[table] = count
    if kind == "postgres":
        moved, raced = _seal_inline_values(connection, resealer, dry_run=dry_run, batch_size=batch_size)
        report.resealed[INLINE], report.current[INLINE], report.raced[INLINE], report.refused[INLINE] = (
            moved,
            0,
            raced,
            0,
        )
    return report


INLINE = "checkpoints (inline values)"


def _seal_inline_values(
    connection: Any, resealer: KeyringResealer | HandlerResealer, *, dry_run: bool, batch_size: int
) -> tuple[int, int]:
    """PostgreSQL: move the primitive channel values upstream kept inline in ``checkpoints`` rows into
    sealed blobs (``checkpoints.pg_saver.SealsPrimitives`` writes new ones there); (moved, raced).

    A value goes to the blob of its channel at its version (inserted unless
    there) and leaves the row by compare-and-swap on it. An inline ``true``
    with a blob behind it is a delta snapshot's marker and stays.
    """
    from django.db import transaction  # as in reseal(): Django's transaction on the caller's connection

    serde = JsonPlusSerializer()
    select = (
        "SELECT thread_id, checkpoint_ns, checkpoint_id, checkpoint -> 'channel_values', "
        "checkpoint -> 'channel_versions' FROM checkpoints c WHERE (thread_id, checkpoint_ns, checkpoint_id) > "
        "(%s, %s, %s) AND EXISTS (SELECT 1 FROM jsonb_each(c.checkpoint -> 'channel_values') v "
        "WHERE jsonb_typeof(v.value) IN ('string', 'number', 'boolean')) ORDER BY thread_id, checkpoint_ns, checkpoint_id LIMIT %s"
    )
    blob_at = (
        "SELECT 1 FROM checkpoint_blobs WHERE thread_id = %s AND checkpoint_ns = %s AND channel = %s AND version = %s"
    )
    insert = (
        "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob) "
        "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
    )
    update = (
        "UPDATE checkpoints SET checkpoint = checkpoint #- %s WHERE thread_id = %s AND checkpoint_ns = %s "
        "AND checkpoint_id = %s AND checkpoint -> 'channel_values' -> %s = %s::jsonb"
    )
    after: tuple = ("", "", "")
    moved = raced = 0
    while True:
        with connection.cursor() as cursor:
            cursor.execute(select, [*after, batch_size])
            rows = cursor.fetchall()
        if not rows:
            return moved, raced
        after = tuple(rows[-1][:3])
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            for thread_id, ns, checkpoint_id, values, versions in rows:
                values, versions = _json_value(values), _json_value(versions) or {}
                for channel, value in values.items():
                    version = versions.get(channel)
                    if value is None or isinstance(value, dict | list) or version is None:
                        continue
                    if value is True:
                        cursor.execute(blob_at, [thread_id, ns, channel, version])
                        if cursor.fetchone():
                            continue  # a delta snapshot's marker
                    if dry_run:
                        moved += 1
                        continue
                    type_, sealed = resealer.sealed(*serde.dumps_typed(value))
                    cursor.execute(insert, [thread_id, ns, channel, version, type_, sealed])
                    path = ["channel_values", channel]
                    cursor.execute(update, [path, thread_id, ns, checkpoint_id, channel, json.dumps(value)])
                    if cursor.rowcount:
                        moved += 1
                    else:
                        raced += 1


def _json_value(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value
