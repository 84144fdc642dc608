from django.contrib import admin
from django.db.models import Count

from threads.models import ThreadMeta


@admin.register(ThreadMeta)
class ThreadMetaAdmin(admin.ModelAdmin):
    """Threads for support staff: owner, title, status, graph and run count."""

    list_display = ("thread_id", "display_name", "owner", "status", "assistant_id", "run_count", "updated_at")
    list_filter = ("status", "assistant_id")
    list_select_related = ("owner",)
    search_fields = ("thread_id", "display_name", "owner__username")
    readonly_fields = ("thread_id", "owner", "assistant_id", "created_at", "updated_at", "state_updated_at")
    fields = (
        "thread_id",
        "owner",
        "display_name",
        "status",
        "assistant_id",
        "metadata",
        "created_at",
        "updated_at",
        "state_updated_at",
    )
    show_full_result_count = False
    list_per_page = 50

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(_run_count=Count("runs"))

    @admin.display(description="runs", ordering="_run_count")
    def run_count(self, obj) -> int:
        return obj._run_count

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        # Deleting a thread must also delete its checkpoints: the API does that.
        return False
