"""The console's staff actions: Django's admin log ("Log entries"), read-only, filterable by who, what and when.

Every staff action goes through ``core.console_actions.service_call`` with
what it is and on which object (cancels, retention, key creation and
revocation, …), so the log answers "who did what, when, and what came of
it"; each object's History page lists its own entries.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.utils.html import format_html

from core.admin_site import ReadOnlyAdminMixin


@admin.register(LogEntry)
class StaffActionAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Read-only: the log is written by the actions themselves, never edited."""

    list_display = ("action_time", "user", "object_link", "message")
    list_filter = ("user", "content_type", "action_flag")
    search_fields = ("object_repr", "object_id", "change_message")
    date_hierarchy = "action_time"
    list_select_related = ("user", "content_type")
    ordering = ("-action_time",)

    @admin.display(description="object")
    def object_link(self, entry: LogEntry) -> str:
        label = f"{entry.content_type.name if entry.content_type else '?'}: {entry.object_repr}"
        url = entry.get_admin_url()  # None for an object the console has no page for
        return format_html('<a href="{}">{}</a>', url, label) if url else label

    @admin.display(description="what and outcome")
    def message(self, entry: LogEntry) -> str:
        return entry.get_change_message()
