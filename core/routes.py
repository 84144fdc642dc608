"""Build the API's route tables: a family of routes under one prefix, named after their paths."""

from __future__ import annotations

from collections.abc import Mapping

from django.urls import URLPattern, path
from django.views import View


def routes(prefix: str, name: str, views: Mapping[str, type[View]]) -> list[URLPattern]:
    """Return a path() per ``{suffix: view}`` under ``prefix``, in order, named ``<name>-<suffix>``.

    A suffix's slashes become dashes in its name (``state/checkpoint``: ``thread-state-checkpoint``).
    """
    return [
        path(f"{prefix}/{suffix}", view.as_view(), name=f"{name}-{suffix.replace('/', '-')}")
        for suffix, view in views.items()
    ]


def collection_routes(
    prefix: str,
    name: str,
    *,
    create: type[View],
    search: type[View],
    count: type[View],
    detail: type[View],
    id_param: str,
) -> list[URLPattern]:
    """Return a collection's routes: create (``prefix``), search, count and one item (by ``id_param``).

    Named ``<name>-create``, ``-search``, ``-count`` and ``-detail``; search
    and count come first, so neither is taken for an id.
    """
    return [
        path(prefix, create.as_view(), name=f"{name}-create"),
        *routes(prefix, name, {"search": search, "count": count}),
        path(f"{prefix}/<str:{id_param}>", detail.as_view(), name=f"{name}-detail"),
    ]
