"""The admin site of the support console: Django's, plus custom read-only pages.

LangGraph's tables have composite keys and cannot be admin models, so pages
over them (Store items, checkpoint lineage) are plain views registered here;
they get the admin's login, URL namespace, index and sidebar entries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any, TypeVar, cast

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.urls import path, reverse

T = TypeVar("T")


def console_render(request, template: str, context: dict[str, Any]) -> TemplateResponse:
    """Render a console page's template inside the admin's frame (sidebar, user links)."""
    return TemplateResponse(request, template, {**admin.site.each_context(request), **context})


class NoAddDeleteMixin:
    """A ModelAdmin whose rows are created and deleted through their services (the API), never here."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class ReadOnlyAdminMixin(NoAddDeleteMixin):
    """A ModelAdmin that only reads: its rows change through their services too."""

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@dataclass(frozen=True)
class ConsolePage:
    """A custom admin page listed under an app, like a read-only model.

    ``permission`` (``app_label.codename``) is required to open the page and
    to see it listed; ``listed=False`` keeps pages that need arguments (a
    thread's lineage) out of the index and sidebar.
    """

    app_label: str
    app_name: str
    route: str
    url_name: str
    title: str
    view: Callable
    permission: str | None = None
    listed: bool = True
    # Who sees the page in the index and sidebar (the view enforces it too).
    visible_to: Callable = lambda user: True

    def allowed(self, request) -> bool:
        return self.permission is None or request.user.has_perm(self.permission)


def _guarded(page: ConsolePage) -> Callable:
    @wraps(page.view)
    def view(request, *args, **kwargs):
        if not page.allowed(request):
            raise PermissionDenied(f"{page.title} needs the {page.permission} permission.")
        return page.view(request, *args, **kwargs)

    return view


@dataclass(frozen=True)
class HealthPanel:
    """A section of the checkpoint-settings (health) page: a template and its context."""

    template: str
    context: Callable


class ConsoleAdminSite(admin.AdminSite):
    site_header = "DeerFlow persistence console"
    site_title = "DeerFlow console"
    index_title = "Threads, runs, checkpoints and memory"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._pages: list[ConsolePage] = []
        self._health_panels: list[HealthPanel] = []

    def register_health_panel(self, panel: HealthPanel) -> None:
        """Add a section to the health page; apps contribute without the page importing them."""
        self._health_panels.append(panel)

    def health_panels(self, request) -> list[dict]:
        """Return each panel's template and context, in registration order."""
        return [{"template": p.template, "context": p.context(request)} for p in self._health_panels]

    def register_page(self, page: ConsolePage) -> None:
        """Add a custom page (its view gets the admin's login and permission wrapper)."""
        self._pages.append(page)

    def get_urls(self):
        pages = [path(p.route, self.admin_view(_guarded(p)), name=p.url_name) for p in self._pages]
        return [*pages, *super().get_urls()]

    def get_app_list(self, request, app_label=None):
        app_list = super().get_app_list(request, app_label)
        if not request.user.is_staff:
            return app_list
        for page in self._pages:
            if (
                app_label not in (None, page.app_label)
                or not page.listed
                or not page.allowed(request)
                or not page.visible_to(request.user)
            ):
                continue
            app = next((a for a in app_list if a["app_label"] == page.app_label), None)
            if app is None:
                url = reverse(f"admin:{page.url_name}")
                app = {
                    "name": page.app_name,
                    "app_label": page.app_label,
                    "app_url": url,
                    "has_module_perms": True,
                    "models": [],
                }
                app_list = sorted([*app_list, app], key=lambda a: a["name"].lower())
            perms = {"add": False, "change": False, "delete": False, "view": True}
            app["models"].append(
                {
                    "name": page.title,
                    "object_name": page.url_name,
                    "perms": perms,
                    "admin_url": reverse(f"admin:{page.url_name}"),
                    "view_only": True,
                }
            )
        return app_list


class ConsoleAdminConfig(AdminConfig):
    default_site = "core.admin_site.ConsoleAdminSite"


def console_site() -> ConsoleAdminSite:
    """Return ``admin.site``, which ConsoleAdminConfig (in INSTALLED_APPS) makes a ConsoleAdminSite.

    The class is chosen by settings, which the type checker cannot read.
    """
    return cast(ConsoleAdminSite, admin.site)
