"""Thread routes (LangGraph Platform compatible): CRUD, search, count, copy."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from checkpoints.accessor import state_accessor
from checkpoints.errors import UnknownGraphError
from core.access import authorize
from core.drf import (
    SortedPageSerializer,
    StrictCharField,
    StrictDictField,
    select_field,
    set_pagination_headers,
)
from core.errors import Invalid
from core.validation import metadata_size_check
from runs.services.cancel import thread_delete_cancelling_runs
from threads import search, selectors, services
from threads.api_common import ThreadIdField, owned_thread, thread_payload
from threads.api_state import checked_as_node, checked_state_values
from threads.models import ThreadStatus
from threads.supersteps import thread_create_with_supersteps
from threads.ttl import ttl_info, ttl_policy_from

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


@extend_schema_field(
    {
        "type": "object",
        "nullable": True,
        "properties": {
            "ttl": {"type": "number", "description": "minutes after the last activity"},
            "strategy": {"type": "string", "enum": ["delete", "keep_latest"], "default": "delete"},
        },
        "required": ["ttl"],
    }
)
class TTLField(serializers.Field):
    """``ttl``: ``{"ttl": <minutes>, "strategy": "delete" | "keep_latest"}`` as a ``TTLPolicy``."""

    def __init__(self, **kwargs):
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        try:
            return ttl_policy_from(data)
        except Invalid as exc:
            raise serializers.ValidationError(exc.message) from None


class SuperstepUpdateSerializer(serializers.Serializer):
    """One update of a superstep: ``values`` (or ``command.update``) written as node ``as_node``."""

    values = serializers.JSONField(required=False, allow_null=True)
    command = StrictDictField()
    as_node = StrictCharField(max_length=128)

    def validate_as_node(self, value):
        return checked_as_node(value)

    def validate_command(self, value):
        if not value:
            return None
        if unknown := sorted(set(value) - {"update", "goto", "resume", "graph"}):
            raise serializers.ValidationError(f"unknown key(s) {', '.join(map(repr, unknown))}")
        if any(value.get(key) is not None for key in ("goto", "resume", "graph")):
            raise serializers.ValidationError("only update is supported in supersteps (no goto, resume or graph)")
        return value

    def validate(self, attrs):
        # As on the Platform, a command wins over values.
        command = attrs.get("command")
        values = command.get("update") if command else attrs.get("values")
        try:
            values = checked_state_values(values)
        except serializers.ValidationError as exc:
            raise serializers.ValidationError({"command.update" if command else "values": exc.detail}) from None
        return (values, attrs["as_node"])


class SuperstepSerializer(serializers.Serializer):
    # max_length goes to the ListSerializer many=True builds; the stubs list only the child's arguments.
    updates = SuperstepUpdateSerializer(many=True, allow_empty=False, max_length=100)  # type: ignore[call-arg]


class ThreadCreateView(APIView):
    """POST /threads: create a thread (``if_exists``: raise | do_nothing), optionally with a history."""

    class InputSerializer(serializers.Serializer):
        thread_id = ThreadIdField(required=False, allow_null=True)
        metadata = StrictDictField()
        if_exists = serializers.ChoiceField(choices=["raise", "do_nothing"], required=False, allow_null=True)
        # max_length: as SuperstepSerializer.updates above (a stubs gap).
        supersteps = SuperstepSerializer(many=True, required=False, allow_null=True, max_length=1000)  # type: ignore[call-arg]
        ttl = TTLField()
        # DeerFlow's extension: file the new thread in one of the caller's projects.
        project_id = StrictCharField(required=False, allow_null=True, max_length=64)

        def validate_metadata(self, value):
            metadata_size_check(value, field="")
            return value

    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        # Custom auth's threads.create handler sees the request and may add metadata, which is stored.
        value = {"thread_id": data.get("thread_id"), "metadata": dict(data.get("metadata") or {})}
        authorize(request.user, resource="threads", action="create", value=value)
        create = {
            "owner": request.user,
            "thread_id": data.get("thread_id"),
            "metadata": value["metadata"],
            "if_exists": data.get("if_exists") or "raise",
            "ttl": data.get("ttl"),
            "project_id": data.get("project_id"),
        }
        supersteps = [step["updates"] for step in data.get("supersteps") or []]
        try:
            if supersteps:
                thread, _ = thread_create_with_supersteps(supersteps=supersteps, **create)
            else:
                thread, _ = services.thread_create(**create)
        except UnknownGraphError as exc:
            raise ValidationError({"metadata.graph_id": f"Unknown graph {exc.assistant_id!r}"}) from None
        return Response(thread_payload(thread), status=status.HTTP_200_OK)


class SearchFilterSerializer(serializers.Serializer):
    metadata = StrictDictField()
    values = StrictDictField()
    status = serializers.ChoiceField(choices=ThreadStatus.choices, required=False, allow_null=True)


def _values_filter(request, data: dict[str, Any]) -> dict[str, Any] | None:
    """Check the ``values`` filter and bring the candidates' head mirrors up to date (``threads.search``)."""
    values = data.get("values")
    if not values:
        return None
    try:
        search.values_filter_check(values)
    except Invalid as exc:
        raise ValidationError({exc.field: exc.reason}) from None
    candidates = selectors.thread_filter(
        owner=request.user, metadata=data.get("metadata"), ids=data.get("ids"), status=data.get("status")
    )
    search.threads_values_mirror_refresh(queryset=candidates)
    return values


