"""Store routes (LangGraph Platform compatible): put, get, delete, search items; list namespaces.

Plain synchronous DRF views over the process's sync Store, like the thread
routes: each request is one or two short queries, touches neither the async
savers nor the stream bridge (the boundary DESIGN §6 draws), and shares the
auth and error handling of every other DRF view. Every view passes the
caller's id to the store selectors/services, which confine it to its own
namespace root; the client only ever sees the namespaces it wrote. With
custom auth, the project's store handler sees each request first and may
refuse it or rewrite its namespace (inside that root).
"""

from __future__ import annotations

from django.http import JsonResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from checkpoints.runtime import store_index
from core.access import AccessDenied, authorize
from core.drf import OFFSET_MAX, StrictCharField
from core.errors import Invalid
from store import selectors, services
from store.selectors import (
    store_item_payload,
    store_namespace_check,
    store_ttl_check,
    store_user_id,
)

REFRESH_UNSUPPORTED = "refreshing TTLs on read is not supported by this server (a TTL counts from the last write)"


@extend_schema_field({"type": "array", "items": {"type": "string"}})
class NamespaceField(serializers.Field):
    """A namespace as the client writes it: a list of labels (rules in store_selectors)."""

    def __init__(self, *, allow_empty: bool = False, **kwargs) -> None:
        self.allow_empty = allow_empty
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        try:
            return store_namespace_check(data, field=self.field_name, allow_empty=self.allow_empty)
        except Invalid as exc:
            raise ValidationError(exc.reason) from None

    def to_representation(self, value):
        return list(value)


