"""OpenAPI generation: API-key security, and request bodies from each view's nested serializer.

Views follow one convention (one APIView per operation with a nested
``InputSerializer``), so the schema reads the body from there instead of
every view repeating an ``@extend_schema`` decorator. Responses are described
as JSON objects; their shapes follow the LangGraph SDK's types (README).
"""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes

from deerflow_site import custom_auth


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "deerflow_site.auth.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "x-api-key"}


class ConventionSchema(AutoSchema):
    """Use ``InputSerializer`` (or ``UpdateSerializer`` for POST state) as the request body."""

    def get_request_serializer(self):
        if self.method in ("POST", "PUT", "PATCH", "DELETE"):
            for name in ("InputSerializer", "UpdateSerializer", "PatchSerializer"):
                if (serializer := getattr(self.view, name, None)) is not None:
                    return serializer
        return super().get_request_serializer() if hasattr(self.view, "get_serializer") else None

    def get_response_serializers(self):
        serializers = super().get_response_serializers() if hasattr(self.view, "get_serializer") else None
        return serializers or OpenApiTypes.OBJECT

    def _get_serializer_name(self, serializer, direction, bypass_extensions=False):
        name = super()._get_serializer_name(serializer, direction, bypass_extensions)
        # Nested serializers share generic names ("Input"); prefix the view's.
        if name in ("Input", "Update", "Patch", "Query", "ListQuery", "Cursor"):
            return type(self.view).__name__.removesuffix("View") + name
        return name

    def get_operation_id(self):
        # One view answers both the bare and the checkpoint-suffixed paths.
        base = super().get_operation_id()
        for variable in ("checkpoint_id", "run_id"):
            if "{" + variable + "}" in self.path and self.path.endswith("{" + variable + "}"):
                return f"{base}_one"
        return base


# What every API answer other than success may be: ``{"detail": ...}`` with one of these.
ERROR_STATUSES = {
    "400": "Malformed request (or a refused CORS preflight)",
    "401": "No valid API key",
    "404": "Not found, or not the caller's",
    "409": "Conflicts with the object's current state (a run in flight, the channel-mode gate)",
    "413": "Request body over limits.max_body_bytes",
    "422": "Invalid input",
    "503": "A backing service is unavailable",
}


def apply_auth_openapi(result, generator, request, public):
    """With custom auth, document langgraph.json's ``auth.openapi`` instead of the API key (a postprocessing hook).

    Under custom auth the API key is no way in, so its scheme goes; every
    operation that needs credentials gets the project's requirements.
    """
    custom = custom_auth.active()
    if custom is None or custom.openapi is None:
        return result
    result.setdefault("components", {})["securitySchemes"] = dict(custom.openapi["securitySchemes"])
    for item in result.get("paths", {}).values():
        for operation in item.values():
            if isinstance(operation, dict) and "security" in operation and {} not in operation["security"]:
                operation["security"] = list(custom.openapi["security"])
    return result


def add_error_responses(result, generator, request, public):
    """Document the error answers every operation may give, with their one shape (a postprocessing hook)."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas["ErrorDetail"] = {
        "type": "object",
        "properties": {"detail": {"type": "string"}},
        "required": ["detail"],
        "additionalProperties": True,
    }
    body = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorDetail"}}}
    for item in result.get("paths", {}).values():
        for operation in item.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            anonymous = {} in operation.get("security", [{}])
            for code, description in ERROR_STATUSES.items():
                if code == "401" and anonymous:
                    continue
                operation["responses"].setdefault(code, {"description": description, "content": body})
    return result
