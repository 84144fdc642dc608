"""Reads of the LangGraph Store, and the per-user namespace root they go through.

Every user's items live under ``("users", <user id>, *client namespace)``.
This module is the one place that adds and strips that root (the writes in
``store_services`` use it too): HTTP views pass ``store_user_id(user=...)``,
graphs pass ``config["configurable"]["langgraph_auth_user_id"]`` (the same
string), so both see the same items, a client gets its namespace back exactly
as written, and no client namespace can name another user's root.

Expiry: LangGraph's SQLite and PostgreSQL stores keep an expired row (and
return it) until a sweep deletes it; the SQLite store has no read-time filter
at all. So every read here first runs the store's own ``sweep_ttl()`` (one
indexed ``DELETE … WHERE expires_at < now``): an expired item is never
returned, by the HTTP routes, the admin or graphs reading through here.
Reads never extend a TTL (``refresh_ttl=False``): in the installed versions
the SQLite store only refreshes with a ``TTLConfig`` and the PostgreSQL store
rounds ``ttl_minutes`` to an integer column when it refreshes.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, overload

import orjson
from langgraph.store.base import BaseStore, Item, SearchItem

from checkpoints.runtime import async_resources, sync_resources
from core.custom_encryption import refuse_sealed_filter
from core.drf import fits_sql_integer
from core.errors import Invalid

STORE_ROOT_LABEL = "users"
# The key the LangGraph Platform (and our run executor) puts the user id under.
USER_ID_CONFIG_KEY = "langgraph_auth_user_id"
# SQLite's store interpolates filter keys into SQL and accepts only these.
FILTER_KEY_PATTERN = re.compile(r"^[A-Za-z0-9_.-]+$")
FILTER_OPERATORS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"})
# Past this an expiry overflows Python's datetime (a 500), so it is a 422.
TTL_MAX_MINUTES = 100 * 365 * 24 * 60
# How many user roots the admin walks at most when no user is selected.
_MAX_ADMIN_USERS = 10_000


# -- the per-user root ---------------------------------------------------------


def store_user_id(*, user) -> str:
    """Return the id a user's items are filed under (``langgraph_auth_user_id`` for graphs)."""
    return str(user.pk)


def store_user_id_from_config(config: Mapping[str, Any] | None) -> str | None:
    """Return the user id a run passes to its graph, or None outside an authenticated run."""
    user_id = ((config or {}).get("configurable") or {}).get(USER_ID_CONFIG_KEY)
    return user_id if isinstance(user_id, str) and user_id else None


def store_namespace_root(*, user_id: str) -> tuple[str, str]:
    """Return the server-owned root of ``user_id``'s items."""
    # "*" would be a wildcard label in namespace listings, matching every user.
    if not isinstance(user_id, str) or not user_id or "." in user_id or user_id == "*":
        raise ValueError(f"a store user id must be a non-empty string without '.' (and not '*'), got {user_id!r}")
    return (STORE_ROOT_LABEL, user_id)


def store_namespace_check(namespace: Any, *, field: str = "namespace", allow_empty: bool = False) -> tuple[str, ...]:
    """Return a client namespace as a tuple, or raise Invalid naming ``field``.

    Labels are non-empty strings without ``.`` (the query form joins them
    with dots) or NUL, as LangGraph requires of every label.
    """
    if not isinstance(namespace, (list, tuple)):
        raise Invalid(field, "must be a list of strings")
    if not namespace and not allow_empty:
        raise Invalid(field, "must not be empty")
    for index, label in enumerate(namespace):
        if not isinstance(label, str) or not label:
            raise Invalid(field, f"label {index} must be a non-empty string, got {label!r}")
        if "." in label or "\x00" in label:
            raise Invalid(field, f"label {index} ({label!r}) must not contain '.' or NUL")
    return tuple(namespace)


def store_namespace_full(*, user_id: str, namespace: Sequence[str], allow_empty: bool = False) -> tuple[str, ...]:
    """Return the namespace a client's ``namespace`` is stored under."""
    return (*store_namespace_root(user_id=user_id), *store_namespace_check(namespace, allow_empty=allow_empty))


