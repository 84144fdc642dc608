"""Writes to the LangGraph Store, always under the writer's per-user root.

The root is added by ``store_selectors.store_namespace_full`` (the one place
that knows it). The HTTP routes call the sync twins with the process's sync
Store; graph nodes call either twin with the Store their run was compiled
with (``get_store()``), so an item written by a graph is the item a client
reads, and the other way round.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from langgraph.store.base import BaseStore

from checkpoints.runtime import store_default_ttl
from core.errors import Invalid
from store.selectors import (
    USER_ROOT_PAGE,
    aresolve_store,
    resolve_store,
    store_namespace_full,
    store_namespace_root,
    store_ttl_check,
)


def _check_key(key: Any) -> str:
    if not isinstance(key, str) or not key:
        raise Invalid("key", "must be a non-empty string")
    return key


def _check_ttl(ttl: Any, *, store: BaseStore) -> float | None:
    ttl = store_ttl_check(ttl)
    if ttl is not None and not store.supports_ttl:
        raise Invalid("ttl", f"{type(store).__name__} (the memory backend) does not support TTLs")
    return ttl


def _put_plan(
    store: BaseStore, *, user_id: str, namespace: Sequence[str], key: Any, value: Any, ttl: Any
) -> tuple[tuple[str, ...], str, dict[str, Any], float | None]:
    """Validate a put completely before anything is written; no ``ttl``: the deployment's default, if any."""
    full = store_namespace_full(user_id=user_id, namespace=namespace)
    if not isinstance(value, Mapping):
        raise Invalid("value", "must be a JSON object")
    ttl = _check_ttl(ttl, store=store)
    if ttl is None and store.supports_ttl:
        ttl = store_default_ttl()
    return full, _check_key(key), dict(value), ttl


def store_item_put(
    *,
    user_id: str,
    namespace: Sequence[str],
    key: str,
    value: Mapping[str, Any],
    index: Literal[False] | list[str] | None = None,
    ttl: float | None = None,
    store: BaseStore | None = None,
) -> None:
    """Create or replace the user's item; ``ttl`` minutes after this write it expires."""
    store = resolve_store(store)
    full, key, value, ttl = _put_plan(store, user_id=user_id, namespace=namespace, key=key, value=value, ttl=ttl)
    store.put(full, key, value, index=index, ttl=ttl)


async def astore_item_put(
    *,
    user_id: str,
    namespace: Sequence[str],
    key: str,
    value: Mapping[str, Any],
    index: Literal[False] | list[str] | None = None,
    ttl: float | None = None,
    store: BaseStore | None = None,
) -> None:
    """See store_item_put()."""
    store = await aresolve_store(store)
    full, key, value, ttl = _put_plan(store, user_id=user_id, namespace=namespace, key=key, value=value, ttl=ttl)
    await store.aput(full, key, value, index=index, ttl=ttl)


def store_item_delete(*, user_id: str, namespace: Sequence[str], key: str, store: BaseStore | None = None) -> None:
    """Delete the user's item (a missing item is not an error, as on the LangGraph Platform)."""
    full = store_namespace_full(user_id=user_id, namespace=namespace)
    resolve_store(store).delete(full, _check_key(key))


async def astore_item_delete(
    *, user_id: str, namespace: Sequence[str], key: str, store: BaseStore | None = None
) -> None:
    """See store_item_delete()."""
    full = store_namespace_full(user_id=user_id, namespace=namespace)
    await (await aresolve_store(store)).adelete(full, _check_key(key))


def store_user_items_delete(*, user_id: str, store: BaseStore | None = None) -> int:
    """Delete every item under ``user_id``'s root, in every namespace; return how many."""
    store = resolve_store(store)
    root, deleted = store_namespace_root(user_id=user_id), 0
    while page := store.search(root, limit=USER_ROOT_PAGE, refresh_ttl=False):
        for item in page:
            store.delete(item.namespace, item.key)
        deleted += len(page)
    return deleted
