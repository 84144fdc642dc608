"""The console's runs and events: lists, a run page with its grouped (and live) timeline and failure, cancel.

Rows are read-only here; cancelling goes through ``runs.services.cancel``
like the API's, after a confirmation that says what will happen, and needs
the change permission on runs.
"""

from __future__ import annotations

from typing import cast

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Q, QuerySet
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html

from console.timeline import run_failure, run_timeline
from core.admin_site import HealthPanel, NoAddDeleteMixin, ReadOnlyAdminMixin
from core.console_actions import ServiceErrorMessagesMixin, StaffAction
from runs.execution.runtime import current_worker
from runs.models import CancelAction, Run, RunEvent
from runs.selectors import run_health
from runs.services.cancel import run_cancel_unfinished
from runs.services.events import EVENT_CATEGORIES
from threads.models import UNFINISHED_STATUSES, RunStatus

ERROR_PREVIEW = 60
# How a run ended (or where it is), as support asks: a rollback or a cancel is not a failure.
OUTCOMES = {
    "queued": Q(status=RunStatus.QUEUED),
    "pending": Q(status=RunStatus.PENDING),
    "running": Q(status=RunStatus.RUNNING),
    "success": Q(status=RunStatus.SUCCESS),
    "failed": Q(status__in=(RunStatus.ERROR, RunStatus.TIMEOUT)) & ~Q(cancel_action=CancelAction.ROLLBACK),
    "rolled back": Q(status=RunStatus.ERROR, cancel_action=CancelAction.ROLLBACK),
    "cancelled": Q(status=RunStatus.INTERRUPTED, cancel_action=CancelAction.INTERRUPT),
    "waiting for input": Q(status=RunStatus.INTERRUPTED, cancel_action=""),
}
# What each cancel does, as the confirmation says it before anything happens.
CANCEL_EFFECTS: dict[str, str] = {
    CancelAction.INTERRUPT: "The run stops at once; what it already wrote to the thread stays, and the thread "
    "can be continued from there.",
    CancelAction.ROLLBACK: "The run stops at once and the thread is put back to its state before the run: "
    "its messages and checkpoints are removed from the thread's head.",
}


def run_outcome(run: Run) -> str:
    """Return the run's outcome as the list filters it (a key of ``OUTCOMES``)."""
    if run.status == RunStatus.ERROR and run.cancel_action == CancelAction.ROLLBACK:
        return "rolled back"
    if run.status == RunStatus.INTERRUPTED:
        return "cancelled" if run.cancel_action == CancelAction.INTERRUPT else "waiting for input"
    return "failed" if run.status in (RunStatus.ERROR, RunStatus.TIMEOUT) else run.status


class CappedPaginator(Paginator):
    """Never count a huge table exactly: the admin shows "many" past the cap."""

    CAP = 10_000

    @cached_property
    def count(self) -> int:
        # The admin pages its changelists over querysets; Paginator is typed for any sequence.
        return len(cast(QuerySet, self.object_list)[: self.CAP].values_list("pk", flat=True))


def _duration(run: Run) -> str:
    if run.started_at is None:
        return "–"
    seconds = ((run.finished_at or timezone.now()) - run.started_at).total_seconds()
    return f"{seconds:.1f} s" if run.finished_at else f"{seconds:.1f} s…"


def _checkpoint_url(request, run: Run, checkpoint_id: str | None) -> str:
    """Link the checkpoint a run failed after, for whoever may open checkpoint pages."""
    if not checkpoint_id or not request.user.has_perm("threads.view_threadmeta"):
        return ""
    return reverse("admin:checkpoints_checkpoint", args=[run.thread_id, checkpoint_id])


class _ChoicesFilter(admin.SimpleListFilter):
    """A filter whose choices are known without scanning the table (no ``SELECT DISTINCT`` over millions of rows)."""

    def choices_known(self) -> list[str]:
        raise NotImplementedError

    def lookups(self, request, model_admin):
        return [(value, value) for value in self.choices_known()]

    def queryset(self, request, queryset):
        return queryset.filter(**{self.parameter_name: self.value()}) if self.value() else queryset


class EventTypeFilter(_ChoicesFilter):
    title = "event type"
    parameter_name = "event_type"

    def choices_known(self) -> list[str]:
        return sorted(EVENT_CATEGORIES)


class CategoryFilter(_ChoicesFilter):
    title = "category"
    parameter_name = "category"

    def choices_known(self) -> list[str]:
        return sorted(set(EVENT_CATEGORIES.values()))


class OutcomeFilter(_ChoicesFilter):
    """Status as support reads it: failures apart from rollbacks and cancels."""

    title = "outcome"
    parameter_name = "outcome"

    def choices_known(self) -> list[str]:
        return list(OUTCOMES)

    def queryset(self, request, queryset):
        return queryset.filter(OUTCOMES[self.value()]) if self.value() in OUTCOMES else queryset


