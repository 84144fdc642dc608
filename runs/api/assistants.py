"""Assistants (read side): one system assistant per registered graph."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from checkpoints.accessor import state_accessor
from checkpoints.graphs import GraphSpec, registered_graphs, resolve_graph
from checkpoints.modes import process_mode
from deerflow_site.db import json_contains
from deerflow_site.drf import OFFSET_MAX, StrictCharField, StrictDictField, set_pagination_headers

logger = logging.getLogger(__name__)

# System assistants exist from process start; their rows are the settings.
_STARTED_AT = datetime.now(UTC).isoformat()
ASSISTANT_SORT_FIELDS = ("assistant_id", "created_at", "updated_at", "name", "graph_id")


def assistant_payload(spec: GraphSpec) -> dict[str, Any]:
    """Return the SDK's ``Assistant`` object for a registered graph."""
    return {
        "assistant_id": spec.assistant_id,
        "graph_id": spec.graph_id,
        "config": {},
        "context": {},
        "metadata": {"created_by": "system"},
        "name": spec.graph_id,
        "description": None,
        "version": 1,
        "created_at": _STARTED_AT,
        "updated_at": _STARTED_AT,
    }


class AssistantFilterSerializer(serializers.Serializer):
    metadata = StrictDictField()
    graph_id = StrictCharField(required=False, allow_null=True)
    name = StrictCharField(required=False, allow_null=True)


def _matching(data: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for spec in registered_graphs().values():
        payload = assistant_payload(spec)
        if data.get("graph_id") and spec.graph_id != data["graph_id"]:
            continue
        if data.get("name") and data["name"].lower() not in payload["name"].lower():
            continue
        if data.get("metadata") and not json_contains(payload["metadata"], data["metadata"]):
            continue
        out.append(payload)
    return out


class AssistantSearchView(APIView):
    """POST /assistants/search."""

    class InputSerializer(AssistantFilterSerializer):
        limit = serializers.IntegerField(min_value=1, max_value=1000, default=10)
        offset = serializers.IntegerField(min_value=0, max_value=OFFSET_MAX, default=0)
        sort_by = serializers.ChoiceField(choices=ASSISTANT_SORT_FIELDS, required=False, allow_null=True)
        sort_order = serializers.ChoiceField(choices=["asc", "desc"], required=False, allow_null=True)
        select = serializers.ListField(child=StrictCharField(), required=False, allow_null=True)

    def post(self, request):
        serializer = self.InputSerializer(data=request.data or {})
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        found = _matching(data)
        sort_by = data.get("sort_by") or "created_at"
        found.sort(key=lambda a: (a[sort_by], a["assistant_id"]), reverse=(data.get("sort_order") or "desc") == "desc")
        page = found[data["offset"] : data["offset"] + data["limit"]]
        if select := data.get("select"):
            page = [{k: v for k, v in a.items() if k in select} for a in page]
        return set_pagination_headers(Response(page), total=len(found), offset=data["offset"], count=len(page))


class AssistantCountView(APIView):
    """POST /assistants/count."""

    def post(self, request):
        serializer = AssistantFilterSerializer(data=request.data or {})
        serializer.is_valid(raise_exception=True)
        return Response(len(_matching(serializer.validated_data)))


class AssistantDetailView(APIView):
    """GET /assistants/{assistant_id} (an assistant id or a graph name)."""

    def get(self, request, assistant_id: str):
        return Response(assistant_payload(resolve_graph(assistant_id)))


class AssistantGraphView(APIView):
    """GET /assistants/{assistant_id}/graph: nodes and edges (``?xray``)."""

    def get(self, request, assistant_id: str):
        spec = resolve_graph(assistant_id)
        raw = request.query_params.get("xray", "false").lower()
        xray: bool | int = raw in {"1", "true"} or (int(raw) if raw.isdigit() else False)
        graph = state_accessor(spec.graph_id).graph
        return Response(graph.get_graph(xray=xray).to_json())


def _schema(build) -> dict[str, Any] | None:
    """Return a JSON schema, or None when the graph's types cannot be expressed as one."""
    try:
        return build()
    except Exception:  # pydantic rejects some user types; a missing schema is not an outage
        logger.warning("JSON schema generation failed", exc_info=True)
        return None


class AssistantSchemasView(APIView):
    """GET /assistants/{assistant_id}/schemas: JSON schemas of input, output, state, config, context."""

    def get(self, request, assistant_id: str):
        spec = resolve_graph(assistant_id)
        graph = state_accessor(spec.graph_id).graph
        mode, _ = process_mode()
        return Response(
            {
                "graph_id": spec.graph_id,
                "input_schema": _schema(graph.get_input_jsonschema),
                "output_schema": _schema(graph.get_output_jsonschema),
                "state_schema": _schema(graph.get_output_jsonschema),
                "config_schema": _schema(graph.get_config_jsonschema),
                "context_schema": _schema(graph.get_context_jsonschema),
                "channel_mode": mode,
            }
        )
