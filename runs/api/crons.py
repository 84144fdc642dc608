"""Cron routes (LangGraph Platform compatible): create (on a thread or stateless), search, count, get, patch, delete.

A create or patch body is the cron's own fields plus a run request, which is
checked by the run routes' serializer, so a cron can only store a run the
run routes would accept.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from core.access import authorize
from core.drf import (
    SortedPageSerializer,
    StrictCharField,
    StrictDictField,
    given,
    page_response,
    select_field,
    sorted_page_args,
    validated_body,
)
from core.payloads import fields_of
from runs import cron_selectors as selectors
from runs.assistant_selectors import is_uuid
from runs.models import Cron
from runs.schemas import RunCreateSerializer
from runs.services import crons as services
from threads.api_common import owned_thread, validate_thread_id

# The run request fields a cron may carry (resume points and per-request
# connection options make no sense for a schedule).
CRON_RUN_FIELDS = (
    "assistant_id",
    "input",
    "metadata",
    "config",
    "context",
    "webhook",
    "after_seconds",
    "interrupt_before",
    "interrupt_after",
    "multitask_strategy",
    "stream_mode",
    "stream_subgraphs",
    "stream_resumable",
    "durability",
    "checkpoint_during",
    "feedback_keys",
    "langsmith_tracer",
)
CRON_PAYLOAD_FIELDS = (
    "cron_id",
    "assistant_id",
    "thread_id",
    "on_run_completed",
    "end_time",
    "schedule",
    "timezone",
    "created_at",
    "updated_at",
    "user_id",
    "payload",
    "next_run_date",
    "metadata",
    "enabled",
)


def cron_payload(cron: Cron) -> dict[str, Any]:
    """Return the SDK's ``Cron`` object."""
    return {
        **fields_of(cron, "cron_id", "assistant_id", "thread_id", "schedule"),
        "timezone": cron.timezone or None,
        "end_time": cron.end_time.isoformat() if cron.end_time else None,
        "payload": cron.payload,
        "user_id": str(cron.owner_id),
        "next_run_date": cron.next_run_date.isoformat() if cron.next_run_date else None,
        "last_run_date": cron.last_run_date.isoformat() if cron.last_run_date else None,
        "metadata": cron.metadata,
        "enabled": cron.enabled,
        "on_run_completed": cron.on_run_completed or None,
        "created_at": cron.created_at.isoformat(),
        "updated_at": cron.updated_at.isoformat(),
    }


class CronFieldsSerializer(serializers.Serializer):
    """The cron's own fields (the rest of the body is its run request)."""

    schedule = StrictCharField(max_length=256)
    timezone = StrictCharField(max_length=64, required=False, allow_null=True, allow_blank=True)
    end_time = serializers.DateTimeField(required=False, allow_null=True)
    enabled = serializers.BooleanField(required=False, allow_null=True)
    on_run_completed = serializers.ChoiceField(choices=["delete", "keep"], required=False, allow_null=True)


class CronPatchFieldsSerializer(CronFieldsSerializer):
    schedule = StrictCharField(max_length=256, required=False)