class StrictIntegerField(serializers.IntegerField):
    """An integer that refuses strings, floats and booleans instead of coercing them."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


@extend_schema_field({"type": "number", "nullable": True})
class TTLField(serializers.Field):
    """Minutes until expiry: a positive number (fractions allowed), or null for none."""

    def to_internal_value(self, data):
        try:
            return store_ttl_check(data)
        except Invalid as exc:
            raise ValidationError(exc.reason) from None


@extend_schema_field({"oneOf": [{"type": "boolean", "enum": [False]}, {"type": "array", "items": {"type": "string"}}]})
class IndexField(serializers.Field):
    """``false``, null, or the list of value paths to index (the SDK's ``index``)."""

    def to_internal_value(self, data):
        if data is False:
            return False
        if isinstance(data, list) and all(isinstance(path, str) and path for path in data):
            return data
        raise ValidationError("must be false, null or a list of field paths")


def _authorized(request, action: str, value: dict, *, allow_empty: bool = False) -> tuple[str, ...]:
    """Ask custom auth's store handler about ``value``; return the namespace it leaves (it may rewrite it).

    As on the Platform, a store handler validates or rewrites
    ``value["namespace"]`` and returns no filter; whatever it writes is
    checked as a client's namespace, and stays under the caller's root.
    """
    authorize(request.user, resource="store", action=action, value=value)
    try:
        return store_namespace_check(value.get("namespace"), allow_empty=allow_empty)
    except Invalid as exc:
        raise AccessDenied(f"The store handler left an invalid namespace: {exc.reason}", status=500) from None


def _reject_refresh(data) -> None:
    if data.get("refresh_ttl"):
        raise ValidationError({"refresh_ttl": REFRESH_UNSUPPORTED})


class StoreItemView(APIView):
    """PUT, GET and DELETE /store/items: one item of the caller's store."""

    @extend_schema_serializer(component_name="StorePutItem")
    class PutSerializer(serializers.Serializer):
        namespace = NamespaceField()
        key = StrictCharField(trim_whitespace=False)
        value = serializers.DictField(error_messages={"not_a_dict": "must be a JSON object, got {input_type}"})
        index = IndexField(required=False, allow_null=True)
        ttl = TTLField(required=False, allow_null=True)

    @extend_schema_serializer(component_name="StoreGetItem")
    class GetSerializer(serializers.Serializer):
        namespace = StrictCharField(trim_whitespace=False, allow_blank=True)
        key = StrictCharField(trim_whitespace=False)
        refresh_ttl = serializers.BooleanField(required=False, allow_null=True, default=None)

        def validate_namespace(self, value: str) -> tuple[str, ...]:
            # The query form joins labels with dots, so no label can contain one.
            labels = value.split(".") if value else []
            try:
                return store_namespace_check(labels)
            except Invalid as exc:
                raise ValidationError(exc.reason) from None

    @extend_schema_serializer(component_name="StoreDeleteItem")
    class DeleteSerializer(serializers.Serializer):
        namespace = NamespaceField()
        key = StrictCharField(trim_whitespace=False)

    @extend_schema(request=PutSerializer, responses={204: None})
    def put(self, request):
        serializer = self.PutSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        value = {k: data.get(k) for k in ("namespace", "key", "value", "index")}
        data["namespace"] = _authorized(request, "put", value)
        services.store_item_put(user_id=store_user_id(user=request.user), **data)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(parameters=[GetSerializer], responses={200: OpenApiTypes.OBJECT})
    def get(self, request):
        serializer = self.GetSerializer(data=request.query_params)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        _reject_refresh(data)
        namespace = _authorized(request, "get", {"namespace": data["namespace"], "key": data["key"]})
        item = selectors.store_item_get(user_id=store_user_id(user=request.user), namespace=namespace, key=data["key"])
        # Missing, expired and another user's items alike: null, as the Platform
        # answers (DRF would render None as an empty body).
        return JsonResponse(store_item_payload(item) if item else None, safe=False)

    @extend_schema(request=DeleteSerializer, responses={204: None})
    def delete(self, request):
        serializer = self.DeleteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        namespace = _authorized(request, "delete", {"namespace": data["namespace"], "key": data["key"]})
        services.store_item_delete(user_id=store_user_id(user=request.user), namespace=namespace, key=data["key"])
        return Response(status=status.HTTP_204_NO_CONTENT)


class StoreItemSearchView(APIView):
    """POST /store/items/search: the caller's items under a namespace prefix."""

    @extend_schema_serializer(component_name="StoreSearchItems")
    class InputSerializer(serializers.Serializer):
        namespace_prefix = NamespaceField(allow_empty=True, required=False, default=())
        filter = serializers.JSONField(required=False, allow_null=True, default=None)
        limit = StrictIntegerField(min_value=1, max_value=1000, default=10)
        offset = StrictIntegerField(min_value=0, max_value=OFFSET_MAX, default=0)
        query = StrictCharField(required=False, allow_null=True, allow_blank=True, default=None)
        refresh_ttl = serializers.BooleanField(required=False, allow_null=True, default=None)

    @extend_schema(request=InputSerializer, responses={200: OpenApiTypes.OBJECT})
    def post(self, request):
        serializer = self.InputSerializer(data=request.data or {})
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        _reject_refresh(data)
        if data["query"] and store_index() is None:
            raise ValidationError(
                {"query": "semantic search needs an embedding index (langgraph.json store.index); none is configured"}
            )
        value = {"namespace": data["namespace_prefix"], **{k: data[k] for k in ("filter", "limit", "offset", "query")}}
        items = selectors.store_item_search(
            user_id=store_user_id(user=request.user),
            namespace_prefix=_authorized(request, "search", value, allow_empty=True),
            filter=data["filter"],
            query=data["query"] or None,
            limit=data["limit"],
            offset=data["offset"],
        )
        return Response({"items": [store_item_payload(item) for item in items]})


class StoreNamespaceListView(APIView):
    """POST /store/namespaces: the caller's namespaces, as the client wrote them."""

    @extend_schema_serializer(component_name="StoreListNamespaces")
    class InputSerializer(serializers.Serializer):
        prefix = NamespaceField(allow_empty=True, required=False, allow_null=True, default=None)
        suffix = NamespaceField(allow_empty=True, required=False, allow_null=True, default=None)
        max_depth = StrictIntegerField(min_value=1, max_value=OFFSET_MAX, required=False, allow_null=True, default=None)
        limit = StrictIntegerField(min_value=1, max_value=1000, default=100)
        offset = StrictIntegerField(min_value=0, max_value=OFFSET_MAX, default=0)

    @extend_schema(request=InputSerializer, responses={200: OpenApiTypes.OBJECT})
    def post(self, request):
        serializer = self.InputSerializer(data=request.data or {})
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        value = {"namespace": data["prefix"] or (), **{k: data[k] for k in ("suffix", "max_depth", "limit", "offset")}}
        namespaces = selectors.store_namespace_list(
            user_id=store_user_id(user=request.user),
            prefix=_authorized(request, "list_namespaces", value, allow_empty=True),
            suffix=data["suffix"] or (),
            max_depth=data["max_depth"],
            limit=data["limit"],
            offset=data["offset"],
        )
        return Response({"namespaces": [list(namespace) for namespace in namespaces]})