def store_namespace_client(*, user_id: str, namespace: Sequence[str]) -> tuple[str, ...]:
    """Strip the root from a stored namespace; refuse one outside ``user_id``'s root."""
    root = store_namespace_root(user_id=user_id)
    if tuple(namespace[: len(root)]) != root:
        raise ValueError(f"namespace {tuple(namespace)} is outside the root of user {user_id}")
    return tuple(namespace[len(root) :])


def store_filter_check(filter: Any) -> dict[str, Any] | None:
    """Return a search filter LangGraph's SQL stores can run, or raise Invalid."""
    if filter is None:
        return None
    if not isinstance(filter, dict):
        raise Invalid("filter", "must be an object")
    for key, condition in filter.items():
        if not FILTER_KEY_PATTERN.match(key):
            raise Invalid("filter", f"key {key!r} may contain only letters, digits, '_', '.' and '-'")
        if isinstance(condition, dict) and not set(condition) <= FILTER_OPERATORS:
            unknown = sorted(set(condition) - FILTER_OPERATORS)
            raise Invalid("filter", f"unknown operator(s) {unknown} for {key!r}; use {sorted(FILTER_OPERATORS)}")
        operands = condition.values() if isinstance(condition, dict) else [condition]
        if not all(fits_sql_integer(operand) for operand in operands):
            raise Invalid("filter", f"the value for {key!r} is out of the 64-bit integer range")
    refuse_sealed_filter("filter", filter)
    return filter or None


def store_ttl_check(ttl: Any) -> float | None:
    """Return a TTL in minutes (fractions allowed; None = no expiry), or raise Invalid."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not math.isfinite(ttl):
        raise Invalid("ttl", "must be a number of minutes")
    if ttl <= 0:
        raise Invalid("ttl", "must be greater than 0 minutes (omit it for no expiry)")
    if ttl > TTL_MAX_MINUTES:
        raise Invalid("ttl", f"must be at most {TTL_MAX_MINUTES} minutes (100 years; omit it for no expiry)")
    return float(ttl)


def _aware(moment: datetime) -> datetime:
    # The SQLite store returns naive UTC timestamps; PostgreSQL aware ones.
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@overload
def _client_item(item: SearchItem, *, user_id: str) -> SearchItem: ...
@overload
def _client_item(item: Item, *, user_id: str) -> Item: ...
def _client_item(item: Item, *, user_id: str) -> Item:
    """Return ``item`` as its owner sees it: the client namespace, aware timestamps."""
    fields: dict[str, Any] = {
        "namespace": store_namespace_client(user_id=user_id, namespace=item.namespace),
        "key": item.key,
        "value": item.value,
        "created_at": _aware(item.created_at),
        "updated_at": _aware(item.updated_at),
    }
    if isinstance(item, SearchItem):
        return SearchItem(**fields, score=item.score)
    return Item(**fields)


def store_item_payload(item: Item) -> dict[str, Any]:
    """Return the SDK's ``Item`` (``SearchItem`` with ``score``) for a client item."""
    payload = item.dict()
    if isinstance(item, SearchItem):
        payload["score"] = item.score
    return payload


# -- expiry ---------------------------------------------------------------------


def _sweep(store: BaseStore) -> None:
    """Delete expired items so the read that follows cannot return them."""
    sweep = getattr(store, "sweep_ttl", None)
    if sweep is None:  # InMemoryStore keeps no TTLs
        return
    if inspect.iscoroutinefunction(sweep):
        raise TypeError(f"{type(store).__name__} is async: use the a* twin of this selector")
    sweep()


async def _asweep(store: BaseStore) -> None:
    """See _sweep()."""
    sweep = getattr(store, "sweep_ttl", None)
    if sweep is None:
        return
    if inspect.iscoroutinefunction(sweep):
        await sweep()
    else:  # a sync store in an async graph: off the loop, as its own abatch() does
        await asyncio.get_running_loop().run_in_executor(None, sweep)


