"""The lineage page of a thread and the page of one checkpoint (state, writes, diff)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.http import Http404
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse

from checkpoints.accessor import StateAccessor, state_accessor, thread_config
from checkpoints.errors import CheckpointModeMismatchError, CheckpointNotFoundError
from checkpoints.modes import metadata_uses_delta
from checkpoints.storage import UnsupportedBackendError
from console.lineage.diff import message_views, state_diff, value_text, write_preview
from console.lineage.drawing import lineage_drawing
from console.lineage.lineage import LineageGap, LineageNode, thread_lineage_get
from core.admin_site import ConsolePage
from threads.models import ThreadMeta
from threads.retention import thread_checkpoint_references

VIEW_PERMISSION = "threads.view_threadmeta"
APPLY_PERMISSION = "threads.apply_retention"


def checkpoint_page(route: str, url_name: str, title: str, view, *, listed: bool = False) -> ConsolePage:
    """A page listed under "Checkpoints" for whoever may view threads (they hold the checkpoints)."""
    return ConsolePage(
        app_label="checkpoints",
        app_name="Checkpoints",
        route=route,
        url_name=url_name,
        title=title,
        view=view,
        permission=VIEW_PERMISSION,
        listed=listed,
    )


def _int(raw: str | None, default: int) -> int:
    try:
        return int(raw) if raw else default
    except ValueError:
        return default


def _query(**params: Any) -> str:
    kept = {k: v for k, v in params.items() if v not in (None, "")}
    return f"?{urlencode(kept)}" if kept else ""


def checkpoint_url(thread_id: str, checkpoint_id: str, *, ns: str = "", against: str = "") -> str:
    url = reverse("admin:checkpoints_checkpoint", args=[thread_id, checkpoint_id])
    return url + _query(ns=ns, against=against)


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
    try:
        lineage = thread_lineage_get(
            thread_id=thread.thread_id,
            references=thread_checkpoint_references(thread=thread),
            checkpoint_ns=ns,
            page=_int(request.GET.get("page"), 1),
            collapsed=collapsed,
        )
    except UnsupportedBackendError as exc:
        return TemplateResponse(request, "admin/checkpoints/lineage.html", {**context, "error": str(exc)}, status=501)

    def node_href(node: LineageNode) -> str:
        return checkpoint_url(thread.thread_id, node.checkpoint_id, ns=ns, against=base)

    def gap_href(gap: LineageGap) -> str:
        return _query(ns=ns, base=base, collapse=0, page=gap.expand_page)

    context.update(
        lineage=lineage,
        drawing=lineage_drawing(lineage, node_href, gap_href),
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


def checkpoint_view(request, thread_id: str, checkpoint_id: str):
    """Show one checkpoint: metadata, materialized state, pending writes, diff against a base."""
    thread = get_object_or_404(ThreadMeta, pk=thread_id)
    ns = request.GET.get("ns", "")
    accessor = state_accessor(thread.assistant_id)
    # Metadata and links only: values are read through the accessor below.
    raw = accessor.saver.get_tuple(thread_config(thread.thread_id, checkpoint_id, ns))
    if raw is None:
        raise Http404(f"Checkpoint {checkpoint_id} not found in thread {thread.thread_id}")
    parent_id = (raw.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    against = request.GET.get("against") or parent_id or ""
    current = _materialized(accessor, thread.thread_id, checkpoint_id, ns)
    context: dict[str, Any] = {
        **admin.site.each_context(request),
        "title": f"Checkpoint {checkpoint_id}",
        "thread": thread,
        "checkpoint_id": checkpoint_id,
        "ns": ns,
        "parent_id": parent_id,
        "parent_url": checkpoint_url(thread.thread_id, parent_id, ns=ns) if parent_id else "",
        "against": against,
        "metadata": sorted((k, value_text(v)) for k, v in (raw.metadata or {}).items()),
        "mode": "delta" if metadata_uses_delta(raw.metadata) else "full",
        "process_mode": accessor.mode,
        "lineage_url": reverse("admin:checkpoints_lineage", args=[thread.thread_id]) + _query(ns=ns),
        "pick_url": reverse("admin:checkpoints_lineage", args=[thread.thread_id]) + _query(ns=ns, base=checkpoint_id),
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
