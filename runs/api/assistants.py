"""Assistant routes (LangGraph Platform compatible): CRUD, search, versions, graph and schemas.

Thin: each view validates, calls one selector or service
(``runs.assistant_selectors``, ``runs.services.assistants``) and serializes.
"""

from __future__ import annotations

import logging
from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from checkpoints.accessor import state_accessor
from checkpoints.graphs import INTROSPECT
from checkpoints.modes import process_mode
from core.access import authorize
from core.drf import (
    OFFSET_MAX,
    PageSerializer,
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
from runs import assistant_selectors as selectors
from runs.models import Assistant, AssistantVersion
from runs.schemas import RunCreateSerializer
from runs.services import assistants as services

logger = logging.getLogger(__name__)

ASSISTANT_SORT_FIELDS = selectors.ASSISTANT_SORT_FIELDS
ASSISTANT_FIELDS = (
    "assistant_id",
    "graph_id",
    "name",
    "description",
    "config",
    "context",
    "created_at",
    "updated_at",
    "metadata",
    "version",
)


def assistant_payload(assistant: Assistant) -> dict[str, Any]:
    """Return the SDK's ``Assistant`` object."""
    return {
        **fields_of(assistant, "assistant_id", "graph_id", "config", "context", "metadata", "name"),
        "description": assistant.description or None,
        "version": assistant.version,
        "created_at": assistant.created_at.isoformat(),
        "updated_at": assistant.updated_at.isoformat(),
    }


def version_payload(version: AssistantVersion) -> dict[str, Any]:
    """Return one saved version (the SDK's ``AssistantVersion``)."""
    return {
        **fields_of(version, "assistant_id", "version", "graph_id", "config", "context", "metadata", "name"),
        "description": version.description or None,
        "created_at": version.created_at.isoformat(),
    }


class _Object(serializers.JSONField):
    """A JSON object; ``null`` is accepted as not given."""

    default_error_messages = {"invalid": "must be an object"}

    def __init__(self, **kwargs):
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if data is not None and not isinstance(data, dict):
            self.fail("invalid")
        return data


class AssistantFieldsSerializer(serializers.Serializer):
    """The versioned fields, checked as a run's are: an assistant's config and context end up in runs."""

    graph_id = StrictCharField(max_length=128)
    config = _Object()
    context = _Object()  # type: ignore[assignment]  # a declared field, not Serializer.context (see runs.schemas)
    metadata = _Object()
    name = StrictCharField(max_length=256, required=False, allow_null=True, allow_blank=True)
    description = StrictCharField(required=False, allow_null=True, allow_blank=True)

    def validate_config(self, value):
        return None if value is None else RunCreateSerializer.validate_config(self, value)

    def validate_metadata(self, value):
        return None if value is None else RunCreateSerializer.validate_metadata(self, value)


class AssistantCreateView(APIView):
    """POST /assistants: create an assistant of a registered graph (``if_exists``: raise | do_nothing)."""

    class InputSerializer(AssistantFieldsSerializer):
        assistant_id = StrictCharField(required=False, allow_null=True)
        if_exists = serializers.ChoiceField(choices=["raise", "do_nothing"], required=False, allow_null=True)

        def validate_assistant_id(self, value):
            if value is not None and not selectors.is_uuid(value):
                raise serializers.ValidationError("Invalid assistant ID: must be a UUID")
            return value

    def post(self, request):
        serializer = self.InputSerializer(data=request.data if request.data is not None else {})
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        # Custom auth's assistants.create handler sees the request and may add metadata, which is stored.
        value = {
            **{k: data.get(k) for k in ("assistant_id", "graph_id", "config", "context", "name", "description")},
            "metadata": dict(data.get("metadata") or {}),
            "if_exists": data.get("if_exists") or "raise",
        }
        authorize(request.user, resource="assistants", action="create", value=value)
        assistant = services.assistant_create(
            owner=request.user,
            graph_id=data["graph_id"],
            assistant_id=data.get("assistant_id"),
            config=data.get("config"),
            context=data.get("context"),
            metadata=value["metadata"],
            if_exists=data.get("if_exists") or "raise",
            name=data.get("name"),
            description=data.get("description") or "",
        )
        return Response(assistant_payload(assistant))


# The fields both /assistants/search and /assistants/count filter by.
ASSISTANT_FILTERS = ("metadata", "graph_id", "name")


class AssistantFilterSerializer(serializers.Serializer):
    metadata = StrictDictField()
    graph_id = StrictCharField(required=False, allow_null=True)
    name = StrictCharField(required=False, allow_null=True)


class AssistantSearchView(APIView):
    """POST /assistants/search: the caller's and the system assistants, sorted and paged."""

    class InputSerializer(AssistantFilterSerializer, SortedPageSerializer):
        sort_by = serializers.ChoiceField(choices=ASSISTANT_SORT_FIELDS, required=False, allow_null=True)
        select = select_field(ASSISTANT_FIELDS)

    def post(self, request):
        data = validated_body(self.InputSerializer, request)
        found, total = selectors.assistant_search(
            owner=request.user, **given(data, ASSISTANT_FILTERS), **sorted_page_args(data, sort_by="created_at")
        )
        return page_response(
            [assistant_payload(a) for a in found], select=data.get("select"), total=total, offset=data["offset"]
        )


class AssistantCountView(APIView):
    """POST /assistants/count."""

    InputSerializer = AssistantFilterSerializer

    def post(self, request):
        data = validated_body(AssistantFilterSerializer, request)
        return Response(selectors.assistant_filter(owner=request.user, **given(data, ASSISTANT_FILTERS)).count())


def _flag(request, name: str) -> bool:
    raw = request.query_params.get(name, "false").lower()
    if raw not in {"0", "1", "true", "false"}:
        raise ValidationError({name: "must be true/false or 1/0"})
    return raw in {"1", "true"}


class AssistantPatchSerializer(AssistantFieldsSerializer):
    """PATCH /assistants/{assistant_id}: every field optional (a new version from the current one)."""

    graph_id = StrictCharField(max_length=128, required=False, allow_null=True)


class AssistantDetailView(APIView):
    """GET, PATCH (a new version) and DELETE (``?delete_threads``) /assistants/{assistant_id}.

    GET also takes a graph name (its system assistant).
    """

    PatchSerializer = AssistantPatchSerializer

    def get(self, request, assistant_id: str):
        return Response(assistant_payload(selectors.assistant_get(owner=request.user, assistant_id=assistant_id)))

    def patch(self, request, assistant_id: str):
        assistant = selectors.assistant_get(owner=request.user, assistant_id=assistant_id)
        serializer = self.PatchSerializer(data=request.data if request.data is not None else {})
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        updated = services.assistant_update(
            assistant=assistant,
            graph_id=data.get("graph_id"),
            config=data.get("config"),
            context=data.get("context"),
            metadata=data.get("metadata"),
            name=data.get("name") or None,
            description=data.get("description"),
        )
        return Response(assistant_payload(updated))

    def delete(self, request, assistant_id: str):
        delete_threads = _flag(request, "delete_threads")
        assistant = selectors.assistant_get(owner=request.user, assistant_id=assistant_id)
        services.assistant_delete(assistant=assistant, delete_threads=delete_threads)
        return Response(status=status.HTTP_204_NO_CONTENT)


class AssistantVersionsView(APIView):
    """POST /assistants/{assistant_id}/versions: saved versions, newest first."""

    class InputSerializer(PageSerializer):
        metadata = StrictDictField()

    def post(self, request, assistant_id: str):
        assistant = selectors.assistant_get(owner=request.user, assistant_id=assistant_id)
        serializer = self.InputSerializer(data=request.data or {})
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        versions = selectors.assistant_versions(
            assistant=assistant, metadata=data.get("metadata"), limit=data["limit"], offset=data["offset"]
        )
        return Response([version_payload(v) for v in versions])


class AssistantLatestView(APIView):
    """POST /assistants/{assistant_id}/latest: put a saved version in force (JSON ``{version}`` or ``?version=``)."""

    class InputSerializer(serializers.Serializer):
        version = serializers.IntegerField(min_value=1, max_value=OFFSET_MAX)

    def post(self, request, assistant_id: str):
        body = request.data if isinstance(request.data, dict) else {}
        source = body if body.get("version") is not None else {"version": request.query_params.get("version")}
        serializer = self.InputSerializer(data=source)
        serializer.is_valid(raise_exception=True)
        assistant = selectors.assistant_get(owner=request.user, assistant_id=assistant_id)
        updated = services.assistant_set_latest(assistant=assistant, version=serializer.validated_data["version"])
        return Response(assistant_payload(updated))


def _xray(request) -> bool | int:
    """``?xray``: true/false, or a positive depth (the Platform's rule); anything else is 422."""
    raw = request.query_params.get("xray")
    if raw is None or raw.lower() in ("false", "0"):
        return False
    if raw.lower() == "true":
        return True
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    raise ValidationError({"xray": "must be true, false or a positive depth"})


def _graph(request, assistant_id: str):
    assistant = selectors.assistant_get(owner=request.user, assistant_id=assistant_id)
    # A factory graph is built as for introspection (its ServerRuntime says assistants.read).
    return assistant, state_accessor(assistant.graph_id, access=INTROSPECT).graph


class AssistantGraphView(APIView):
    """GET /assistants/{assistant_id}/graph: nodes and edges (``?xray``: subgraphs drawn in)."""

    def get(self, request, assistant_id: str):
        xray = _xray(request)
        _, graph = _graph(request, assistant_id)
        return Response(graph.get_graph(xray=xray).to_json())


# (graph name, schema) pairs whose failure was logged: the SDK asks for a graph's schemas again and again.
_logged_failures: set[tuple[str, str]] = set()


def _schema(graph, kind: str, build) -> dict[str, Any] | None:
    """Return a JSON schema, or None when the graph's types cannot be expressed as one (logged once a graph)."""
    try:
        return build()
    except Exception as exc:  # pydantic rejects some user types; a missing schema is not an outage
        if (graph.name, kind) not in _logged_failures:
            _logged_failures.add((graph.name, kind))
            logger.warning(
                "graph %s: its %s cannot be expressed as JSON schema and is served as null (%s)",
                graph.name,
                kind,
                str(exc).splitlines()[0],
                exc_info=True,
            )
        return None


def graph_schemas(graph) -> dict[str, Any]:
    return {
        "input_schema": _schema(graph, "input_schema", graph.get_input_jsonschema),
        "output_schema": _schema(graph, "output_schema", graph.get_output_jsonschema),
        "state_schema": _schema(graph, "state_schema", graph.get_output_jsonschema),
        "config_schema": _schema(graph, "config_schema", graph.get_config_jsonschema),
        "context_schema": _schema(graph, "context_schema", graph.get_context_jsonschema),
    }


class AssistantSchemasView(APIView):
    """GET /assistants/{assistant_id}/schemas: JSON schemas of input, output, state, config, context."""

    def get(self, request, assistant_id: str):
        assistant, graph = _graph(request, assistant_id)
        mode, _ = process_mode()
        return Response({"graph_id": assistant.graph_id, **graph_schemas(graph), "channel_mode": mode})


class AssistantSubgraphsView(APIView):
    """GET /assistants/{assistant_id}/subgraphs[/{namespace}]: namespace → schemas (``?recurse``)."""

    def get(self, request, assistant_id: str, namespace: str | None = None):
        recurse = _flag(request, "recurse")
        _, graph = _graph(request, assistant_id)
        return Response(
            {ns: graph_schemas(sub) for ns, sub in graph.get_subgraphs(namespace=namespace, recurse=recurse)}
        )


@extend_schema_view(get=extend_schema(operation_id="assistants_subgraphs_namespace_retrieve"))
class AssistantSubgraphsNamespaceView(AssistantSubgraphsView):
    """GET /assistants/{assistant_id}/subgraphs/{namespace}: that subgraph (and, with ``?recurse``, below it)."""
