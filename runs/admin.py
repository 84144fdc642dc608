from django.contrib import admin
from django.core.paginator import Paginator
from django.utils.functional import cached_property

from runs.models import Run, RunEvent


class CappedPaginator(Paginator):
    """Never count a huge table exactly: the admin shows "many" past the cap."""

    CAP = 10_000

    @cached_property
    def count(self) -> int:
        return len(self.object_list[: self.CAP].values_list("pk", flat=True))


class RunEventInline(admin.TabularInline):
    model = RunEvent
    fields = ("seq", "event_type", "category", "created_at")
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = True
    ordering = ("seq",)


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    """Runs: status, tokens, errors and cancel requests, read-only."""

    list_display = (
        "run_id",
        "thread",
        "owner",
        "status",
        "multitask_strategy",
        "cancel_action",
        "model_name",
        "total_tokens",
        "created_at",
    )
    list_filter = ("status", "cancel_action", "multitask_strategy", "model_name")
    list_select_related = ("thread", "owner")
    search_fields = ("run_id", "thread__thread_id", "owner__username", "error")
    date_hierarchy = "created_at"
    show_full_result_count = False
    paginator = CappedPaginator
    inlines = (RunEventInline,)

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in Run._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(RunEvent)
class RunEventAdmin(admin.ModelAdmin):
    """The persisted feed, filterable by run and category."""

    list_display = ("thread", "seq", "run", "event_type", "category", "created_at")
    list_filter = ("category", "event_type")
    list_select_related = ("thread", "run")
    search_fields = ("thread__thread_id", "run__run_id")
    show_full_result_count = False
    paginator = CappedPaginator
    ordering = ("-id",)

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in RunEvent._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
