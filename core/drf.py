"""DRF plumbing: the error shape, parsers and pagination headers (no views here)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions, parsers, permissions, serializers, status
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from core import errors, validation


class EventStreamRenderer(JSONRenderer):
    """Let SSE routes pass content negotiation; errors before the stream are JSON."""

    media_type = "text/event-stream"
    format = "sse"


class JSONParser(parsers.JSONParser):
    """Parse a JSON body, refusing (422) what no backend can store.

    Refused with the path named: NUL and lone surrogates in any string or
    key, non-finite numbers (``NaN``, ``Infinity``, ``1e400``), nesting past
    ``limits.max_json_depth``. Once here, no view has to check them again.
    """

    def parse(self, stream, media_type=None, parser_context=None):
        encoding = (parser_context or {}).get("encoding") or "utf-8"
        try:
            text = stream.read().decode(encoding)
            return validation.json_loads(text, max_depth=validation.limits().max_json_depth)
        except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError alike
            raise exceptions.ParseError(f"JSON parse error - {exc}") from None


class PlainTextJSONParser(JSONParser):
    """Parse JSON sent as ``text/plain`` (LangGraph Studio does this)."""

    media_type = "text/plain"


class StorableURLText(permissions.BasePermission):
    """Refuse (422) path ids and query strings holding text no backend can store.

    A permission so it runs on every DRF view after authentication (an
    anonymous caller still gets 401) and before the view reads anything.
    """

    def has_permission(self, request, view) -> bool:
        validation.url_text_check(getattr(view, "kwargs", None) or {})
        validation.url_text_check(dict(request.query_params.lists()))
        return True


def _flatten(detail, prefix: str = "") -> list[str]:
    if isinstance(detail, dict):
        out: list[str] = []
        for key, value in detail.items():
            if isinstance(key, int):  # a nested many=True serializer's item: supersteps[0]
                out += _flatten(value, f"{prefix}[{key}]")
                continue
            name = key if key != "non_field_errors" else ""
            out += _flatten(value, f"{prefix}.{name}" if prefix and name else (name or prefix))
        return out
    if isinstance(detail, list):
        out = []
        for index, value in enumerate(detail):
            sub = f"{prefix}[{index}]" if isinstance(value, (dict, list)) else prefix
            out += _flatten(value, sub)
        return out
    return [f"{prefix}: {detail}" if prefix else str(detail)]


def exception_handler(exc, context):
    """Answer every error as ``{"detail": str}`` with the right 4xx.

    Validation errors are 422 (what the LangGraph Platform and FastAPI answer),
    with the per-field structure kept under ``errors``. Every layer's
    refusals are domain errors (the channel-mode gate's 409/503 included), so
    none of them can surface as a 500: one branch answers them all.
    """
    if isinstance(exc, errors.DomainError):
        return domain_error_response(exc, thread_id=(context.get("kwargs") or {}).get("thread_id"))
    if isinstance(exc, exceptions.ValidationError):
        messages = _flatten(exc.detail)
        return Response(
            {"detail": "; ".join(messages), "errors": exc.detail},
            status=status.HTTP_422_UNPROCESSABLE_ENTITY,
        )
    if isinstance(exc, RequestDataTooBig):
        return Response({"detail": validation.body_too_large()}, status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or "Not found.")
    # Imported here: settings name this module, and rest_framework.views reads
    # those settings while it is being imported.
    from rest_framework.views import exception_handler as drf_exception_handler

    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(response.data, dict) and "detail" in response.data:
        response.data = {"detail": str(response.data["detail"])}
    return response


_DOMAIN_STATUS = {
    errors.NotFound: status.HTTP_404_NOT_FOUND,
    errors.Conflict: status.HTTP_409_CONFLICT,
    errors.Invalid: status.HTTP_422_UNPROCESSABLE_ENTITY,
}


def domain_error_response(exc: errors.DomainError, *, thread_id: str | None = None) -> Response:
    """Answer a domain error with its status and ``{"detail": str}`` (``errors`` for every 422)."""
    detail = exc.detail(thread_id=thread_id)
    if isinstance(exc, errors.Invalid):
        body = {"detail": detail, "errors": {exc.field: [exc.reason]} if exc.field else [exc.reason]}
        return Response(body, status=status.HTTP_422_UNPROCESSABLE_ENTITY)
    if isinstance(exc, errors.Unavailable | errors.Forbidden):
        return Response({"detail": detail}, status=exc.status)
    code = next((c for kind, c in _DOMAIN_STATUS.items() if isinstance(exc, kind)), status.HTTP_400_BAD_REQUEST)
    return Response({"detail": detail}, status=code)


def set_pagination_headers(response: Response, *, total: int, offset: int, count: int) -> Response:
    """Add ``X-Pagination-Total`` and, when more rows exist, ``X-Pagination-Next``."""
    response["X-Pagination-Total"] = str(total)
    if offset + count < total:
        response["X-Pagination-Next"] = str(offset + count)
    return response


def page_response(page: list[dict], *, select: list[str] | None, total: int, offset: int) -> Response:
    """Answer a search page: only the ``select``-ed fields of each object, with the pagination headers."""
    if select:
        page = [{k: v for k, v in item.items() if k in select} for item in page]
    return set_pagination_headers(Response(page), total=total, offset=offset, count=len(page))


def validated_body(serializer_class: type[serializers.Serializer], request) -> dict[str, Any]:
    """Return the request body as ``serializer_class`` validates it (no body: ``{}``); else raise its 422."""
    serializer = serializer_class(data=request.data or {})
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def given(data: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """Return each of ``names`` from validated data, None where the body left it out (a selector's filters)."""
    return {name: data.get(name) for name in names}


def sorted_page_args(data: Mapping[str, Any], *, sort_by: str) -> dict[str, Any]:
    """Return a search selector's sort and page arguments from a ``SortedPageSerializer``'s data.

    ``sort_by``: the route's default sort field; the order defaults to descending.
    """
    return {
        "sort_by": data.get("sort_by") or sort_by,
        "sort_order": data.get("sort_order") or "desc",
        "limit": data["limit"],
        "offset": data["offset"],
    }


class StrictCharField(serializers.CharField):
    """A CharField that refuses numbers and booleans instead of coercing them."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


# Bounds for numeric query inputs: past these SQLite raises OverflowError (a
# 500) instead of finding nothing, so they are a 422 up front.
OFFSET_MAX = 2**31 - 1
SQL_INT_MAX = 2**63 - 1


def fits_sql_integer(value) -> bool:
    """Tell whether ``value`` (any JSON scalar) can be bound as a SQL parameter."""
    return not isinstance(value, int) or isinstance(value, bool) or -SQL_INT_MAX - 1 <= value <= SQL_INT_MAX


class PageSerializer(serializers.Serializer):
    """``limit`` (1-1000, default 10) and ``offset``: how the list and search routes page."""

    limit = serializers.IntegerField(min_value=1, max_value=1000, default=10)
    offset = serializers.IntegerField(min_value=0, max_value=OFFSET_MAX, default=0)


class SortedPageSerializer(PageSerializer):
    """A page in ``sort_order``; the route declares its own ``sort_by`` choices and ``select_field``."""

    sort_order = serializers.ChoiceField(choices=["asc", "desc"], required=False, allow_null=True)


def select_field(fields) -> serializers.ListField:
    """``select``: which fields of each object found a search answers with."""
    return serializers.ListField(child=serializers.ChoiceField(choices=fields), required=False, allow_null=True)


class StrictDictField(serializers.DictField):
    """A JSON object; ``null`` is accepted as empty (the SDK sends it)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)
