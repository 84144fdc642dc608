"""The lineage page of a thread and the page of one checkpoint (state, writes, diff)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseBadRequest, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views.decorators.http import require_http_methods
from langchain_core.runnables import RunnableConfig

from checkpoints.accessor import StateAccessor, state_accessor, thread_config
from checkpoints.errors import CheckpointModeMismatchError, CheckpointNotFoundError
from checkpoints.modes import metadata_uses_delta
from checkpoints.rollback import replacement
from checkpoints.storage import UnsupportedBackendError
from console.lineage.diff import message_views, state_diff, value_text, write_preview
from console.lineage.drawing import lineage_drawing
from console.lineage.lineage import (
    LineageGap,
    LineageNode,
    LineagePage,
    checkpoint_time,
    lineage_tables_read,
    thread_lineage_get,
)
from core.admin_site import ConsolePage
from core.console_actions import StaffAction, service_call
from threads.models import UNFINISHED_STATUSES, ThreadMeta
from threads.retention import thread_checkpoint_references
from threads.selectors import thread_has_unfinished_run
from threads.services import thread_state_update

VIEW_PERMISSION = "threads.view_threadmeta"
APPLY_PERMISSION = "threads.apply_retention"
# Forking or restoring writes the thread's state, as PATCH-ing the thread would.
STATE_PERMISSION = "threads.change_threadmeta"
# The node a restore-as-head update is written as (the lineage names it as the writer).
RESTORE_AS_HEAD_NODE = "console_restore"
# Checkpoints offered by "compare with…" (newest first); any other id can be typed.
COMPARE_CHOICES = 200


def checkpoint_page(
    route: str,
    url_name: str,
    title: str,
    view,
    *,
    listed: bool = False,
    permission: str | None = VIEW_PERMISSION,
    visible_to: Callable[[Any], bool] | None = None,
) -> ConsolePage:
    """A page listed under "Checkpoints", by default for whoever may view threads (they hold the checkpoints)."""
    page = ConsolePage("checkpoints", "Checkpoints", route, url_name, title, view, permission, listed)
    return page if visible_to is None else replace(page, visible_to=visible_to)


def _int(raw: str | None, default: int) -> int:
    try:
        return int(raw) if raw else default
    except ValueError:
        return default


def _query(**params: Any) -> str:
    kept = {k: v for k, v in params.items() if v not in (None, "")}
    return f"?{urlencode(kept)}" if kept else ""


def checkpoint_url(thread_id: str, checkpoint_id: str, *, ns: str = "", against: str = "", confirm: str = "") -> str:
    url = reverse("admin:checkpoints_checkpoint", args=[thread_id, checkpoint_id])
    return url + _query(ns=ns, against=against, confirm=confirm)


def run_url(run_id: str) -> str:
    return reverse("admin:runs_run_change", args=[run_id])


def thread_runs(thread: ThreadMeta) -> dict[str, str]:
    """Return run id → status ("rolled back" for a finished rollback) of every run of the thread, in one query."""
    return {
        run_id: "rolled back" if cancel_action == "rollback" and status not in UNFINISHED_STATUSES else status
        for run_id, status, cancel_action in thread.runs.values_list("run_id", "status", "cancel_action")
    }


def _mark_runs(lineage: LineagePage, statuses: dict[str, str]) -> None:
    """Give each drawn node its run's status."""
    for row in lineage.rows:
        if isinstance(row, LineageNode) and row.run_id:
            row.run_status = statuses.get(row.run_id, "no run record")


def lineage_view(request, thread_id: str):
    """Draw the thread's checkpoint tree from metadata only; ``base`` makes node links diff against it."""
    thread = get_object_or_404(ThreadMeta, pk=thread_id)
    ns = request.GET.get("ns", "")
    base = request.GET.get("base", "")
    collapsed = request.GET.get("collapse", "1") != "0"
    context = {
        **admin.site.each_context(request),
        "title": f"Checkpoint lineage: {thread}",
        "thread": thread,
        "ns": ns,
        "base": base,
        "can_apply": request.user.has_perm(APPLY_PERMISSION),
        "preview_url": reverse("admin:checkpoints_retention_preview") + _query(ids=thread.thread_id),
    }
    runs = thread_runs(thread)
    try:
        lineage = thread_lineage_get(
            thread_id=thread.thread_id,
            references=thread_checkpoint_references(thread=thread),
            released_runs=frozenset(run for run, status in runs.items() if status == "rolled back"),
            checkpoint_ns=ns,
            page=_int(request.GET.get("page"), 1),
            collapsed=collapsed,
        )
    except UnsupportedBackendError as exc:
        return TemplateResponse(request, "admin/checkpoints/lineage.html", {**context, "error": str(exc)}, status=501)

    _mark_runs(lineage, runs)

    def node_href(node: LineageNode) -> str:
        # An abandoned tip's question is what HEAD lost: its link compares with HEAD.
        against = base or (lineage.head_id if node.abandoned else "")
        return checkpoint_url(thread.thread_id, node.checkpoint_id, ns=ns, against=against)

    def gap_href(gap: LineageGap) -> str:
        return _query(ns=ns, base=base, collapse=0, page=gap.expand_page)

    context.update(
        lineage=lineage,
        drawing=lineage_drawing(lineage, node_href, gap_href, run_url),
        newer=_query(ns=ns, base=base, collapse=0 if not collapsed else "", page=lineage.page - 1)
        if lineage.page > 1
        else "",
        older=_query(ns=ns, base=base, collapse=0 if not collapsed else "", page=lineage.page + 1)
        if lineage.page < lineage.pages
        else "",
        toggle=_query(ns=ns, base=base, collapse=1 if not collapsed else 0),
    )
    return TemplateResponse(request, "admin/checkpoints/lineage.html", context)


