"""The console's Store items page (read-only).

LangGraph owns the Store's tables (composite keys, no Django models), so the
page reads them through the store selectors and is registered as a console
page (``core.admin_site``, registered by ``console.admin``), listed under "Checkpoints" where staff look for
what a thread and its user keep.
"""

from __future__ import annotations

from collections import defaultdict

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied

from console.checkpoints import checkpoint_page
from core.admin_site import console_render
from core.errors import Invalid
from store.selectors import StoreItemRow, store_item_rows, store_namespace_check, store_user_ids

# Rows fetched per page view; the filters narrow it down beyond that.
STORE_ITEMS_CAP = 200
STORE_ITEMS_URL_NAME = "checkpoints_store_items"


def _usernames(user_ids: list[str]) -> dict[str, str]:
    """Map store user ids (``str(pk)``) to usernames in one query."""
    pks = [int(user_id) for user_id in user_ids if user_id.isdigit()]
    users = get_user_model().objects.filter(pk__in=pks).values_list("pk", "username")
    return {str(pk): username for pk, username in users}


def _namespace_groups(rows: list[StoreItemRow]) -> list[dict]:
    """Return item count and bytes per (user, namespace), in row order."""
    groups: dict[tuple[str, tuple[str, ...]], dict] = defaultdict(lambda: {"items": 0, "size": 0})
    for row in rows:
        group = groups[(row.user_id, row.namespace)]
        group["items"] += 1
        group["size"] += row.size
    return [{"user_id": user_id, "namespace": ".".join(ns), **totals} for (user_id, ns), totals in groups.items()]


def _filters(request) -> tuple[str | None, tuple[str, ...], str]:
    """Return (user id, namespace prefix, error) from the query string."""
    user_id = request.GET.get("user") or None
    raw = request.GET.get("namespace", "").strip()
    try:
        namespace = store_namespace_check(raw.split(".") if raw else [], allow_empty=True)
    except Invalid as exc:
        return user_id, (), str(exc)
    if user_id is not None and (not user_id.isdigit()):
        return None, namespace, f"user: {user_id!r} is not a user id"
    return user_id, namespace, ""


def store_items_view(request):
    """List Store items per user and namespace with their JSON size (read-only, superusers only).

    Memories are user data with no model permission to grant, so plain staff
    accounts do not see them.
    """
    if not request.user.is_superuser:
        raise PermissionDenied("Only superusers can read users' Store items.")
    user_id, namespace, error = _filters(request)
    rows = [] if error else store_item_rows(user_id=user_id, namespace_prefix=namespace, limit=STORE_ITEMS_CAP + 1)
    capped, rows = len(rows) > STORE_ITEMS_CAP, rows[:STORE_ITEMS_CAP]
    user_ids = store_user_ids()
    names = _usernames(sorted({*user_ids, *(row.user_id for row in rows)}))
    context = {
        "title": "Store items",
        "rows": [
            {"row": row, "username": names.get(row.user_id, "?"), "namespace": ".".join(row.namespace)} for row in rows
        ],
        "groups": [{**group, "username": names.get(group["user_id"], "?")} for group in _namespace_groups(rows)],
        "users": [(uid, names.get(uid, "?")) for uid in user_ids],
        "selected_user": user_id or "",
        "namespace": ".".join(namespace),
        "error": error,
        "capped": capped,
        "cap": STORE_ITEMS_CAP,
    }
    return console_render(request, "admin/checkpoints/store_items.html", context)


PAGE = checkpoint_page(
    "checkpoints/store-items/",
    STORE_ITEMS_URL_NAME,
    "Store items",
    store_items_view,
    listed=True,
    permission=None,
    visible_to=lambda user: user.is_superuser,
)
