"""The console's threads: a list to find them by, a page per conversation read as turns, compare and export.

Read-only: a thread's rows change through the API's services (its state
through the accessor), never through an admin form. The search box matches
ids, titles, owners and metadata, and what was said (``threads.search``'s
message index); the side filters add an activity date range and a metadata
key=value.
"""

from __future__ import annotations

from datetime import date, timedelta

from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import Count, OuterRef, Q, Subquery, TextField
from django.db.models.expressions import RawSQL
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast
from django.http import Http404, HttpResponseRedirect, JsonResponse
from django.template.defaultfilters import filesizeformat
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode

from checkpoints.storage import UnsupportedBackendError
from checkpoints.thread_stats import checkpointed_sql, delta_heads_sql, thread_stats_many
from console.compare import compare_view
from console.retention import preview_retention, preview_url
from console.turns import thread_turn_stats, thread_turns
from core.admin_site import ReadOnlyAdminMixin
from core.console_actions import ServiceErrorMessagesMixin, StaffAction, staff_action_record
from runs.models import Run
from threads.conversation import thread_conversation
from threads.export import thread_export
from threads.models import ThreadMeta
from threads.search import TextQuery, message_matches, message_snippets

# A failed run ended in error or timeout on its own; a rollback is a person's decision.
FAILED_RUNS = Q(runs__status__in=["error", "timeout"]) & ~Q(runs__cancel_action="rollback")
SHORT_ID = 8
INPUT_PREVIEW = 90
LAST_RUN_FIELDS = ("first_human_message", "status", "cancel_action", "error", "started_at", "finished_at")


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


class InputFilter(admin.ListFilter):
    """A side filter typed into a small GET form instead of picked from links (``parameters``: name → label, type).

    The form carries the page's other parameters along, so it narrows the
    current list rather than starting over.
    """

    template = "admin/threads/threadmeta/input_filter.html"
    parameters: dict[str, tuple[str, str]] = {}

    def __init__(self, request, params, model, model_admin):
        super().__init__(request, params, model, model_admin)
        self.values = {}
        for name in self.parameters:
            if name in params:
                value = params.pop(name)
                self.values[name] = (value[-1] if isinstance(value, list) else value).strip()

    def has_output(self) -> bool:
        return True

    def expected_parameters(self) -> list[str | None]:
        return list(self.parameters)

    def choices(self, changelist):
        others = {k: v for k, v in changelist.params.items() if k not in self.parameters}
        fields = [(name, label, kind, self.values.get(name, "")) for name, (label, kind) in self.parameters.items()]
        clear = changelist.get_query_string(remove=list(self.parameters))
        yield {"fields": fields, "hidden": sorted(others.items()), "clear": clear, "active": any(self.values.values())}


class ActivityRangeFilter(InputFilter):
    """Threads whose last activity falls between two dates (inclusive), either end open."""

    title = "last activity"
    parameters = {"active_from": ("from", "date"), "active_to": ("to", "date")}

    def _date(self, name: str) -> date | None:
        text = self.values.get(name)
        try:
            return date.fromisoformat(text) if text else None
        except ValueError as exc:
            raise IncorrectLookupParameters(f"{name}: not a date (YYYY-MM-DD)") from exc

    def queryset(self, request, queryset):
        start, end = self._date("active_from"), self._date("active_to")
        if start:
            queryset = queryset.filter(updated_at__date__gte=start)
        if end:
            queryset = queryset.filter(updated_at__date__lt=end + timedelta(days=1))
        return queryset


class MetadataFilter(InputFilter):
    """``key=value`` (the value as text), or a bare ``key`` that must be present, in the thread's metadata."""

    title = "metadata"
    parameters = {"meta": ("key=value", "text")}

    def queryset(self, request, queryset):
        text = self.values.get("meta")
        if not text:
            return queryset
        key, has_value, value = text.partition("=")
        if not has_value:
            return queryset.filter(metadata__has_key=key.strip())
        # KeyTextTransform takes the key literally ("a__b" is one key, not a path or a lookup);
        # the cast makes the comparison plain text, so 2 and "2" match "tier=2".
        as_text = Cast(KeyTextTransform(key.strip(), "metadata"), output_field=TextField())
        return queryset.alias(_meta_value=as_text).filter(_meta_value=value.strip())


