"""State and history routes: every read goes through the checkpoint state accessor."""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import chain
from typing import Any

from asgiref.sync import async_to_sync
from django.http import HttpResponse, StreamingHttpResponse
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from checkpoints.accessor import SPECIAL_AS_NODES, state_accessor
from checkpoints.serialization import checkpoint_ref
from core.bridge_runtime import get_bridge
from core.drf import StrictCharField, StrictDictField, fits_sql_integer
from core.errors import Unavailable
from core.validation import messages_problems
from threads import services
from threads.api_common import owned_thread
from threads.stream_follow import publish_thread_events

HISTORY_MAX_LIMIT = 1000
# A history response larger than this is streamed in pieces instead of joined
# (limit 100 on a 200-turn full-mode thread is ~27 MB of JSON).
STREAM_ABOVE_BYTES = 1 << 20
AS_NODE_PATTERN = re.compile(r"^(?!__)[A-Za-z0-9_.-]{1,128}$")
# Checkpoint metadata filter keys: the SQLite saver's own rule minus ".",
# which SQLite reads as a nested path and PostgreSQL as part of the key.
HISTORY_FILTER_KEY_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


def checked_as_node(value: str | None) -> str | None:
    """Return ``as_node`` if it names a node (or LangGraph's ``__copy__``/``__input__``); else a 422."""
    if value is not None and value not in SPECIAL_AS_NODES and not AS_NODE_PATTERN.match(value):
        raise serializers.ValidationError(
            "must be a node name: letters, digits, '_', '-' or '.', not starting with '__'"
        )
    return value


def checked_state_values(value: Any) -> dict[str, Any] | None:
    """Return state ``values`` (an object, or null) with well-formed messages; else a 422."""
    if value is not None and not isinstance(value, dict):
        raise serializers.ValidationError("must be an object of channel values, or null")
    if not value or value.get("messages") is None:
        return value
    # Name each message LangChain cannot take; the accessor stores the rest as add_messages would.
    if problems := messages_problems(value["messages"]):
        raise serializers.ValidationError(problems)
    return value


def checkpoint_id_from(value: Any, *, field: str) -> str | None:
    """Accept a checkpoint as an id string, a Checkpoint dict or ``{"configurable": {...}}``.

    The Python SDK sends the first two, the JS SDK the third; the LangGraph
    Platform's dev server answers 500/422 to two of them (see README).
    """
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        configurable = value.get("configurable")
        inner = configurable if isinstance(configurable, dict) else value
        checkpoint_id = inner.get("checkpoint_id")
        if checkpoint_id is None or isinstance(checkpoint_id, str):
            return checkpoint_id or None
    raise ValidationError(
        {field: 'must be a checkpoint id, a checkpoint object or {"configurable": {"checkpoint_id": ...}}'}
    )


def checkpoint_ns_from(value: Any) -> str:
    if isinstance(value, dict):
        configurable = value.get("configurable")
        inner = configurable if isinstance(configurable, dict) else value
        ns = inner.get("checkpoint_ns") or ""
        if not isinstance(ns, str):
            raise ValidationError({"checkpoint.checkpoint_ns": "must be a string"})
        return ns
    return ""


def _subgraphs(request) -> bool:
    return request.query_params.get("subgraphs", "").lower() in {"1", "true"}


def json_response(pieces: Iterator[bytes]) -> HttpResponse | StreamingHttpResponse:
    """Join small JSON bodies; stream the rest of a large one as it is encoded."""
    head, size = [], 0
    for piece in pieces:
        head.append(piece)
        size += len(piece)
        if size > STREAM_ABOVE_BYTES:
            return StreamingHttpResponse(chain(head, pieces), content_type="application/json")
    return HttpResponse(b"".join(head), content_type="application/json")


def _announce(thread_id: str, logged: list[dict]) -> None:
    """Hand logged events to live followers; where no bridge runs, followers read them on their next idle re-read."""
    try:
        bridge = get_bridge()
    except Unavailable:
        return
    async_to_sync(publish_thread_events)(bridge, thread_id, logged)


