"""The console's threads: a list with storage figures per page, and a page per conversation.

Read-only: a thread's rows change through the API's services (its state
through the accessor), never through an admin form.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q
from django.db.models.expressions import RawSQL
from django.http import Http404, JsonResponse
from django.template.defaultfilters import filesizeformat
from django.urls import path, reverse
from django.utils.html import format_html

from checkpoints.storage import UnsupportedBackendError
from checkpoints.thread_stats import checkpointed_sql, delta_heads_sql, thread_stats_many
from console.retention import preview_retention, preview_url
from core.console_actions import ServiceErrorMessagesMixin
from threads.conversation import thread_conversation
from threads.export import thread_export
from threads.models import ThreadMeta

# A failed run ended in error or timeout on its own; a rollback is a person's decision.
FAILED_RUNS = Q(runs__status__in=["error", "timeout"]) & ~Q(runs__cancel_action="rollback")
THREAD_PAGE_RUNS = 20


class ChannelModeFilter(admin.SimpleListFilter):
    """Filter by the head checkpoint's channel mode (one subquery over LangGraph's table)."""

    title = "channel mode"
    parameter_name = "mode"

    def lookups(self, request, model_admin):
        return (("full", "full"), ("delta", "delta"), ("none", "no checkpoints"))

    def queryset(self, request, queryset):
        delta, checkpointed = delta_heads_sql(), checkpointed_sql()
        if self.value() is None or delta is None or checkpointed is None:
            return queryset
        if self.value() == "delta":
            return queryset.filter(thread_id__in=RawSQL(delta, []))
        if self.value() == "full":
            return queryset.filter(thread_id__in=RawSQL(checkpointed, [])).exclude(thread_id__in=RawSQL(delta, []))
        return queryset.exclude(thread_id__in=RawSQL(checkpointed, []))


class FailedRunsFilter(admin.SimpleListFilter):
    title = "failed runs"
    parameter_name = "failed"

    def lookups(self, request, model_admin):
        return (("yes", "has failed runs"), ("no", "no failed runs"))

    def queryset(self, request, queryset):
        failed = ThreadMeta.objects.filter(FAILED_RUNS).values("pk")
        if self.value() == "yes":
            return queryset.filter(pk__in=failed)
        if self.value() == "no":
            return queryset.exclude(pk__in=failed)
        return queryset


class ThreadChangeList(ChangeList):
    """Attach the page's checkpoint figures to its rows: one grouped query per page."""

    def get_results(self, request) -> None:
        super().get_results(request)
        threads = list(self.result_list)
        stats = thread_stats_many(thread_ids=[thread.pk for thread in threads])
        for thread in threads:
            thread.storage_stats = None if stats is None else stats.get(thread.pk)
            thread.stats_available = stats is not None


