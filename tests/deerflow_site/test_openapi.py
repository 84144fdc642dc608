"""The OpenAPI schema describes every route, with API-key security, and generates cleanly."""

from __future__ import annotations

import io

import pytest
import yaml
from django.core.management import call_command

pytestmark = pytest.mark.django_db


def test_schema_generates_without_warnings_and_documents_bodies():
    out = io.StringIO()
    call_command("spectacular", "--fail-on-warn", "--validate", stdout=out)
    schema = yaml.safe_load(out.getvalue())
    assert schema["components"]["securitySchemes"]["ApiKey"] == {"type": "apiKey", "in": "header", "name": "x-api-key"}
    create = schema["paths"]["/api/threads/{thread_id}/runs"]["post"]
    body = create["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert "assistant_id" in schema["components"]["schemas"][body]["properties"]
    search = schema["paths"]["/api/threads/search"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    properties = schema["components"]["schemas"][search["$ref"].rsplit("/", 1)[1]]["properties"]
    assert {"metadata", "ids", "status", "limit", "offset", "sort_by", "sort_order"} <= set(properties)
    operation_ids = [op["operationId"] for path in schema["paths"].values() for op in path.values()]
    assert len(operation_ids) == len(set(operation_ids))