def _materialized(accessor: StateAccessor, thread_id: str, checkpoint_id: str, ns: str) -> dict[str, Any]:
    """Materialize one checkpoint through the accessor; the gate's message instead of partial state."""
    try:
        snapshot = accessor.get(thread_id, checkpoint_id=checkpoint_id, checkpoint_ns=ns)
    except CheckpointModeMismatchError as exc:
        return {"gate": f"Thread {thread_id}: {exc}"}
    except CheckpointNotFoundError:
        return {"missing": f"Checkpoint {checkpoint_id} not found in thread {thread_id}"}
    return {"snapshot": snapshot}


def _state_context(snapshot) -> dict[str, Any]:
    values = dict(snapshot.values or {})
    messages = values.pop("messages", None)
    return {
        "messages": message_views(messages) if isinstance(messages, list) else [],
        "channels": [(name, value_text(value)) for name, value in sorted(values.items())],
        "next": list(snapshot.next or ()),
        "interrupts": [value_text(i.value) for task in snapshot.tasks for i in task.interrupts],
    }


def checkpoint_choices(thread_id: str, ns: str) -> tuple[str, list[tuple[str, str]]]:
    """Return the namespace's head id and (id, label) of its newest checkpoints, from metadata only."""
    tables = lineage_tables_read(thread_id=thread_id)
    head = tables.heads().get(ns, "")
    parents = {row.parent_id for row in tables.checkpoints.values() if row.ns == ns}
    rows = sorted((r for r in tables.checkpoints.values() if r.ns == ns), key=lambda r: r.checkpoint_id, reverse=True)
    choices = []
    for row in rows[:COMPARE_CHOICES]:
        when = checkpoint_time(row.checkpoint_id)
        mark = " HEAD" if row.checkpoint_id == head else (" tip" if row.checkpoint_id not in parents else "")
        label = (
            f"{when:%H:%M:%S} · " if when else ""
        ) + f"step {row.metadata.get('step')} {row.metadata.get('source', '?')} · {row.checkpoint_id[:13]}…{mark}"
        choices.append((row.checkpoint_id, label))
    return head, choices


def checkpoint_restore_as_head(*, thread: ThreadMeta, checkpoint_id: str) -> RunnableConfig:
    """Write ``checkpoint_id``'s state on top of the head (a linear history: nothing is abandoned).

    Both states pass the mode gate; channels only the head has are emptied,
    as a rollback does; ``thread_state_update`` refuses while a run is active.
    """
    accessor = state_accessor(thread.assistant_id)
    selected = accessor.get(thread.thread_id, checkpoint_id=checkpoint_id)
    head = accessor.get(thread.thread_id)
    values = replacement(accessor, dict(selected.values or {}), dict(head.values or {}))
    return thread_state_update(thread=thread, values=values, as_node=RESTORE_AS_HEAD_NODE)


def checkpoint_fork(*, thread: ThreadMeta, checkpoint_id: str) -> RunnableConfig:
    """Copy ``checkpoint_id`` as the new head beside it (LangGraph's ``__copy__``, the protocol's state.fork)."""
    return thread_state_update(thread=thread, values=None, as_node="__copy__", checkpoint_id=checkpoint_id)


STATE_ACTIONS: dict[str, tuple[Callable[..., RunnableConfig], str]] = {
    "fork": (checkpoint_fork, "Forked the thread from checkpoint {}"),
    "restore": (checkpoint_restore_as_head, "Restored checkpoint {} as the head"),
}


def _new_head(config: RunnableConfig) -> str:
    return f"new head {config['configurable']['checkpoint_id']}"