class ThreadSearchView(APIView):
    """POST /threads/search: filter, sort and page the caller's threads."""

    class InputSerializer(SearchFilterSerializer, SortedPageSerializer):
        ids = serializers.ListField(child=ThreadIdField(), required=False, allow_null=True, max_length=1000)
        sort_by = serializers.ChoiceField(choices=selectors.THREAD_SORT_FIELDS, required=False, allow_null=True)
        select = select_field(THREAD_FIELDS)
        extract = StrictDictField()

    def post(self, request):
        serializer = self.InputSerializer(data=request.data or {})
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            extract = search.extract_parse(data.get("extract") or {}, reserved=(*THREAD_FIELDS, "extracted", "ttl"))
        except Invalid as exc:
            raise ValidationError({exc.field: exc.reason}) from None
        threads, total = selectors.thread_search(
            owner=request.user,
            metadata=data.get("metadata"),
            ids=data.get("ids"),
            status=data.get("status"),
            values=_values_filter(request, data),
            sort_by=data.get("sort_by") or "updated_at",
            sort_order=data.get("sort_order") or "desc",
            limit=data["limit"],
            offset=data["offset"],
        )
        page = _within_budget(
            (thread_payload(t, select=data.get("select"), in_list=True, extract=extract) for t in threads),
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
        count = selectors.thread_filter(
            owner=request.user,
            metadata=data.get("metadata"),
            status=data.get("status"),
            values=_values_filter(request, data),
        ).count()
        return Response(count)


class ThreadDetailView(APIView):
    """GET, PATCH and DELETE /threads/{thread_id}."""

    class PatchSerializer(serializers.Serializer):
        metadata = StrictDictField()
        ttl = TTLField()

    def get(self, request, thread_id: str):
        thread = owned_thread(request, thread_id)
        payload = thread_payload(thread)
        # ?include=ttl adds the Platform's ttl object, when the thread has a TTL.
        include = {part.strip() for part in request.query_params.get("include", "").split(",")}
        if "ttl" in include and (info := ttl_info(thread)) is not None:
            payload["ttl"] = info
        return Response(payload)

    def patch(self, request, thread_id: str):
        thread = owned_thread(request, thread_id)
        serializer = self.PatchSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        # PATCH merges, so the merged object is what must fit the limit.
        metadata_size_check({**thread.metadata, **(serializer.validated_data.get("metadata") or {})})
        # The answer carries the thread's values: pass the mode gate before writing.
        state_accessor(thread.assistant_id).head_tuple(thread.thread_id)
        thread = services.thread_update(
            thread=thread,
            metadata=serializer.validated_data.get("metadata") or {},
            ttl=serializer.validated_data.get("ttl"),
        )
        if request.headers.get("Prefer") == "return=minimal":
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(thread_payload(thread))

    def delete(self, request, thread_id: str):
        thread_delete_cancelling_runs(thread=owned_thread(request, thread_id), by=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ThreadCopyView(APIView):
    """POST /threads/{thread_id}/copy: a new thread with a copy of every checkpoint."""

    def post(self, request, thread_id: str):
        thread = owned_thread(request, thread_id)
        # A process that must not read the thread does not copy it either (409, nothing written).
        state_accessor(thread.assistant_id).head_tuple(thread.thread_id)
        copy = services.thread_copy(thread=thread)
        return Response(thread_payload(copy))
