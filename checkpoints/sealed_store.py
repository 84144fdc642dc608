"""The Store with its values sealed by langgraph.json's ``encryption.path`` JSON handlers.

Every value put through the process's Store — by the API or by a graph — is
sealed (``model="store"``, ``field="value"``) before the Store writes it,
with the context of the request or run; every item read comes back opened.
Keys the handler leaves plaintext still filter a search. With custom
handlers, a Store with a semantic index (``store.index``) is not wrapped: it
embeds the values it stores, and would embed ciphertext; the start-up log
says so (``deerflow_site.graph_sources``). With ``LANGGRAPH_AES_JSON_KEYS``
it is: only the listed keys are sealed, and an index ``fields`` path through
one of them is refused at start-up.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from langgraph.store.base import BaseStore, Item, Op, PutOp, Result, SearchItem

from core.custom_encryption import active, open_json, seal_json

MODEL, FIELD = "store", "value"


class SealedStore(BaseStore):
    """Wrap ``inner``: puts sealed, items opened; everything else is the inner Store's."""

    def __init__(self, inner: BaseStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:  # the inner Store's sweeps, connection, batch task
        return getattr(self.inner, name)

    @property
    def supports_ttl(self) -> bool:  # type: ignore[override]
        return self.inner.supports_ttl

    @property
    def ttl_config(self) -> Any:  # type: ignore[override]
        return self.inner.ttl_config

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return [_opened(result) for result in self.inner.batch([_sealed(op) for op in ops])]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return [_opened(result) for result in await self.inner.abatch([_sealed(op) for op in ops])]


def sealed_store(store: BaseStore, *, indexed: bool) -> BaseStore:
    """``store`` wrapped when JSON is sealed, unless custom handlers would seal what a semantic index embeds."""
    custom = active()
    if custom is None or not custom.seals_json or (indexed and custom.json_keys is None):
        return store
    return SealedStore(store)


def _sealed(op: Op) -> Op:
    if isinstance(op, PutOp) and isinstance(op.value, dict):
        return PutOp(op.namespace, op.key, seal_json(MODEL, FIELD, op.value), index=op.index, ttl=op.ttl)
    return op


def _opened(result: Any) -> Any:
    if isinstance(result, list):
        return [_opened(item) for item in result]
    if isinstance(result, SearchItem):
        value = open_json(MODEL, FIELD, result.value)
        return SearchItem(result.namespace, result.key, value, result.created_at, result.updated_at, score=result.score)
    if isinstance(result, Item):  # a new Item: the memory Store hands out the one it keeps
        return Item(
            value=open_json(MODEL, FIELD, result.value),
            key=result.key,
            namespace=result.namespace,
            created_at=result.created_at,
            updated_at=result.updated_at,
        )
    return result
