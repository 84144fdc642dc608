"""The console's 403 and 404 pages: inside its layout (header, sidebar, breadcrumbs), saying what is missing.

Django answers an admin view's ``PermissionDenied`` with the site-wide bare
page; a support person then sees neither where they are nor what to ask
for. Here a staff user gets the console around the answer and the name of
the permission the page needs (from the refusal, else from the model admin
the URL belongs to). Anyone else gets Django's default pages.
"""

from __future__ import annotations

import re

from django.contrib import admin
from django.shortcuts import render
from django.urls import Resolver404, resolve, reverse
from django.views import defaults

# How the console's own refusals name a permission: "… needs the app.codename permission."
_NAMED = re.compile(r"\b(\w+\.\w+) permission\b")
# A model admin's URL names end with what the view does; each needs one permission.
_VIEW_NEEDS = {"changelist": "view", "change": "view", "history": "view", "add": "add", "delete": "delete"}


def _in_console(request) -> bool:
    user = getattr(request, "user", None)
    return request.path.startswith(reverse("admin:index")) and user is not None and user.is_active and user.is_staff


def missing_permission(request, exception: BaseException | None) -> str:
    """Return the permission the refused page needs (``app.codename``), or "" when it cannot be told."""
    if named := _NAMED.search(str(exception or "")):
        return named[1]
    try:
        url_name = resolve(request.path_info).url_name or ""
    except Resolver404:
        return ""
    for model in admin.site._registry:
        opts = model._meta
        prefix = f"{opts.app_label}_{opts.model_name}_"
        if url_name.startswith(prefix) and (action := _VIEW_NEEDS.get(url_name[len(prefix) :])):
            return f"{opts.app_label}.{action}_{opts.model_name}"
    return ""


def permission_denied(request, exception=None):
    """403: the console's page for its staff, naming the missing permission; Django's elsewhere."""
    if not _in_console(request):
        return defaults.permission_denied(request, exception)
    context = {
        **admin.site.each_context(request),
        "title": "Permission needed",
        "missing": missing_permission(request, exception),
        "reason": str(exception or ""),
    }
    return render(request, "admin/403.html", context, status=403)


def page_not_found(request, exception=None):
    """404: the console's page for its staff, with where to go next; Django's elsewhere.

    It repeats nothing of the address or the refusal: an id there is one the
    account may not see exist (the admin matrix holds every page to that).
    """
    if not _in_console(request):
        return defaults.page_not_found(request, exception)
    context = {**admin.site.each_context(request), "title": "Not found"}
    return render(request, "admin/404.html", context, status=404)