class ThreadChangeList(ChangeList):
    """Attach the page's checkpoint figures and, when searching, the matching passages: one query each per page."""

    def get_results(self, request) -> None:
        super().get_results(request)
        threads = list(self.result_list)
        ids = [thread.pk for thread in threads]
        stats = thread_stats_many(thread_ids=ids)
        snippets = message_snippets(TextQuery.parse(self.query), ids)
        for thread in threads:
            thread.storage_stats = None if stats is None else stats.get(thread.pk)
            thread.stats_available = stats is not None
            thread.snippet = snippets.get(thread.pk, "")

    def get_queryset(self, request, exclude_parameters=None):
        # Only the list shows the last run (one correlated subquery per column): the thread page needs none of it.
        queryset = super().get_queryset(request, exclude_parameters)
        return queryset.annotate(**{f"_last_{name}": _last_run(name) for name in LAST_RUN_FIELDS})


def _last_run(field: str) -> Subquery:
    return Subquery(Run.objects.filter(thread=OuterRef("pk")).order_by("-created_at").values(field)[:1])


@admin.register(ThreadMeta)
class ThreadMetaAdmin(ServiceErrorMessagesMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """Threads for support staff: who, what, how busy, how big, which mode.

    Read-only: thread rows change through the API's services, and deleting a
    thread must also delete its checkpoints, which the API does.
    """

    # Title first (with a short id and the owner), what was asked last and how it went: what a
    # person scans for, in columns that fit a 1440 px screen beside the sidebar and filters.
    list_display = (
        "title",
        "status",
        "input_preview",
        "last_run",
        "last_activity",
        "run_count",
        "storage",
    )
    list_display_links = ("title",)
    list_filter = (
        "status",
        ("owner", admin.RelatedOnlyFieldListFilter),
        ChannelModeFilter,
        "assistant_id",
        FailedRunsFilter,
        ActivityRangeFilter,
        MetadataFilter,
    )
    list_select_related = ("owner",)
    # ``metadata`` searches the JSON text: values (and keys) match. What was
    # said matches too, through the message index (get_search_results).
    search_fields = ("thread_id", "display_name", "owner__username", "metadata")
    search_help_text = 'Id, title, owner, metadata, or words said in the conversation ("quotes" for a phrase).'
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
    actions = (preview_retention, "compare_threads")
    change_list_template = "admin/threads/threadmeta/change_list.html"

    def get_changelist(self, request, **kwargs):
        return ThreadChangeList

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(_run_count=Count("runs"), _failed_runs=Count("runs", filter=FAILED_RUNS))
        )

    def get_search_results(self, request, queryset, search_term):
        """Match the admin's fields, or the words said in the thread (one subquery over the message index)."""
        matched, duplicates = super().get_search_results(request, queryset, search_term)
        said = message_matches(TextQuery.parse(search_term))
        if said is None:
            return matched, duplicates
        fields, _ = super().get_search_results(request, ThreadMeta.objects.all(), search_term)
        return queryset.filter(Q(pk__in=fields.values("pk")) | Q(pk__in=said)), duplicates

    def get_urls(self):
        export = path(
            "<path:object_id>/export/", self.admin_site.admin_view(self.export_view), name="threads_threadmeta_export"
        )
        compare = path("compare/", self.admin_site.admin_view(self.compare_view), name="threads_compare")
        return [export, compare, *super().get_urls()]

    @admin.action(description="Compare the two selected threads")
    def compare_threads(self, request, queryset):
        ids = sorted(queryset.values_list("pk", flat=True))
        if len(ids) != 2:
            self.message_user(request, f"Select exactly two threads to compare ({len(ids)} selected).", messages.ERROR)
            return None
        return HttpResponseRedirect(reverse("admin:threads_compare") + "?" + urlencode({"thread": ids}, doseq=True))

    @admin.display(description="title", ordering="display_name")
    def title(self, obj) -> str:
        """Title, short id (the full one on hover) and owner: who and what in one column."""
        short = obj.thread_id if len(obj.thread_id) <= SHORT_ID + 1 else f"{obj.thread_id[:SHORT_ID]}…"
        return format_html(
            '<span class="thread-title">{}</span> <code class="short-id" title="{}">{}</code>'
            '<span class="row-owner">{}</span>',
            obj.display_name or "(untitled)",
            obj.thread_id,
            short,
            obj.owner.get_username(),
        )

    @admin.display(description="input")
    def input_preview(self, obj) -> str:
        """The matching passage when searching what was said, else what the last run was asked."""
        if getattr(obj, "snippet", ""):
            return format_html('<span class="preview snippet" title="{}">{}</span>', obj.snippet, obj.snippet)
        text = getattr(obj, "_last_first_human_message", "") or ""
        if not text:
            return "–"
        short = text if len(text) <= INPUT_PREVIEW else text[:INPUT_PREVIEW] + "…"
        return format_html('<span class="preview" title="{}">{}</span>', text[:1000], short)

    @admin.display(description="last run")
    def last_run(self, obj) -> str:
        status = getattr(obj, "_last_status", None)
        if status is None:
            return "–"
        started, finished = obj._last_started_at, obj._last_finished_at
        took = f"{(finished - started).total_seconds():.1f} s" if started and finished else status
        if obj._last_error:
            label = "rolled back" if obj._last_cancel_action == "rollback" else status
            return format_html(
                '{} <span class="row-error" title="{}">{}: {}</span>',
                took,
                obj._last_error,
                label,
                obj._last_error[:60],
            )
        return took

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

    @admin.display(description="active", ordering="updated_at")
    def last_activity(self, obj) -> str:
        # Short enough for the list to fit a 1440 px screen; the full time is the hover text.
        local = timezone.localtime(obj.updated_at)
        return format_html('<span title="{}">{}<br>{}</span>', local.isoformat(), f"{local:%Y-%m-%d}", f"{local:%H:%M}")

    @admin.display(description="runs", ordering="_run_count")
    def run_count(self, obj) -> str:
        if obj._failed_runs:
            return format_html('{} <span class="failed-runs">({} failed)</span>', obj._run_count, obj._failed_runs)
        return str(obj._run_count)

    @admin.display(description="storage")
    def storage(self, obj) -> str:
        """The page's storage figures in one narrow cell: checkpoints, bytes, the head's channel mode."""
        stats = getattr(obj, "storage_stats", None)
        if stats is None:
            return format_html(
                '<span class="ckpt-count">{}</span>', "0" if getattr(obj, "stats_available", False) else "–"
            )
        badge = (
            format_html(' <span class="mode-badge mode-{}">{}</span>', stats.head_mode, stats.head_mode)
            if stats.head_mode
            else ""
        )
        return format_html(
            '<span class="ckpt-count">{}</span> · <span class="stored">{}</span>{}',
            stats.checkpoint_count,
            filesizeformat(stats.stored_bytes),
            badge,
        )

    # -- the thread page -------------------------------------------------------

    def change_view(self, request, object_id, form_url="", extra_context=None):
        thread = self.get_object(request, unquote(object_id))
        if thread is not None and self.has_view_permission(request, thread):
            extra_context = {**(extra_context or {}), **self.thread_page_context(request, thread)}
        return super().change_view(request, object_id, form_url, extra_context)

    def thread_page_context(self, request, thread: ThreadMeta) -> dict:
        """Return the turns and their figures, the conversation, storage summary and links of a thread."""
        # The one grouped query of the list, not the full accounting: that reads
        # every row's payload (2 GiB for a 1,000-turn full-mode thread).
        stats = thread_stats_many(thread_ids=[thread.thread_id])
        storage_error = UnsupportedBackendError.MESSAGE if stats is None else ""
        turns_page, turns = thread_turns(thread=thread, page=request.GET.get("turns"))
        return {
            "conversation": thread_conversation(thread=thread),
            "turns": turns,
            "turns_page": turns_page,
            "turn_stats": thread_turn_stats(thread_id=thread.thread_id),
            "compare_url": reverse("admin:threads_compare"),
            "storage": None if stats is None else stats.get(thread.thread_id),
            "storage_available": stats is not None,
            "storage_error": storage_error,
            "events_url": reverse("admin:runs_runevent_changelist") + f"?thread={thread.pk}",
            "runs_url": reverse("admin:runs_run_changelist") + f"?thread={thread.pk}",
            "export_url": (
                reverse("admin:threads_threadmeta_export", args=[thread.pk])
                if request.user.has_perms(EXPORT_PERMISSIONS)
                else ""
            ),
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
            raise PermissionDenied(f"Exporting a thread needs the {', '.join(EXPORT_PERMISSIONS)} permissions.")
        document = thread_export(thread=thread)
        response = JsonResponse(document, json_dumps_params={"indent": 2})
        response["Content-Disposition"] = f'attachment; filename="thread-{thread.pk}.json"'
        # An export takes a user's conversation out of the system: who took which, and how much, is on record.
        staff_action_record(
            request,
            StaffAction(target=thread, what="Exported thread"),
            f"{len(document['runs'])} runs, {len(document['events'])} events, {len(response.content)} bytes",
        )
        return response

    def compare_view(self, request):
        """Two runs (``?run=a&run=b``) or two threads (``?thread=a&thread=b``) side by side."""
        if not self.has_view_permission(request):
            raise PermissionDenied(f"Comparing needs the {COMPARE_PERMISSION} permission.")
        return compare_view(request, {**self.admin_site.each_context(request), "opts": self.model._meta})


# The export holds the thread's messages and branches, its runs with their inputs, and its events.
EXPORT_PERMISSIONS = ("threads.export_threadmeta", "threads.view_threadmeta", "runs.view_run", "runs.view_runevent")
COMPARE_PERMISSION = "threads.view_threadmeta"