@admin.register(ThreadMeta)
class ThreadMetaAdmin(ServiceErrorMessagesMixin, admin.ModelAdmin):
    """Threads for support staff: who, what, how busy, how big, which mode."""

    list_display = (
        "thread_id",
        "display_name",
        "owner",
        "status",
        "assistant_id",
        "last_activity",
        "run_count",
        "checkpoint_count",
        "stored_bytes",
        "mode_badge",
    )
    list_filter = (
        "status",
        ("owner", admin.RelatedOnlyFieldListFilter),
        ChannelModeFilter,
        "assistant_id",
        FailedRunsFilter,
    )
    list_select_related = ("owner",)
    # ``metadata`` searches the JSON text: values (and keys) match.
    search_fields = ("thread_id", "display_name", "owner__username", "metadata")
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
        "ttl_policy",
    )
    readonly_fields = fields
    show_full_result_count = False
    list_per_page = 50
    change_form_template = "admin/threads/threadmeta/change_form.html"
    actions = (preview_retention,)

    def get_changelist(self, request, **kwargs):
        return ThreadChangeList

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(_run_count=Count("runs"), _failed_runs=Count("runs", filter=FAILED_RUNS))
        )

    def get_urls(self):
        export = path(
            "<path:object_id>/export/", self.admin_site.admin_view(self.export_view), name="threads_threadmeta_export"
        )
        return [export, *super().get_urls()]

    @admin.display(description="TTL")
    def ttl_policy(self, obj) -> str:
        if obj.ttl is None:
            return "none (never expires)"
        minutes = obj.ttl.total_seconds() / 60
        expires = (
            f"expires {obj.expires_at:%Y-%m-%d %H:%M:%S %Z}"
            if obj.expires_at
            else "pruned: the next activity restarts the clock"
        )
        return f"{obj.ttl_strategy} {minutes:g} min after the last activity; {expires}"

    @admin.display(description="last activity", ordering="updated_at")
    def last_activity(self, obj):
        return obj.updated_at

    @admin.display(description="runs", ordering="_run_count")
    def run_count(self, obj) -> str:
        if obj._failed_runs:
            return format_html('{} <span class="failed-runs">({} failed)</span>', obj._run_count, obj._failed_runs)
        return str(obj._run_count)

    @admin.display(description="checkpoints")
    def checkpoint_count(self, obj) -> str:
        stats = getattr(obj, "storage_stats", None)
        return str(stats.checkpoint_count) if stats else ("0" if getattr(obj, "stats_available", False) else "–")

    @admin.display(description="stored")
    def stored_bytes(self, obj) -> str:
        stats = getattr(obj, "storage_stats", None)
        return filesizeformat(stats.stored_bytes) if stats else "–"

    @admin.display(description="mode")
    def mode_badge(self, obj) -> str:
        stats = getattr(obj, "storage_stats", None)
        if stats is None or stats.head_mode is None:
            return "–"
        return format_html('<span class="mode-badge mode-{}">{}</span>', stats.head_mode, stats.head_mode)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        # Thread rows change through the API's services; the console only reads them.
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        # Deleting a thread must also delete its checkpoints: the API does that.
        return False

    # -- the thread page -------------------------------------------------------

    def change_view(self, request, object_id, form_url="", extra_context=None):
        thread = self.get_object(request, unquote(object_id))
        if thread is not None and self.has_view_permission(request, thread):
            extra_context = {**(extra_context or {}), **self.thread_page_context(request, thread)}
        return super().change_view(request, object_id, form_url, extra_context)

    def thread_page_context(self, request, thread: ThreadMeta) -> dict:
        """Return the conversation, recent runs, storage summary and links of a thread."""
        # The one grouped query of the list, not the full accounting: that reads
        # every row's payload (2 GiB for a 1,000-turn full-mode thread).
        stats = thread_stats_many(thread_ids=[thread.thread_id])
        storage_error = UnsupportedBackendError.MESSAGE if stats is None else ""
        runs = list(thread.runs.order_by("-created_at")[:THREAD_PAGE_RUNS])
        return {
            "conversation": thread_conversation(thread=thread),
            "thread_runs": runs,
            "storage": None if stats is None else stats.get(thread.thread_id),
            "storage_available": stats is not None,
            "storage_error": storage_error,
            "events_url": reverse("admin:runs_runevent_changelist") + f"?thread={thread.pk}",
            "runs_url": reverse("admin:runs_run_changelist") + f"?thread={thread.pk}",
            "export_url": reverse("admin:threads_threadmeta_export", args=[thread.pk]),
            "lineage_url": reverse("admin:checkpoints_lineage", args=[thread.pk]),
            "retention_url": preview_url([thread.pk]),
            "storage_page_url": reverse("admin:checkpoints_storage"),
        }

    def export_view(self, request, object_id):
        """Download the thread as one JSON document for a bug report."""
        thread = self.get_object(request, unquote(object_id))
        if thread is None:
            raise Http404(f"Thread {object_id} not found")
        if not (self.has_view_permission(request, thread) and request.user.has_perms(EXPORT_PERMISSIONS)):
            raise PermissionDenied("Exporting a thread needs the view permission on threads, runs and run events.")
        response = JsonResponse(thread_export(thread=thread), json_dumps_params={"indent": 2})
        response["Content-Disposition"] = f'attachment; filename="thread-{thread.pk}.json"'
        return response


# The export holds the thread, its runs and its events.
EXPORT_PERMISSIONS = ("threads.view_threadmeta", "runs.view_run", "runs.view_runevent")
