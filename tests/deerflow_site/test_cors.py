"""CORS for browser frontends: preflights and response headers on /api/ for the configured origins only."""

from __future__ import annotations

import json
import logging
import uuid

import pytest
from django.core.exceptions import ImproperlyConfigured
from rest_framework.test import APIClient

from deerflow_site.config import CorsConfig, parse_config

APP = "http://127.0.0.1:5173"
STRANGER = "https://evil.example"


@pytest.fixture
def cors(settings):
    """Allow APP (and nothing else) with the default methods, headers and exposed headers."""

    def configure(**policy):
        settings.DEERFLOW = {**settings.DEERFLOW, "CORS": CorsConfig(**{"allow_origins": [APP], **policy})}

    configure()
    return configure


def preflight(path: str, origin: str, method: str = "POST", headers: str = "content-type,x-api-key"):
    return APIClient().options(
        path,
        HTTP_ORIGIN=origin,
        HTTP_ACCESS_CONTROL_REQUEST_METHOD=method,
        HTTP_ACCESS_CONTROL_REQUEST_HEADERS=headers,
    )


@pytest.mark.django_db
def test_without_configuration_no_origin_gets_a_cors_header(owner):
    answer = owner.client.post("/api/threads", {}, format="json", HTTP_ORIGIN=APP)
    assert answer.status_code == 200
    assert not [h for h in answer.headers if h.lower().startswith("access-control-")]
    # The preflight is refused as CORS (no origin is listed), not as a missing key.
    refused = preflight("/api/threads", APP)
    assert refused.status_code == 403
    assert "cors.allow_origins" in refused.json()["detail"]
    assert "Access-Control-Allow-Origin" not in refused.headers


@pytest.mark.django_db
def test_preflight_from_an_allowed_origin_is_answered_without_a_key(cors):
    answer = preflight("/api/threads/abc/stream/events", APP)
    assert answer.status_code == 200
    assert answer.headers["Access-Control-Allow-Origin"] == APP
    assert set(answer.headers["Access-Control-Allow-Methods"].split(", ")) >= {"GET", "POST", "DELETE", "PATCH"}
    assert {"x-api-key", "content-type", "authorization"} <= set(
        answer.headers["Access-Control-Allow-Headers"].split(", ")
    )
    assert answer.headers["Access-Control-Max-Age"] == "600"
    assert "Origin" in answer.headers["Vary"]
    assert "Access-Control-Allow-Credentials" not in answer.headers


@pytest.mark.django_db
def test_preflight_from_another_origin_is_a_403_naming_the_setting_and_logged_once(cors, caplog):
    origin = f"https://{uuid.uuid4().hex[:8]}.example"  # one this process has not logged yet
    with caplog.at_level(logging.WARNING, logger="deerflow_site.cors"):
        answers = [preflight("/api/threads", origin) for _ in range(3)]
    for answer in answers:
        assert answer.status_code == 403
        assert answer.json()["detail"] == (
            f"CORS: origin {origin} is not allowed to call this server; "
            "add it to cors.allow_origins in config.yaml (or match it with cors.allow_origin_regex)"
        )
        assert "Access-Control-Allow-Origin" not in answer.headers
        assert "Access-Control-Allow-Methods" not in answer.headers
        assert "Origin" in answer.headers["Vary"]
    logged = [r.getMessage() for r in caplog.records if origin in r.getMessage()]
    assert len(logged) == 1 and "cors.allow_origins" in logged[0]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("policy", "method", "headers", "message"),
    [
        ({"allow_methods": ["GET", "POST"]}, "DELETE", "x-api-key", "method DELETE is not allowed"),
        ({}, "POST", "content-type,x-api-key,x-secret-sauce", "header(s) x-secret-sauce not allowed"),
    ],
)
def test_preflight_asking_for_more_than_allowed_is_a_400_naming_it(cors, policy, method, headers, message):
    cors(**policy)
    answer = preflight("/api/threads", APP, method=method, headers=headers)
    assert answer.status_code == 400
    assert message in answer.json()["detail"]
    assert "Access-Control-Allow-Methods" not in answer.headers


@pytest.mark.django_db
def test_wildcards_reflect_what_the_preflight_asks_for(cors):
    cors(allow_origins=["*"], allow_methods=["*"], allow_headers=["*"])
    answer = preflight("/api/threads", STRANGER, method="PUT", headers="x-anything,content-type")
    assert answer.status_code == 200
    assert answer.headers["Access-Control-Allow-Origin"] == STRANGER  # the origin itself, never "*"
    assert answer.headers["Access-Control-Allow-Methods"] == "PUT"
    assert answer.headers["Access-Control-Allow-Headers"] == "x-anything,content-type"


