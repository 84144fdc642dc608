"""``LANGGRAPH_AES_JSON_KEYS``: chosen JSON keys sealed with ``LANGGRAPH_AES_KEY`` wherever they appear.

The Platform's selective field encryption, without custom handlers: with
``LANGGRAPH_AES_KEY`` set, the keys listed (comma-separated) are sealed in
thread, assistant, run and cron JSON and in Store values, at any depth (a
``configurable.api_key`` inside a run's kwargs as much as a top-level
``api_key`` in thread metadata), and in our own copies of them (run events,
the protocol-v2 log). Every other key is stored as it is, so metadata
filters, searches and the console keep working on them.

A sealed value becomes the text ``lgaes:v1:<cipher>:<base64>``: its JSON,
sealed with AES-EAX by the keyring's current key (``<cipher>`` names the
key, as a checkpoint's envelope does), so reads open what any configured
key (``LANGGRAPH_AES_FALLBACK_KEYS``) sealed and ``manage.py reencrypt``
seals it again with the current one. A value of a listed key stored before
the key was listed stays readable as it is; ``reencrypt`` seals it.

A sealed value never equals a filter's value, so a filter, a search or an
auth handler's filter that reads a listed key is refused (a 422 naming the
key) rather than silently matching nothing; the Platform's system metadata
and the keys this server filters on may not be listed at all.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

ENV = "LANGGRAPH_AES_JSON_KEYS"
PREFIX = "lgaes:v1:"
# The Platform's system fields, and the keys this server reads in SQL (ownership, graph, branch lineage).
RESERVED = frozenset(
    {
        "langgraph_version",
        "langgraph_api_version",
        "langgraph_plan",
        "langgraph_host",
        "langgraph_api_url",
        "langgraph_request_id",
        "langgraph_auth_user_id",
        "langgraph_auth_permissions",
        "owner",
        "owner_id",
        "user_id",
        "graph_id",
        "assistant_id",
        "thread_id",
        "checkpoint_ns",
        "checkpoint_id",
        "run_id",
        "branch_parent_thread_id",
        "branch_parent_checkpoint_id",
    }
)


class Cipher(Protocol):
    """``checkpoints.encryption.KeyringCipher``: seals with the current key, opens with any configured one."""

    name: str  # the envelope name new values get (the current key's)

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]: ...

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes: ...


class SealedKeyFilter(ValueError):
    """A filter reads a key whose values are sealed."""


def parse_keys(raw: str | None) -> frozenset[str]:
    """The listed keys (empty: none); ValueError naming a key that may not be sealed."""
    keys = frozenset(k.strip() for k in (raw or "").split(",") if k.strip())
    if reserved := sorted(keys & RESERVED):
        raise ValueError(
            f"{ENV} lists {', '.join(reserved)}: system metadata and the keys the server filters on "
            "(ownership, graph, branch lineage) stay plaintext"
        )
    if bad := sorted(k for k in keys if k.startswith("__")):
        raise ValueError(f"{ENV} lists {', '.join(bad)}: keys starting with '__' are the server's own")
    return keys


@dataclass(frozen=True)
class AesJsonKeys:
    """The listed keys and the cipher their values are sealed with."""

    keys: frozenset[str]
    cipher: Cipher

    def seal(self, value: Any) -> Any:
        """``value`` with every listed key's value sealed, at any depth (a sealed value is left as it is)."""
        return self._mapped(value, self._sealed)

    def open(self, value: Any) -> Any:
        """``value`` with every sealed value opened (a listed key's value stored in the clear is returned as it is)."""
        return self._mapped(value, self._opened)

    def _mapped(self, value: Any, listed: Callable[[Any], Any]) -> Any:
        """``value`` with ``listed`` applied to every listed key's value, at any depth."""
        if isinstance(value, dict):
            return {k: listed(v) if k in self.keys else self._mapped(v, listed) for k, v in value.items()}
        if isinstance(value, list):
            return [self._mapped(item, listed) for item in value]
        return value

    def stale(self, value: Any) -> bool:
        """Whether ``value`` holds a listed key's value in the clear or sealed with another key than the current."""
        if isinstance(value, dict):
            return any(
                (not is_sealed(v) or not v.startswith(f"{PREFIX}{self.cipher.name}:"))
                if k in self.keys
                else self.stale(v)
                for k, v in value.items()
            )
        if isinstance(value, list):
            return any(self.stale(item) for item in value)
        return False

    def _sealed(self, value: Any) -> str:
        if is_sealed(value):
            return value
        name, sealed = self.cipher.encrypt(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
        return f"{PREFIX}{name}:{base64.b64encode(sealed).decode()}"

    def _opened(self, value: Any) -> Any:
        if not is_sealed(value):
            return self.open(value)  # stored before the key was listed: reencrypt seals it
        name, _, text = value[len(PREFIX) :].partition(":")
        try:
            sealed = base64.b64decode(text, validate=True)
        except binascii.Error:
            raise ValueError(f"a value sealed under {ENV} is damaged (not base64)") from None
        return json.loads(self.cipher.decrypt(name, sealed))

    def filtered_keys(self, filters: Any) -> list[str]:
        """The listed keys a containment filter (or a Store/auth filter's key paths) reads, at any depth."""
        return sorted(set(_keys_in(filters)) & self.keys)

    def refuse_filter(self, filters: Any) -> None:
        """SealedKeyFilter when ``filters`` reads a listed key: its sealed values never equal the filter's."""
        if hidden := self.filtered_keys(filters):
            raise SealedKeyFilter(
                f"{', '.join(hidden)} {'is' if len(hidden) == 1 else 'are'} sealed at rest ({ENV}): "
                "sealed values cannot be searched or filtered"
            )


def is_sealed(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)


def _keys_in(filters: Any) -> Iterable[str]:
    if isinstance(filters, Mapping):
        for key, value in filters.items():
            if isinstance(key, str):
                yield from key.split(".")  # a Store filter's dotted path
            yield from _keys_in(value)
    elif isinstance(filters, list):
        for item in filters:
            yield from _keys_in(item)
