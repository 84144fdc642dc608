"""Retention from the console: preview (the dry run) and apply, the changelist action, the storage page.

Preview and apply call ``threads.retention.thread_prune`` with the policy
of the API's ``keep_latest`` (sibling branches, metadata-only leaves,
snapshot thinning) — the same service ``prune_checkpoints`` reaches — so the
console can neither skip the unfinished-run guard nor delete anything a
pass would protect. Every apply is written to the admin log with its summary.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseBadRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from checkpoints.retention import RetentionPolicy, RetentionReport
from checkpoints.storage import UnsupportedBackendError
from console.checkpoints import APPLY_PERMISSION, checkpoint_page, checkpoint_url, run_url
from console.lineage.guidance import thread_guidance_get
from console.lineage.totals import storage_totals_get
from core.console_actions import StaffAction, service_call
from core.errors import DomainError
from threads.models import UNFINISHED_STATUSES, ThreadMeta
from threads.retention import KEEP_LATEST_POLICY, thread_checkpoint_references, thread_prune
from threads.selectors import thread_rolled_back_runs

# A preview runs one dry pass per thread: a selection is capped like a changelist page.
PREVIEW_MAX_THREADS = 50
# Checkpoints listed per thread and section; the counts are always complete.
PREVIEW_LIST_CAP = 200
# The storage page explains this many of the largest threads (one metadata read and plan each).
GUIDED_THREADS = 10


def console_policy(released: frozenset[str]) -> RetentionPolicy:
    """The API's keep_latest, with the thread's rolled-back runs released (docs/retention.md)."""
    return replace(KEEP_LATEST_POLICY, released_runs=released)


def preview_url(thread_ids: list[str]) -> str:
    return reverse("admin:checkpoints_retention_preview") + "?" + urlencode({"ids": ",".join(thread_ids)})


@admin.action(description="Preview retention", permissions=["view"])
def preview_retention(modeladmin, request, queryset):
    """Changelist action: open the retention preview for the selected threads (at most 50)."""
    thread_ids = list(queryset.order_by("pk").values_list("pk", flat=True)[:PREVIEW_MAX_THREADS])
    return HttpResponseRedirect(preview_url(thread_ids))


def _selected(raw: str) -> list[str] | str:
    """Return the thread ids asked for, or the reason they cannot be previewed."""
    thread_ids = [t for t in dict.fromkeys(part.strip() for part in raw.split(",")) if t]
    if not thread_ids:
        return "ids: name at least one thread id (?ids=a,b)"
    if len(thread_ids) > PREVIEW_MAX_THREADS:
        return f"ids: at most {PREVIEW_MAX_THREADS} threads per preview, got {len(thread_ids)}"
    return thread_ids


def summary_text(report: RetentionReport) -> str:
    """One line for messages and the admin log."""
    saved = sum(report.bytes_saved.values())
    return (
        f"deleted {len(report.deleted)} checkpoint(s), thinned {len(report.thinned)} snapshot(s), "
        f"dropped consumed writes of {len(report.writes_dropped)} checkpoint(s), saved {saved:,} bytes; "
        f"{len(report.protected)} protected"
    )


def _lost(thread: ThreadMeta, policy: RetentionPolicy) -> list[dict[str, Any]]:
    """The branches the pass deletes, each with what it holds that HEAD does not, linked to read it first."""
    guidance = thread_guidance_get(
        thread_id=thread.thread_id,
        total_bytes=0,
        references=thread_checkpoint_references(thread=thread),
        policy=policy,
    )
    return [
        {
            "branch": branch,
            "url": checkpoint_url(thread.thread_id, branch.tip, against=guidance.head_id),
            "run_url": run_url(branch.run_id) if branch.run_id else "",
        }
        for branch in guidance.lost
    ]


def _preview_entry(thread: ThreadMeta, busy: bool, released: frozenset[str]) -> dict[str, Any]:
    entry: dict[str, Any] = {"thread": thread, "busy": busy, "released": sorted(released)}
    policy = console_policy(released)
    try:
        report = thread_prune(thread=thread, policy=policy, dry_run=True)
        entry["lost"] = _lost(thread, policy)
    except (DomainError, UnsupportedBackendError) as exc:
        return {**entry, "error": str(exc)}
    entry.update(
        report=report,
        summary=summary_text(report),
        bytes_saved=sum(report.bytes_saved.values()),
        deleted=report.deleted[:PREVIEW_LIST_CAP],
        thinned=report.thinned[:PREVIEW_LIST_CAP],
        protected=[p for p in report.protected if not all(r.startswith("lineage of ") for r in p["reasons"])][
            :PREVIEW_LIST_CAP
        ],
        lineage_protected=sum(all(r.startswith("lineage of ") for r in p["reasons"]) for p in report.protected),
        kept_snapshots=report.kept_snapshots[:PREVIEW_LIST_CAP],
    )
    return entry


def _apply(request, threads: list[ThreadMeta]) -> None:
    released = thread_rolled_back_runs([thread.pk for thread in threads])
    for thread in threads:
        audit = StaffAction(target=thread, what="Applied checkpoint retention (keep_latest)", describe=summary_text)
        policy = console_policy(released.get(thread.pk, frozenset()))
        done, report = service_call(request, thread_prune, audit=audit, thread=thread, policy=policy)
        if done and report is not None:  # done: thread_prune returned its report
            heads = ", ".join(report.heads.values()) or "none"
            messages.success(
                request,
                f"Thread {thread.thread_id}: {summary_text(report)}. Head {heads} kept: the thread reads and resumes "
                "from it as before.",
            )


@require_http_methods(["GET", "POST"])
def retention_preview_view(request):
    """GET: the dry run of each selected thread. POST (the confirmation form): apply, then back to GET."""
    selected = _selected(request.POST.get("ids", "") if request.method == "POST" else request.GET.get("ids", ""))
    if isinstance(selected, str):
        return HttpResponseBadRequest(selected)
    can_apply = request.user.has_perm(APPLY_PERMISSION)
    found = ThreadMeta.objects.in_bulk(selected)
    threads = [found[t] for t in selected if t in found]
    missing = [t for t in selected if t not in found]
    if request.method == "POST":
        if not can_apply:
            raise PermissionDenied(f"Applying retention needs the {APPLY_PERMISSION} permission.")
        for thread_id in missing:
            messages.error(request, f"Thread {thread_id} not found")
        _apply(request, threads)
        return HttpResponseRedirect(preview_url(selected))
    busy = set(
        ThreadMeta.objects.filter(pk__in=found, runs__status__in=UNFINISHED_STATUSES).values_list("pk", flat=True)
    )
    released = thread_rolled_back_runs(list(found))
    context = {
        **admin.site.each_context(request),
        "title": "Retention preview",
        "entries": [
            _preview_entry(thread, thread.pk in busy, released.get(thread.pk, frozenset())) for thread in threads
        ],
        "missing": missing,
        "ids": ",".join(selected),
        "can_apply": can_apply,
        "cap": PREVIEW_LIST_CAP,
    }
    return TemplateResponse(request, "admin/checkpoints/retention_preview.html", context)


def _guidance(largest: list[dict[str, Any]], threads: dict[str, ThreadMeta]) -> list[dict[str, Any]]:
    """Explain the largest known threads, most reclaimable first."""
    guided = [row for row in largest if row["thread_id"] in threads][:GUIDED_THREADS]
    released = thread_rolled_back_runs([row["thread_id"] for row in guided])
    explained = []
    for row in guided:
        thread = threads[row["thread_id"]]
        guidance = thread_guidance_get(
            thread_id=thread.thread_id,
            total_bytes=row["bytes"],
            references=thread_checkpoint_references(thread=thread),
            policy=console_policy(released.get(thread.pk, frozenset())),
        )
        explained.append(
            {
                "thread": thread,
                "g": guidance,
                "preview_url": preview_url([thread.thread_id]),
                "lineage_url": reverse("admin:checkpoints_lineage", args=[thread.thread_id]),
            }
        )
    return sorted(explained, key=lambda e: (-e["g"].reclaimable, -e["g"].bytes))


def storage_view(request):
    """Storage of every thread: per table and mode, orphans, and why the largest threads are large."""
    context: dict[str, Any] = {**admin.site.each_context(request), "title": "Checkpoint storage"}
    try:
        totals = storage_totals_get()
    except UnsupportedBackendError as exc:
        return TemplateResponse(request, "admin/checkpoints/storage.html", {**context, "error": str(exc)}, status=501)
    threads = ThreadMeta.objects.in_bulk([t["thread_id"] for t in totals.largest])
    context.update(
        totals=totals,
        guided=_guidance(totals.largest, threads),
        guided_max=GUIDED_THREADS,
        largest=[
            {
                **row,
                "known": row["thread_id"] in threads,
                "title": threads[row["thread_id"]].display_name if row["thread_id"] in threads else "",
                "preview_url": preview_url([row["thread_id"]]),
                "lineage_url": reverse("admin:checkpoints_lineage", args=[row["thread_id"]]),
            }
            for row in totals.largest
        ],
    )
    return TemplateResponse(request, "admin/checkpoints/storage.html", context)


PAGES = (
    checkpoint_page(
        "checkpoints/retention/", "checkpoints_retention_preview", "Retention preview", retention_preview_view
    ),
    checkpoint_page("checkpoints/storage/", "checkpoints_storage", "Checkpoint storage", storage_view, listed=True),
)
