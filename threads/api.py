"""Thread routes (LangGraph Platform compatible): CRUD, search, count, copy."""

from __future__ import annotations

import json
import re
from typing import Any

from django.conf import settings
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from checkpoints.accessor import state_accessor
from checkpoints.errors import CheckpointModeMismatchError, UnknownGraphError
from checkpoints.serialization import serialize_channel_values, thread_interrupts
from deerflow_site.drf import OFFSET_MAX, StrictCharField, set_pagination_headers
from deerflow_site.validation import metadata_size_check
from threads import selectors, services
from threads.models import ThreadMeta, ThreadStatus

THREAD_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
THREAD_FIELDS = (
    "thread_id",
    "created_at",
    "updated_at",
    "state_updated_at",
    "metadata",
    "status",
    "values",
    "interrupts",
    "config",
    "error",
)


def validate_thread_id(thread_id: str) -> str:
    """Raise 422 unless ``thread_id`` is 1–64 letters, digits, ``_`` or ``-``."""
    if not THREAD_ID_PATTERN.match(thread_id):
        raise ValidationError({"thread_id": f"Invalid thread id {thread_id!r}: use 1-64 letters, digits, '_' or '-'"})
    return thread_id


def owned_thread(request, thread_id: str) -> ThreadMeta:
    """Return the caller's thread named in the path (422 bad id, 404 not theirs)."""
    return selectors.thread_get(thread_id=validate_thread_id(thread_id), owner=request.user)


class ThreadIdField(StrictCharField):
    """A thread id exactly as sent: ``" a"`` is refused, not trimmed into another thread's id."""

    def __init__(self, **kwargs):
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        return validate_thread_id(super().to_internal_value(data))


class StrictDictField(serializers.DictField):
    """A JSON object; ``null`` is accepted as empty (the SDK sends it)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)


def _reject_unsupported(data: dict[str, Any], names: tuple[str, ...]) -> None:
    for name in names:
        if data.get(name) not in (None, [], {}):
            raise ValidationError({name: f"{name} is not supported by this server"})


def thread_values(thread: ThreadMeta) -> tuple[dict[str, Any], dict[str, Any], str]:
    """Return (values, interrupts, status) from the thread's head checkpoint."""
    snapshot = state_accessor(thread.assistant_id).get(thread.thread_id)
    interrupts = thread_interrupts(snapshot)
    status_ = thread.status
    # A settled thread reads its status from the head: pending interrupts win.
    if status_ in (ThreadStatus.IDLE, ThreadStatus.INTERRUPTED):
        status_ = ThreadStatus.INTERRUPTED if interrupts else ThreadStatus.IDLE
    return serialize_channel_values(snapshot.values), interrupts, status_


def thread_payload(
    thread: ThreadMeta, *, with_values: bool = True, select: list[str] | None = None, in_list: bool = False
) -> dict[str, Any]:
    """Return the SDK's ``Thread`` object.

    In a list (search), a thread whose checkpoints this process must not read
    (a delta thread in a full-mode process) is listed with its title only
    and the gate's message in ``error``: one such thread must not turn the
    owner's whole search into a 409. A single-thread read answers 409.
    """
    values: dict[str, Any] = {"title": thread.display_name} if thread.display_name else {}
    interrupts: dict[str, Any] = {}
    status_ = thread.status
    error = None
    if with_values and (select is None or {"values", "interrupts", "status"} & set(select)):
        try:
            values, interrupts, status_ = thread_values(thread)
        except CheckpointModeMismatchError as exc:
            if not in_list:
                raise
            error = str(exc)
    payload = {
        "thread_id": thread.thread_id,
        "created_at": thread.created_at.isoformat(),
        "updated_at": thread.updated_at.isoformat(),
        "state_updated_at": (thread.state_updated_at or thread.updated_at).isoformat(),
        "metadata": thread.metadata,
        "status": status_,
        "values": values,
        "interrupts": interrupts,
        "config": {},
        "error": error,
    }
    if select:
        payload = {k: v for k, v in payload.items() if k in select}
    return payload


class ThreadCreateView(APIView):
    """POST /threads: create a thread (``if_exists``: raise | do_nothing)."""

    class InputSerializer(serializers.Serializer):
        thread_id = ThreadIdField(required=False, allow_null=True)
        metadata = StrictDictField()
        if_exists = serializers.ChoiceField(choices=["raise", "do_nothing"], required=False, allow_null=True)
        supersteps = serializers.ListField(required=False, allow_null=True)
        ttl = serializers.JSONField(required=False, allow_null=True)

        def validate_metadata(self, value):
            metadata_size_check(value, field="")
            return value

    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        _reject_unsupported(data, ("supersteps", "ttl"))
        try:
            thread, _ = services.thread_create(
                owner=request.user,
                thread_id=data.get("thread_id"),
                metadata=data.get("metadata") or {},
                if_exists=data.get("if_exists") or "raise",
            )
        except UnknownGraphError as exc:
            raise ValidationError({"metadata.graph_id": f"Unknown graph {exc.assistant_id!r}"}) from None
        return Response(thread_payload(thread), status=status.HTTP_200_OK)