class ModelNameFilter(_ChoicesFilter):
    """Model names of the latest runs (run ids are time-ordered: a bounded walk of the primary key)."""

    title = "model"
    parameter_name = "model_name"
    window = 5000

    def choices_known(self) -> list[str]:
        recent = Run.objects.order_by("-pk").values_list("model_name", flat=True)[: self.window]
        return sorted({name for name in recent if name})


@admin.register(Run)
class RunAdmin(ServiceErrorMessagesMixin, NoAddDeleteMixin, admin.ModelAdmin):
    """Runs: status, strategy, model, tokens, duration and error; cancel one or a selection."""

    # Two facts a cell where they belong together: the list fits 1440 px with the filters beside it.
    list_display = ("run_id", "thread_and_owner", "outcome", "model_and_tokens", "error_preview", "created")
    list_filter = (OutcomeFilter, "multitask_strategy", ModelNameFilter)
    list_select_related = ("thread", "owner")
    search_fields = ("run_id", "thread__thread_id", "owner__username", "error")
    date_hierarchy = "created_at"
    show_full_result_count = False
    paginator = CappedPaginator
    actions = ("cancel_selected_interrupt", "cancel_selected_rollback")
    change_form_template = "admin/runs/run/change_form.html"

    class Media:
        css = {"all": ("console/runs.css",)}

    fieldsets = (
        (
            None,
            {
                "fields": (
                    ("status", "cancel_action", "multitask_strategy"),
                    "thread",
                    "owner",
                    "assistant_id",
                    "model_name",
                )
            },
        ),
        ("When", {"fields": (("created_at", "not_before", "started_at", "finished_at"),)}),
        ("Cancel", {"fields": (("cancel_requested_at", "cancelled_by"),)}),
        ("Messages", {"fields": ("first_human_message", "last_ai_message", "message_count")}),
        (
            "Execution details",
            {
                "classes": ("collapse",),
                "fields": (
                    "run_id",
                    "kwargs",
                    "metadata",
                    "stop_reason",
                    "worker_id",
                    "lease_expires_at",
                    "rollback_point",
                    "updated_at",
                ),
            },
        ),
    )

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in Run._meta.fields]

    @admin.display(description="thread · owner", ordering="thread")
    def thread_and_owner(self, obj: Run) -> str:
        return format_html('{}<br><span class="quiet">{}</span>', obj.thread_id, obj.owner)

    @admin.display(description="outcome · duration", ordering="status")
    def outcome(self, obj: Run) -> str:
        return format_html('{}<br><span class="quiet">{}</span>', run_outcome(obj), _duration(obj))

    @admin.display(description="model · tokens", ordering="model_name")
    def model_and_tokens(self, obj: Run) -> str:
        return format_html('{}<br><span class="quiet">{} tokens</span>', obj.model_name or "–", obj.total_tokens)

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: Run) -> str:
        return timezone.localtime(obj.created_at).strftime("%Y-%m-%d %H:%M:%S")

    @admin.display(description="error")
    def error_preview(self, obj: Run) -> str:
        return obj.error if len(obj.error) <= ERROR_PREVIEW else obj.error[: ERROR_PREVIEW - 1] + "…"

    # -- cancel ------------------------------------------------------------------

    def _cancel_many(self, request, queryset, action: str):
        """Ask first (what will happen, to which runs); cancel the unfinished ones once confirmed."""
        unfinished = list(queryset.filter(status__in=UNFINISHED_STATUSES))
        skipped = queryset.count() - len(unfinished)
        if request.POST.get("confirmed") != "yes":
            return self._confirmation(request, unfinished, action, skipped=skipped, bulk=True)
        done = sum(self._cancel(request, run, action)[0] for run in unfinished)
        note = f"; {skipped} already finished, left as they were" if skipped else ""
        self.message_user(request, f"Cancel ({action}) requested for {done} run(s){note}.", level=messages.SUCCESS)
        return None

    def _confirmation(self, request, runs: list[Run], action: str, *, skipped: int = 0, bulk: bool = False):
        context = {
            **self.admin_site.each_context(request),
            "title": f"Cancel {len(runs)} run(s) ({action})?" if bulk else f"Cancel this run ({action})?",
            "opts": self.opts,
            "runs": runs,
            "action": action,
            "effect": CANCEL_EFFECTS.get(action, ""),
            "skipped": skipped,
            "bulk": bulk,
            "action_name": f"cancel_selected_{action}",
            "selected": [run.pk for run in runs],
        }
        return TemplateResponse(request, "admin/runs/run/cancel_confirmation.html", context)

    def _cancel(self, request, run: Run, action: str):
        """Cancel one run through the service on behalf of the person, recorded in the audit with its outcome."""
        audit = StaffAction(
            target=run, what=f"Cancelled run ({action})", describe=lambda fresh: f"the run is {fresh.status}"
        )
        return self.call_service(request, run_cancel_unfinished, audit=audit, run=run, action=action, by=request.user)

    @admin.action(description="Cancel selected runs (interrupt: keep what was written)…", permissions=["change"])
    def cancel_selected_interrupt(self, request, queryset):
        return self._cancel_many(request, queryset, CancelAction.INTERRUPT)

    @admin.action(description="Cancel selected runs (rollback: restore the pre-run state)…", permissions=["change"])
    def cancel_selected_rollback(self, request, queryset):
        return self._cancel_many(request, queryset, CancelAction.ROLLBACK)

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("<path:object_id>/cancel/", view(self.cancel_view), name="runs_run_cancel"),
            *super().get_urls(),
        ]

    def _run_or_404(self, request, object_id) -> Run:
        run = self.get_object(request, unquote(object_id))
        if run is None:
            raise Http404(f"Run {object_id} not found")
        return run

    def cancel_view(self, request, object_id):
        """GET ``?action=``: say what cancelling will do; POST ``action=`` with ``confirmed=yes``: do it."""
        if request.method not in ("GET", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        run = self._run_or_404(request, object_id)
        if not self.has_change_permission(request, run):
            raise PermissionDenied("Cancelling a run needs the runs.change_run permission.")
        action = request.POST.get("action") or request.GET.get("action", "")
        if request.method == "GET" or request.POST.get("confirmed") != "yes":
            unfinished = run.status in UNFINISHED_STATUSES
            return self._confirmation(request, [run] if unfinished else [], action, skipped=0 if unfinished else 1)
        done, fresh = self._cancel(request, run, action)
        if done:
            self.message_user(
                request, f"Cancel ({action}) requested; the run is {fresh.status}.", level=messages.SUCCESS
            )
        return HttpResponseRedirect(reverse("admin:runs_run_change", args=[run.pk]))

    # -- the run page --------------------------------------------------------------

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        # The form is a read-only view: saving it would write a stale copy of a row the executor owns.
        if request.method == "POST":
            raise PermissionDenied("Runs are read-only here; use the cancel actions.")
        run = self.get_object(request, unquote(object_id)) if object_id else None
        if run is not None and self.has_view_permission(request, run):
            extra_context = {**(extra_context or {}), **self.run_page_context(request, run)}
        return super().changeform_view(request, object_id, form_url, extra_context)

    def run_page_context(self, request, run: Run) -> dict:
        """Return the outcome, the failure, the grouped timeline, token usage, cancel rights and the live stream's path."""
        live = run.status in UNFINISHED_STATUSES
        outcome = run_outcome(run)
        failure = run_failure(run=run) if outcome == "failed" else None
        return {
            "outcome": outcome,
            "failure": failure,
            "failed_after_url": _checkpoint_url(request, run, failure.checkpoint_id if failure else None),
            "timeline": run_timeline(run=run),
            "run_duration": _duration(run),
            "usage_by_model": sorted((run.token_usage_by_model or {}).items()),
            "usage_by_caller": sorted((run.token_usage_by_caller or {}).items()),
            "can_cancel": live and self.has_change_permission(request, run),
            "cancel_url": reverse("admin:runs_run_cancel", args=[run.pk]),
            "live_path": f"/ws/threads/{run.thread_id}/runs/{run.run_id}" if live else "",
            "events_url": reverse("admin:runs_runevent_changelist") + f"?run={run.pk}",
            "show_save": False,
            "show_save_and_continue": False,
            "show_save_and_add_another": False,
            "show_delete_link": False,
        }


@admin.register(RunEvent)
class RunEventAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """The persisted feed, filterable by thread (``?thread=``), run (``?run=``), category and type."""

    list_display = ("thread", "seq", "run", "event_type", "category", "created_at")
    list_filter = (CategoryFilter, EventTypeFilter)

    class Media:
        css = {"all": ("console/runs.css",)}

    list_select_related = ("thread", "run")
    search_fields = ("thread__thread_id", "run__run_id")
    show_full_result_count = False
    paginator = CappedPaginator
    ordering = ("-id",)

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in RunEvent._meta.fields]


def runs_health_context(request) -> dict:
    """The health page's runs section: this process's worker, leased workers, queue depth, orphans."""
    config = settings.DEERFLOW_CONFIG.runs
    worker = current_worker()
    here = None
    if worker is not None:
        here = {"worker_id": worker.worker_id, "running": len(worker.tasks), "capacity": worker.capacity}
        here["claims"] = worker.claim
    return {
        **run_health(lease_seconds=config.lease_seconds),
        "this_worker": here,
        "capacity": config.capacity,
        "lease_seconds": config.lease_seconds,
        "execute_in_server": config.execute_in_server,
    }


HEALTH_PANEL = HealthPanel("admin/runs/health_panel.html", runs_health_context)