def resolve_store(store: BaseStore | None) -> BaseStore:
    """Return ``store`` (a graph's own), or this process's sync Store."""
    return store if store is not None else sync_resources().store


async def aresolve_store(store: BaseStore | None) -> BaseStore:
    """Return ``store`` (a graph's own), or the running loop's async Store."""
    return store if store is not None else (await async_resources()).store


# -- get ------------------------------------------------------------------------


def store_item_get(*, user_id: str, namespace: Sequence[str], key: str, store: BaseStore | None = None) -> Item | None:
    """Return the user's item at (namespace, key), or None (also when expired)."""
    full = store_namespace_full(user_id=user_id, namespace=namespace)
    store = resolve_store(store)
    _sweep(store)
    item = store.get(full, key, refresh_ttl=False)
    return _client_item(item, user_id=user_id) if item else None


async def astore_item_get(
    *, user_id: str, namespace: Sequence[str], key: str, store: BaseStore | None = None
) -> Item | None:
    """See store_item_get()."""
    full = store_namespace_full(user_id=user_id, namespace=namespace)
    store = await aresolve_store(store)
    await _asweep(store)
    item = await store.aget(full, key, refresh_ttl=False)
    return _client_item(item, user_id=user_id) if item else None


# -- search ---------------------------------------------------------------------


def _search_args(
    user_id: str, namespace_prefix: Sequence[str], filter: Any, query: str | None, limit: int, offset: int
):
    prefix = store_namespace_full(user_id=user_id, namespace=namespace_prefix, allow_empty=True)
    kwargs = {"filter": store_filter_check(filter), "query": query, "limit": limit, "offset": offset}
    return prefix, {**kwargs, "refresh_ttl": False}


def store_item_search(
    *,
    user_id: str,
    namespace_prefix: Sequence[str] = (),
    filter: Mapping[str, Any] | None = None,
    query: str | None = None,
    limit: int = 10,
    offset: int = 0,
    store: BaseStore | None = None,
) -> list[SearchItem]:
    """Return the user's items under ``namespace_prefix``, newest update first.

    ``query`` is semantic search: with an embedding index (langgraph.json
    ``store.index``, ``checkpoints.store_index``) the items come most similar
    first, each with its cosine ``score``; filters and the user's root apply
    in the same query. Without one LangGraph ignores it and ``score`` stays None.
    """
    prefix, kwargs = _search_args(user_id, namespace_prefix, filter, query, limit, offset)
    store = resolve_store(store)
    _sweep(store)
    return [_client_item(item, user_id=user_id) for item in store.search(prefix, **kwargs)]


async def astore_item_search(
    *,
    user_id: str,
    namespace_prefix: Sequence[str] = (),
    filter: Mapping[str, Any] | None = None,
    query: str | None = None,
    limit: int = 10,
    offset: int = 0,
    store: BaseStore | None = None,
) -> list[SearchItem]:
    """See store_item_search()."""
    prefix, kwargs = _search_args(user_id, namespace_prefix, filter, query, limit, offset)
    store = await aresolve_store(store)
    await _asweep(store)
    return [_client_item(item, user_id=user_id) for item in await store.asearch(prefix, **kwargs)]


# -- namespaces -----------------------------------------------------------------


def _namespace_conditions(
    user_id: str, prefix: Sequence[str], suffix: Sequence[str], max_depth: int | None
) -> dict[str, Any]:
    """Return list_namespaces() arguments confined to the user's root.

    A suffix is matched against the stored (rooted) namespace, so a suffix
    longer than the client's namespace could reach into the root, e.g. suffix
    ``(<id>, "a")`` matching the client's ``("a",)``. Padding the prefix with
    one-label ``*`` wildcards up to the suffix's length rules that out.
    """
    prefix = store_namespace_check(prefix, field="prefix", allow_empty=True)
    suffix = store_namespace_check(suffix, field="suffix", allow_empty=True)
    root = store_namespace_root(user_id=user_id)
    padding = ("*",) * max(0, len(suffix) - len(prefix))
    return {
        "prefix": (*root, *prefix, *padding),
        "suffix": suffix or None,
        "max_depth": None if max_depth is None else len(root) + max_depth,
    }