class SearchFilterSerializer(serializers.Serializer):
    metadata = StrictDictField()
    values = StrictDictField()
    status = serializers.ChoiceField(choices=ThreadStatus.choices, required=False, allow_null=True)


class ThreadSearchView(APIView):
    """POST /threads/search: filter, sort and page the caller's threads."""

    class InputSerializer(SearchFilterSerializer):
        ids = serializers.ListField(child=ThreadIdField(), required=False, allow_null=True, max_length=1000)
        limit = serializers.IntegerField(min_value=1, max_value=1000, default=10)
        offset = serializers.IntegerField(min_value=0, max_value=OFFSET_MAX, default=0)
        sort_by = serializers.ChoiceField(choices=selectors.THREAD_SORT_FIELDS, required=False, allow_null=True)
        sort_order = serializers.ChoiceField(choices=["asc", "desc"], required=False, allow_null=True)
        select = serializers.ListField(
            child=serializers.ChoiceField(choices=THREAD_FIELDS), required=False, allow_null=True
        )
        extract = StrictDictField()

    def post(self, request):
        serializer = self.InputSerializer(data=request.data or {})
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        _reject_unsupported(data, ("values", "extract"))
        threads, total = selectors.thread_search(
            owner=request.user,
            metadata=data.get("metadata"),
            ids=data.get("ids"),
            status=data.get("status"),
            sort_by=data.get("sort_by") or "updated_at",
            sort_order=data.get("sort_order") or "desc",
            limit=data["limit"],
            offset=data["offset"],
        )
        page = _within_budget(
            (thread_payload(t, select=data.get("select"), in_list=True) for t in threads),
            settings.DEERFLOW_CONFIG.limits.max_response_bytes,
        )
        return set_pagination_headers(Response(page), total=total, offset=data["offset"], count=len(page))


def _within_budget(payloads, budget: int) -> list[dict[str, Any]]:
    """Take payloads while their JSON fits ``budget`` bytes (always the first): a search pages, never balloons."""
    page: list[dict[str, Any]] = []
    used = 0
    for payload in payloads:
        used += len(json.dumps(payload, default=str, separators=(",", ":")).encode())
        if page and used > budget:
            break
        page.append(payload)
    return page


class ThreadCountView(APIView):
    """POST /threads/count: how many of the caller's threads match."""

    def post(self, request):
        serializer = SearchFilterSerializer(data=request.data or {})
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        _reject_unsupported(data, ("values",))
        count = selectors.thread_filter(
            owner=request.user, metadata=data.get("metadata"), status=data.get("status")
        ).count()
        return Response(count)


class ThreadDetailView(APIView):
    """GET, PATCH and DELETE /threads/{thread_id}."""

    class PatchSerializer(serializers.Serializer):
        metadata = StrictDictField()
        ttl = serializers.JSONField(required=False, allow_null=True)

    def get(self, request, thread_id: str):
        return Response(thread_payload(owned_thread(request, thread_id)))

    def patch(self, request, thread_id: str):
        thread = owned_thread(request, thread_id)
        serializer = self.PatchSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        _reject_unsupported(serializer.validated_data, ("ttl",))
        # PATCH merges, so the merged object is what must fit the limit.
        metadata_size_check({**thread.metadata, **(serializer.validated_data.get("metadata") or {})})
        # The answer carries the thread's values: pass the mode gate before writing.
        state_accessor(thread.assistant_id).head_tuple(thread.thread_id)
        thread = services.thread_update(thread=thread, metadata=serializer.validated_data.get("metadata") or {})
        if request.headers.get("Prefer") == "return=minimal":
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(thread_payload(thread))

    def delete(self, request, thread_id: str):
        services.thread_delete(thread=owned_thread(request, thread_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class ThreadCopyView(APIView):
    """POST /threads/{thread_id}/copy: a new thread with a copy of every checkpoint."""

    def post(self, request, thread_id: str):
        thread = owned_thread(request, thread_id)
        # A process that must not read the thread does not copy it either (409, nothing written).
        state_accessor(thread.assistant_id).head_tuple(thread.thread_id)
        copy = services.thread_copy(thread=thread)
        return Response(thread_payload(copy))