@pytest.mark.django_db
def test_an_allowed_origin_reads_answers_and_the_headers_the_sdks_need(cors, owner):
    thread = owner.client.post("/api/threads", {}, format="json", HTTP_ORIGIN=APP)
    assert thread.status_code == 200
    assert thread.headers["Access-Control-Allow-Origin"] == APP
    exposed = thread.headers["Access-Control-Expose-Headers"].split(", ")
    assert {"Content-Location", "Location", "X-Pagination-Total", "X-Pagination-Next"} <= set(exposed)
    assert "Origin" in thread.headers["Vary"]

    search = owner.client.post("/api/threads/search", {"limit": 1}, format="json", HTTP_ORIGIN=APP)
    assert search.headers["X-Pagination-Total"] == "1"
    assert search.headers["Access-Control-Allow-Origin"] == APP
    # Errors too, so the page can show the detail instead of an opaque network error.
    missing = APIClient().get("/api/info", HTTP_ORIGIN=APP)
    assert missing.status_code == 401
    assert missing.headers["Access-Control-Allow-Origin"] == APP


@pytest.mark.django_db
def test_another_origin_gets_the_answer_without_cors_headers(cors, owner):
    answer = owner.client.post("/api/threads", {}, format="json", HTTP_ORIGIN=STRANGER)
    assert answer.status_code == 200  # the server served it; the browser will not let the page read it
    assert "Access-Control-Allow-Origin" not in answer.headers
    assert "Access-Control-Expose-Headers" not in answer.headers
    assert "Origin" in answer.headers["Vary"]


@pytest.mark.django_db
def test_credentials_and_regex_origins(cors, owner):
    cors(allow_origins=[], allow_origin_regex=r"https://[a-z]+\.example\.com", allow_credentials=True)
    allowed = owner.client.get("/api/info", HTTP_ORIGIN="https://app.example.com")
    assert allowed.headers["Access-Control-Allow-Origin"] == "https://app.example.com"
    assert allowed.headers["Access-Control-Allow-Credentials"] == "true"
    # fullmatch: a suffix does not sneak past the regex.
    sneaky = owner.client.get("/api/info", HTTP_ORIGIN="https://app.example.com.evil.example")
    assert "Access-Control-Allow-Origin" not in sneaky.headers


@pytest.mark.django_db
def test_the_admin_never_answers_another_origin(cors, client):
    answer = client.options("/admin/login/", HTTP_ORIGIN=APP, HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST")
    assert "Access-Control-Allow-Origin" not in answer.headers
    page = client.get("/admin/login/", HTTP_ORIGIN=APP)
    assert "Access-Control-Allow-Origin" not in page.headers


@pytest.mark.backend_free
def test_cors_is_off_by_default_and_validated_naming_the_key(tmp_path):
    config = parse_config({}, source=tmp_path / "c.yaml")
    assert not config.cors_settings(config.graph_sources()).enabled
    with pytest.raises(ImproperlyConfigured, match=r"cors\.allow_origins: .*'http://a\.example/app' is not an origin"):
        parse_config({"cors": {"allow_origins": ["http://a.example/app"]}}, source=tmp_path / "c.yaml")
    with pytest.raises(ImproperlyConfigured, match=r"cors\.max_age: Input should be greater than or equal to 0"):
        parse_config({"cors": {"allow_origins": [APP], "max_age": -1}}, source=tmp_path / "c.yaml")
    with pytest.raises(ImproperlyConfigured, match=r"cors\.allow_origin_regex: .*not a regular expression"):
        parse_config({"cors": {"allow_origin_regex": "("}}, source=tmp_path / "c.yaml")


@pytest.mark.backend_free
def test_langgraph_json_http_cors_applies_unless_config_yaml_has_its_own(tmp_path):
    (tmp_path / "langgraph.json").write_text(
        json.dumps({"graphs": {}, "http": {"cors": {"allow_origins": [APP], "max_age": 60, "allow_credentials": True}}})
    )
    config = parse_config({"langgraph_json": "langgraph.json"}, source=tmp_path / "c.yaml")
    policy = config.cors_settings(config.graph_sources())
    assert policy.allows_origin(APP) and not policy.allows_origin(STRANGER)
    assert (policy.max_age, policy.allow_credentials) == (60, True)
    assert "Content-Location" in policy.expose_headers  # keys it does not set keep our defaults

    own = parse_config(
        {"langgraph_json": "langgraph.json", "cors": {"allow_origins": [STRANGER]}}, source=tmp_path / "c.yaml"
    )
    policy = own.cors_settings(own.graph_sources())
    assert policy.allows_origin(STRANGER) and not policy.allows_origin(APP)


@pytest.mark.backend_free
def test_a_bad_langgraph_json_http_cors_stops_start_up_naming_the_key(tmp_path):
    (tmp_path / "langgraph.json").write_text(json.dumps({"http": {"cors": {"allow_origins": "http://x.example"}}}))
    config = parse_config({"langgraph_json": "langgraph.json"}, source=tmp_path / "c.yaml")
    with pytest.raises(ImproperlyConfigured, match=r"Invalid langgraph.json .*: http\.cors\.allow_origins: "):
        config.cors_settings(config.graph_sources())
    (tmp_path / "langgraph.json").write_text(json.dumps({"http": {"cors": ["http://x.example"]}}))
    with pytest.raises(ImproperlyConfigured, match=r"http\.cors must be an object"):
        parse_config({"langgraph_json": "langgraph.json"}, source=tmp_path / "c.yaml").graph_sources()
