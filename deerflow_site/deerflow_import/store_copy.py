"""Store items: DeerFlow's LangGraph Store → ours, under the per-user root clients see.

Where an item lands:

- ``("threads", …)``: DeerFlow's own thread records (its memory-mode thread
  store and older Gateways wrote them); they are thread metadata, read for
  legacy threads, not copied.
- ``("users", <DeerFlow user id>, *rest)``: that user's item, stored under
  their mapped user's root with the namespace ``rest``.
- anything else: a deployment-wide item, stored under the NULL-owner user's
  root with its namespace as it was.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from langgraph.store.base import BaseStore, Item

from core.errors import Invalid
from deerflow_site.deerflow_import.records import Tally
from store.selectors import store_item_get, store_namespace_check, store_user_id
from store.services import store_item_put

THREAD_RECORDS_NAMESPACE = ("threads",)
USERS_LABEL = "users"
PAGE = 500


def source_items(store: BaseStore, prefix: tuple[str, ...] = ()) -> Iterator[Item]:
    """Yield every item under ``prefix`` in the source Store, a page at a time."""
    offset = 0
    while page := store.search(prefix, limit=PAGE, offset=offset):
        yield from page
        offset += len(page)


def thread_records(store: BaseStore) -> dict[str, dict[str, Any]]:
    """Return DeerFlow's Store-kept thread records by thread id (the metadata of threads without a row)."""
    return {item.key: item.value for item in source_items(store, THREAD_RECORDS_NAMESPACE)}


def item_destination(namespace: tuple[str, ...]) -> tuple[str | None, tuple[str, ...]] | None:
    """Return (DeerFlow owner id or None for shared, client namespace), or None for an item not copied."""
    if namespace[: len(THREAD_RECORDS_NAMESPACE)] == THREAD_RECORDS_NAMESPACE:
        return None
    if len(namespace) > 2 and namespace[0] == USERS_LABEL:
        return namespace[1], tuple(namespace[2:])
    return None, tuple(namespace)


def store_owner_ids(store: BaseStore) -> set[str | None]:
    """Return the DeerFlow owners the Store's copied items belong to (None: shared items)."""
    owners: set[str | None] = set()
    for namespace in store.list_namespaces(limit=100_000):
        if (destination := item_destination(namespace)) is not None:
            owners.add(destination[0])
    return owners


def store_items_import(store: BaseStore, *, owners: Mapping[str | None, Any], tally: Tally, dry_run: bool) -> None:
    """Put every source item under its owner's root, skipping items already here with the same value."""
    for item in source_items(store):
        destination = item_destination(tuple(item.namespace))
        if destination is None:
            continue
        tally.found += 1
        owner_id, namespace = destination
        user_id = store_user_id(user=owners[owner_id])
        try:
            store_namespace_check(namespace)
        except Invalid as exc:
            tally.fail(f"store item {item.namespace}/{item.key}: {exc}")
            continue
        here = (
            None
            if dry_run and owners[owner_id].pk is None
            else store_item_get(user_id=user_id, namespace=namespace, key=item.key)
        )
        if here is not None and here.value == item.value:
            tally.present += 1
            continue
        tally.imported += 1
        if not dry_run:
            store_item_put(user_id=user_id, namespace=namespace, key=item.key, value=item.value)