def _split(body: Any, *, cron_fields: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a body into (cron fields, run request); unknown keys are 422, each named."""
    if not isinstance(body, dict):
        raise ValidationError({"non_field_errors": ["expected a JSON object"]})
    unknown = sorted(set(body) - set(cron_fields) - set(CRON_RUN_FIELDS))
    if unknown:
        raise ValidationError({name: "unknown cron option" for name in unknown})
    return {k: v for k, v in body.items() if k in cron_fields}, {k: v for k, v in body.items() if k in CRON_RUN_FIELDS}


def _run_request(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Validate a cron's run request as the run routes do; return (payload to store, metadata)."""
    serializer = RunCreateSerializer(data=data)
    serializer.is_valid(raise_exception=True)
    validated = dict(serializer.validated_data)
    metadata = validated.pop("metadata", None)
    return {k: v for k, v in validated.items() if v is not None}, metadata


class _CronCreate(APIView):
    cron_fields: tuple[str, ...] = ()

    def _create(self, request, thread_id: str | None):
        cron_part, run_part = _split(request.data, cron_fields=self.cron_fields)
        fields = CronFieldsSerializer(data=cron_part)
        fields.is_valid(raise_exception=True)
        payload, metadata = _run_request(run_part)
        data = fields.validated_data
        # Custom auth's crons.create handler sees the request and may add metadata, which is stored.
        value = {
            "payload": payload,
            "schedule": data["schedule"],
            "thread_id": thread_id,
            "end_time": data.get("end_time"),
            "metadata": dict(metadata or {}),
        }
        authorize(request.user, resource="crons", action="create", value=value)  # refused: 403 before a 404
        metadata = value["metadata"]
        cron = services.cron_create(
            owner=request.user,
            thread=owned_thread(request, thread_id) if thread_id is not None else None,
            payload=payload,
            schedule=data["schedule"],
            zone=data.get("timezone") or "",
            end_time=data.get("end_time"),
            enabled=data.get("enabled") is not False,
            on_run_completed=data.get("on_run_completed"),
            metadata=metadata,
        )
        return Response(cron_payload(cron))


class ThreadCronCreateView(_CronCreate):
    """POST /threads/{thread_id}/runs/crons: a cron that runs on this thread."""

    cron_fields = ("schedule", "timezone", "end_time", "enabled")
    InputSerializer = CronFieldsSerializer

    def post(self, request, thread_id: str):
        validate_thread_id(thread_id)
        return self._create(request, thread_id)


class CronCreateView(_CronCreate):
    """POST /runs/crons: a stateless cron, a new thread per firing (``on_run_completed``: delete | keep)."""

    cron_fields = services.CRON_FIELDS
    InputSerializer = CronFieldsSerializer

    def post(self, request):
        return self._create(request, None)


# The fields both /runs/crons/search and /runs/crons/count filter by (search adds ``enabled``).
CRON_FILTERS = ("assistant_id", "thread_id", "metadata")


class CronFilterSerializer(serializers.Serializer):
    assistant_id = StrictCharField(required=False, allow_null=True)
    thread_id = StrictCharField(required=False, allow_null=True)
    metadata = StrictDictField()


class CronSearchView(APIView):
    """POST /runs/crons/search: the caller's crons, filtered, sorted and paged."""

    class InputSerializer(CronFilterSerializer, SortedPageSerializer):
        enabled = serializers.BooleanField(required=False, allow_null=True)
        sort_by = serializers.ChoiceField(choices=selectors.CRON_SORT_FIELDS, required=False, allow_null=True)
        select = select_field(CRON_PAYLOAD_FIELDS)

    def post(self, request):
        data = validated_body(self.InputSerializer, request)
        found, total = selectors.cron_search(
            owner=request.user,
            **given(data, (*CRON_FILTERS, "enabled")),
            **sorted_page_args(data, sort_by="created_at"),
        )
        return page_response(
            [cron_payload(c) for c in found], select=data.get("select"), total=total, offset=data["offset"]
        )


class CronCountView(APIView):
    """POST /runs/crons/count."""

    InputSerializer = CronFilterSerializer

    def post(self, request):
        data = validated_body(CronFilterSerializer, request)
        return Response(selectors.cron_filter(owner=request.user, **given(data, CRON_FILTERS)).count())


def _cron(request, cron_id: str) -> Cron:
    if not is_uuid(cron_id):
        raise ValidationError({"cron_id": "Invalid cron ID: must be a UUID"})
    return selectors.cron_get(owner=request.user, cron_id=cron_id)


class CronDetailView(APIView):
    """GET, PATCH and DELETE /runs/crons/{cron_id}."""

    PatchSerializer = CronPatchFieldsSerializer

    def get(self, request, cron_id: str):
        return Response(cron_payload(_cron(request, cron_id)))

    def patch(self, request, cron_id: str):
        cron = _cron(request, cron_id)
        cron_part, run_part = _split(request.data, cron_fields=services.CRON_FIELDS)
        if "assistant_id" in run_part:
            raise ValidationError({"assistant_id": "a cron's assistant cannot be changed; create another cron"})
        if not cron_part and not run_part:
            raise ValidationError({"non_field_errors": ["no fields to update"]})
        fields = CronPatchFieldsSerializer(data=cron_part, partial=True)
        fields.is_valid(raise_exception=True)
        changes = dict(fields.validated_data)
        payload = None
        if set(run_part) - {"metadata"}:
            payload, metadata = _run_request({**cron.payload, **run_part})
            changes["metadata"] = metadata
        elif "metadata" in run_part:
            changes["metadata"] = _run_request({"assistant_id": cron.assistant_id, **run_part})[1]
        updated = services.cron_update(cron=cron, changes=changes, payload=payload)
        return Response(cron_payload(updated))

    def delete(self, request, cron_id: str):
        services.cron_delete(cron=_cron(request, cron_id))
        return Response(status=status.HTTP_204_NO_CONTENT)
