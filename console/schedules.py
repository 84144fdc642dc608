"""The console's read-only lists of assistants (with their versions) and crons.

Nothing is edited here: assistants and crons change through their services
(the API), which hold the rules (versions, ownership, the claim on
``next_run_date``).
"""

from __future__ import annotations

from django.contrib import admin

from core.admin_site import ReadOnlyAdminMixin
from runs.models import Assistant, AssistantVersion, Cron
from runs.services.assistants import system_assistants_ensure


class _ReadOnly(ReadOnlyAdminMixin, admin.ModelAdmin):
    show_full_result_count = False

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]


class AssistantVersionInline(admin.TabularInline):
    model = AssistantVersion
    fields = ("version", "graph_id", "name", "config", "context", "metadata", "created_at")
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False
    ordering = ("-version",)


class SystemFilter(admin.SimpleListFilter):
    title = "kind"
    parameter_name = "kind"

    def lookups(self, request, model_admin):
        return (("system", "system (one per graph)"), ("user", "created by a user"))

    def queryset(self, request, queryset):
        if self.value() == "system":
            return queryset.filter(owner__isnull=True)
        if self.value() == "user":
            return queryset.filter(owner__isnull=False)
        return queryset


@admin.register(Assistant)
class AssistantAdmin(_ReadOnly):
    """Assistants: graph, owner (none for system ones), the version in force and every saved one."""

    list_display = ("assistant_id", "name", "graph_id", "owner_or_system", "version", "updated_at")
    list_filter = (SystemFilter, "graph_id")
    list_select_related = ("owner",)
    search_fields = ("assistant_id", "name", "graph_id", "owner__username")
    inlines = (AssistantVersionInline,)

    def changelist_view(self, request, extra_context=None):
        system_assistants_ensure()  # the configured graphs are listed before any API read created their rows
        return super().changelist_view(request, extra_context)

    @admin.display(description="owner", ordering="owner__username")
    def owner_or_system(self, obj: Assistant) -> str:
        return obj.owner.get_username() if obj.owner is not None else "system"


@admin.register(Cron)
class CronAdmin(_ReadOnly):
    """Crons: schedule, zone, state and when they fire next (and fired last)."""

    list_display = (
        "cron_id",
        "owner",
        "assistant",
        "thread",
        "schedule",
        "timezone",
        "enabled",
        "next_run_date",
        "last_run_date",
        "end_time",
    )
    list_filter = ("enabled",)
    list_select_related = ("owner", "assistant", "thread")
    search_fields = ("cron_id", "owner__username", "assistant__assistant_id", "thread__thread_id", "schedule")
    date_hierarchy = "next_run_date"