def _client_namespaces(user_id: str, namespaces: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    stripped = (store_namespace_client(user_id=user_id, namespace=ns) for ns in namespaces)
    return [ns for ns in stripped if ns]


def store_namespace_list(
    *,
    user_id: str,
    prefix: Sequence[str] = (),
    suffix: Sequence[str] = (),
    max_depth: int | None = None,
    limit: int = 100,
    offset: int = 0,
    store: BaseStore | None = None,
) -> list[tuple[str, ...]]:
    """Return the user's namespaces (as the client wrote them), sorted, truncated to ``max_depth``."""
    conditions = _namespace_conditions(user_id, prefix, suffix, max_depth)
    store = resolve_store(store)
    _sweep(store)
    return _client_namespaces(user_id, store.list_namespaces(**conditions, limit=limit, offset=offset))


async def astore_namespace_list(
    *,
    user_id: str,
    prefix: Sequence[str] = (),
    suffix: Sequence[str] = (),
    max_depth: int | None = None,
    limit: int = 100,
    offset: int = 0,
    store: BaseStore | None = None,
) -> list[tuple[str, ...]]:
    """See store_namespace_list()."""
    conditions = _namespace_conditions(user_id, prefix, suffix, max_depth)
    store = await aresolve_store(store)
    await _asweep(store)
    return _client_namespaces(user_id, await store.alist_namespaces(**conditions, limit=limit, offset=offset))


# -- admin console --------------------------------------------------------------


@dataclass(frozen=True)
class StoreItemRow:
    """One item as the admin lists it: whose, where, and how big."""

    user_id: str
    namespace: tuple[str, ...]
    key: str
    size: int
    updated_at: datetime


def store_item_size(value: Mapping[str, Any]) -> int:
    """Return the bytes of ``value`` as JSON (what the SQLite store writes, orjson-encoded)."""
    return len(orjson.dumps(dict(value)))


def store_user_ids(*, store: BaseStore | None = None) -> list[str]:
    """Return the ids of the users that have at least one live item."""
    store = resolve_store(store)
    _sweep(store)
    return _user_ids(store)


def _user_ids(store: BaseStore) -> list[str]:
    roots = store.list_namespaces(prefix=(STORE_ROOT_LABEL,), max_depth=2, limit=_MAX_ADMIN_USERS)
    return [root[1] for root in roots if len(root) == 2]


def store_item_rows(
    *,
    user_id: str | None = None,
    namespace_prefix: Sequence[str] = (),
    limit: int = 200,
    store: BaseStore | None = None,
) -> list[StoreItemRow]:
    """Return up to ``limit`` items of one user (or of every user) under ``namespace_prefix``."""
    store = resolve_store(store)
    _sweep(store)
    user_ids = [user_id] if user_id else _user_ids(store)
    rows: list[StoreItemRow] = []
    for uid in user_ids:
        if len(rows) >= limit:
            break
        prefix, kwargs = _search_args(uid, namespace_prefix, None, None, limit - len(rows), 0)
        items = [_client_item(item, user_id=uid) for item in store.search(prefix, **kwargs)]
        rows += [
            StoreItemRow(uid, item.namespace, item.key, store_item_size(item.value), item.updated_at) for item in items
        ]
    return rows


# Items per page when a user's whole root is walked (erase: count, then delete).
USER_ROOT_PAGE = 500


def store_user_items_count(*, user_id: str, store: BaseStore | None = None) -> int:
    """Count every item under ``user_id``'s root, in every namespace (expired ones swept first)."""
    store = resolve_store(store)
    _sweep(store)
    root, count = store_namespace_root(user_id=user_id), 0
    while page := store.search(root, limit=USER_ROOT_PAGE, offset=count, refresh_ttl=False):
        count += len(page)
    return count