def _state_action(request, thread: ThreadMeta, checkpoint_id: str, ns: str):
    """POST fork / restore: through ``service_call`` with an audit entry; back to the new head, or the form."""
    if not request.user.has_perm(STATE_PERMISSION):
        raise PermissionDenied(f"Forking and restoring need the {STATE_PERMISSION} permission.")
    action = request.POST.get("action", "")
    if action not in STATE_ACTIONS or ns:
        return HttpResponseBadRequest("action: fork or restore, on a root-namespace checkpoint")
    service, what = STATE_ACTIONS[action]
    audit = StaffAction(target=thread, what=what.format(checkpoint_id), describe=_new_head)
    done, config = service_call(request, service, audit=audit, thread=thread, checkpoint_id=checkpoint_id)
    if not done or config is None:
        return HttpResponseRedirect(checkpoint_url(thread.thread_id, checkpoint_id, confirm=action))
    head = config["configurable"]["checkpoint_id"]
    messages.success(request, f"{what.format(checkpoint_id)}: the head is now {head}.")
    return HttpResponseRedirect(checkpoint_url(thread.thread_id, head, against=checkpoint_id))


def _confirmation(request, thread: ThreadMeta, checkpoint_id: str, head: str) -> dict[str, Any]:
    confirm = request.GET.get("confirm", "")
    if confirm not in STATE_ACTIONS or checkpoint_id == head:
        return {}
    return {
        "confirm": confirm,
        "can_change_state": request.user.has_perm(STATE_PERMISSION),
        "busy": thread_has_unfinished_run(thread.thread_id),
    }


@require_http_methods(["GET", "POST"])
def checkpoint_view(request, thread_id: str, checkpoint_id: str):
    """Show one checkpoint: its diff first, then state, pending writes and metadata; POST forks or restores it."""
    thread = get_object_or_404(ThreadMeta, pk=thread_id)
    ns = request.GET.get("ns", "")
    if request.method == "POST":
        return _state_action(request, thread, checkpoint_id, ns)
    accessor = state_accessor(thread.assistant_id)
    # Metadata and links only: values are read through the accessor below.
    raw = accessor.saver.get_tuple(thread_config(thread.thread_id, checkpoint_id, ns))
    if raw is None:
        raise Http404(f"Checkpoint {checkpoint_id} not found in thread {thread.thread_id}")
    parent_id = (raw.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    head, choices = checkpoint_choices(thread.thread_id, ns)
    confirmation = _confirmation(request, thread, checkpoint_id, head)
    against = head if confirmation else request.GET.get("against") or parent_id or ""
    current = _materialized(accessor, thread.thread_id, checkpoint_id, ns)
    run_id = str((raw.metadata or {}).get("run_id") or "")
    context: dict[str, Any] = {
        **admin.site.each_context(request),
        "title": f"Checkpoint {checkpoint_id}",
        "thread": thread,
        "checkpoint_id": checkpoint_id,
        "time": checkpoint_time(checkpoint_id),
        "ns": ns,
        "head": head,
        "is_head": checkpoint_id == head,
        "head_url": checkpoint_url(thread.thread_id, checkpoint_id, ns=ns, against=head),
        "choices": choices,
        "run_id": run_id,
        "run_url": run_url(run_id) if run_id else "",
        "parent_id": parent_id,
        "parent_url": checkpoint_url(thread.thread_id, parent_id, ns=ns) if parent_id else "",
        "against": against,
        "metadata": sorted((k, value_text(v)) for k, v in (raw.metadata or {}).items()),
        "mode": "delta" if metadata_uses_delta(raw.metadata) else "full",
        "process_mode": accessor.mode,
        "lineage_url": reverse("admin:checkpoints_lineage", args=[thread.thread_id]) + _query(ns=ns),
        "pick_url": reverse("admin:checkpoints_lineage", args=[thread.thread_id]) + _query(ns=ns, base=checkpoint_id),
        "can_change_state": request.user.has_perm(STATE_PERMISSION) and not ns,
        "fork_url": checkpoint_url(thread.thread_id, checkpoint_id, confirm="fork"),
        "restore_url": checkpoint_url(thread.thread_id, checkpoint_id, confirm="restore"),
        **confirmation,
        **{k: v for k, v in current.items() if k != "snapshot"},
    }
    if "snapshot" in current:
        context["state"] = _state_context(current["snapshot"])
        # Writes are state too: shown only once the gate has let the checkpoint through.
        context["writes"] = [(task, channel, write_preview(value)) for task, channel, value in raw.pending_writes or []]
        if against:
            base = _materialized(accessor, thread.thread_id, against, ns)
            if "snapshot" in base:
                context["diff"] = state_diff(base["snapshot"].values, current["snapshot"].values)
                context["against_url"] = checkpoint_url(thread.thread_id, against, ns=ns)
            else:
                context["diff_error"] = base.get("gate") or base.get("missing")
    return TemplateResponse(request, "admin/checkpoints/checkpoint.html", context)


PAGES = (
    checkpoint_page(
        "checkpoints/threads/<str:thread_id>/lineage/", "checkpoints_lineage", "Checkpoint lineage", lineage_view
    ),
    checkpoint_page(
        "checkpoints/threads/<str:thread_id>/checkpoints/<str:checkpoint_id>/",
        "checkpoints_checkpoint",
        "Checkpoint",
        checkpoint_view,
    ),
)