class ThreadStateView(APIView):
    """GET /threads/{id}/state[/{checkpoint_id}]: the materialized state; POST: update it."""

    class UpdateSerializer(serializers.Serializer):
        values = serializers.JSONField(required=False, allow_null=True)
        as_node = StrictCharField(required=False, allow_null=True, max_length=128)
        checkpoint = serializers.JSONField(required=False, allow_null=True)
        checkpoint_id = StrictCharField(required=False, allow_null=True)

        def validate_as_node(self, value):
            return checked_as_node(value)

        def validate_values(self, value):
            return checked_state_values(value)

    def post(self, request, thread_id: str, checkpoint_id: str | None = None):
        thread = owned_thread(request, thread_id)
        serializer = self.UpdateSerializer(data=request.data or {})
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        target = data.get("checkpoint_id") or checkpoint_id_from(data.get("checkpoint"), field="checkpoint")
        config = services.thread_state_update(
            thread=thread, values=data.get("values"), as_node=data.get("as_node"), checkpoint_id=target
        )
        logged = services.thread_log_state_update(
            thread_id=thread.thread_id, config=config, values=data.get("values"), as_node=data.get("as_node")
        )
        _announce(thread.thread_id, logged)
        return Response({"checkpoint": checkpoint_ref(config)})

    def get(self, request, thread_id: str, checkpoint_id: str | None = None):
        thread = owned_thread(request, thread_id)
        encoded = state_accessor(thread.assistant_id).encoded_state(
            thread.thread_id, checkpoint_id=checkpoint_id, subgraphs=_subgraphs(request)
        )
        return HttpResponse(encoded, content_type="application/json")


class ThreadStateAtCheckpointView(APIView):
    """POST /threads/{id}/state/checkpoint: the state at a checkpoint object."""

    class InputSerializer(serializers.Serializer):
        checkpoint = serializers.JSONField()
        subgraphs = serializers.BooleanField(default=False)

    def post(self, request, thread_id: str):
        thread = owned_thread(request, thread_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        checkpoint = data["checkpoint"]
        encoded = state_accessor(thread.assistant_id).encoded_state(
            thread.thread_id,
            checkpoint_id=checkpoint_id_from(checkpoint, field="checkpoint"),
            checkpoint_ns=checkpoint_ns_from(checkpoint),
            subgraphs=data["subgraphs"],
        )
        return HttpResponse(encoded, content_type="application/json")


class HistoryInputSerializer(serializers.Serializer):
    limit = serializers.IntegerField(min_value=1, max_value=HISTORY_MAX_LIMIT, default=10)
    before = serializers.JSONField(required=False, allow_null=True)
    metadata = StrictDictField()
    checkpoint = serializers.JSONField(required=False, allow_null=True)
    select = serializers.ListField(child=StrictCharField(), required=False, allow_null=True)

    def validate_metadata(self, value):
        for key, condition in (value or {}).items():
            if not HISTORY_FILTER_KEY_PATTERN.match(key):
                raise serializers.ValidationError(f"key {key!r} may contain only letters, digits, '_' and '-'")
            if not fits_sql_integer(condition):
                raise serializers.ValidationError(f"the value for {key!r} is out of the 64-bit integer range")
        return value


class ThreadHistoryView(APIView):
    """POST (and GET) /threads/{id}/history: full states, newest first.

    ``before`` is exclusive, as in LangGraph's ``get_state_history``: passing
    the last entry of a page returns the next page with no overlap.
    """

    def _history(self, request, thread_id: str, data: dict[str, Any]) -> HttpResponse | StreamingHttpResponse:
        thread = owned_thread(request, thread_id)
        before = checkpoint_id_from(data.get("before"), field="before")
        checkpoint_ns = checkpoint_ns_from(data.get("checkpoint"))
        pieces = state_accessor(thread.assistant_id).encoded_history(
            thread.thread_id,
            limit=data["limit"],
            before=before,
            metadata_filter=data.get("metadata") or None,
            checkpoint_ns=checkpoint_ns,
            select=data.get("select"),
        )
        return json_response(pieces)

    def post(self, request, thread_id: str):
        serializer = HistoryInputSerializer(data=request.data or {})
        serializer.is_valid(raise_exception=True)
        return self._history(request, thread_id, serializer.validated_data)

    def get(self, request, thread_id: str):
        serializer = HistoryInputSerializer(data=request.query_params.dict())
        serializer.is_valid(raise_exception=True)
        return self._history(request, thread_id, serializer.validated_data)
